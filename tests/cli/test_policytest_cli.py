"""`trainguard test`: pytest-style lines, the summary, exit codes, --require-tests, malformed files."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from webhook.cli import main
from webhook.errors import InputError
from webhook.policytest import Runner, load_test_file, run_case

REPO = Path(__file__).resolve().parents[2]
POLICIES = REPO / "policies"

NO_GANG = """\
apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata: {name: no-gang}
spec:
  pytorchReplicaSpecs:
    Worker:
      replicas: 2
      template: {spec: {containers: [{name: t, image: x}]}}
"""

SINGLE = """\
apiVersion: batch/v1
kind: Job
metadata: {name: single}
spec:
  template: {spec: {restartPolicy: Never, containers: [{name: t, image: x}]}}
"""


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
    return path


GANG_AND_LABEL = f"[{POLICIES / 'gang-required.yaml'}, {POLICIES / 'mutate-class-label.yaml'}]"


def suite_file(
    directory: Path, cases: str, *, head: str = "", name: str = "gang.yaml", policies: str = GANG_AND_LABEL
) -> Path:
    write(directory / "resources" / "no-gang.yaml", NO_GANG)
    write(directory / "resources" / "single.yaml", SINGLE)
    body = f"""\
apiVersion: trainguard.dev/v1alpha1
kind: PolicyTest
metadata: {{name: gang}}
policies: {policies}
request: {{namespace: team-a}}
resources: [resources/no-gang.yaml, resources/single.yaml]
{head}cases:
"""
    return write(directory / name, body + textwrap.dedent(cases))


PASSING = """\
  - {name: no-gang-is-denied, resource: no-gang, policy: gang-required, result: fail,
     message: "no gang mechanism"}
  - {name: single-is-skipped, resource: Job/single, policy: gang-required, result: skip}
"""


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["test", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_passing_cases_print_pytest_style_lines_and_exit_0(tmp_path, monkeypatch, capsys) -> None:
    suite_file(tmp_path / "suite", PASSING)
    monkeypatch.chdir(tmp_path)
    code, out, _ = run(capsys, "suite")
    assert code == 0
    assert out.splitlines() == [
        "PASSED suite/gang.yaml::no-gang-is-denied",
        "PASSED suite/gang.yaml::single-is-skipped",
        "2 passed, 0 failed",
    ]


def test_a_failing_case_prints_the_reason_and_exits_1(tmp_path, monkeypatch, capsys) -> None:
    suite_file(
        tmp_path,
        PASSING
        + """\
  - {name: wrong-expectation, resource: no-gang, policy: gang-required, result: pass}
  - {name: wrong-message, resource: no-gang, policy: gang-required, result: fail,
     message: "^nothing like this"}
  - {name: skipped-case, resource: no-gang, policy: gang-required, result: pass, skip: "waiting for issue 12"}
""",
    )
    monkeypatch.chdir(tmp_path)
    code, out, _ = run(capsys, ".")
    assert code == 1
    lines = out.splitlines()
    assert lines[2].startswith(
        "FAILED gang.yaml::wrong-expectation - expected pass, got fail: class B training PyTorchJob"
    )
    assert lines[3].startswith(
        "FAILED gang.yaml::wrong-message - message /^nothing like this/ not found in 'class B"
    )
    assert lines[4] == "SKIPPED gang.yaml::skipped-case - waiting for issue 12"
    assert lines[-1] == "2 passed, 2 failed, 1 skipped"


def test_patched_resource_is_compared_exactly_and_differences_named(tmp_path, monkeypatch, capsys) -> None:
    expected = tmp_path / "expected" / "single.yaml"
    write(
        expected,
        """\
        apiVersion: batch/v1
        kind: Job
        metadata: {name: single, labels: {trainguard.dev/class: A}}
        spec:
          template:
            metadata: {labels: {trainguard.dev/class: A}}
            spec: {restartPolicy: Never, containers: [{name: t, image: x}]}
        """,
    )
    suite_file(
        tmp_path,
        """\
  - {name: class-label-added, resource: single, policy: mutate-class-label, result: pass,
     patchedResource: expected/single.yaml}
  - name: wrong-class
    resource: single
    policy: mutate-class-label
    result: pass
    patchedResource:
      apiVersion: batch/v1
      kind: Job
      metadata: {name: single, labels: {trainguard.dev/class: "B"}}
      spec: {template: {spec: {restartPolicy: Never, containers: [{name: t, image: x}]}}}
""",
    )
    monkeypatch.chdir(tmp_path)
    code, out, _ = run(capsys, "gang.yaml")
    assert code == 1
    lines = out.splitlines()
    assert lines[0] == "PASSED gang.yaml::class-label-added"
    assert lines[1] == (
        "FAILED gang.yaml::wrong-class - patchedResource differs: "
        "at /metadata/labels/trainguard.dev~1class: expected 'B', got 'A'; "
        "at /spec/template/metadata: expected nothing, got {'labels': {'trainguard.dev/class': 'A'}}"
    )


def test_require_tests_lists_the_policies_no_case_names(tmp_path, monkeypatch, capsys) -> None:
    suite_file(tmp_path, PASSING)
    monkeypatch.chdir(tmp_path)
    code, out, _ = run(capsys, ".", "--require-tests")
    assert code == 1
    assert "UNTESTED mutate-class-label (" in out
    assert "UNTESTED gang-required" not in out
    assert out.splitlines()[-1] == "2 passed, 0 failed"
    assert run(capsys, ".")[0] == 0


def test_exceptions_config_and_now_are_honoured(tmp_path, monkeypatch, capsys) -> None:
    write(
        tmp_path / "exceptions.yaml",
        """\
        apiVersion: trainguard.dev/v1alpha1
        kind: PolicyException
        metadata: {name: waiver, namespace: team-a}
        spec:
          policies: [gang-required]
          match: {workloads: [{name: no-gang}]}
          justification: legacy
          owner: team-a
          expiresAt: "2026-07-01T00:00:00Z"
        """,
    )
    cases = """\
  - {name: waived, resource: no-gang, policy: gang-required, result: exempt, message: "no gang mechanism"}
"""
    suite_file(
        tmp_path, cases, head='exceptions: [exceptions.yaml]\nnow: "2026-06-01T00:00:00Z"\n', name="a.yaml"
    )
    suite_file(
        tmp_path, cases, head='exceptions: [exceptions.yaml]\nnow: "2026-07-01T00:00:00Z"\n', name="b.yaml"
    )
    write(tmp_path / "platform.yaml", "queues: {namespaces: {team-a: team-a-queue}}\n")
    queued = """\
  - {name: queue-label-is-a-gang, resource: no-gang, policy: gang-required, result: pass}
"""
    suite_file(tmp_path, queued, head="config: platform.yaml\n", name="c.yaml")
    inline = "config: {queues: {namespaces: {team-a: q}}}\n"
    suite_file(tmp_path, queued, head=inline, name="d.yaml", policies=f"[{POLICIES}]")
    monkeypatch.chdir(tmp_path)
    code, out, _ = run(capsys, "a.yaml", "b.yaml", "c.yaml", "d.yaml")
    lines = out.splitlines()
    assert lines[0] == "PASSED a.yaml::waived"
    assert lines[1].startswith("FAILED b.yaml::waived - expected exempt, got fail")  # expired at `now`
    assert lines[2].startswith("FAILED c.yaml::queue-label-is-a-gang")  # mutate-queue not in this set
    assert lines[3] == "PASSED d.yaml::queue-label-is-a-gang"  # the whole set queues it first
    assert code == 1


def test_update_cases_match_old_resources(tmp_path, monkeypatch, capsys) -> None:
    write(
        tmp_path / "update.yaml",
        f"""\
        apiVersion: trainguard.dev/v1alpha1
        kind: PolicyTest
        policies: [{POLICIES / "queue-immutable.yaml"}]
        request: {{operation: UPDATE, namespace: ml}}
        resources:
          - apiVersion: batch/v1
            kind: Job
            metadata: {{name: j, labels: {{kueue.x-k8s.io/queue-name: b}}}}
            spec: {{suspend: false, template: {{spec: {{containers: [{{name: t, image: x}}]}}}}}}
        oldResources:
          - apiVersion: batch/v1
            kind: Job
            metadata: {{name: j, labels: {{kueue.x-k8s.io/queue-name: a}}}}
            spec: {{suspend: false, template: {{spec: {{containers: [{{name: t, image: x}}]}}}}}}
        cases:
          - {{name: queue-change-on-running-job-denied, resource: j, policy: queue-immutable, result: fail}}
        """,
    )
    monkeypatch.chdir(tmp_path)
    code, out, _ = run(capsys, "update.yaml")
    assert (code, out.splitlines()[0]) == (0, "PASSED update.yaml::queue-change-on-running-job-denied")


BAD_CASES = [
    pytest.param(
        "  - {name: a, resource: no-gang, policy: gang-required, result: denied}\n",
        "cases[0].result",
        id="bad-result",
    ),
    pytest.param(
        "  - {name: a, resource: no-gang, policy: gang-required}\n", "cases[0].result", id="no-result"
    ),
    pytest.param(
        "  - {name: a, resource: nope, policy: gang-required, result: fail}\n",
        "cases[0].resource",
        id="unknown-resource",
    ),
    pytest.param(
        "  - {name: a, resourse: no-gang, policy: gang-required, result: fail}\n",
        "cases[0]: unknown field 'resourse'",
        id="typo",
    ),
    pytest.param(
        "  - {name: a, resource: no-gang, policy: nope, result: fail}\n",
        "cases[0].policy: policy 'nope' is not in",
        id="unknown-policy",
    ),
    pytest.param(
        "  - {name: a, resource: no-gang, policy: gang-required, result: fail, message: '(['}\n",
        "cases[0].message: not a valid regular expression",
        id="bad-regex",
    ),
    pytest.param(
        "  - {name: a, resource: no-gang, policy: gang-required, result: fail}\n"
        "  - {name: a, resource: single, policy: gang-required, result: skip}\n",
        "cases[1].name: duplicate case name 'a'",
        id="duplicate-name",
    ),
    pytest.param("  []\n", "field cases: is required", id="no-cases"),
]


@pytest.mark.parametrize(("cases", "message"), BAD_CASES)
def test_malformed_cases_exit_2_naming_file_and_field(tmp_path, monkeypatch, capsys, cases, message) -> None:
    if cases.strip() == "[]":
        cases = ""
    path = suite_file(tmp_path, cases)
    monkeypatch.chdir(tmp_path)
    code, out, err = run(capsys, ".")
    assert code == 2
    assert out == ""
    assert f"trainguard: error: {path.name}" in err or str(path) in err
    assert message in err


@pytest.mark.parametrize(
    ("head", "message"),
    [
        pytest.param("polices: []\n", "unknown field 'polices'", id="top-level-typo"),
        pytest.param(
            "config: missing.yaml\n", "field config: 'missing.yaml' does not exist", id="missing-config"
        ),
        pytest.param("config: {pools: {nope: 1}}\n", "field config:", id="bad-inline-config"),
        pytest.param(
            "request: {operation: PATCH}\n", "field request.operation: must be one of", id="bad-operation"
        ),
        pytest.param(
            "request: {operation: UPDATE}\n",
            "oldResources has no Job/default/single",
            id="update-without-old",
        ),
        pytest.param("now: tomorrow\n", "field now: must be an RFC 3339 timestamp", id="bad-now"),
        pytest.param(
            "exceptions: [{kind: PolicyException}]\n", "field exceptions[0]:", id="bad-inline-exception"
        ),
    ],
)
def test_malformed_files_exit_2_naming_file_and_field(tmp_path, monkeypatch, capsys, head, message) -> None:
    path = suite_file(
        tmp_path, "  - {name: a, resource: single, policy: gang-required, result: skip}\n", head=head
    )
    if "request:" in head:
        text = path.read_text().replace("request: {namespace: team-a}\n", "")
        path.write_text(text)
    monkeypatch.chdir(tmp_path)
    code, _, err = run(capsys, ".")
    assert code == 2
    assert "gang.yaml" in err
    assert message in err


def test_another_api_version_exits_2_naming_what_the_file_says(tmp_path, monkeypatch, capsys) -> None:
    path = suite_file(tmp_path, "  - {name: a, resource: single, policy: gang-required, result: skip}\n")
    path.write_text(path.read_text().replace("trainguard.dev/v1alpha1", "trainguard.dev/v2", 1))
    monkeypatch.chdir(tmp_path)
    code, _, err = run(capsys, ".")
    assert code == 2
    assert "gang.yaml, field kind: expected apiVersion trainguard.dev/v1alpha1 and kind PolicyTest" in err
    assert "got 'trainguard.dev/v2' / 'PolicyTest'" in err


def test_ambiguous_resource_names_ask_for_a_longer_selector(tmp_path) -> None:
    write(
        tmp_path / "resources" / "pod.yaml", "apiVersion: v1\nkind: Pod\nmetadata: {name: single}\nspec: {}\n"
    )
    path = suite_file(tmp_path, "  - {name: a, resource: single, policy: gang-required, result: skip}\n")
    path.write_text(
        path.read_text().replace("resources/single.yaml]", "resources/single.yaml, resources/pod.yaml]")
    )
    with pytest.raises(InputError, match=r"'single' matches 2 resources .*write Kind/namespace/name"):
        load_test_file(path)
    path.write_text(path.read_text().replace("resource: single,", "resource: Pod/single,"))
    assert load_test_file(path).cases[0].resource.kind == "Pod"


def test_no_test_files_is_an_error(tmp_path, capsys) -> None:
    (tmp_path / "resource.yaml").write_text(NO_GANG)
    code, _, err = run(capsys, str(tmp_path))
    assert code == 2
    assert "no PolicyTest files" in err


def test_load_test_file_and_run_case_serve_pytest(tmp_path) -> None:
    test = load_test_file(suite_file(tmp_path, PASSING))
    assert [c.name for c in test.cases] == ["no-gang-is-denied", "single-is-skipped"]
    assert test.namespace == "team-a" and test.operation == "CREATE"
    runner = Runner("cel-python")
    results = [run_case(test, case, runner=runner) for case in test.cases]
    assert [r.status for r in results] == ["passed", "passed"]
    assert [r.outcome for r in results] == ["fail", "skip"]
    assert run_case(test, test.cases[0], backend="cel-expr-python").status == "passed"
