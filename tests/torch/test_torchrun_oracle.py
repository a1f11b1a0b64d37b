"""torch as the judge: trainguard's torchrun parser against torch's own parser, case by case.

For every case in torchrun_cases.py, torch's `get_args_parser()` (or torch.distributed.launch's
`parse_args`, which adds `--use-env`), `parse_min_max_nnodes` and the launch-time checks of
`config_from_args` (0 < min <= max, max_restarts >= 0) give torch's answer, with the PET_*
environment set in os.environ (torch's `env` actions read it when the parser is built). Shell-wrapped
cases run in a real shell with a `torchrun` stand-in that records the argv and environment torch
would receive. Every field trainguard reports must agree, invalid lines included, except the
documented differences, which are tested as such.
"""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

# CI installs torch (tests/torch/install_torch.sh). Ask for a submodule: with tests/ on sys.path and
# no torch installed, `import torch` would find this directory as a namespace package.
pytest.importorskip("torch.distributed.run")
import torch
from torch.distributed import launch as torch_launch
from torch.distributed import run as torch_run
from torchrun_cases import ALL_CASES, DIFFERENCES, HAND_CASES, Case, Difference

from webhook.workloads.model import TorchrunSpec
from webhook.workloads.torchrun import ARGV, INVALID, LaunchParse, parse_launch

pytestmark = pytest.mark.torch


@dataclass(frozen=True)
class View:
    """The fields trainguard's policies use, normalised to torch's defaults."""

    invalid: bool
    nnodes: tuple[int, int] | None = None
    nproc_per_node: str | None = None
    standalone: bool | None = None
    rdzv_backend: str | None = None
    max_restarts: int | None = None


INVALID_VIEW = View(invalid=True)

SHIM = """#!/bin/sh
# Records the first launch: argv and environment, NUL-separated.
[ -e "$TG_ARGV_OUT" ] && exit 0
for a in "$@"; do printf '%s\\0' "$a"; done > "$TG_ARGV_OUT"
env -0 > "$TG_ENV_OUT"
exit 0
"""


@pytest.fixture(scope="module")
def shim_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("shim")
    (d / "torchrun").write_text(SHIM)
    (d / "torchrun").chmod(0o755)
    return d


@contextlib.contextmanager
def pet_environ(env: dict[str, str]) -> Iterator[None]:
    saved = {k: v for k, v in os.environ.items() if k.startswith("PET_")}
    for k in saved:
        del os.environ[k]
    os.environ.update(env)
    try:
        yield
    finally:
        for k in env:
            os.environ.pop(k, None)
        os.environ.update(saved)


def torch_input(case: Case, shim: Path, tmp: Path) -> tuple[str, tuple[str, ...], dict[str, str]]:
    """(module, argv, PET env) as torch would receive them."""
    words = [*case.command, *case.args]
    if case.shell:
        argv_out, env_out = tmp / "argv", tmp / "env"
        for f in (argv_out, env_out):
            f.unlink(missing_ok=True)
        env = {"PATH": f"{shim}:/usr/bin:/bin", "TG_ARGV_OUT": str(argv_out), "TG_ENV_OUT": str(env_out)}
        subprocess.run(words, env={**env, **case.env}, cwd="/", capture_output=True, timeout=20, check=False)
        assert argv_out.exists(), f"the shell never launched torchrun: {words}"
        argv = tuple(argv_out.read_bytes().decode().split("\0")[:-1])
        pairs = (e.split("=", 1) for e in env_out.read_bytes().decode().split("\0") if "=" in e)
        return "torch.distributed.run", argv, {k: v for k, v in pairs if k.startswith("PET_")}
    pet = {k: v for k, v in case.env.items() if k.startswith("PET_")}
    if os.path.basename(words[0]) == "torchrun":
        return "torch.distributed.run", tuple(words[1:]), pet
    m = words.index("-m")
    return words[m + 1], tuple(words[m + 2 :]), pet


def torch_view(module: str, argv: tuple[str, ...], env: dict[str, str]) -> View:
    parse = torch_launch.parse_args if module == "torch.distributed.launch" else torch_run.parse_args
    with (
        pet_environ(env),
        contextlib.redirect_stdout(io.StringIO()),
        contextlib.redirect_stderr(io.StringIO()),
    ):
        try:
            args = parse(list(argv))
        except (SystemExit, ValueError):  # argparse errors; check_env's int() on PET_<FLAG>
            return INVALID_VIEW
    try:
        lo, hi = torch_run.parse_min_max_nnodes(args.nnodes)
    except (ValueError, RuntimeError):
        return INVALID_VIEW
    if not 0 < lo <= hi or args.max_restarts < 0:  # config_from_args' assertions
        return INVALID_VIEW
    return View(False, (lo, hi), args.nproc_per_node, args.standalone, args.rdzv_backend, args.max_restarts)


def trainguard_view(spec: TorchrunSpec) -> View:
    if INVALID in spec.unresolved:
        return INVALID_VIEW
    assert not spec.unresolved, spec
    nnodes = (spec.nnodes_min, spec.nnodes_max) if spec.nnodes is not None else (1, 1)
    assert nnodes[0] is not None and nnodes[1] is not None
    return View(
        invalid=False,
        nnodes=(nnodes[0], nnodes[1]),
        nproc_per_node=spec.nproc_per_node if spec.nproc_per_node is not None else "1",
        standalone=spec.standalone,
        rdzv_backend=spec.rdzv_backend if spec.rdzv_backend is not None else "static",
        max_restarts=spec.max_restarts if spec.max_restarts is not None else 0,
    )


def judge(
    case: Case, shim: Path, tmp: Path
) -> tuple[LaunchParse, View, View, tuple[str, ...], dict[str, str]]:
    parsed = parse_launch(case.command, case.args, case.env)
    module, argv, env = torch_input(case, shim, tmp)
    assert parsed.spec is not None, case
    return parsed, trainguard_view(parsed.spec), torch_view(module, argv, env), argv, env


@pytest.mark.parametrize("case", ALL_CASES, ids=[c.id for c in ALL_CASES])
def test_agrees_with_torch(case: Case, shim_dir: Path, tmp_path: Path) -> None:
    parsed, ours, theirs, argv, env = judge(case, shim_dir, tmp_path)
    # The launch line trainguard found is the one torch receives (shell splitting included) …
    assert parsed.argv == argv
    assert {k: v for k, v in parsed.env.items() if k.startswith("PET_")} == env
    # … and both read it the same way.
    assert ours == theirs, parsed.error


@pytest.mark.parametrize("diff", DIFFERENCES, ids=[d.case.id for d in DIFFERENCES])
def test_documented_difference(diff: Difference, shim_dir: Path, tmp_path: Path) -> None:
    """Each documented difference still holds on both sides (so the table cannot go stale)."""
    case = diff.case
    parsed = parse_launch(case.command, case.args, case.env)
    assert parsed.spec is not None
    module, argv, env = torch_input(case, shim_dir, tmp_path)
    theirs = torch_view(module, argv, env)
    spec = parsed.spec
    assert isinstance(diff.trainguard, dict)
    for key, want in diff.trainguard.items():
        if key == "unknown":
            assert want in spec.unresolved and INVALID not in spec.unresolved
        elif key == "nnodes":
            assert (spec.nnodes_min, spec.nnodes_max) == want
        else:
            assert getattr(spec, key) == want
    if diff.torch == "invalid":
        assert theirs.invalid
    else:
        assert isinstance(diff.torch, dict)
        for key, want in diff.torch.items():
            if key == "launch_error":
                with pytest.raises(ValueError, match=str(want)):
                    torch_run.determine_local_world_size(str(diff.torch["nproc_per_node"]))
            else:
                assert getattr(theirs, key) == want
    assert diff.why


def test_corpus_size_and_agreement(
    shim_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The figures: how many cases, of which kinds, all agreeing."""
    tally: Counter[str] = Counter()
    for case in ALL_CASES:
        _, ours, theirs, _, _ = judge(case, shim_dir, tmp_path)
        tally["cases"] += 1
        tally["agree"] += ours == theirs
        tally["invalid"] += theirs.invalid
        tally["shell"] += case.shell
        tally["hand"] += case in HAND_CASES
    with capsys.disabled():
        print(
            f"\ntorchrun oracle: {tally['cases']} cases ({tally['hand']} hand-written, "
            f"{tally['cases'] - tally['hand']} generated; {tally['shell']} run through a shell), "
            f"{tally['agree']} agree with torch {torch.__version__} "
            f"({tally['invalid']} rejected by both); {len(DIFFERENCES)} documented differences"
        )
    assert tally["cases"] >= 300
    assert tally["agree"] == tally["cases"]
    assert tally["invalid"] >= 50 and tally["cases"] - tally["invalid"] >= 150


def test_argv_unknown_marker_is_never_a_torch_verdict() -> None:
    """ARGV means 'could not see': it never comes with field values that pretend otherwise."""
    parsed = parse_launch(["bash", "-c", "torchrun $EXTRA --nnodes=2 t.py"], [], {})
    assert parsed.spec is not None and parsed.spec.unresolved == (ARGV,)
