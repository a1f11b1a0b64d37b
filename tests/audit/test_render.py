"""`trainguard audit` output without a cluster: the renderers and the comparison on decided objects,
and the command's exit code when it cannot reach one."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
import yaml

from webhook.audit.compare import compare
from webhook.audit.decide import Auditor, ObjectAudit
from webhook.audit.render import AuditRun, render_markdown, render_sarif, render_table
from webhook.cli import main
from webhook.config import load_config
from webhook.engine import build_engine, default_policies_dir, load_policy_set

REPO = Path(__file__).parents[2]
SARIF_SCHEMA = REPO / "tests" / "reviewgate" / "sarif-2.1.0-subset.schema.json"


def stored(path: str, uid: str) -> dict:
    obj = yaml.safe_load((REPO / path).read_text(encoding="utf-8"))
    obj["metadata"].update(uid=uid, resourceVersion="1")
    obj["metadata"].setdefault("namespace", "default")
    return obj


OBJECTS = [
    stored("deploy/examples/volcano-gang-b.yaml", "u-volcano"),
    stored("deploy/counterexamples/pytorchjob-no-gang.yaml", "u-no-gang"),
    stored("deploy/counterexamples/elastic-no-checkpoint.yaml", "u-no-ckpt"),
]


@pytest.fixture(scope="module")
def run() -> AuditRun:
    auditor = Auditor(build_engine(load_policy_set([default_policies_dir()]), load_config()))
    audits = [a for a in (auditor.audit(o) for o in OBJECTS) if a is not None]
    return AuditRun(audits, [cp.policy for cp in auditor.engine.policies.policies], "all namespaces")


def test_table_names_each_failing_policy_and_counts(run) -> None:
    text = render_table(run)
    assert "PyTorchJob  team-a/no-gang          B      guaranteed   FAIL" in text
    assert "    fail  gang-required: class B training PyTorchJob with 4 pods declares no gang" in text
    assert (
        "    would patch /metadata/labels, /spec/tasks/0/template/metadata, /spec/tasks/1/template/metadata (mutate-class-label)"
        in text
    )
    assert text.rstrip().endswith(
        "3 workloads in all namespaces: 2 failing, 0 with warnings, 1 passing; 3 would be patched"
    )


def test_markdown_headline_and_findings(run) -> None:
    text = render_markdown(run)
    assert "**2 of 3 workloads failing**" in text
    assert "| `team-b/elastic-no-ckpt` | PyTorchJob | C | preemptible | ❌ fail |" in text
    assert (
        "- `PyTorchJob team-b/elastic-no-ckpt` **fail** `checkpoint-required`: preemptible (default)" in text
    )
    assert "- `Job research/mpi-allreduce` **would patch** `mutate-class-label`: /metadata/labels," in text


def test_sarif_is_valid_and_has_one_result_per_failure(run) -> None:
    log = render_sarif(run)
    schema = json.loads(SARIF_SCHEMA.read_text(encoding="utf-8"))
    jsonschema.Draft7Validator(schema).validate(log)
    results = log["runs"][0]["results"]
    assert sorted(r["ruleId"] for r in results) == sorted(r.policy for a in run.audits for r in a.failing())
    rules = [r["id"] for r in log["runs"][0]["tool"]["driver"]["rules"]]
    assert all(rules[r["ruleIndex"]] == r["ruleId"] for r in results)


def test_compare_lists_newly_failing_and_newly_passing(tmp_path) -> None:
    current = Auditor(build_engine(load_policy_set([default_policies_dir()]), load_config()))
    proposed_dir = tmp_path / "proposed"
    proposed_dir.mkdir()
    for path in sorted((REPO / "policies").glob("*.yaml")):
        text = path.read_text(encoding="utf-8")
        if path.name == "gang-required.yaml":
            text = text.replace("mode: Enforce", "mode: Warn")
        if path.name == "min-available.yaml":  # stricter: every training workload must declare a queue
            continue
        (proposed_dir / path.name).write_text(text, encoding="utf-8")
    stricter = tmp_path / "stricter"
    stricter.mkdir()
    (stricter / "require-owner.yaml").write_text(
        """apiVersion: trainguard.dev/v1alpha1
kind: TrainingPolicy
metadata:
  name: require-owner
spec:
  mode: Enforce
  match:
    roles: [training]
  validations:
    - expression: "has(workload.labels.team)"
      message: label team is required
""",
        encoding="utf-8",
    )
    proposed = Auditor(build_engine(load_policy_set([proposed_dir, stricter]), load_config()))
    pairs: list[tuple[ObjectAudit | None, ObjectAudit | None]] = [
        (current.audit(o), proposed.audit(o)) for o in OBJECTS
    ]
    c = compare(pairs)
    assert [ch.ref.name for ch in c.newly_failing] == ["mpi-allreduce"]
    assert c.newly_failing[0].policies == ("require-owner",)
    assert c.newly_passing == () and c.unchanged == 2  # the other two fail either way


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["audit", "--kubeconfig", "/nonexistent/kubeconfig"], "cannot load cluster credentials"),
        (
            ["audit", "--policies", "/nonexistent/policies", "--kubeconfig", "/nonexistent"],
            "/nonexistent/policies",
        ),
    ],
    ids=["missing-kubeconfig", "missing-policies"],
)
def test_unusable_input_exits_2_with_a_message(capsys, argv, message) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_namespace_and_all_namespaces_exclude_each_other(capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["audit", "-n", "a", "-A"])
    assert exc.value.code == 2


def test_serve_audit_without_cluster_access_exits_2(capsys, tmp_path) -> None:
    for name in ("tls.crt", "tls.key"):
        (tmp_path / name).write_text("not used: the options are refused first\n", encoding="utf-8")
    argv = [
        "serve",
        "--tls-cert",
        str(tmp_path / "tls.crt"),
        "--tls-key",
        str(tmp_path / "tls.key"),
        "--audit",
    ]
    assert main(argv) == 2
    assert "--audit needs cluster access (--kubeconfig or --in-cluster)" in capsys.readouterr().err
