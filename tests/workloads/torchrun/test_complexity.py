"""Property tests over generated launch lines: the parser's work grows linearly with its input.

Work is the parser's own counter (`LaunchParse.work`, every loop charges what it consumes), not
wall time: these tests hold on a loaded machine. tests/bench/bench_parsers.py measures the time.
"""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest

from webhook.workloads.torchrun import ARGV, LIMIT, parse_launch
from webhook.workloads.torchrun.limits import MAX_ARGV_BYTES, MAX_WORK

# Work per character (or word) of input the parser may spend; measured worst is about 4.
WORK_PER_UNIT = 8

Gen = Callable[[random.Random, int], tuple[list[str], list[str], dict[str, str | None]]]


def _script(rng: random.Random, pieces: list[str], size: int) -> str:
    out: list[str] = []
    total = 0
    while total < size:
        piece = rng.choice(pieces)
        out.append(piece)
        total += len(piece)
    return "".join(out)


def _words(rng: random.Random, pieces: list[list[str]], count: int) -> list[str]:
    out: list[str] = []
    while len(out) < count:
        out.extend(rng.choice(pieces))
    return out


WRAPPERS = [["timeout", "5"], ["env", "A=1"], ["nice", "-n", "5"], ["exec"], ["nohup"], ["env", "-u", "X"]]
SCRIPT_PIECES = [
    "timeout 5 ", "env A=1 ", "A=1; ", "echo $A; ", "if ", "then ", "$( ", "$(echo x) ", "'q' ",
    '"d\\"q" ', "\\x ", "$'\\x41' ", "${A:-d} ", "$% ", "`echo` ", "# c\n", "x && ", "y | ",
]  # fmt: skip

GENERATORS: dict[str, Gen] = {
    "exec-wrappers": lambda rng, n: (
        _words(rng, WRAPPERS, n // 6) + ["torchrun", "--nnodes=2", "t.py"],
        [],
        {},
    ),
    "exec-dollar-paren-runs": lambda rng, n: (
        ["torchrun", "--nnodes=2", _script(rng, ["$(", "$(N)", "$$(", "x"], n), "t.py"],
        [],
        {"N": "2"},
    ),
    "sh-mixed-script": lambda rng, n: (
        ["sh", "-c", _script(rng, SCRIPT_PIECES, n) + "\ntorchrun --nnodes=2 t.py"],
        [],
        {"A": "1"},
    ),
    "sh-wrappers": lambda rng, n: (
        ["bash", "-c", _script(rng, ["timeout 5 ", "env A=1 ", "nice "], n) + "torchrun t.py"],
        [],
        {},
    ),
    "sh-unterminated-dollar-paren": lambda rng, n: (
        ["sh", "-c", "torchrun t.py " + _script(rng, ["$(", "$( '"], n)],
        [],
        {},
    ),
    "args-with-many-options": lambda rng, n: (
        ["torchrun"],
        _words(
            rng, [["--nnodes=2"], ["--nproc-per", "4"], ["--max-restarts", "1"], ["--standalone"]], n // 10
        )
        + ["t.py"],
        {},
    ),
    "accelerate-many-options": lambda rng, n: (
        ["accelerate", "launch"],
        _words(
            rng,
            [["--num_machines=2"], ["--num_processes", "16"], ["--multi_gpu"], ["--machine_rank", "$(R)"]],
            n // 10,
        )
        + ["t.py"],
        {"R": None},
    ),
    "sh-wrappers-then-deepspeed": lambda rng, n: (
        ["bash", "-c", _script(rng, ["timeout 5 ", "env A=1 ", "nice "], n) + "deepspeed --num_gpus 8 t.py"],
        [],
        {},
    ),
}


def _size(command: list[str], args: list[str]) -> int:
    return sum(map(len, command)) + sum(map(len, args)) + len(command) + len(args)


@pytest.mark.parametrize("name", GENERATORS, ids=list(GENERATORS))
def test_work_is_linear_in_the_input(name: str) -> None:
    """At every size (1 KB to 64 KB) and seed: work within a constant per input unit (a quadratic
    step would break the bound at the larger sizes), and the launch found or a cap named."""
    gen = GENERATORS[name]
    for seed in range(5):
        for n in (1_000, 4_000, 16_000, 64_000):
            command, args, env = gen(random.Random(f"{name}/{seed}/{n}"), n)
            parsed = parse_launch(command, args, env)
            size = _size(command, args)
            assert parsed.work <= WORK_PER_UNIT * size + 64, (name, seed, n, parsed.work, size)
            expected = (
                ("accelerate",) if "accelerate" in name else ("deepspeed",) if "deepspeed" in name else ()
            )
            assert parsed.spec is None or parsed.spec.launcher in ("torchrun", "env", *expected), parsed.spec
            if parsed.limit is not None:
                assert parsed.spec is not None and LIMIT in parsed.spec.unresolved


@pytest.mark.parametrize(
    ("command", "env"),
    [
        pytest.param(
            ["sh", "-c", "X=" + "y" * 60_000 + "; torchrun " + "$X " * 1000 + "t.py"],
            {},
            id="script-var-copies",
        ),
        pytest.param(["torchrun", "$(BIG)" * 20_000, "t.py"], {"BIG": "z" * 10_000}, id="kubelet-var-copies"),
        pytest.param(
            ["bash", "-c", "torchrun " + '"$@" ' * 24 + "t.py", "--", *(["a" * 200] * 1000)],
            {},
            id="params-copies",
        ),
    ],
)
def test_expansion_that_multiplies_the_input_stops_at_the_work_cap(
    command: list[str], env: dict[str, str | None]
) -> None:
    """Expanding one long value many times would write far more than was read: the meter stops it,
    and the launch is reported as past a cap instead of being computed."""
    parsed = parse_launch(command, [], env)
    assert parsed.work <= MAX_WORK + MAX_ARGV_BYTES
    assert parsed.spec is not None and parsed.spec.unresolved[:2] == (ARGV, LIMIT)
    assert parsed.limit is not None and "steps" in parsed.limit
