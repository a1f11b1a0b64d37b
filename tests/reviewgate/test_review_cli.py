"""`trainguard review`: the five answers, SARIF (valid, on the right lines), JUnit, Markdown, exit codes."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import jsonschema
import pytest

from webhook.cli import main
from webhook.cli._file_engine import build_engine
from webhook.config import load_config
from webhook.documents import read_manifests
from webhook.engine import default_policies_dir, load_exceptions, load_policy_set
from webhook.reviewgate.questions import Answer
from webhook.reviewgate.report import Report, build_report

HERE = Path(__file__).parent
REPO = HERE.parents[1]
MANIFESTS = HERE / "manifests"
EXCEPTIONS = HERE / "exceptions"
GOLDEN = HERE / "golden"
SCHEMA = json.loads((HERE / "sarif-2.1.0-subset.schema.json").read_text())
NOW = datetime(2026, 6, 1, tzinfo=UTC)
REL = "tests/reviewgate/manifests"


def review(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    code = main(["review", *args])
    return code, capsys.readouterr().out


@pytest.fixture(scope="module")
def policies():
    # Compiling the shipped set is the slow part: once per module.
    return load_policy_set([default_policies_dir()])


def report_for(policies, *sources: str | Path, config: str | None = None, exceptions=()) -> Report:
    docs = read_manifests([str(s) for s in sources], track_lines=True)
    engine = build_engine(policies, load_config(config), docs, exceptions)
    return build_report(engine, docs, exceptions=exceptions, now=NOW)


def answer(report: Report, name: str, key: str) -> Answer:
    review_ = next(r for r in report.reviews if r.workload.name == name)
    return next(a for a in review_.answers if a.key == key)


def evidence(a: Answer) -> dict[str, object]:
    return {e.field: e.value for e in a.evidence}


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


# --------------------------------------------------------------------------------------------
# SARIF


def test_sarif_validates_against_the_sarif_2_1_0_schema(in_repo, capsys) -> None:
    code, out = review(
        capsys,
        "deploy/examples",
        "deploy/counterexamples",
        REL,
        "--exceptions",
        str(EXCEPTIONS),
        "-o",
        "sarif",
    )
    assert code == 1
    log = json.loads(out)
    jsonschema.Draft7Validator(SCHEMA).validate(log)
    assert log["version"] == "2.1.0"
    assert log["runs"][0]["results"], "the counterexamples produce results"


def test_the_subset_schema_refuses_what_sarif_refuses() -> None:
    validator = jsonschema.Draft7Validator(SCHEMA)
    good = {"version": "2.1.0", "runs": [{"tool": {"driver": {"name": "t"}}, "results": []}]}
    assert validator.is_valid(good)
    bad_level = json.loads(json.dumps(good))
    bad_level["runs"][0]["results"] = [{"message": {"text": "m"}, "level": "fatal"}]
    misspelt = json.loads(json.dumps(good))
    misspelt["runs"][0]["tool"]["driver"]["rule"] = []
    no_message = json.loads(json.dumps(good))
    no_message["runs"][0]["results"] = [{"ruleId": "x"}]
    for log in (bad_level, misspelt, no_message, {**good, "version": "2.0.0"}):
        assert not validator.is_valid(log)


def test_sarif_has_one_rule_per_policy_with_level_by_mode(in_repo, capsys, policies) -> None:
    _, out = review(capsys, "deploy/examples", "-o", "sarif")
    rules = json.loads(out)["runs"][0]["tool"]["driver"]["rules"]
    assert [r["id"] for r in rules] == policies.names()
    by_id = {r["id"]: r for r in rules}
    gang = by_id["gang-required"]
    assert gang["shortDescription"]["text"] == "Multi-node training is admitted as a gang"
    assert gang["fullDescription"]["text"].startswith("A multi-node (class B) or elastic (class C)")
    assert gang["help"]["text"] == gang["fullDescription"]["text"]
    assert gang["defaultConfiguration"]["level"] == "error"
    assert by_id["recovery-policy"]["defaultConfiguration"]["level"] == "warning"


def _markers(path: Path) -> Counter[tuple[str, int]]:
    """(policy, line) for every `# sarif-line: <policy>` comment in a manifest."""
    found: Counter[tuple[str, int]] = Counter()
    for n, line in enumerate(path.read_text().splitlines(), 1):
        m = re.search(r"# sarif-line: ([\w-]+)", line)
        if m:
            found[(m.group(1), n)] += 1
    return found


@pytest.mark.parametrize("name", ["denied-mixed.yaml", "legacy-no-gang.yaml"])
def test_sarif_results_point_at_the_offending_field(in_repo, capsys, name) -> None:
    _, out = review(capsys, f"{REL}/{name}", "--exceptions", str(EXCEPTIONS), "-o", "sarif")
    results = json.loads(out)["runs"][0]["results"]
    located = Counter(
        (r["ruleId"], r["locations"][0]["physicalLocation"]["region"]["startLine"]) for r in results
    )
    assert located == _markers(MANIFESTS / name)
    assert {r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] for r in results} == {
        f"{REL}/{name}"
    }


def _line(path: Path, pattern: str, after: str | None = None) -> int:
    lines = path.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if after in line) if after else 0
    return next(i for i, line in enumerate(lines[start:], start + 1) if re.search(pattern, line))


def test_missing_grace_period_points_at_the_pod_template_spec_and_pool_at_the_selector_key(
    in_repo, capsys
) -> None:
    _, out = review(capsys, "deploy/counterexamples", "-o", "sarif")
    results = json.loads(out)["runs"][0]["results"]

    def lines(policy: str, uri: str) -> list[int]:
        return [
            r["locations"][0]["physicalLocation"]["region"]["startLine"]
            for r in results
            if r["ruleId"] == policy
            and r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] == uri
        ]

    elastic = REPO / "deploy/counterexamples/elastic-no-checkpoint.yaml"
    grace = [r for r in results if "terminationGracePeriodSeconds" in (r["properties"]["field"] or "")]
    assert grace and all(r["level"] == "error" for r in grace)
    assert _line(elastic, r"^\s+spec:\s*$", after="template:") in lines(
        "checkpoint-required", "deploy/counterexamples/elastic-no-checkpoint.yaml"
    )
    pool = REPO / "deploy/counterexamples/training-on-inference-pool.yaml"
    assert lines("pool-separation", "deploy/counterexamples/training-on-inference-pool.yaml") == [
        _line(pool, r"^\s+trainguard.dev/pool: inference", after="nodeSelector:")
    ]


def test_missing_annotation_points_at_metadata_annotations_or_metadata(tmp_path, capsys) -> None:
    text = """apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata:
  name: spot
  namespace: team-b
  labels: {trainguard.dev/tier: preemptible, kueue.x-k8s.io/queue-name: q}
  annotations:
    trainguard.dev/checkpoint-owner: team-b
    trainguard.dev/checkpoint-interval: 30m
spec:
  runPolicy: {backoffLimit: 2}
  pytorchReplicaSpecs:
    Worker:
      replicas: 1
      template:
        spec:
          terminationGracePeriodSeconds: 120
          containers: [{name: t, image: x}]
"""
    path = write(tmp_path, "spot.yaml", text)
    _, out = review(capsys, str(path), "-o", "sarif")
    (result,) = json.loads(out)["runs"][0]["results"]
    assert result["ruleId"] == "checkpoint-required"
    assert "trainguard.dev/checkpoint-uri" in result["message"]["text"]
    assert result["locations"][0]["physicalLocation"]["region"]["startLine"] == 7  # metadata.annotations


_POOL_POD = """apiVersion: v1
kind: Pod
metadata:
  name: trainer
  namespace: team-b
spec:
  nodeSelector:
    kubernetes.io/arch: amd64
    {selector}
  affinity:
    nodeAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
        nodeSelectorTerms:
          - matchExpressions:
              - {{key: kubernetes.io/os, operator: In, values: [linux]}}
              {affinity}
  tolerations:
    - {{key: nvidia.com/gpu, operator: Exists}}
    {toleration}
  containers: [{{name: t, image: x}}]
"""


@pytest.mark.parametrize(
    ("selector", "affinity", "toleration", "wrong"),
    [
        pytest.param(
            "trainguard.dev/pool: inference", "", "", "trainguard.dev/pool: inference", id="node-selector-key"
        ),
        pytest.param(
            "",
            "- {key: trainguard.dev/pool, operator: In, values: [inference]}",
            "",
            "- {key: trainguard.dev/pool, operator: In",
            id="affinity-expression",
        ),
        pytest.param(
            "",
            "",
            "- {key: trainguard.dev/pool, operator: Equal, value: inference, effect: NoSchedule}",
            "- {key: trainguard.dev/pool, operator: Equal",
            id="toleration",
        ),
    ],
)
def test_sarif_points_a_pool_finding_at_the_line_of_the_offending_entry(
    tmp_path, capsys, selector: str, affinity: str, toleration: str, wrong: str
) -> None:
    text = _POOL_POD.format(selector=selector, affinity=affinity, toleration=toleration)
    path = write(tmp_path, "pod.yaml", text)
    _, out = review(capsys, str(path), "-o", "sarif")
    (result,) = [r for r in json.loads(out)["runs"][0]["results"] if r["ruleId"] == "pool-separation"]
    line = next(n for n, raw in enumerate(text.splitlines(), 1) if raw.strip().startswith(wrong))
    assert result["locations"][0]["physicalLocation"]["region"]["startLine"] == line


def test_exempted_finding_is_a_suppressed_sarif_result(in_repo, capsys) -> None:
    code, out = review(capsys, f"{REL}/legacy-no-gang.yaml", "--exceptions", str(EXCEPTIONS), "-o", "sarif")
    assert code == 0
    (result,) = json.loads(out)["runs"][0]["results"]
    assert result["ruleId"] == "gang-required"
    assert result["level"] == "error"
    (suppression,) = result["suppressions"]
    assert suppression["kind"] == "external"
    assert suppression["justification"].startswith("migrating to Kueue in Q3")
    assert suppression["properties"]["exception"] == "team-a/legacy-no-gang"


def test_absolute_paths_become_uris_relative_to_the_working_directory(in_repo, capsys) -> None:
    _, out = review(capsys, str(REPO / "deploy/counterexamples/pytorchjob-no-gang.yaml"), "-o", "sarif")
    (result,) = json.loads(out)["runs"][0]["results"]
    uri = result["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]
    assert uri == "deploy/counterexamples/pytorchjob-no-gang.yaml"


# --------------------------------------------------------------------------------------------
# JUnit


def test_junit_has_a_suite_per_file_and_a_case_per_workload_and_validating_policy(
    in_repo, capsys, policies
) -> None:
    code, out = review(capsys, "deploy/counterexamples", REL, "--exceptions", str(EXCEPTIONS), "-o", "junit")
    assert code == 1
    root = ET.fromstring(out)
    assert root.tag == "testsuites"
    suites = {s.get("name"): s for s in root.findall("testsuite")}
    assert set(suites) == {
        *(f"deploy/counterexamples/{p.name}" for p in (REPO / "deploy/counterexamples").glob("*.yaml")),
        *(f"{REL}/{p.name}" for p in MANIFESTS.glob("*.yaml")),
    }
    validating = len(policies.validating)
    workloads = 4 + 4  # four counterexamples, four workloads here (a Service and a PriorityClass are not)
    cases = root.findall(".//testcase")
    assert len(cases) == workloads * validating == int(root.attrib["tests"])
    failures = [c for c in cases if c.find("failure") is not None]
    # bare pod: gang, topology (no pod group to keep together); elastic: checkpoint; no-gang: gang;
    # sneaky: pool, torchrun; mixed: checkpoint, pool
    assert len(failures) == int(root.attrib["failures"]) == 8
    names = {c.get("name") for c in failures}
    assert "JobSet/team-c/spot-on-serving :: pool-separation" in names
    assert "PyTorchJob/team-a/no-gang :: gang-required" in names
    mixed = suites[f"{REL}/denied-mixed.yaml"]
    assert mixed.get("failures") == "2"
    recovery = mixed.find("testcase[@name='JobSet/team-c/spot-on-serving :: recovery-policy']")
    assert recovery.find("failure") is None
    assert "warn: " in (recovery.findtext("system-out") or "")
    exempt = suites[f"{REL}/legacy-no-gang.yaml"].find(
        "testcase[@name='PyTorchJob/team-a/legacy-job :: gang-required']"
    )
    assert exempt.find("skipped").get("message").startswith("exempted: migrating to Kueue")
    skipped = suites[f"{REL}/fsdp-kueue-b.yaml"].find(
        "testcase[@name='PyTorchJob/team-a/llama-fsdp :: checkpoint-required']"
    )
    assert skipped.find("skipped").get("message") == "not applicable: tier guaranteed not matched"
    assert all(c.get("classname") == s.get("name") for s in suites.values() for c in s.findall("testcase"))


# --------------------------------------------------------------------------------------------
# Markdown (golden files: `pytest tests/reviewgate --update-golden` rewrites them)

GOLDEN_CASES = [
    pytest.param("fsdp-kueue-b", [f"{REL}/fsdp-kueue-b.yaml"], id="fsdp-kueue-b"),
    pytest.param("volcano-spot-c", [f"{REL}/volcano-spot-c.yaml"], id="volcano-spot-c"),
    pytest.param("denied-mixed", [f"{REL}/denied-mixed.yaml"], id="denied-mixed"),
    pytest.param(
        "legacy-exempted",
        [f"{REL}/legacy-no-gang.yaml", "--exceptions", "tests/reviewgate/exceptions"],
        id="legacy-exempted",
    ),
    pytest.param("counterexamples", ["deploy/counterexamples"], id="counterexamples"),
]


@pytest.mark.parametrize(("name", "args"), GOLDEN_CASES)
def test_markdown_matches_golden(in_repo, capsys, update_golden, name, args) -> None:
    _, out = review(capsys, *args, "-o", "markdown")
    golden = GOLDEN / f"{name}.md"
    if update_golden:
        golden.write_text(out, encoding="utf-8")
    hint = f"{golden.relative_to(REPO)} is stale or missing: rerun `pytest tests/reviewgate --update-golden`"
    assert golden.exists(), hint
    assert out == golden.read_text(encoding="utf-8"), hint


def test_markdown_summary_table_lists_every_workload_with_its_decision(in_repo, capsys) -> None:
    _, out = review(capsys, "deploy/counterexamples", "deploy/examples/pytorchjob-kueue-b.yaml")
    table = [line for line in out.splitlines() if line.startswith("| `")]
    assert len(table) == 5
    assert "| `team-a/llama-ddp` | PyTorchJob | B | guaranteed | 4 | 32 | ✅ admitted |" in table
    assert "| `team-a/no-gang` | PyTorchJob | B | guaranteed | 4 | 32 | ❌ denied |" in table


# --------------------------------------------------------------------------------------------
# Exit codes

WARN_ONLY = """apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata:
  name: unbounded
  namespace: team-b
  labels: {kueue.x-k8s.io/queue-name: team-b}
  annotations:
    trainguard.dev/checkpoint-owner: team-b
    trainguard.dev/checkpoint-interval: 30m
    trainguard.dev/checkpoint-uri: s3://ckpt/unbounded
spec:
  elasticPolicy: {minReplicas: 1, maxReplicas: 3}
  pytorchReplicaSpecs:
    Worker:
      replicas: 2
      template:
        spec:
          terminationGracePeriodSeconds: 90
          containers: [{name: pytorch, image: train:1}]
"""


@pytest.mark.parametrize(
    ("source", "fail_on", "expected"),
    [
        pytest.param("deploy/examples", "deny", 0, id="admitted-passes"),
        pytest.param("deploy/counterexamples", "deny", 1, id="denied-fails"),
        pytest.param("deploy/counterexamples", "warn", 1, id="denied-fails-on-warn-too"),
        pytest.param("warn-only", "deny", 0, id="warning-passes-by-default"),
        pytest.param("warn-only", "warn", 1, id="warning-fails-with-fail-on-warn"),
    ],
)
def test_fail_on_sets_the_exit_code(in_repo, tmp_path, capsys, source, fail_on, expected) -> None:
    if source == "warn-only":
        source = str(write(tmp_path, "warn.yaml", WARN_ONLY))
    for output in ("markdown", "sarif", "junit", "json"):
        code, _ = review(capsys, source, "--fail-on", fail_on, "-o", output)
        assert code == expected, output


OK = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n"
BAD_EXCEPTION = "apiVersion: trainguard.dev/v1alpha1\nkind: PolicyException\nmetadata: {name: x}\nspec: {}\n"


@pytest.mark.parametrize(
    ("files", "argv", "message"),
    [
        pytest.param(
            {"bad.yaml": "kind: Pod\nmetadata: {name: [\n"}, ["bad.yaml"], "malformed YAML", id="malformed"
        ),
        pytest.param(
            {"dup.yaml": "apiVersion: v1\nkind: Pod\nkind: Job\n"}, ["dup.yaml"], "duplicate key", id="dup"
        ),
        pytest.param({}, ["missing.yaml"], "no such file or directory", id="missing-file"),
        pytest.param(
            {"ok.yaml": OK, "ex.yaml": BAD_EXCEPTION},
            ["ok.yaml", "--exceptions", "ex.yaml"],
            "ex.yaml, PolicyException x, field spec.policies: is required",
            id="bad-exception-file",
        ),
        pytest.param(
            {"ok.yaml": OK, "cfg.yaml": "pools: {nope: 1}\n"},
            ["ok.yaml", "--config", "cfg.yaml"],
            "unknown field pools.nope",
            id="bad-config",
        ),
    ],
)
def test_input_policy_and_exception_errors_exit_2(
    tmp_path, monkeypatch, capsys, files, argv, message
) -> None:
    monkeypatch.chdir(tmp_path)
    for name, text in files.items():
        write(tmp_path, name, text)
    assert main(["review", *argv]) == 2
    assert message in capsys.readouterr().err


def test_json_output_carries_answers_findings_and_patch(in_repo, capsys) -> None:
    code, out = review(capsys, f"{REL}/denied-mixed.yaml", "-o", "json")
    assert code == 1
    data = json.loads(out)
    (r,) = data["reviews"]
    assert (r["kind"], r["namespace"], r["name"], r["class"], r["tier"], r["pods"], r["gpus"]) == (
        "JobSet", "team-c", "spot-on-serving", "B", "preemptible", 2, 16,
    )  # fmt: skip
    assert [a["question"] for a in r["answers"]] == ["gang", "topology", "preemption", "recovery", "pool"]
    assert {(f["level"], f["policy"]) for f in r["findings"]} == {
        ("deny", "checkpoint-required"), ("deny", "pool-separation"), ("warn", "recovery-policy"),
    }  # fmt: skip
    assert data["notReviewed"][0]["kind"] == "Service"
    assert r["patch"]


# --------------------------------------------------------------------------------------------
# The five answers, on hand-written manifests


def test_gang_answer_names_mechanism_and_minimum(policies) -> None:
    report = report_for(policies, MANIFESTS / "volcano-spot-c.yaml")
    a = answer(report, "bert-spot", "gang")
    assert a.verdict == "ok"
    assert "the Volcano scheduler" in a.summary and "min-available 2 (spec.minAvailable)" in a.summary
    assert evidence(a) == {"spec.schedulerName": "volcano", "spec.minAvailable": 2}


def test_gang_answer_flags_a_partial_minimum_on_a_fixed_size_job(tmp_path, policies) -> None:
    path = write(
        tmp_path,
        "partial.yaml",
        """apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata: {name: partial, namespace: ml}
spec:
  runPolicy: {schedulingPolicy: {minAvailable: 2}}
  pytorchReplicaSpecs:
    Master: {replicas: 1, template: {spec: {schedulerName: volcano, containers: [{name: t, image: x}]}}}
    Worker: {replicas: 3, template: {spec: {schedulerName: volcano, containers: [{name: t, image: x}]}}}
""",
    )
    a = answer(report_for(policies, path), "partial", "gang")
    assert a.verdict == "needs attention"  # min-available's finding, not a rule of the review's own
    assert "min-available 2 (spec.runPolicy.schedulingPolicy.minAvailable)" in a.summary
    assert "Policy min-available reports a finding" in a.summary
    assert evidence(a)["spec.runPolicy.schedulingPolicy.minAvailable"] == 2


def test_gang_is_not_applicable_to_a_single_node_job(in_repo, policies) -> None:
    report = report_for(policies, "deploy/examples/finetune-single-node-a.yaml")
    gang = answer(report, "lora-finetune", "gang")
    # torchrun-consistency answers the gang question too, and its launch line agrees with one pod
    assert gang.verdict == "ok" and gang.summary.startswith("Single node (1 pod): nothing to gang.")
    assert answer(report, "lora-finetune", "topology").verdict == "not applicable"


def test_verdicts_follow_whatever_policies_answer_the_question(tmp_path, in_repo) -> None:
    """A platform's own policy, under its own name, decides the review: no rule of the review's own."""
    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "team-gang.yaml").write_text(
        "apiVersion: trainguard.dev/v1alpha1\nkind: TrainingPolicy\nmetadata:\n  name: team-gang-rule\n"
        "  annotations:\n    trainguard.dev/review-question: gang\n"
        "spec:\n  mode: Warn\n  validations:\n    - expression: workload.totalPods <= 1\n"
        "      message: this platform runs no multi-pod jobs\n"
    )
    report = report_for(load_policy_set([rules]), MANIFESTS / "fsdp-kueue-b.yaml")
    gang = answer(report, "llama-fsdp", "gang")
    assert gang.verdict == "needs attention"
    assert "Policy team-gang-rule reports a finding" in gang.summary
    topology = answer(report, "llama-fsdp", "topology")
    assert topology.verdict == "not applicable"
    assert "No loaded policy answers this question." in topology.summary


def test_gang_is_missing_without_any_mechanism(in_repo, policies) -> None:
    a = answer(report_for(policies, "deploy/counterexamples/pytorchjob-no-gang.yaml"), "no-gang", "gang")
    assert a.verdict == "needs attention"
    assert "no gang mechanism" in a.summary


def test_topology_answer_names_keys_levels_and_required(policies) -> None:
    a = answer(report_for(policies, MANIFESTS / "fsdp-kueue-b.yaml"), "llama-fsdp", "topology")
    assert a.verdict == "ok"
    assert a.summary == "Required Kueue TAS at cloud.example.com/rack on Master, Worker."
    key = "kueue.x-k8s.io/podset-required-topology"
    assert evidence(a) == {
        f"spec.pytorchReplicaSpecs.Master.template.metadata.annotations[{key}]": "cloud.example.com/rack",
        f"spec.pytorchReplicaSpecs.Worker.template.metadata.annotations[{key}]": "cloud.example.com/rack",
    }
    assert all(e.added_by is None for e in a.evidence)


def test_topology_added_by_the_mutation_says_so(policies) -> None:
    a = answer(report_for(policies, MANIFESTS / "denied-mixed.yaml"), "spot-on-serving", "topology")
    assert a.verdict == "ok"
    assert a.summary.startswith("Preferred pod affinity at topology.kubernetes.io/zone")
    (e,) = a.evidence
    assert e.field.endswith(
        "podAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].podAffinityTerm.topologyKey"
    )
    assert e.added_by == "mutate-topology"


def test_topology_best_effort_declaration_is_an_answer(tmp_path, policies) -> None:
    path = write(
        tmp_path,
        "be.yaml",
        """apiVersion: jobset.x-k8s.io/v1alpha2
kind: JobSet
metadata:
  name: be
  namespace: ml
  labels: {kueue.x-k8s.io/queue-name: q}
  annotations: {trainguard.dev/topology-slo: best-effort}
spec:
  replicatedJobs:
    - name: w
      replicas: 2
      template:
        spec:
          template:
            spec:
              containers: [{name: t, image: x, resources: {limits: {nvidia.com/gpu: 8}}}]
""",
    )
    a = answer(report_for(policies, path), "be", "topology")
    assert a.verdict == "ok"
    assert "best-effort" in a.summary
    assert evidence(a) == {"metadata.annotations[trainguard.dev/topology-slo]": "best-effort"}


def test_preemption_answer_gives_tier_owner_interval_location_and_grace(policies) -> None:
    a = answer(report_for(policies, MANIFESTS / "volcano-spot-c.yaml"), "bert-spot", "preemption")
    assert a.verdict == "ok"
    assert a.summary.startswith(
        "Tier preemptible (label trainguard.dev/tier): checkpoints owned by research-ml@"
    )
    assert "Grace periods: worker 120 s." in a.summary
    ev = evidence(a)
    assert ev["metadata.labels[trainguard.dev/tier]"] == "preemptible"
    assert ev["metadata.annotations[trainguard.dev/checkpoint-owner]"] == "research-ml@example.com"
    assert ev["metadata.annotations[trainguard.dev/checkpoint-interval]"] == "15m"
    assert ev["metadata.annotations[trainguard.dev/checkpoint-uri]"] == "pvc://ckpt-research/bert-spot"
    assert ev["spec.tasks[0].template.spec.terminationGracePeriodSeconds"] == 120
    injected = next(e for e in a.evidence if e.added_by)
    assert injected.added_by == "mutate-checkpoint-env"
    assert injected.value == "TRAINGUARD_CHECKPOINT_URI=pvc://ckpt-research/bert-spot"


def test_preemption_answer_lists_what_is_missing(policies) -> None:
    report = report_for(policies, MANIFESTS / "denied-mixed.yaml")
    a = answer(report, "spot-on-serving", "preemption")
    assert a.verdict == "needs attention"
    assert "no checkpoint contract declared" in a.summary
    assert "Policy checkpoint-required reports a finding (see Findings)" in a.summary
    review_ = next(r for r in report.reviews if r.workload.name == "spot-on-serving")
    finding = next(f for f in review_.findings if f.policy == "checkpoint-required")
    assert "trainguard.dev/checkpoint-uri" in finding.message
    assert evidence(a)[
        "spec.replicatedJobs[0].template.spec.template.spec.terminationGracePeriodSeconds"
    ] == ("unset (30)")


def test_recovery_answer_gives_bound_priority_and_cooldown(policies) -> None:
    a = answer(report_for(policies, MANIFESTS / "volcano-spot-c.yaml"), "bert-spot", "recovery")
    assert a.verdict == "ok"
    assert a.summary.startswith("Restarts bounded by spec.maxRetry = 5 (platform maximum 10)")
    assert "resumes at priority class training-spot" in a.summary
    ev = evidence(a)
    assert ev["spec.maxRetry"] == 5
    assert ev["spec.priorityClassName"] == "training-spot"
    assert ev["metadata.annotations[volcano.sh/cooldown-time]"] == "10m"
    assert ev["spec.tasks[0].template.spec.containers[0].command[3]"] == "torchrun --max-restarts=3"


def test_recovery_answer_reads_the_priority_value_given_beside(policies) -> None:
    a = answer(report_for(policies, MANIFESTS / "fsdp-kueue-b.yaml"), "llama-fsdp", "recovery")
    assert a.verdict == "not applicable"  # guaranteed, fixed size: no bound required
    assert "spec.runPolicy.backoffLimit = 2" in a.summary
    assert "resumes at priority class training-high (value 100000)" in a.summary


def test_recovery_answer_flags_a_bound_above_the_platform_maximum(policies) -> None:
    a = answer(report_for(policies, MANIFESTS / "denied-mixed.yaml"), "spot-on-serving", "recovery")
    assert a.verdict == "needs attention"
    assert evidence(a) == {"spec.failurePolicy.maxRestarts": 20}


def test_pool_answer_pinned_shared_and_violating(policies) -> None:
    pinned = answer(report_for(policies, MANIFESTS / "volcano-spot-c.yaml"), "bert-spot", "pool")
    assert pinned.verdict == "ok" and pinned.summary.startswith("Training workload targets the training pool")
    assert evidence(pinned) == {"spec.tasks[0].template.spec.nodeSelector[trainguard.dev/pool]": "training"}
    bad = answer(report_for(policies, MANIFESTS / "denied-mixed.yaml"), "spot-on-serving", "pool")
    assert bad.verdict == "needs attention" and "targets the inference pool" in bad.summary
    assert "Policy pool-separation reports a finding" in bad.summary
    shared = answer(report_for(policies, MANIFESTS / "fsdp-kueue-b.yaml"), "llama-fsdp", "pool")
    assert shared.verdict == "ok" and shared.summary.startswith("No pool chosen")


def test_pool_pinned_by_the_mutation_says_which_policy_did_it(tmp_path, policies) -> None:
    config = write(tmp_path, "platform.yaml", "pools: {assignTraining: true}\n")
    a = answer(
        report_for(policies, MANIFESTS / "fsdp-kueue-b.yaml", config=str(config)), "llama-fsdp", "pool"
    )
    assert a.verdict == "ok"
    assert a.summary.startswith("Training workload targets the training pool")
    assert {e.added_by for e in a.evidence} == {"mutate-pool"}
    assert any("nodeAffinity" in e.field for e in a.evidence)


def test_inference_workload_answers_pool_and_skips_training_questions(in_repo, policies) -> None:
    report = report_for(policies, "deploy/examples/lws-inference.yaml")
    verdicts = {a.key: a.verdict for a in report.reviews[0].answers}
    assert verdicts == {
        "gang": "not applicable", "topology": "not applicable", "preemption": "not applicable",
        "recovery": "not applicable", "pool": "ok",
    }  # fmt: skip


def test_exempted_finding_is_reported_with_its_exception(policies) -> None:
    exceptions = load_exceptions([EXCEPTIONS])
    report = report_for(policies, MANIFESTS / "legacy-no-gang.yaml", exceptions=exceptions)
    (finding,) = report.findings()
    assert finding.level == "exempt"
    assert finding.exception is not None and finding.exception.id == "team-a/legacy-no-gang"
    assert finding.justification.startswith("migrating to Kueue")
    assert report.reviews[0].decision.allowed
    # The gang answer still tells the truth about the object.
    assert answer(report, "legacy-job", "gang").verdict == "needs attention"


def test_inference_is_shown_without_a_training_class(capsys: pytest.CaptureFixture[str]) -> None:
    code, out = review(capsys, str(REPO / "deploy/examples/lws-inference.yaml"))
    assert code == 0
    assert "| `serving/vllm-70b` | LeaderWorkerSet | – | guaranteed |" in out
    assert "role inference · tier **guaranteed** (default for inference)" in out
    assert "class B" not in out
