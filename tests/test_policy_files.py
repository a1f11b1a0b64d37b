"""The shipped policies' PolicyTest files (tests/policies/*.yaml), case by case, on both CEL backends."""

from __future__ import annotations

from pathlib import Path

import pytest

from webhook.cli import main
from webhook.policytest import PolicyTestCase, PolicyTestFile, Runner, discover, load_test_file, run_case

REPO = Path(__file__).resolve().parents[1]
SUITES = REPO / "tests" / "policies"
BACKENDS = ("cel-expr-python", "cel-python")


def _cases() -> list[object]:
    params: list[object] = []
    for path in discover([SUITES]):
        try:
            test = load_test_file(path)
        except Exception as exc:  # a malformed file fails as a test, not as a collection error
            params += [pytest.param(path, None, b, exc, id=f"{path.stem}::<load>[{b}]") for b in BACKENDS]
            continue
        for case in test.cases:
            params += [
                pytest.param(test, case, b, None, id=f"{path.stem}::{case.name}[{b}]") for b in BACKENDS
            ]
    return params


# One Runner per backend for the whole module: each policy set compiles once per backend.
_RUNNERS = {backend: Runner(backend) for backend in BACKENDS}


@pytest.mark.parametrize(("test", "case", "backend", "error"), _cases())
def test_policy_case(
    test: PolicyTestFile, case: PolicyTestCase | None, backend: str, error: Exception | None
) -> None:
    if error is not None or case is None:
        pytest.fail(f"{test} does not load: {error}")
    result = run_case(test, case, runner=_RUNNERS[backend])
    if result.status == "skipped":
        pytest.skip(result.reason or "skipped in the test file")
    assert result.status == "passed", f"{result.id}: {result.reason}"


def test_there_are_policy_tests() -> None:
    assert discover([SUITES]), "tests/policies holds no PolicyTest files"


def test_every_shipped_policy_has_a_test(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(REPO)
    code = main(["test", "tests/policies", "--require-tests"])
    out = capsys.readouterr().out
    assert code == 0, out
