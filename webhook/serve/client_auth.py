"""Mutual TLS for the admission endpoints: only a client certificate signed by --client-ca may ask.

The TLS context asks every client for a certificate but does not demand one (CERT_OPTIONAL): a
certificate that is presented is verified against the client CA during the handshake, and one that
does not verify ends the handshake. Whether a certificate was presented is then decided per route:
/validate and /mutate answer 401 without one, while /healthz and /readyz stay open to the kubelet,
whose HTTPS probes never send a client certificate (and /metrics to a scraper, which the
NetworkPolicy limits instead). CERT_REQUIRED on the one port would fail every probe; a second,
probe-only port would double the listeners each worker process runs and the ports the Deployment,
Service and NetworkPolicy must keep in step, for the same guarantee.

The HTTP protocol records the verified peer on the request's scope (uvicorn passes no TLS details
to the app), under the ASGI TLS extension's name.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

__all__ = ["ADMISSION_PATHS", "peer_recording_protocol", "requiring_client_certificate"]

ADMISSION_PATHS = frozenset({"/validate", "/mutate"})

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def peer_recording_protocol(base: type[Any]) -> type[Any]:
    """`base` (an HTTP protocol class) that puts its connection's verified client certificate on
    every request's scope: ``scope["extensions"]["tls"]["client_cert_subject"]``, None without one."""

    class PeerRecordingProtocol(base):  # type: ignore[misc]
        _client_subject: str | None = None

        def connection_made(self, transport: Any) -> None:
            # The handshake is over when the protocol sees the connection: the peer is known.
            self._client_subject = _subject(transport.get_extra_info("peercert"))
            super().connection_made(transport)

        def on_message_begin(self) -> None:
            super().on_message_begin()
            self.scope["extensions"] = {"tls": {"client_cert_subject": self._client_subject}}

    PeerRecordingProtocol.__name__ = f"PeerRecording{base.__name__}"
    return PeerRecordingProtocol


def requiring_client_certificate(app: ASGIApp, paths: frozenset[str] = ADMISSION_PATHS) -> ASGIApp:
    """`app`, answering 401 on `paths` to a request whose connection presented no client certificate."""
    body = json.dumps(
        {
            "kind": "Status",
            "apiVersion": "v1",
            "status": "Failure",
            "reason": "Unauthorized",
            "code": 401,
            "message": "a client certificate signed by the webhook's client CA is required",
        }
    ).encode()

    async def guarded(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"] in paths and not _verified(scope):
            await send(
                {
                    "type": "http.response.start",
                    "status": 401,
                    "headers": [
                        (b"content-type", b"application/json"),
                        (b"content-length", str(len(body)).encode()),
                        (b"connection", b"close"),
                    ],
                }
            )
            await send({"type": "http.response.body", "body": body})
            return
        await app(scope, receive, send)

    return guarded


def _verified(scope: Scope) -> bool:
    tls = (scope.get("extensions") or {}).get("tls") or {}
    return tls.get("client_cert_subject") is not None


def _subject(peercert: Any) -> str | None:
    """The verified certificate's subject as text; None when the client presented none.

    Python reports an unverified or absent certificate as None or {} (getpeercert() only returns
    the fields of a certificate the handshake verified).
    """
    if not peercert:
        return None
    parts = [f"{key}={value}" for rdn in peercert.get("subject", ()) for key, value in rdn]
    return ",".join(parts) or "(empty subject)"
