"""Interpreter settings for a server on the API server's critical path: short, predictable pauses.

Called once, after the policies, the config and every module the server needs are loaded, and
before the first request (`serve()` in main.py). What it changes, and why:

- Garbage collection. A loaded server holds a few hundred thousand long-lived objects (compiled
  policies and CEL programs, the kubernetes client's models, starlette, uvicorn). CPython's oldest
  generation is collected whenever enough objects have survived into it, and a full collection walks
  every one of them: tens of milliseconds with the event loop stopped, which is the p99 of a request
  that had the bad luck to come then. `gc.freeze()` moves everything alive now into a permanent
  generation that collections skip, so later collections walk only what was allocated since.
  The youngest generation's threshold goes up too: a review allocates thousands of short-lived
  objects, most freed by reference counting, and with CPython's default of 700 a collection runs
  every few requests; one collection per several requests costs the same in total and pauses less
  often.
- The GIL switch interval. A thread that holds the GIL (a cluster watch decoding an event, the
  reload poll hashing files) keeps the event loop waiting up to the switch interval before it must
  let go: 5 ms by default, more than a whole review. 1 ms bounds that wait below the budget.

- The C allocator (glibc malloc), set by bound_allocator() before anything is loaded. A 3 MiB
  review is received, copied and decoded in buffers of megabytes. glibc serves such a buffer with
  mmap() at first, but each time one is freed it raises its mmap threshold to that size (up to
  32 MiB), so from then on the large buffers come from the heaps, between small long-lived
  allocations that keep the freed space from going back to the kernel; and every thread that
  allocates gets a heap of its own (up to 8 per CPU), each keeping its own high-water mark. Under
  mixed traffic with a large review now and then, a worker's memory grew without end (measured:
  130 to 190 MB in 20,000 reviews, one in a thousand of 2.8 MiB, still rising); with a fixed
  threshold, a fixed trim threshold and two heaps it stays flat (tests/bench/bench_memory.py).
  Both thresholds sit above the largest buffer allocated on every request: for each read of a
  TLS connection, uvloop has the ssl module allocate 256 KiB and shrink it to what arrived, and
  at glibc's initial 128 KiB that was an mmap(), an mremap() and a munmap() per read (and a trim
  of the heap's top after it). At 512 KiB those come from the heap, and the buffers of a large
  review (megabytes) are still mapped and given back whole; 1 MiB measured no flatter.
  Set through mallopt() (ctypes: Python has no binding) rather than MALLOC_* variables, so that
  every way of starting the server gets it, not only a Deployment that remembers the variables.

Nothing here changes a decision; every setting is process-wide, so each worker process calls it.
"""

from __future__ import annotations

import ctypes
import gc
import logging
import sys
from collections.abc import Callable

log = logging.getLogger("trainguard.runtime")

# (young, middle, old) collection thresholds. 7,000: a collection every few requests rather than
# several per request; the two older thresholds are CPython's defaults.
GC_THRESHOLDS = (7_000, 10, 10)
SWITCH_INTERVAL_SECONDS = 0.001

# mallopt() parameters, from glibc's <malloc.h>, and the values set.
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_M_ARENA_MAX = -8
# Buffers from 512 KiB up are mmap()ed and given back whole when freed (fixed: glibc would raise
# it); free space at a heap's top beyond 512 KiB is given back at once; two heaps.
ALLOCATOR = {_M_MMAP_THRESHOLD: 512 * 1024, _M_TRIM_THRESHOLD: 512 * 1024, _M_ARENA_MAX: 2}


def _malloc_trim() -> Callable[[int], int] | None:
    try:
        trim: Callable[[int], int] = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return None
    return trim


_TRIM = _malloc_trim()


def give_back_free_memory() -> None:
    """Return the free pages inside the C heaps to the kernel (glibc's malloc_trim, which also
    releases whole free pages in the middle of a heap, where the trim threshold reaches only its
    top): called after a large review, whose buffers leave megabytes free between live objects.
    A millisecond or so, once per large review."""
    if _TRIM is not None:
        _TRIM(0)


def bound_allocator() -> bool:
    """Fix glibc malloc's thresholds and heap count (see the module's docstring); False where the
    C library is not glibc (musl has no mallopt(), and needs none of this)."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    done = all(mallopt(param, value) == 1 for param, value in ALLOCATOR.items())
    log.debug("allocator bounded" if done else "allocator settings refused", extra={"mallopt": done})
    return done


def tune_for_latency() -> None:
    """Freeze what is loaded, collect young objects less often, hand the GIL back sooner."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)
    sys.setswitchinterval(SWITCH_INTERVAL_SECONDS)
    log.debug(
        "runtime tuned for latency",
        extra={
            "frozen_objects": gc.get_freeze_count(),
            "gc_thresholds": list(GC_THRESHOLDS),
            "switch_interval_s": SWITCH_INTERVAL_SECONDS,
        },
    )
