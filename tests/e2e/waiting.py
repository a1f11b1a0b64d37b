"""Waiting on the cluster: a condition polled up to a generous bound (CI machines are loaded), and
on a timeout the log that explains it."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

WAIT = 60.0


def wait_for(what: str, check: Callable[[], Any], timeout: float = WAIT, log: Callable[[], str] = str) -> Any:
    """`check()`'s first true value; AssertionError naming `what`, with `log()`, past `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}\n{log()}")
        time.sleep(0.5)
