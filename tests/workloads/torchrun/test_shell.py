"""The POSIX-sh lexer and interpreter: words, expansions, and the argv each command gets."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from webhook.workloads.torchrun.environ import Environ
from webhook.workloads.torchrun.found import Found
from webhook.workloads.torchrun.limits import Meter, OverLimit
from webhook.workloads.torchrun.shell import ShellState, Unfollowable, run_script
from webhook.workloads.torchrun.unknown import UNK


def commands(
    script: str, env: dict[str, str | None] | None = None, params: Sequence[str] = ()
) -> list[list[str]]:
    """Every command's argv, in order (a finder that never finds)."""
    seen: list[list[str]] = []

    def record(argv: list[str], environ: Environ, depth: int, meter: Meter) -> Found | None:
        seen.append(argv)
        return None

    state = ShellState(vars=dict(env or {}), exported=set(env or {}))
    state.set_params(list(params), "sh")
    run_script(script, state, 1, Meter(), record)
    return seen


@pytest.mark.parametrize(
    ("script", "env", "expected"),
    [
        pytest.param("a b; c", {}, [["a", "b"], ["c"]], id="semicolon"),
        pytest.param("a && b || c | d & e", {}, [["a"], ["b"], ["c"], ["d"], ["e"]], id="operators"),
        pytest.param("a \\\n  b", {}, [["a", "b"]], id="line-continuation"),
        pytest.param("a # c d\nb", {}, [["a"], ["b"]], id="comment"),
        pytest.param("a 'x y' \"z $N\"", {"N": "2"}, [["a", "x y", "z 2"]], id="quotes"),
        pytest.param("a $'\\x41\\tb'", {}, [["a", "A\tb"]], id="ansi-c"),
        pytest.param("N=3; a $N ${N:-9} ${M:-9}", {}, [["a", "3", "3", UNK]], id="assignment-and-defaults"),
        pytest.param("a $V", {"V": "x  y"}, [["a", "x", "y"]], id="field-splitting"),
        pytest.param('a "$V"', {"V": "x  y"}, [["a", "x  y"]], id="quoted-no-splitting"),
        pytest.param("a $(cmd) `cmd`", {}, [["a", UNK, UNK]], id="command-substitution-unknown"),
        pytest.param("a 2>&1 >/dev/null b", {}, [["a", "b"]], id="redirections"),
        pytest.param("cat <<EOF\nx y\nEOF\nb", {}, [["cat"], ["b"]], id="heredoc-skipped"),
        pytest.param("if a; then b; fi", {}, [["a"], ["b"]], id="keywords-dropped"),
        pytest.param("unset N; a $N", {"N": "1"}, [["a", UNK]], id="unset"),
        pytest.param("a $%$%", {}, [["a", "$%$%"]], id="literal-dollars-joined"),
    ],
)
def test_commands(script: str, env: dict[str, str | None], expected: list[list[str]]) -> None:
    assert commands(script, env) == expected


def test_quoted_at_gives_one_field_per_parameter() -> None:
    assert commands('a "$@" $#', params=["x y", "z"]) == [["a", "x y", "z", "2"]]


@pytest.mark.parametrize(
    ("script", "error"),
    [
        pytest.param("torchrun 'unterminated", Unfollowable, id="unlexable-naming-a-launcher"),
        pytest.param("x" * 70_000, OverLimit, id="longer-than-the-script-cap"),
    ],
)
def test_scripts_that_cannot_be_followed(script: str, error: type[Exception]) -> None:
    with pytest.raises(error):
        commands(script)


def test_unlexable_script_without_a_launcher_is_nothing() -> None:
    assert commands("echo 'unterminated") == []
