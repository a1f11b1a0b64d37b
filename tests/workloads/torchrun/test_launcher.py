"""Finding the launch in one command's argv: launchers, wrappers and shells."""

from __future__ import annotations

import pytest

from webhook.workloads.torchrun.environ import Environ
from webhook.workloads.torchrun.launcher import find_launch
from webhook.workloads.torchrun.limits import Meter


@pytest.mark.parametrize(
    ("argv", "env", "expected"),
    [
        pytest.param(["torchrun", "t.py"], {}, ("torchrun", ("t.py",), {}), id="torchrun"),
        pytest.param(
            ["timeout", "-s", "KILL", "5", "torchrun", "t.py"], {}, ("torchrun", ("t.py",), {}), id="timeout"
        ),
        pytest.param(
            ["nice", "-n", "5", "exec", "-a", "x", "torchrun"], {}, ("torchrun", (), {}), id="nice-exec"
        ),
        pytest.param(
            ["env", "-i", "PET_NNODES=2", "nohup", "torchrun"],
            {"PET_NPROC_PER_NODE": "8"},
            ("torchrun", (), {"PET_NNODES": "2"}),
            id="env-clears-then-sets",
        ),
        pytest.param(
            ["env", "-u", "PET_NNODES", "torchrun"],
            {"PET_NNODES": "2"},
            ("torchrun", (), {}),
            id="env-unsets",
        ),
        pytest.param(
            ["python3", "-u", "-m", "torch.distributed.run", "t.py"],
            {},
            ("torch.distributed.run", ("t.py",), {}),
            id="python-m",
        ),
        pytest.param(
            ["sh", "-c", 'exec torchrun "$@"', "sh", "--nnodes=2"],
            {},
            ("torchrun", ("--nnodes=2",), {}),
            id="shell-params",
        ),
        pytest.param(
            ["busybox", "sh", "-c", "PET_NNODES=3 torchrun"],
            {},
            ("torchrun", (), {"PET_NNODES": "3"}),
            id="busybox-sh",
        ),
        pytest.param(["timeout", "5"], {}, None, id="wrapper-without-a-command"),
        pytest.param(["python", "-c", "import torch"], {}, None, id="python-c"),
        pytest.param(["sh", "/entrypoint.sh"], {}, None, id="script-file"),
    ],
)
def test_find_launch(
    argv: list[str], env: dict[str, str | None], expected: tuple[str, tuple[str, ...], dict[str, str]] | None
) -> None:
    found = find_launch(argv, Environ(env), 0, Meter())
    assert (None if found is None else (found.launcher, found.argv, found.env)) == expected


def test_wrapper_repeats_cost_one_step_per_word() -> None:
    argv = ["timeout", "5"] * 50_000 + ["torchrun", "t.py"]
    meter = Meter()
    found = find_launch(argv, Environ({}), 0, meter)
    assert found is not None and found.argv == ("t.py",)
    assert meter.work <= len(argv)
