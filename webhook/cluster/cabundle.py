"""caBundle injection: the install creates the two webhook configurations; the server only writes
their `caBundle`, at start and whenever the CA file changes.

Least privilege: this needs `get` and `patch` on the two configurations by name (RBAC
`resourceNames`), never `create`, which RBAC cannot limit to a name. Self-registration
(registration.py, `--self-register`) remains for installs that want the server to create them.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from webhook import certs
from webhook.cluster.registration import Registrar
from webhook.cluster.watch import ClusterError

log = logging.getLogger("trainguard.cluster")

KINDS = ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration")


def ca_bundle_patch(configuration: dict[str, Any], bundle: str) -> list[dict[str, Any]]:
    """JSON Patch setting every webhook's caBundle to `bundle`; [] when all already have it.

    Each write is preceded by a `test` of the webhook's name at that index, so a configuration
    edited between the read and the patch is refused (422) instead of patched at the wrong entry.
    """
    ops: list[dict[str, Any]] = []
    for index, hook in enumerate(configuration.get("webhooks") or []):
        if (hook.get("clientConfig") or {}).get("caBundle") == bundle:
            continue
        ops.append({"op": "test", "path": f"/webhooks/{index}/name", "value": hook.get("name")})
        ops.append({"op": "add", "path": f"/webhooks/{index}/clientConfig/caBundle", "value": bundle})
    return ops


class CABundleInjector(Registrar):
    """Registrar's retrying thread, writing only the caBundle of configurations that exist."""

    doing = "caBundle injection"
    done = "caBundle of the webhook configurations up to date"

    def __init__(self, api: client.ApiClient, *, name: str = "trainguard", **kwargs: Any) -> None:
        super().__init__(api, **kwargs)
        self.name = name

    def apply(self, ca_pem: bytes) -> None:
        bundle = certs.ca_bundle(ca_pem)
        for kind in KINDS:
            configuration = self._read(kind)
            ops = ca_bundle_patch(configuration, bundle)
            if not ops:
                continue
            patch = (
                self.admission.patch_validating_webhook_configuration
                if kind == KINDS[0]
                else self.admission.patch_mutating_webhook_configuration
            )
            patch(self.name, ops, _content_type="application/json-patch+json")
            log.info("caBundle written", extra={"kind": kind, "configuration": self.name})

    def _read(self, kind: str) -> dict[str, Any]:
        read = (
            self.admission.read_validating_webhook_configuration
            if kind == KINDS[0]
            else self.admission.read_mutating_webhook_configuration
        )
        try:
            # Raw JSON: the typed models would drop fields this client version does not know.
            response: Any = read(self.name, _preload_content=False)
        except ApiException as exc:
            if exc.status == 404:
                raise ClusterError(
                    f"{kind} {self.name} does not exist: the install creates it (deploy/"
                    "webhook-configurations.yaml, or `trainguard webhook-config | kubectl apply -f -`)"
                ) from None
            raise
        result: dict[str, Any] = json.loads(response.data)
        return result
