"""The listening sockets, bound in the parent before any fork so that every worker accepts on them."""

from __future__ import annotations

import socket

from webhook.serve.settings import ServerError

__all__ = ["bind"]


def bind(host: str, port: int, backlog: int = 2048) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(backlog)
    except OSError as exc:
        sock.close()
        raise ServerError(f"cannot listen on {host}:{port}: {(exc.strerror or str(exc)).lower()}") from None
    sock.set_inheritable(True)
    return sock
