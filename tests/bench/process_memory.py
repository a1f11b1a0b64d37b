"""The memory of a server's process tree, as the benchmarks that hold it to a limit read it.

Pss (proportional set size) is what the container's memory cgroup counts: pages the forked workers
still share with the supervisor count once. Rss is what `ps` shows (shared pages in every process).
"""

from __future__ import annotations

import contextlib
import threading
import time
from pathlib import Path
from typing import Any


def tree(pid: int) -> list[int]:
    """`pid` and its descendants."""
    out = [pid]
    with contextlib.suppress(OSError):
        for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split():
            out += tree(int(child))
    return out


def memory_kib(pid: int) -> tuple[int, int]:
    """(Pss, Rss) summed over the process tree, in KiB."""
    pss = rss = 0
    for p in tree(pid):
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{p}/smaps_rollup").read_text().splitlines():
                if line.startswith("Pss:"):
                    pss += int(line.split()[1])
                elif line.startswith("Rss:"):
                    rss += int(line.split()[1])
    return pss, rss


def pss_kib(pid: int) -> int:
    return memory_kib(pid)[0]


class Sampler:
    """(seconds since entering, Pss KiB, Rss KiB) on entering and every `every` seconds while the
    `with` block runs; `peak_pss` is the highest Pss seen."""

    def __init__(self, pid: int, every: float) -> None:
        self.pid = pid
        self.every = every
        self.samples: list[tuple[float, int, int]] = []
        self._stop = threading.Event()

    @property
    def peak_pss(self) -> int:
        return max((pss for _, pss, _ in self.samples), default=0)

    def __enter__(self) -> Sampler:
        self._start = time.monotonic()
        self._sample()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join(5)

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            self._sample()

    def _sample(self) -> None:
        self.samples.append((time.monotonic() - self._start, *memory_kib(self.pid)))
