"""Every cap of limits.py: past it the launch facts are unknown and the limit says which cap."""

from __future__ import annotations

import shlex

import pytest

from webhook.config import load_config
from webhook.workloads import AdaptContext, Deferred, build_workload
from webhook.workloads.torchrun import ARGV, LIMIT, parse_launch
from webhook.workloads.torchrun.limits import MAX_CONTAINERS, MAX_WORKLOAD_WORK, WorkloadBudget


def _nested(script: str, levels: int) -> str:
    for _ in range(levels):
        script = "sh -c " + shlex.quote(script)
    return script


@pytest.mark.parametrize(
    ("command", "env", "index", "limit"),
    [
        pytest.param(
            ["timeout", "5"] * 600 + ["torchrun", "t.py"], {}, 0,
            "command + args has 1,202 words, over the cap of 1,024", id="words",
        ),
        pytest.param(
            ["torchrun", "x" * 300_000, "t.py"], {}, 0,
            "command + args has 300,012 characters, over the cap of 262,144", id="characters",
        ),
        pytest.param(
            ["sh", "-c", "true\n" * 14_000 + "torchrun t.py"], {}, 0,
            "a shell script has 70,013 bytes, over the cap of 65,536", id="script-bytes",
        ),
        pytest.param(
            ["torchrun", "t.py"], {f"V{i}": "1" for i in range(1100)}, 0,
            "env has 1,100 entries, over the cap of 1,024", id="env-entries",
        ),
        pytest.param(
            ["torchrun", "t.py"], {}, MAX_CONTAINERS,
            f"its pod has more than {MAX_CONTAINERS} containers (container #{MAX_CONTAINERS + 1})", id="containers",
        ),
        pytest.param(
            ["sh", "-c", _nested("torchrun t.py", 9)], {}, 0, "it nests shells more than 8 deep", id="nesting-depth",
        ),
        pytest.param(
            ["sh", "-c", "sh -c true; " * 40 + "torchrun t.py"], {}, 0,
            "it runs more than 32 nested shells or evals", id="nested-shells",
        ),
    ],
)  # fmt: skip
def test_past_a_cap_the_launch_is_unknown_and_named(
    command: list[str], env: dict[str, str | None], index: int, limit: str
) -> None:
    parsed = parse_launch(command, [], env, container_index=index)
    assert parsed.spec is not None and parsed.spec.limit == limit
    assert parsed.spec.unresolved[:2] == (ARGV, LIMIT)
    assert parsed.spec.nnodes is None and parsed.spec.nproc_per_node is None


def test_past_a_cap_a_command_that_names_no_launcher_is_nothing() -> None:
    assert parse_launch(["echo", "x"] * 2000, [], {}).spec is None


def test_within_the_caps_nothing_is_reported() -> None:
    parsed = parse_launch(["timeout", "5"] * 500 + ["torchrun", "--nnodes=2", "t.py"], [], {})
    assert parsed.spec is not None and parsed.spec.limit is None and parsed.spec.nnodes == "2"


def test_a_workload_repeating_long_launch_lines_stops_at_its_budget() -> None:
    """Each container is within its own caps; together they are past the workload's budget, and
    the containers read after that say so."""
    script = "A=1; echo $A; " * 4600 + "torchrun --nnodes=2 t.py"  # 64 KB, within the script cap
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "ml"},
        "spec": {
            "containers": [
                {"name": f"c{i}", "image": "x", "command": ["sh", "-c", script]} for i in range(40)
            ]
        },
    }
    workload = build_workload(pod, AdaptContext(config=load_config(), namespace="ml"))
    assert workload is not None
    specs = [t for _, _, t in workload.torchrun]
    read = [t for t in specs if t.limit is None]
    assert len(specs) == 40 and 0 < len(read) < 40
    assert all(t.nnodes == "2" for t in read)
    assert {t.limit for t in specs[len(read) :]} <= {
        f"the workload's launch lines together take more than {MAX_WORKLOAD_WORK:,} steps"
    }


# -- a caller's allowance: Deferred, never a fact about the workload ----------------------------------


def _script_pod(script: str, containers: int = 1) -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "ml"},
        "spec": {
            "containers": [
                {"name": f"c{i}", "image": "x", "command": ["sh", "-c", script]} for i in range(containers)
            ]
        },
    }


@pytest.mark.parametrize(
    ("script", "containers", "deferred"),
    [
        pytest.param("torchrun --nnodes=2 t.py", 1, False, id="a-real-launch-line"),
        pytest.param("A=1; echo $A; " * 2000 + "torchrun --nnodes=2 t.py", 1, True, id="one-long-script"),
        pytest.param(
            "A=1; echo $A; " * 300 + "torchrun --nnodes=2 t.py", 8, True, id="short-scripts-adding-up"
        ),
    ],
)
def test_an_allowance_defers_what_would_take_longer_and_reads_the_rest_the_same(
    script: str, containers: int, deferred: bool
) -> None:
    """Within the allowance the workload reads as without one; past it, Deferred, and without an
    allowance the same workload reads within the caps (no launch-limits warning)."""
    pod = _script_pod(script, containers)
    unlimited = build_workload(pod, AdaptContext(config=load_config(), namespace="ml"))
    assert unlimited is not None
    assert all(t.limit is None and t.nnodes == "2" for _, _, t in unlimited.torchrun)
    allowed = AdaptContext(config=load_config(), namespace="ml", launch_allowance=16_384)
    if deferred:
        with pytest.raises(Deferred):
            build_workload(pod, allowed)
    else:
        assert build_workload(pod, allowed) == unlimited


def test_an_allowance_meter_defers_instead_of_reporting_a_cap() -> None:
    meter = WorkloadBudget(allowance=100).meter()
    meter.charge(100)
    with pytest.raises(Deferred):
        meter.charge(1)
    uncapped = WorkloadBudget().meter()
    uncapped.charge(100_000)  # far below MAX_WORK: nothing raised
