"""HTTP/1.1 on httptools with the limits uvicorn lacks: header size and count, header and body timeouts.

uvicorn's httptools protocol arms a timer only between requests (keep-alive), and httptools
accumulates a header of any size; h11 caps the header block but is several times slower on the
request path. So the few limits the webhook needs are added here, on top of uvicorn's protocol:

- header timeout: from connect (or a request's first byte) to the end of its headers, else
  408 and close: a client sending headers a byte at a time (slowloris) is cut off;
- body timeout: from the end of the headers to the end of the body, else 408 and close: a
  Content-Length with a withheld body frees its buffer and its admission slot;
- header bytes and header count: past either, 431 and close, before the headers are handed on.

The two timeouts share one timer per connection, set lazily (as the kernel's own TCP timers and
nginx's are): a request moves a deadline, which is a float, and the timer is only re-armed when it
would fire too late for the new deadline; when it fires early, it is set again for the rest. On
a keep-alive connection every deadline comes later than the one before, so after the first
request a request arms no timer at all; arming and cancelling one (twice per request) was the
protocol's own largest cost per request.

One change to the write path: a response's status line and headers are held back and written
with its body, in one write (_OneWrite). uvicorn writes them separately, and each write to a TLS
transport is a TLS record and a send() of its own that wakes the client: for a response of a few
hundred bytes, two of everything. On loopback that send() was the largest single cost of an
admission outside the engine.

A refusal is followed by a lingering close (as nginx's `lingering_close`): closing a socket
while the client's bytes sit unread in the kernel makes the kernel send a reset, and a reset can
destroy the refusal before the client has read it; a client still trickling headers always has
such bytes in flight. So the connection keeps reading, and discarding, for LINGER_SECONDS.

Everything else (parsing, flow control, keep-alive, pipelining, drain) is uvicorn's.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, ClassVar

from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol, RequestResponseCycle

from webhook.serve.settings import Settings, default

__all__ = ["LINGER_SECONDS", "HttpLimits", "limited_protocol"]

LINGER_SECONDS = 1.0
# uvloop counts its timers in whole milliseconds and may fire one that much early: a deadline
# that close has come (else the timer would be set again, and again, until it has).
_EARLY_SECONDS = 0.002


@dataclass(frozen=True, slots=True)
class HttpLimits:
    header_timeout: float = default("header_timeout")
    body_timeout: float = default("body_timeout")
    max_header_bytes: int = default("max_header_bytes")
    max_headers: int = default("max_headers")

    @classmethod
    def from_settings(cls, settings: Settings) -> HttpLimits:
        return cls(
            settings.header_timeout, settings.body_timeout, settings.max_header_bytes, settings.max_headers
        )


class _HeaderLimit(Exception):
    """Raised from a parser callback to stop parsing; httptools wraps it in HttpParserError."""


class LimitedHttpToolsProtocol(HttpToolsProtocol):
    limits: ClassVar[HttpLimits] = HttpLimits()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._timer: asyncio.TimerHandle | None = None  # fires at or before _deadline, if that is set
        self._deadline: float | None = None  # loop time by which _waiting_for must have arrived
        self._waiting_for = ("", 0.0)  # (what, seconds) of the deadline
        self._in_headers = True  # bytes received now belong to a request's headers
        self._header_bytes = 0
        self._header_count = 0
        self._header_size = 0  # of the headers parsed so far (a chunk may hold body bytes too)
        self._refusal: tuple[int, str] | None = None
        self._lingering = False  # refused: what the client still sends is read and dropped

    # -- the connection -------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm(self.limits.header_timeout, "request headers")

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._lingering:
            return
        if self._in_headers:
            self._header_bytes += len(data)
        super().data_received(data)
        # Headers still incomplete after this chunk: every byte so far was header. httptools keeps
        # an unfinished header line whole until it ends, so this is checked per chunk.
        limit = self.limits.max_header_bytes
        if self._in_headers and self._header_bytes > limit and not self.transport.is_closing():
            self._refuse(431, f"request headers exceed {limit} bytes")

    def send_400_response(self, msg: str) -> None:
        # uvicorn answers every parser error with 400; a limit we raised gets its own status.
        if self._refusal is not None:
            self._refuse(*self._refusal)
        else:
            super().send_400_response(msg)

    # -- parser callbacks -----------------------------------------------------------------------

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._in_headers = True
        self._header_count = 0
        self._header_size = 0
        if self._deadline is None:  # a keep-alive connection's next request
            self._arm(self.limits.header_timeout, "request headers")

    def on_header(self, name: bytes, value: bytes) -> None:
        self._header_count += 1
        self._header_size += len(name) + len(value) + 4
        if self._header_count > self.limits.max_headers:
            self._refusal = (431, f"more than {self.limits.max_headers} request headers")
            raise _HeaderLimit
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        limit = self.limits.max_header_bytes
        if self._header_size + len(self.url) > limit:
            self._refusal = (431, f"request headers exceed {limit} bytes")
            raise _HeaderLimit
        self._in_headers = False
        self._header_bytes = 0
        self._arm(self.limits.body_timeout, "request body")
        before = self.cycle
        super().on_headers_complete()
        if self.cycle is not before:  # the cycle made for this request writes its response in one piece
            self.cycle.transport = _OneWrite(self.transport, self.cycle)  # type: ignore[assignment]

    def on_message_complete(self) -> None:
        self._disarm()
        super().on_message_complete()

    # -- helpers --------------------------------------------------------------------------------

    def _arm(self, seconds: float, what: str) -> None:
        self._deadline = deadline = self.loop.time() + seconds
        self._waiting_for = (what, seconds)
        timer = self._timer
        if timer is None or timer.when() > deadline:
            if timer is not None:
                timer.cancel()
            self._timer = self.loop.call_at(deadline, self._on_timer)

    def _disarm(self) -> None:
        # The timer stays: the next request's deadline is later, and it will be set again for it.
        self._deadline = None

    def _on_timer(self) -> None:
        self._timer = None
        deadline = self._deadline
        if deadline is None:
            return
        if self.loop.time() + _EARLY_SECONDS < deadline:  # moved on since the timer was set
            self._timer = self.loop.call_at(deadline, self._on_timer)
            return
        self._deadline = None
        self._expired(*self._waiting_for)

    def _expired(self, what: str, seconds: float) -> None:
        if self.transport.is_closing():
            return
        self.logger.warning("closing a connection: %s not received within %s s", what, seconds)
        if self.cycle is not None and self.cycle.response_started:
            self.transport.close()  # a response is on its way: no second status line
            return
        self._refuse(408, f"{what} not received within {seconds:g} s")

    def _refuse(self, status: int, message: str) -> None:
        body = message.encode("ascii", "replace")
        self.transport.write(
            b"".join(
                [
                    STATUS_LINE[status],
                    b"content-type: text/plain; charset=utf-8\r\n",
                    b"content-length: %d\r\nconnection: close\r\n\r\n" % len(body),
                    body,
                ]
            )
        )
        self._disarm()
        self._lingering = True
        self.loop.call_later(LINGER_SECONDS, self._close)

    def _close(self) -> None:
        if not self.transport.is_closing():
            self.transport.close()


class _OneWrite:
    """The transport as one request's cycle sees it: the response head is held until the body comes.

    uvicorn's cycle writes the status line and headers when the response starts, then each body
    chunk; the head is kept here and joined to the first body chunk, which Starlette sends right
    after it. Nothing else is held: a "100 Continue" (written before the response starts) goes
    out at once, the head of a response to HEAD (which has no body write) too, and a head still
    held when the cycle closes the connection (a response the app left unfinished) is written
    first.
    """

    __slots__ = ("_cycle", "_head_seen", "_held", "_transport")

    def __init__(self, transport: asyncio.Transport, cycle: RequestResponseCycle) -> None:
        self._transport = transport
        self._cycle = cycle
        self._head_seen = False
        self._held: bytes | None = None

    def write(self, data: bytes) -> None:
        if self._held is not None:
            data, self._held = self._held + data, None
        elif not self._head_seen and self._cycle.response_started:
            # The cycle's first write once the response has started is always its head.
            self._head_seen = True
            if self._cycle.scope["method"] != "HEAD":
                self._held = data
                return
        self._transport.write(data)

    def close(self) -> None:
        if self._held is not None:
            self._transport.write(self._held)
            self._held = None
        self._transport.close()

    def is_closing(self) -> bool:
        return self._transport.is_closing()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


def limited_protocol(limits: HttpLimits) -> type[LimitedHttpToolsProtocol]:
    """The protocol class uvicorn instantiates per connection, with `limits` fixed."""
    return type("WebhookHttpProtocol", (LimitedHttpToolsProtocol,), {"limits": limits})
