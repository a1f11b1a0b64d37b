"""torch's argparse, reproduced: what each argv gives, and where torch would exit."""

from __future__ import annotations

import pytest

from webhook.workloads.torchrun.limits import Meter
from webhook.workloads.torchrun.options import TorchExit, Values, apply_env, parse_argv


def parsed(argv: list[str], env: dict[str, str | None] | None = None) -> dict[str, tuple[str | bool, str]]:
    out = Values()
    parse_argv(argv, "torchrun", out, Meter())
    apply_env("torchrun", env or {}, out)
    return out.values


@pytest.mark.parametrize(
    ("argv", "env", "dest", "expected"),
    [
        pytest.param(["--nnodes=2", "t.py"], {}, "nnodes", ("2", "flag"), id="equals-form"),
        pytest.param(["--nnodes", "2", "t.py"], {}, "nnodes", ("2", "flag"), id="space-form"),
        pytest.param(["--nproc_per=4", "t.py"], {}, "nproc_per_node", ("4", "flag"), id="unique-prefix"),
        pytest.param(["-mr3", "t.py"], {}, "redirects", ("3", "flag"), id="clustered-short-options"),
        pytest.param(["t.py", "--nnodes=9"], {}, "nnodes", None, id="after-the-script"),
        pytest.param(["t.py"], {"PET_NNODES": "3"}, "nnodes", ("3", "env"), id="pet-fallback"),
        pytest.param(
            ["--nnodes=2", "t.py"], {"PET_NNODES": "3"}, "nnodes", ("2", "flag"), id="flag-beats-pet"
        ),
        pytest.param(["t.py"], {"PET_STANDALONE": "1"}, "standalone", (True, "env"), id="pet-boolean"),
    ],
)
def test_values(
    argv: list[str], env: dict[str, str | None], dest: str, expected: tuple[str | bool, str] | None
) -> None:
    assert parsed(argv, env).get(dest) == expected


@pytest.mark.parametrize(
    ("argv", "env", "message"),
    [
        pytest.param(["--nproc", "4", "t.py"], {}, "ambiguous option: --nproc", id="ambiguous-prefix"),
        pytest.param(["t.py", "--lo", "x"], {}, "ambiguous option: --lo", id="ambiguous-after-script"),
        pytest.param(["--bogus", "t.py"], {}, "unrecognized arguments: --bogus", id="unknown-option"),
        pytest.param(["--nnodes"], {}, "expected one argument", id="missing-value"),
        pytest.param(["--nnodes=2"], {}, "required: training_script", id="no-script"),
        pytest.param(["--max-restarts=x", "t.py"], {}, "invalid int value", id="bad-int"),
        pytest.param(["--start-method=thread", "t.py"], {}, "invalid choice", id="bad-choice"),
        pytest.param(["t.py"], {"PET_STANDALONE": "yes"}, "is not an integer", id="pet-boolean-not-int"),
    ],
)
def test_where_torch_exits(argv: list[str], env: dict[str, str | None], message: str) -> None:
    with pytest.raises(TorchExit, match=message):
        parsed(argv, env)
