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
# a well-formed input far below it; it stops what they cannot see, such as `$X $X $X …` expanding
# one long variable many times.
MAX_WORK = 4 * 1024 * 1024


class OverLimit(Exception):
    """A cap was reached: the message says which, in words a user can act on."""


@dataclass(slots=True)
class Meter:
    """Work done on one container's launch line; raises OverLimit past MAX_WORK or MAX_NESTED.

    Every loop of the parser charges what it consumes, so the total is also what the property tests
    hold against the input size.
    """

    work: int = 0
    nested: int = 0
    budget: int = MAX_WORK

    def charge(self, units: int) -> None:
        self.work += units
        if self.work > self.budget:
            raise OverLimit(f"reading it takes more than {self.budget:,} steps (expansions too long)")

    def nest(self) -> None:
        self.nested += 1
        if self.nested > MAX_NESTED:
            raise OverLimit(f"it runs more than {MAX_NESTED} nested shells or evals")


def over(what: str, size: int, cap: int, unit: str) -> str:
    """The warning text for a cap: what was too large, how large, and the cap."""
    return f"{what} has {size:,} {unit}, over the cap of {cap:,}"
