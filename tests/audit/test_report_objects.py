"""Report building: what a PolicyReport / Report says about stored workloads (golden files), that it
is valid against the upstream CRD schema, how results map, and how a large namespace is split.

`pytest tests/audit --update-golden` rewrites tests/audit/golden/ (then review the diff).
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import jsonschema
import orjson
import pytest
import yaml

from webhook.audit.decide import Auditor, ObjectAudit, ObjectRef, Row
from webhook.audit.report_objects import build_reports, report_bytes, shard_name
from webhook.config import load_config
from webhook.engine import ClusterFacts, build_engine, default_policies_dir, load_exceptions, load_policy_set

HERE = Path(__file__).parent
REPO = HERE.parents[1]
GOLDEN = HERE / "golden"
CRDS = REPO / "tests" / "e2e" / "crds"
NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)

# Stored objects: the shipped examples (compliant) and counterexamples (each breaks one policy).
MANIFESTS = sorted((REPO / "deploy" / "examples").glob("*.yaml")) + sorted(
    (REPO / "deploy" / "counterexamples").glob("*.yaml")
)


def stored(path: Path, number: int) -> dict[str, Any]:
    """A manifest as the API server would return it: uid, resourceVersion, a namespace."""
    obj = yaml.safe_load(path.read_text(encoding="utf-8"))
    meta = obj.setdefault("metadata", {})
    meta.setdefault("namespace", "default")
    meta["uid"] = f"00000000-0000-0000-0000-{number:012d}"
    meta["resourceVersion"] = str(1000 + number)
    return obj


@pytest.fixture(scope="module")
def auditor() -> Auditor:
    return Auditor(build_engine(load_policy_set([default_policies_dir()]), load_config()))


@pytest.fixture(scope="module")
def audits(auditor: Auditor) -> list[ObjectAudit]:
    found = [auditor.audit(stored(path, i), now=NOW) for i, path in enumerate(MANIFESTS, 1)]
    return [a for a in found if a is not None]


def by_namespace(audits: list[ObjectAudit]) -> dict[str | None, list[ObjectAudit]]:
    groups: dict[str | None, list[ObjectAudit]] = {}
    for a in audits:
        groups.setdefault(a.ref.namespace, []).append(a)
    return groups


def all_reports(audits: list[ObjectAudit], fmt: str) -> list[dict[str, Any]]:
    groups = by_namespace(audits)
    return [r for ns in sorted(groups, key=str) for r in build_reports(ns, groups[ns], fmt=fmt)]  # type: ignore[arg-type]


@pytest.mark.parametrize("fmt", ["wgpolicy", "openreports"])
def test_reports_match_golden(audits, update_golden, fmt) -> None:
    text = yaml.safe_dump_all(all_reports(audits, fmt), sort_keys=False, width=120, allow_unicode=True)
    golden = GOLDEN / f"{fmt}.yaml"
    if update_golden:
        golden.write_text(text, encoding="utf-8")
    hint = f"{golden.relative_to(REPO)} is stale or missing: rerun `pytest tests/audit --update-golden`"
    assert golden.exists(), hint
    assert text == golden.read_text(encoding="utf-8"), hint


def _schema(crd_file: str) -> dict[str, Any]:
    docs = [d for d in yaml.safe_load_all((CRDS / crd_file).read_text(encoding="utf-8")) if d]
    (version,) = [v for v in docs[0]["spec"]["versions"] if v["storage"]]
    return version["schema"]["openAPIV3Schema"]


@pytest.mark.parametrize(
    ("fmt", "crd_file"),
    [
        ("wgpolicy", "wgpolicyk8s.io_policyreports.yaml"),
        ("openreports", "openreports.io_reports.yaml"),
    ],
)
def test_reports_are_valid_against_the_upstream_crd_schema(audits, fmt, crd_file) -> None:
    validator = jsonschema.Draft7Validator(_schema(crd_file))
    reports = all_reports(audits, fmt)
    assert reports
    for report in reports:
        problems = [f"{list(e.absolute_path)}: {e.message}" for e in validator.iter_errors(report)]
        assert problems == [], report["metadata"]


def test_verdicts_are_those_of_the_stored_objects(audits) -> None:
    """What a user reads. Validations see the object as stored: llama-ddp passes `check` because the
    topology mutation would add the rack affinity at admission, but stored without it, it fails
    topology-slo (its pods may land on any rack)."""
    verdicts = {a.ref.name: (a.verdict, sorted(r.policy for r in a.failing())) for a in audits}
    assert verdicts == {
        "lora-finetune": ("pass", []),
        "vllm-70b": ("pass", []),
        "bert-elastic": ("pass", []),
        "llama-ddp": ("fail", ["topology-slo"]),
        "mpi-allreduce": ("pass", []),
        "torchrun-node-0": ("fail", ["gang-required", "topology-slo"]),
        "elastic-no-ckpt": ("fail", ["checkpoint-required"]),
        "no-gang": ("fail", ["gang-required", "topology-slo"]),
        "sneaky-train": ("fail", ["pool-separation", "topology-slo", "torchrun-consistency"]),
    }


def test_summary_counts_match_results(audits) -> None:
    for report in all_reports(audits, "wgpolicy"):
        results = [r["result"] for r in report["results"]]
        assert report["summary"] == {k: results.count(k) for k in ("pass", "fail", "warn", "error", "skip")}
        for r in report["results"]:
            (resource,) = r["resources"]
            assert resource["uid"].startswith("00000000-")
            assert resource["namespace"] == report["metadata"]["namespace"]


def test_mutations_are_shown_as_would_patch_and_kept_out_of_reports(audits) -> None:
    patched = [a for a in audits if a.patch]
    assert patched, "the default policies label every workload they decide"
    row = next(r for r in patched[0].rows if r.category == "mutation")
    assert row.message.startswith("would patch /")
    for report in all_reports(patched, "wgpolicy"):
        assert all(r["category"] == "validation" for r in report["results"])


def _policy_dir(tmp_path: Path, mode: str) -> Path:
    text = (REPO / "policies" / "gang-required.yaml").read_text(encoding="utf-8")
    (tmp_path / "gang-required.yaml").write_text(
        text.replace("mode: Enforce", f"mode: {mode}"), encoding="utf-8"
    )
    return tmp_path


@pytest.mark.parametrize(
    ("mode", "result", "severity"),
    [("Enforce", "fail", "high"), ("Audit", "fail", "medium"), ("Warn", "warn", "low")],
    ids=["enforce-fails", "audit-fails-as-preview", "warn-warns"],
)
def test_policy_mode_sets_result_and_severity(tmp_path, mode, result, severity) -> None:
    auditor = Auditor(build_engine(load_policy_set([_policy_dir(tmp_path, mode)]), load_config()))
    audit = auditor.audit(stored(REPO / "deploy" / "counterexamples" / "pytorchjob-no-gang.yaml", 1), now=NOW)
    assert audit is not None
    (row,) = [r for r in audit.rows if r.policy == "gang-required"]
    assert (row.result, row.severity, row.mode) == (result, severity, mode)
    (entry,) = build_reports("default", [audit])[0]["results"]
    assert (entry["result"], entry["severity"], entry["properties"]["mode"]) == (result, severity, mode)


def test_exempted_finding_is_a_skip_with_the_justification(tmp_path) -> None:
    exceptions = load_exceptions([REPO / "tests" / "reviewgate" / "exceptions" / "legacy.yaml"])
    auditor = Auditor(
        build_engine(
            load_policy_set([default_policies_dir()]), load_config(), ClusterFacts(exceptions=exceptions)
        )
    )
    obj = stored(REPO / "deploy" / "counterexamples" / "pytorchjob-no-gang.yaml", 1)
    obj["metadata"].update(name="legacy-job", namespace="team-a")
    audit = auditor.audit(obj, now=NOW)
    assert audit is not None
    assert [r.policy for r in audit.failing()] == ["topology-slo"]  # the exception names gang-required only
    entry = next(e for e in build_reports("team-a", [audit])[0]["results"] if e["policy"] == "gang-required")
    assert entry["result"] == "skip"
    assert entry["properties"]["exemption"].startswith("migrating to Kueue")


def test_member_pods_and_non_workloads_are_not_audited(auditor) -> None:
    member = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "job-worker-0",
            "namespace": "default",
            "uid": "u1",
            "labels": {"job-name": "job"},
        },
        "spec": {"containers": [{"name": "c", "image": "x"}]},
    }
    config_map = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "uid": "u2"}}
    assert auditor.audit(member) is None
    assert auditor.audit(config_map) is None


def _synthetic(n: int) -> list[ObjectAudit]:
    rows = tuple(Row(f"policy-{p}", "fail" if p == 0 else "pass", "x" * 200) for p in range(4))
    return [
        ObjectAudit(
            ObjectRef("kubeflow.org/v1", "PyTorchJob", "big", f"job-{i:05d}", f"uid-{i}"),
            rows,
            decided_at=NOW,
        )
        for i in range(n)
    ]


def test_a_large_namespace_is_split_into_shards_below_the_bound() -> None:
    audits = _synthetic(1000)
    reports = build_reports("big", audits, max_bytes=100_000)
    assert len(reports) > 5
    assert [r["metadata"]["name"] for r in reports] == [shard_name(i) for i in range(len(reports))]
    for r in reports:
        results_bytes = sum(len(orjson.dumps(e)) + 1 for e in r["results"])
        assert results_bytes <= 100_000
        assert report_bytes(r) < 110_000
    per_uid: dict[str, set[str]] = {}
    for r in reports:
        for e in r["results"]:
            per_uid.setdefault(e["resources"][0]["uid"], set()).add(r["metadata"]["name"])
    assert len(per_uid) == 1000
    assert all(len(shards) == 1 for shards in per_uid.values()), "a workload's results were split"
    assert sum(r["summary"]["fail"] for r in reports) == 1000
    assert sum(r["summary"]["pass"] for r in reports) == 3000


def test_default_bound_keeps_every_report_under_the_api_server_limit() -> None:
    for r in build_reports("big", _synthetic(20_000)):
        assert report_bytes(r) < 1_400_000


def test_no_audits_no_reports() -> None:
    assert build_reports("empty", []) == []
