"""The serving TLS context: versions and suites, and the check that a rotated pair loads.

TLS 1.2 offers only ECDHE key exchange with AEAD ciphers (AES-GCM, ChaCha20-Poly1305): the CBC
suites OpenSSL enables by default are left out, as the Kubernetes API server's own defaults do.
TLS 1.3 suites are all AEAD and stay as OpenSSL sets them.
"""

from __future__ import annotations

import os
import shutil
import ssl
import tempfile
from pathlib import Path

__all__ = ["TLS12_CIPHERS", "checked_pair", "harden", "trust_clients"]

TLS12_CIPHERS = "ECDHE+AESGCM:ECDHE+CHACHA20:!aNULL:!eNULL"


def harden(ctx: ssl.SSLContext) -> None:
    """TLS 1.2 minimum, ECDHE + AEAD suites only for 1.2, no renegotiation."""
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.set_ciphers(TLS12_CIPHERS)
    ctx.options |= ssl.OP_NO_RENEGOTIATION | ssl.OP_NO_COMPRESSION | ssl.OP_CIPHER_SERVER_PREFERENCE


def checked_pair(cert_pem: bytes, key_pem: bytes) -> Path:
    """A private directory holding the pair, after loading it into a scratch context.

    A failed load_cert_chain() can leave a context with a certificate and no matching key; the
    serving context is only touched once the pair is known to load.
    """
    scratch = Path(tempfile.mkdtemp(prefix="trainguard-tls-"))  # mode 0700
    try:
        (scratch / "tls.crt").write_bytes(cert_pem)
        fd = os.open(scratch / "tls.key", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as fh:
            fh.write(key_pem)
        ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(scratch / "tls.crt", scratch / "tls.key")
    except BaseException:
        shutil.rmtree(scratch, ignore_errors=True)
        raise
    return scratch


def trust_clients(ctx: ssl.SSLContext, ca_pem: bytes) -> None:
    """Ask clients for a certificate and verify one that is presented against `ca_pem`.

    CERT_OPTIONAL, not CERT_REQUIRED: the kubelet's probes present none (webhook/serve/client_auth.py
    refuses admissions without one). Certificates are added to the context's trust store, which
    cannot be emptied: a CA removed from the file stays trusted until the server restarts.
    """
    ctx.load_verify_locations(cadata=ca_pem.decode("ascii", errors="replace"))
    ctx.verify_mode = ssl.CERT_OPTIONAL
