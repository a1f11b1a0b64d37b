"""The parser's shortcuts read what its general path reads, and charge the same steps.

Each shortcut (a plain script split by one regex, remembered option words classified at once,
commands that cannot start a launch passed by, literal words taken without expansion, no kubelet
pass over words without `$`, PET_* names found by one scan) is held to the general path it stands
for: the same result and the same `Meter.work`, also when the meter runs out part way (then the
same error at the same count). The inputs that must go the general way (quotes, `$VAR`, `#`,
redirections, `--`, unknown words, PET_* names) are here too, so that a shortcut taken where it
must not be fails a test.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import cast

import pytest

from webhook.workloads.torchrun import options as options_module
from webhook.workloads.torchrun import parse_launch
from webhook.workloads.torchrun import shell as shell_module
from webhook.workloads.torchrun.environ import Environ
from webhook.workloads.torchrun.launcher import _may_launch, find_launch
from webhook.workloads.torchrun.limits import Meter, OverLimit
from webhook.workloads.torchrun.options import TorchExit, Values, parse_argv
from webhook.workloads.torchrun.shell import Lexer, ShellState, Unfollowable, Word, expand_word, run_script
from webhook.workloads.torchrun.unknown import UNK


def _outcome(run: Callable[[Meter], object], budget: int) -> tuple[str, int]:
    """What a run with this step budget gives, and the steps it had charged by then."""
    meter = Meter(budget=budget)
    try:
        result = run(meter)
    except (OverLimit, TorchExit, Unfollowable) as e:
        return (f"{type(e).__name__}: {e}", meter.work)
    return (repr(result), meter.work)


def _same_at_every_budget(fast: Callable[[Meter], object], general: Callable[[Meter], object]) -> None:
    """fast and general agree with every step budget from 0 to what a full run takes."""
    full = Meter()
    general(full)
    for budget in range(full.work + 2):
        assert _outcome(fast, budget) == _outcome(general, budget), f"budget {budget}"


# --- the lexer: a plain script is split by one regex --------------------------------------------

PLAIN_SCRIPTS = [
    pytest.param("sleep 60", id="one-command"),
    pytest.param("mkdir -p /var/run/sshd; /usr/sbin/sshd -D;\n", id="semicolons-newline"),
    pytest.param("a&&b||c|d&e;;f|&g", id="operators-without-spaces"),
    pytest.param("a &| b ||| c ;;& d", id="operator-runs"),
    pytest.param("(a; b) && { c; }", id="subshell-and-group"),
    pytest.param("  a\t\tb \r\n\n c  ", id="whitespace-runs"),
    pytest.param("torchrun --nnodes=2 --nproc-per-node=8 train.py --lr=0.1", id="launch-line"),
    pytest.param("a\vb c\fd", id="other-whitespace-is-literal"),
    pytest.param("", id="empty"),
]
# One character of each kind that the regex must not split: the lexer's loop reads them.
NOT_PLAIN_SCRIPTS = [
    pytest.param("a 'x y' b", id="single-quotes"),
    pytest.param('a "x y" b', id="double-quotes"),
    pytest.param("a x\\ y b", id="backslash"),
    pytest.param("a $X b", id="dollar"),
    pytest.param("a `x` b", id="backquote"),
    pytest.param("a >out b", id="redirection-out"),
    pytest.param("a <in b", id="redirection-in"),
    pytest.param("a # b c", id="comment"),
]


@pytest.mark.parametrize("script", PLAIN_SCRIPTS)
def test_plain_script_tokens_are_the_lexers(script: str) -> None:
    assert Lexer(script).run() == Lexer(script).scan()
    assert Lexer(script).plain() == Lexer(script).scan()


@pytest.mark.parametrize("script", NOT_PLAIN_SCRIPTS)
def test_script_with_quotes_or_expansions_goes_the_lexers_way(script: str) -> None:
    # The regex would read these wrongly, so run() must not use it.
    assert Lexer(script).plain() != Lexer(script).scan()
    assert Lexer(script).run() == Lexer(script).scan()


# --- the shell: commands that cannot start a launch, literal words -----------------------------

SCRIPTS = [
    pytest.param("mkdir -p /run; sshd -D; torchrun --nnodes=2 t.py", {}, id="launch-after-plain-commands"),
    pytest.param("echo a b c; sleep 5", {}, id="no-launch"),
    pytest.param("env A=1 timeout 5 torchrun t.py", {}, id="wrappers-then-launch"),
    pytest.param("exec python -u -m torch.distributed.run t.py", {}, id="python-module"),
    pytest.param("$(which torchrun) t.py", {}, id="unknown-head"),
    pytest.param('"$T" --nnodes=$N t.py', {"T": "torchrun", "N": "4"}, id="launcher-from-a-variable"),
    pytest.param("X=1 Y=$X torchrun --nnodes=$Y t.py", {}, id="prefix-assignments"),
    pytest.param("eval torchrun --nnodes=3 t.py", {}, id="eval"),
    pytest.param("echo x && bash -c 'sleep 1; torchrun t.py'", {}, id="nested-shell"),
    pytest.param("cat <<EOF\ntorchrun x\nEOF\nsleep 1 >/dev/null 2>&1", {}, id="heredoc-and-redirections"),
    pytest.param("a $V b; torchrun $V", {"V": "x  y"}, id="field-splitting"),
    pytest.param("export PET_NNODES=4; torchrun t.py", {}, id="export"),
]


def _run(script: str, env: dict[str, str | None], passing_by: bool) -> Callable[[Meter], object]:
    def run(meter: Meter) -> object:
        state = ShellState.inheriting(Environ(env), meter)
        return run_script(script, state, 1, meter, find_launch, _may_launch if passing_by else None)

    return run


@pytest.mark.parametrize(("script", "env"), SCRIPTS)
def test_commands_passed_by_cost_what_the_finder_charges(script: str, env: dict[str, str | None]) -> None:
    _same_at_every_budget(_run(script, env, passing_by=True), _run(script, env, passing_by=False))


@pytest.mark.parametrize(
    ("script", "env"),
    [
        pytest.param("a b c d e f", {}, id="literal-words"),
        pytest.param("a b $V c 'd e' f", {"V": "x  y"}, id="literal-words-around-expansions"),
        pytest.param('"$@" a $X${X} "b"', {"X": "xx"}, id="expansions-only-then-literals"),
    ],
)
def test_literal_words_charge_what_expansion_charges(script: str, env: dict[str, str | None]) -> None:
    words = [cast(Word, payload) for kind, payload in Lexer(script).run() if kind == "word"]
    state = ShellState(vars=dict(env), exported=set(env))

    def fields(meter: Meter) -> object:
        return shell_module._argv(words, state, meter)

    def expanded(meter: Meter) -> object:
        return [f for w in words for f in expand_word(w, state, meter)]

    _same_at_every_budget(fields, expanded)


# --- torch's options: remembered words classified at once --------------------------------------

ARGVS = [
    pytest.param(["--nnodes=2", "--nproc-per-node", "8", "t.py", "--lr=1"], id="options-then-script"),
    pytest.param(["--standalone", "--", "t.py", "--nnodes=9"], id="double-dash"),
    pytest.param(["--nnodes=2", "--"], id="double-dash-last"),
    pytest.param(["--nproc", "4", "t.py"], id="ambiguous-prefix"),
    pytest.param(["t.py", "--lo", "x"], id="ambiguous-after-the-script"),
    pytest.param(["--nnodes", UNK + "x", "t.py"], id="unknown-value"),
    pytest.param([UNK, "t.py"], id="unknown-word"),
    pytest.param(["--max-restarts=x", "t.py"], id="invalid-int"),
    pytest.param(["-mr3", "t.py"], id="clustered-short-options"),
    pytest.param(["--bogus", "t.py"], id="unrecognized"),
    pytest.param(["--print-completion", "bash", "t.py"], id="prints-and-exits"),
]


def _parse_argv(argv: list[str]) -> Callable[[Meter], object]:
    def run(meter: Meter) -> object:
        out = Values()
        parse_argv(argv, "torchrun", out, meter)
        return (out.values, sorted(out.unknown), out.argv_unknown)

    return run


@pytest.mark.parametrize("argv", ARGVS)
def test_remembered_words_read_and_charge_as_new_ones(
    argv: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    fresh: dict[str, tuple[str, object, str, str | None]] = {}
    monkeypatch.setitem(options_module._CLASSIFIED, "torchrun", fresh)
    cold = _outcome(_parse_argv(argv), 10_000)
    # (An ambiguous word is never remembered: a line with one always goes the general way.)
    warm = _outcome(_parse_argv(argv), 10_000)
    assert warm == cold
    # Near the end of the budget, remembered words stop at the same step as new ones.
    for budget in range(cold[1] + 2):
        monkeypatch.setitem(options_module._CLASSIFIED, "torchrun", {})
        cold_at = _outcome(_parse_argv(argv), budget)
        monkeypatch.setitem(options_module._CLASSIFIED, "torchrun", fresh)
        assert _outcome(_parse_argv(argv), budget) == cold_at, f"budget {budget}"


# --- PET_* names found by one scan ----------------------------------------------------------


def _environ(kind: str) -> Environ:
    base: dict[str, str | None] = {
        "NCCL_DEBUG": "WARN",
        "PET_NNODES": "2",
        "A_PET_B": "x",
        "PET_RDZV_ID": None,
    }
    if kind == "no-pet-names":
        base = {"NCCL_DEBUG": "WARN", "X_PET_": "1", "PE": "T_"}
    env = Environ(base, exported={"PET_NNODES", "NCCL_DEBUG"} if kind == "exported" else None)
    if kind == "set-and-unset":
        env.set("PET_MASTER_PORT", "1")
        env.set("OTHER", "1")
        env.unset("PET_NNODES")
    if kind == "cleared":
        env.clear()
        env.set("PET_NPROC_PER_NODE", "8")
    return env


@pytest.mark.parametrize("kind", ["plain", "no-pet-names", "exported", "set-and-unset", "cleared"])
def test_pet_names_are_the_environments_pet_entries(kind: str) -> None:
    every, pet = Meter(), Meter()
    expected = {k: v for k, v in _environ(kind).items(every) if k.startswith("PET_")}
    assert _environ(kind).pet(pet) == expected
    assert list(_environ(kind).pet(Meter())) == list(expected)  # the same order
    assert pet.work == every.work


@pytest.mark.parametrize(
    ("words", "env", "argv"),
    [
        pytest.param(["torchrun", "--nnodes=2", "t.py"], {"N": "3"}, ("--nnodes=2", "t.py"), id="no-dollar"),
        pytest.param(
            ["torchrun", "--nnodes=$(N)", "t.py"], {"N": "3"}, ("--nnodes=3", "t.py"), id="reference"
        ),
        pytest.param(
            ["torchrun", "--nnodes=$$(N)", "t.py"], {"N": "3"}, ("--nnodes=$(N)", "t.py"), id="escaped"
        ),
        pytest.param(
            ["torchrun", "--nnodes=$N", "t.py"], {"N": "3"}, ("--nnodes=$N", "t.py"), id="shell-syntax"
        ),
        pytest.param(
            ["$(L)", "--nnodes=2", "t.py"], {"L": "torchrun"}, ("--nnodes=2", "t.py"), id="launcher"
        ),
    ],
)
def test_kubelet_expansion_only_where_a_dollar_is(
    words: list[str], env: dict[str, str | None], argv: tuple[str, ...]
) -> None:
    parsed = parse_launch(words[:1], words[1:], env)
    assert parsed.spec is not None
    assert parsed.argv == argv


@pytest.mark.parametrize(
    ("env", "container_index", "launcher", "markers"),
    [
        pytest.param({"A": "1"}, 0, None, None, id="nothing"),
        pytest.param({"PET_NNODES": "2"}, 0, "env", (), id="own-pet-nnodes"),
        pytest.param({"PET_NNODES": "0"}, 0, "env", ("invalid", "nnodes"), id="own-pet-invalid"),
        pytest.param({"PET_NNODES": "2"}, 64, "env", ("argv", "limit"), id="past-the-container-cap"),
        pytest.param({"A": "1"}, 64, None, None, id="past-the-container-cap-without-pet"),
    ],
)
def test_container_without_a_launch_line(
    env: dict[str, str | None], container_index: int, launcher: str | None, markers: tuple[str, ...] | None
) -> None:
    parsed = parse_launch((), (), env, container_index=container_index)
    assert (parsed.spec.launcher if parsed.spec else None) == launcher
    assert (parsed.spec.unresolved if parsed.spec else None) == markers
    assert parsed.work == 0


@pytest.mark.parametrize(
    ("script", "argv"),
    [
        pytest.param("a $V-b", ["a", "1-b"], id="name-ends-at-a-dash"),
        pytest.param("a $V_1.b", ["a", "2.b"], id="underscore-and-digit-in-the-name"),
        pytest.param("a $V\u0663x-b", ["a", UNK + "-b"], id="non-ascii-digit-is-part-of-the-name"),
        pytest.param('a "$V"é', ["a", "1é"], id="name-ends-at-the-quote"),
    ],
)
def test_variable_name_is_the_longest_run_of_word_characters(script: str, argv: list[str]) -> None:
    seen: list[list[str]] = []

    def record(words: list[str], environ: Environ, depth: int, meter: Meter) -> None:
        seen.append(words)

    state = ShellState(vars={"V": "1", "V_1": "2"}, exported=set())
    run_script(script, state, 1, Meter(), record)
    assert seen == [argv]
