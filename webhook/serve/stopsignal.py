"""A stop signal that arrives before anything can act on it is kept, not fatal.

`trainguard serve` passes through moments where nobody is ready to stop it: the policy set
compiling, a worker between fork() and uvicorn's own handlers. With the default disposition a
SIGTERM then kills the process (exit 143, or a worker dying mid-start that the supervisor counts
as a failure), although nothing was being served and nothing was lost. So the signal is only
recorded here, and whoever takes over (the supervisor's loop, uvicorn's handlers) asks for it
with take() and acts on it as if it had just arrived.
"""

from __future__ import annotations

import signal
import threading

__all__ = ["STOP_SIGNALS", "install", "pending", "take"]

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)

_received: list[int] = []


def _record(sig: int, frame: object) -> None:
    _received.append(sig)


def install() -> None:
    """Record SIGTERM and SIGINT from now on (main thread only; elsewhere signals are not ours)."""
    if threading.current_thread() is threading.main_thread():
        for sig in STOP_SIGNALS:
            signal.signal(sig, _record)


def pending() -> bool:
    return bool(_received)


def take() -> list[int]:
    """The signals recorded so far, forgotten here: the caller now answers them."""
    taken = list(_received)
    del _received[:]
    return taken
