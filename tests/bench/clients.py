"""The Python clients of the benchmarks that load a server from threads and processes of their own."""

from __future__ import annotations

import http.client
import ssl
from typing import Any

from servers import HOST


class KeepAlive:
    """One keep-alive HTTPS connection to a benchmark's server, opened afresh after a call that
    failed (the server closed it, or the timeout passed): a load generator goes on and counts it."""

    def __init__(self, port: int, ctx: ssl.SSLContext, timeout: float) -> None:
        self._address = (HOST, port, ctx, timeout)
        self._conn = self._open()

    def _open(self) -> http.client.HTTPSConnection:
        host, port, ctx, timeout = self._address
        return http.client.HTTPSConnection(host, port, context=ctx, timeout=timeout)

    def call(self, method: str, path: str, body: bytes | None = None) -> tuple[int | str, bytes]:
        """(status, body) of the answer, or (the error's name, b"") when the call failed."""
        headers = {"content-type": "application/json"} if body is not None else {}
        try:
            self._conn.request(method, path, body=body, headers=headers)
            response = self._conn.getresponse()
            return response.status, response.read()
        except (OSError, http.client.HTTPException) as exc:
            self._conn.close()
            self._conn = self._open()
            return type(exc).__name__, b""

    def post(self, path: str, body: bytes) -> int | str:
        return self.call("POST", path, body)[0]

    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> KeepAlive:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
