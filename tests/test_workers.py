"""How many worker processes `trainguard serve` starts when --workers is not given: the CPU limit."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from webhook.serve.workers import default_workers

CPUS = len(os.sched_getaffinity(0))

LIMITS = [
    pytest.param("200000 100000\n", min(CPUS, 2), id="limit-2-cpus"),
    pytest.param("150000 100000\n", min(CPUS, 2), id="limit-1.5-cpus-rounds-up"),
    pytest.param("50000 100000\n", 1, id="limit-half-a-cpu-is-one-worker"),
    pytest.param("max 100000\n", CPUS, id="no-limit-uses-the-affinity-mask"),
    pytest.param(None, CPUS, id="no-cgroup-v2-file"),
    pytest.param("garbage\n", CPUS, id="unreadable-limit"),
]


@pytest.mark.parametrize(("cpu_max", "workers"), LIMITS)
def test_workers_default_to_the_cpu_limit(tmp_path: Path, cpu_max: str | None, workers: int) -> None:
    if cpu_max is not None:
        (tmp_path / "cpu.max").write_text(cpu_max)
    assert default_workers(str(tmp_path)) == workers
