"""Keeping one admission from holding up the others: bodies received first, then a bounded set of
slots and the deciding threads.

Bodies: a connection's body is received before it asks for a slot, so a client that sends
headers and then nothing (or a body slowly) holds no slot: only its own connection, until its
body timeout. What receiving costs is bounded apart: the first `BodyBudget.threshold` bytes of
a body (what uvicorn's flow control buffers of any connection anyway) are read at once; what
comes beyond is counted, as it arrives, against a byte budget per worker, and a body that would
exceed it waits for room (429 once its time budget is spent), so withheld or slow large bodies
cannot exhaust memory either.

Slots: at most `size` admissions are decided at once in a worker; up to `queue` more wait (with
their bodies) for at most `wait` seconds, which absorbs a burst; anything beyond is refused at
once with 429 and Retry-After, so memory stays bounded and the API server gets an answer
quickly, not at its timeout.

Deciding threads: decisions are CPU work; run on the event loop, one slow decision would hold up
/healthz, /readyz and every other connection of the worker. On a few threads, the loop gets the
GIL back every switch interval (5 ms) and keeps answering.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, TypeVar

__all__ = ["BodyBudget", "Busy", "DecisionThreads", "Slots"]

log = logging.getLogger("trainguard.server")

T = TypeVar("T")


class Busy(Exception):
    """No slot within the wait: the caller answers 429."""


class BodyBudget:
    """Bytes of request bodies received and not yet complete, counted past the first `threshold`
    bytes of each, and how many bodies are on their way (event loop thread only).

    Bytes are counted as they arrive, so a body withheld after its headers holds nothing and one
    withheld after a part holds that part. A body that would take the count past the limit waits
    (in turn, reading nothing: flow control leaves the rest in the client's socket) until room
    frees; withheld bodies then cost their connection, not a stream of refusals and reconnections.
    """

    def __init__(self, limit: int, threshold: int = 64 * 1024) -> None:
        if limit < 1 or threshold < 0:
            raise ValueError(f"a body budget needs limit >= 1, threshold >= 0; got {limit}, {threshold}")
        self.limit = limit
        self.threshold = threshold
        self.reserved = 0
        self.receiving = 0  # bodies being received now, large or small
        self._waiters: list[tuple[int, asyncio.Future[None]]] = []

    @property
    def waiting(self) -> int:
        return len(self._waiters)

    def _fits(self, size: int) -> bool:
        # With nothing else on its way any body goes on, so one of any size the server accepts
        # can always be received.
        return not self.reserved or self.reserved + size <= self.limit

    async def reserve(self, size: int, wait: float) -> int:
        """`size` bytes reserved (returned), or Busy when the bodies on their way leave no room for
        them within `wait` seconds."""
        if not self._waiters and self._fits(size):
            self.reserved += size
            return size
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append((size, waiter))
        try:
            await asyncio.wait_for(asyncio.shield(waiter), wait)
        except TimeoutError:
            if waiter.done() and not waiter.cancelled():
                return size  # granted just as the wait ran out: keep it
            raise Busy from None
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self.release(size)
            raise
        finally:
            self._waiters = [(n, w) for n, w in self._waiters if w is not waiter]
            if not waiter.done():
                waiter.cancel()
        return size

    def release(self, reserved: int) -> None:
        """Give `reserved` bytes back, and let in the waiting bodies that now fit, in turn."""
        self.reserved -= reserved
        while self._waiters:
            size, waiter = self._waiters[0]
            if waiter.done():
                self._waiters.pop(0)
                continue
            if not self._fits(size):
                return
            self._waiters.pop(0)
            self.reserved += size
            waiter.set_result(None)


class Slots:
    """An asyncio limit on admissions in progress with a short, bounded queue (event loop thread only)."""

    def __init__(self, size: int, queue: int, wait: float) -> None:
        if size < 1 or queue < 0 or wait < 0:
            raise ValueError(f"slots need size >= 1, queue >= 0, wait >= 0; got {size}, {queue}, {wait}")
        self.size = size
        self.queue = queue
        self.wait = wait
        self.busy = 0
        self._waiters: list[asyncio.Future[None]] = []

    @property
    def waiting(self) -> int:
        return len(self._waiters)

    async def acquire(self) -> None:
        """A slot, or Busy when all are taken and the queue is full or the wait runs out."""
        if self.busy < self.size and not self._waiters:
            self.busy += 1
            return
        if len(self._waiters) >= self.queue:
            raise Busy
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            await asyncio.wait_for(asyncio.shield(waiter), self.wait)
        except TimeoutError:
            if waiter.done() and not waiter.cancelled():
                return  # handed a slot just as the wait ran out: keep it
            raise Busy from None
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self.release()  # handed a slot, then cancelled (a drain): pass it on
            raise
        finally:
            if waiter in self._waiters:
                self._waiters.remove(waiter)
            if not waiter.done():
                waiter.cancel()

    def release(self) -> None:
        """Hand the slot to the first waiter still waiting, else free it."""
        while self._waiters:
            waiter = self._waiters.pop(0)
            if not waiter.done():
                waiter.set_result(None)  # the slot passes on: `busy` is unchanged
                return
        self.busy -= 1


class DecisionThreads:
    """A fixed pool of daemon threads running decisions; `submit()` returns an asyncio future.

    concurrent.futures.ThreadPoolExecutor joins its threads when the interpreter exits, so one
    runaway decision would keep a stopping server alive past its grace period; these threads are
    daemons, and a stopping server does not wait for a decision nobody will read.
    """

    def __init__(self, size: int, name: str = "trainguard-decide") -> None:
        if size < 1:
            raise ValueError(f"need at least one deciding thread, got {size}")
        self.size = size
        self._name = name
        self._work: queue.SimpleQueue[tuple[Callable[[], Any], Future[Any]] | None] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self.running = 0  # decisions being computed now (read for metrics and shutdown)

    def submit(self, fn: Callable[[], T]) -> asyncio.Future[T]:
        self._start()
        future: Future[T] = Future()
        self._work.put((fn, future))
        return asyncio.wrap_future(future)

    def shutdown(self) -> None:
        """Let idle threads end; a busy one ends with its decision (it is a daemon meanwhile)."""
        for _ in self._threads:
            self._work.put(None)
        self._threads = []

    def _start(self) -> None:
        if self._threads:
            return
        with self._lock:
            if not self._threads:
                for i in range(self.size):
                    thread = threading.Thread(target=self._loop, name=f"{self._name}-{i}", daemon=True)
                    thread.start()
                    self._threads.append(thread)

    def _loop(self) -> None:
        while True:
            item = self._work.get()
            if item is None:
                return
            fn, future = item
            if not future.set_running_or_notify_cancel():
                continue
            with self._lock:
                self.running += 1
            try:
                future.set_result(fn())
            except BaseException as exc:  # handed to the awaiting request, which maps it to a decision
                future.set_exception(exc)
            finally:
                with self._lock:
                    self.running -= 1
