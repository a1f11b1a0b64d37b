"""The names a standard install gives trainguard's objects: the default of every command, function
and setting that names them (`certs`, `webhook-config`, `serve`, the certificate's DNS names, the
webhook configurations)."""

from __future__ import annotations

__all__ = ["CONFIGURATIONS", "NAMESPACE", "SERVICE", "SERVICE_ACCOUNT", "SERVICE_PORT"]

SERVICE = "trainguard"  # the webhook's Service
NAMESPACE = "trainguard-system"  # the Service's namespace, never sent to the webhook
SERVICE_PORT = 443
CONFIGURATIONS = "trainguard"  # the validating and the mutating webhook configuration
SERVICE_ACCOUNT = "trainguard"  # the server's own requests are never sent to it
