"""Interpreter settings for a server on the API server's critical path: short, predictable pauses.

Called once, after the policies, the config and every module the server needs are loaded, and
before the first request (`serve()` in server.py). What it changes, and why:

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

Nothing here changes a decision; every setting is process-wide, so each worker process calls it.
"""

from __future__ import annotations

import gc
import logging
import sys

log = logging.getLogger("trainguard.runtime")

# (young, middle, old) collection thresholds. 7,000: a collection every few requests rather than
# several per request; the two older thresholds are CPython's defaults.
GC_THRESHOLDS = (7_000, 10, 10)
SWITCH_INTERVAL_SECONDS = 0.001


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
