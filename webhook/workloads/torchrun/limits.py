"""Every cap on the launch-line parser, and the meter that enforces them.

The webhook sits in front of every pod with `failurePolicy: Fail`: what one container's command can
cost must be bounded whatever it holds. Every parser in this package reads its input once (or a
fixed number of times), and past one of these caps a fact is *unknown*, reported through
`TorchrunSpec.limit` (which the `launch-limits` policy shows as a warning), never computed at
length. The values sit far above any real launch line: a torchrun command has tens of words,
a container a few dozen env entries.
"""

from __future__ import annotations

from dataclasses import dataclass

# Words in `command` + `args` of one container.
MAX_WORDS = 1024
# Bytes in `command` + `args` of one container (Linux refuses a single argument over 128 KiB).
MAX_ARGV_BYTES = 256 * 1024
# Bytes of one shell script (`sh -c SCRIPT`, `eval …`) that is lexed.
MAX_SCRIPT_BYTES = 64 * 1024
# Entries in one container's `env`.
MAX_ENV_ENTRIES = 1024
# Containers per pod template whose launch line is read.
MAX_CONTAINERS = 64
# Shells within shells (`sh -c "bash -c '…'"`, `eval`) followed.
MAX_DEPTH = 8
# Nested shells and evals followed in one launch line, however deep (each copies its variables).
MAX_NESTED = 32
# Units of work (characters read or written, words visited) for one container. The caps above keep
# a well-formed input below it (a 64 KiB script of short commands takes about 250,000); it stops
# what they cannot see, such as `$X $X $X …` expanding one long variable many times.
MAX_WORK = 256 * 1024
# Units of work for all the containers of one workload together: the caps above bound one
# container, this bounds a Pod (or job) that repeats a long launch line in many containers.
# One of the longest scripts: about 0.2 s of CPU at the slowest rate measured on a busy machine;
# a typical workload spends a few thousand.
MAX_WORKLOAD_WORK = 256 * 1024


class OverLimit(Exception):
    """A cap was reached: the message says which, in words a user can act on."""


class Deferred(Exception):
    """A caller's allowance (WorkloadBudget.allowance) ran out before the caps did.

    Not a fact about the workload: the caller reads it again where the full caps apply (the
    webhook decides small objects on its event loop, and defers the rare long one to a thread).
    """


@dataclass(slots=True)
class Meter:
    """Work done on one container's launch line; raises OverLimit past MAX_WORK or MAX_NESTED.

    Every loop of the parser charges what it consumes, so the total is also what the property tests
    hold against the input size.
    """

    work: int = 0
    nested: int = 0
    budget: int = MAX_WORK
    reason: str = f"reading it takes more than {MAX_WORK:,} steps (expansions too long)"
    defers: bool = False  # the budget is a caller's allowance: past it, Deferred, not OverLimit

    def charge(self, units: int) -> None:
        self.work += units
        if self.work > self.budget:
            if self.defers:
                raise Deferred(f"more than {self.budget:,} steps of launch lines")
            raise OverLimit(self.reason)

    def nest(self) -> None:
        self.nested += 1
        if self.nested > MAX_NESTED:
            raise OverLimit(f"it runs more than {MAX_NESTED} nested shells or evals")


def over(what: str, size: int, cap: int, unit: str) -> str:
    """The warning text for a cap: what was too large, how large, and the cap."""
    return f"{what} has {size:,} {unit}, over the cap of {cap:,}"


@dataclass(slots=True)
class WorkloadBudget:
    """The work left for the launch lines of one workload (limits.MAX_WORKLOAD_WORK)."""

    remaining: int = MAX_WORKLOAD_WORK
    # Steps a caller allows before it would rather read the workload elsewhere (Deferred); None:
    # the caps alone apply. Below the caps, so that what is read within it reads the same.
    allowance: int | None = None

    def meter(self) -> Meter:
        """A meter for the next container: its own cap, or what the workload has left if less."""
        if self.allowance is not None:
            allowed = self.allowance - (MAX_WORKLOAD_WORK - self.remaining)
            if allowed < min(MAX_WORK, self.remaining):
                return Meter(budget=max(0, allowed), defers=True)
        if self.remaining >= MAX_WORK:
            return Meter()
        reason = f"the workload's launch lines together take more than {MAX_WORKLOAD_WORK:,} steps"
        return Meter(budget=max(0, self.remaining), reason=reason)

    def spent(self, meter: Meter) -> None:
        self.remaining -= meter.work
