"""The environment one command starts with, read without copying its shell's variables.

A script runs many commands; copying every variable for each one would cost commands × variables.
An Environ keeps a reference to what the command inherits (the container's env, or its shell's
variables and which of them are exported) and records only its own edits: `NAME=value` prefixes
and what `env -i`, `env -u NAME`, `env NAME=value` change. The whole environment is listed only
when a launch is found (its PET_* entries) or a nested shell starts (limits.MAX_NESTED bounds those).
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping

from webhook.workloads.torchrun.limits import Meter


class Environ:
    __slots__ = ("_base", "_exported", "_cleared", "_sets", "_unset")

    def __init__(self, base: Mapping[str, str | None], exported: Collection[str] | None = None) -> None:
        self._base = base
        self._exported = exported  # names of base passed on; None: all of them
        self._cleared = False
        self._sets: dict[str, str | None] = {}
        self._unset: set[str] = set()

    def set(self, name: str, value: str | None) -> None:
        self._sets[name] = value
        self._unset.discard(name)

    def unset(self, name: str) -> None:
        self._sets.pop(name, None)
        self._unset.add(name)

    def clear(self) -> None:
        self._cleared = True
        self._sets.clear()

    def items(self, meter: Meter) -> Iterator[tuple[str, str | None]]:
        yield from self._sets.items()
        if self._cleared:
            return
        names = self._base if self._exported is None else self._exported
        meter.charge(len(names))
        for name in names:
            if name in self._base and name not in self._sets and name not in self._unset:
                yield name, self._base[name]

    def materialize(self, meter: Meter) -> dict[str, str | None]:
        return dict(self.items(meter))

    def pet(self, meter: Meter) -> dict[str, str | None]:
        """The PET_* entries: all that torch reads from its environment (in items() order, charged
        alike). Written out rather than filtering items(): every launch found calls this, over a
        container env of tens of names of which few are PET_*, and the generator's three
        membership tests per name cost more than the rest of the parse."""
        sets, base = self._sets, self._base
        out = {k: v for k, v in sets.items() if k.startswith("PET_")} if sets else {}
        if self._cleared:
            return out
        names = base if self._exported is None else self._exported
        meter.charge(len(names))
        if "PET_" not in "\0".join(names):
            return out  # the common case, no PET_* name at all: one scan in C instead of a loop
        unset = self._unset
        for name in names:
            if name.startswith("PET_") and name in base and name not in sets and name not in unset:
                out[name] = base[name]
        return out
