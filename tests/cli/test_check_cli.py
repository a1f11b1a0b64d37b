"""`trainguard check`: exit codes, the JSON contract, stdin, and clear errors without tracebacks."""

from __future__ import annotations

import io
import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO, corpus_files, shared_dir
from webhook.cli import main

EXAMPLES = REPO / "deploy" / "examples"
COUNTER = REPO / "deploy" / "counterexamples"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_shipped_examples_are_all_admitted(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "check", str(EXAMPLES))
    assert code == 0, out + err
    assert "0 denied" in out
    assert "pytorchjob-kueue-b.yaml#1" in out


def test_counterexamples_are_denied_with_the_rule_and_the_field(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "check", str(COUNTER), "-o", "json")
    assert code == 1
    results = {Path(r["source"]).name.split("#")[0]: r for r in json.loads(out)["results"]}
    assert {name: [v["policy"] for v in r["violations"]] for name, r in results.items()} == {
        # No pod group: nothing gangs the pods, and no affinity can keep them together.
        "bare-torchrun-pod.yaml": ["gang-required", "topology-slo"],
        "elastic-no-checkpoint.yaml": ["checkpoint-required", "checkpoint-required"],
        "pytorchjob-no-gang.yaml": ["gang-required"],
        "training-on-inference-pool.yaml": ["pool-separation", "torchrun-consistency"],
    }
    gang = results["pytorchjob-no-gang.yaml"]["violations"][0]["message"]
    assert "kueue.x-k8s.io/queue-name" in gang and "spec.runPolicy.schedulingPolicy.minAvailable: 4" in gang


def test_json_output_has_one_result_per_document_with_the_contract_keys(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "mixed.yaml"
    path.write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n---\n"
        + (EXAMPLES / "finetune-single-node-a.yaml").read_text()
    )
    code, out, _ = run(capsys, "check", str(path), "-o", "json")
    assert code == 0
    doc = json.loads(out)
    assert [r["kind"] for r in doc["results"]] == ["ConfigMap", "Job"]
    configmap, job = doc["results"]
    assert configmap["allowed"] is True and configmap["class"] is None and configmap["patch"] == []
    for key in (
        "source",
        "apiVersion",
        "kind",
        "namespace",
        "name",
        "role",
        "class",
        "tier",
        "allowed",
        "violations",
        "warnings",
        "patch",
    ):
        assert key in job
    assert (job["class"], job["tier"], job["role"]) == ("A", "guaranteed", "training")
    assert job["source"].endswith("mixed.yaml#2")
    assert {"op": "add", "path": "/metadata/labels", "value": {"trainguard.dev/class": "A"}} in job["patch"]
    assert doc["summary"]["documents"] == 2


def test_stdin_is_read_with_dash(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO((COUNTER / "bare-torchrun-pod.yaml").read_text()))
    code, out, _ = run(capsys, "check", "-", "-o", "yaml")
    assert code == 1
    assert "source: <stdin>#1" in out


def test_namespace_flag_applies_to_objects_without_one(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    config = tmp_path / "platform.yaml"
    config.write_text("queues:\n  namespaces: {team-x: team-x-queue}\n")
    code, out, _ = run(
        capsys, "check", str(COUNTER / "pytorchjob-no-gang.yaml"), "-o", "json", "--config", str(config)
    )
    assert code == 1, "namespace team-a has no queue"
    job = (COUNTER / "pytorchjob-no-gang.yaml").read_text().replace("  namespace: team-a\n", "")
    nons = tmp_path / "job.yaml"
    nons.write_text(job)
    code, out, _ = run(
        capsys, "check", str(nons), "-o", "json", "--config", str(config), "--namespace", "team-x"
    )
    assert code == 0, out
    result = json.loads(out)["results"][0]
    assert result["namespace"] == "team-x"
    assert {"op": "add", "path": "/spec/runPolicy", "value": {"suspend": True}} in result["patch"]


BAD_INPUT = [
    pytest.param("a: 1\na: 2\n", "document 1, line 2, field a: duplicate key 'a'", id="duplicate-key"),
    pytest.param("apiVersion: v1\nkind: Pod\nmetadata: {name: [x\n", "malformed YAML", id="broken-yaml"),
    pytest.param("just a string\n", "expected a Kubernetes object", id="scalar-document"),
    pytest.param("kind: Pod\n", "missing or empty apiVersion", id="missing-apiversion"),
    pytest.param(
        "apiVersion: kubeflow.org/v1\nkind: PyTorchJob\nmetadata: {name: p}\nspec:\n  pytorchReplicaSpecs:\n    Worker: {replicas: many}\n",
        "replicas",
        id="replicas-not-a-number",
    ),
]


@pytest.mark.parametrize(("text", "words"), BAD_INPUT)
def test_bad_input_exits_2_with_location_and_no_traceback(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, text: str, words: str
) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    code, out, err = run(capsys, "check", str(path))
    assert code == 2
    assert words in err
    assert str(path) in err
    assert "Traceback" not in err + out


def test_broken_policy_directory_exits_2_naming_file_and_policy(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    (tmp_path / "p.yaml").write_text(
        "apiVersion: trainguard.dev/v1alpha1\nkind: TrainingPolicy\nmetadata: {name: broken}\n"
        "spec:\n  validations:\n    - expression: 'workload.totalPods >'\n      message: m\n"
    )
    code, _, err = run(capsys, "check", str(EXAMPLES), "--policies", str(tmp_path))
    assert code == 2
    assert "policy broken, spec.validations[0].expression" in err


def test_usage_errors_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["check", str(EXAMPLES), "-o", "xml"])
    assert info.value.code == 2


@pytest.mark.skipif(shared_dir() is None, reason="the shared corpus is not beside this checkout")
def test_whole_corpus_through_json_has_a_result_for_every_document(
    capsys: pytest.CaptureFixture[str],
) -> None:
    shared = shared_dir()
    assert shared is not None
    code, out, err = run(capsys, "check", str(shared / "corpus"), "-o", "json")
    assert code == 1, err  # the corpus holds jobs without gang and a NEGATIVE fixture
    doc = json.loads(out)
    documents = sum(
        text.count("\nkind:") + text.startswith("kind:") for text in (p.read_text() for p in corpus_files())
    )
    assert doc["summary"]["documents"] == len(doc["results"]) >= 100
    assert documents >= len(doc["results"]) - 5  # top-level kinds only; nested `kind:` lines overcount
    negative = [r for r in doc["results"] if r["source"].endswith("minAvailable-webhook-deny.yaml#1")]
    assert negative and not negative[0]["allowed"]
    assert [v["policy"] for v in negative[0]["violations"]] == ["min-available"]


def test_a_malformed_file_does_not_hide_the_other_decisions(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    (tmp_path / "a-denied.yaml").write_text((COUNTER / "pytorchjob-no-gang.yaml").read_text())
    (tmp_path / "b-broken.yaml").write_text("apiVersion: v1\nkind: Pod\nmetadata: {name: [x\n")
    (tmp_path / "c-admitted.yaml").write_text((EXAMPLES / "pytorchjob-kueue-b.yaml").read_text())
    (tmp_path / "d-unreadable.yaml").write_text(
        "apiVersion: kubeflow.org/v1\nkind: PyTorchJob\nmetadata: {name: p}\nspec:\n"
        "  pytorchReplicaSpecs:\n    Worker: {replicas: many}\n"
    )
    code, out, err = run(capsys, "check", str(tmp_path), "-o", "json")
    assert code == 2
    doc = json.loads(out)
    assert [(Path(r["source"]).name, r["allowed"]) for r in doc["results"]] == [
        ("a-denied.yaml#1", False),
        ("c-admitted.yaml#1", True),
    ]
    errors = [(Path(e["source"]).name, e["document"], e["line"]) for e in doc["errors"]]
    assert errors == [("b-broken.yaml", 1, 4), ("d-unreadable.yaml", 1, 6)]
    assert "replicas" in doc["errors"][1]["message"]
    assert doc["summary"]["errors"] == 2
    assert err.count("trainguard: error:") == 2 and "Traceback" not in err

    code, out, _ = run(capsys, "check", str(tmp_path))
    assert code == 2
    rows = [line.split() for line in out.splitlines() if line.endswith("ERROR")]
    assert [Path(r[0]).name for r in rows] == ["b-broken.yaml#1", "d-unreadable.yaml#1"]
    assert "    error line 4: malformed YAML" in out
    assert "2 documents, 2 workloads: 1 admitted, 1 denied" in out and "2 errors" in out


_READABLE_BUT_WRONG = [
    pytest.param(
        "apiVersion: v1\nkind: Pod\nmetadata: {name: p, labels: {kueue.x-k8s.io/pod-group-name: run}}\n"
        "spec: {containers: [{name: t, image: x, command: [torchrun, --nnodes=2, train.py]}]}\n",
        "pod-group-count",
        "kueue.x-k8s.io/pod-group-total-count is missing",
        id="kueue-pod-group-without-its-count",
    ),
    pytest.param(
        "apiVersion: batch/v1\nkind: Job\nmetadata:\n  name: j\n  labels: {trainguard.dev/tier: preemptible}\n"
        "  annotations: {trainguard.dev/checkpoint-interval: 30m, trainguard.dev/checkpoint-owner: ml,\n"
        "    trainguard.dev/checkpoint-uri: 'pvc:///checkpoints/run-7'}\n"
        "spec: {template: {spec: {restartPolicy: Never, terminationGracePeriodSeconds: 120,\n"
        "  containers: [{name: t, image: x}]}}}\n",
        "checkpoint-required",
        "a pvc:// URI names the PersistentVolumeClaim before the path",
        id="pvc-uri-without-a-claim",
    ),
    pytest.param(
        "apiVersion: ray.io/v1\nkind: RayService\nmetadata: {name: serve}\nspec:\n  rayClusterConfig:\n"
        "    headGroupSpec: {template: {spec: {containers: [{name: h, image: r}]}}}\n"
        "    workerGroupSpecs:\n    - groupName: gpu\n      replicas: 1\n      template:\n        spec:\n"
        "          nodeSelector: {trainguard.dev/pool: training}\n"
        "          containers: [{name: w, image: r, resources: {limits: {nvidia.com/gpu: 1}}}]\n",
        "pool-separation",
        "inference RayService targets the training pool",
        id="rayservice-gpu-workers-on-the-training-pool",
    ),
    pytest.param(
        "apiVersion: ray.io/v1\nkind: RayJob\nmetadata: {name: rj}\nspec:\n  entrypoint: python t.py\n"
        "  rayClusterSpec: {headGroupSpec: {template: {spec: {containers: [{name: h, image: r}]}}}}\n"
        "  submitterPodTemplate:\n    spec:\n      restartPolicy: Never\n"
        "      nodeSelector: {trainguard.dev/pool: inference}\n      containers: [{name: s, image: r}]\n",
        "pool-separation",
        "spec.submitterPodTemplate.spec.nodeSelector[trainguard.dev/pool]",
        id="rayjob-submitter-on-the-inference-pool",
    ),
]


@pytest.mark.parametrize(("text", "policy", "words"), _READABLE_BUT_WRONG)
def test_a_readable_but_wrong_workload_is_denied_with_exit_1(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, text: str, policy: str, words: str
) -> None:
    path = tmp_path / "w.yaml"
    path.write_text(text)
    code, out, err = run(capsys, "check", str(path), "-o", "json")
    assert code == 1, out + err
    doc = json.loads(out)
    assert doc["errors"] == []
    (result,) = doc["results"]
    assert any(v["policy"] == policy and words in v["message"] for v in result["violations"]), result


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_a_syntax_error_in_the_second_document_leaves_the_others_decided(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, jobs: str
) -> None:
    denied = (COUNTER / "pytorchjob-no-gang.yaml").read_text()
    broken = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: [broken\ndata: {a: b}\n"
    admitted = (EXAMPLES / "pytorchjob-kueue-b.yaml").read_text()
    path = tmp_path / "three.yaml"
    path.write_text(f"{denied}---\n{broken}---\n{admitted}")
    # The parser gives up on the line after the unclosed "[" (the document's last).
    broken_line = denied.count("\n") + 1 + broken.count("\n")

    code, out, err = run(capsys, "check", str(path), "-o", "json", "-j", jobs)
    assert code == 2
    doc = json.loads(out)
    assert [(Path(r["source"]).name, r["allowed"]) for r in doc["results"]] == [
        ("three.yaml#1", False),
        ("three.yaml#3", True),
    ]
    assert [(Path(e["source"]).name, e["document"], e["line"]) for e in doc["errors"]] == [
        ("three.yaml", 2, broken_line)
    ]
    assert doc["errors"][0]["message"].startswith("malformed YAML")
    assert f"three.yaml, document 2, line {broken_line}: malformed YAML" in err and "Traceback" not in err


@pytest.mark.parametrize("where", ["empty-file", "empty-stdin", "empty-directory"])
def test_input_without_documents_exits_2(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path, where: str
) -> None:
    if where == "empty-file":
        target = tmp_path / "empty.yaml"
        target.write_text("")
        arg = str(target)
    elif where == "empty-stdin":
        monkeypatch.setattr("sys.stdin", io.StringIO(""))
        arg = "-"
    else:
        arg = str(tmp_path)
    code, out, err = run(capsys, "check", arg, "-o", "json")
    assert code == 2
    assert json.loads(out)["results"] == []
    assert "no documents" in err


def _check_in_a_subprocess(*argv: str, memory: int = 2 * 1024**3) -> subprocess.CompletedProcess[str]:
    """Run `trainguard check` under an address-space cap; the timeout only stops a hung run."""

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))

    return subprocess.run(
        [sys.executable, "-m", "webhook", "check", *argv],
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=cap,
        check=False,
    )


def test_billion_laughs_is_refused_under_a_memory_cap(tmp_path: Path) -> None:
    lines = ["apiVersion: v1", "kind: Pod", 'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for prev, name in zip("abcdefgh", "bcdefghi", strict=True):
        lines.append(f"{name}: &{name} [" + ",".join([f"*{prev}"] * 9) + "]")
    lines.append("kind: Pod")  # the duplicate key made the error path walk every expanded value
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text("\n".join(lines) + "\n")
    assert bomb.stat().st_size < 700
    proc = _check_in_a_subprocess(str(bomb))
    assert proc.returncode == 2, proc.stderr
    assert "YAML aliases expand this document beyond" in proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout


def test_fifo_and_device_paths_are_refused(tmp_path: Path) -> None:
    fifo = tmp_path / "jobs.yaml"
    os.mkfifo(fifo)
    proc = _check_in_a_subprocess(str(fifo), "/dev/zero", str(EXAMPLES / "pytorchjob-kueue-b.yaml"))
    assert proc.returncode == 2
    assert f"{fifo}: refused: a FIFO" in proc.stderr
    assert "/dev/zero: refused: a device" in proc.stderr
    assert "pytorchjob-kueue-b.yaml#1" in proc.stdout and "ADMITTED" in proc.stdout
    assert "Traceback" not in proc.stderr


def test_check_does_not_import_what_other_commands_run_on() -> None:
    """The HTTP server, the cluster client and X.509 cost start-up time that `check` has no use for."""
    script = (
        "import sys\n"
        "from webhook.cli import main\n"
        f"code = main(['check', {str(EXAMPLES / 'pytorchjob-kueue-b.yaml')!r}, '-o', 'json'])\n"
        "heavy = {'starlette', 'uvicorn', 'kubernetes', 'cryptography'}\n"
        "print(code, sorted(heavy & {m.split('.')[0] for m in sys.modules}), file=sys.stderr)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False
    )
    assert proc.stderr.strip() == "0 []"


@pytest.mark.parametrize("argv", [["--help"], ["no-such-command"]], ids=["help", "unknown-command"])
def test_every_command_is_still_listed(capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    with pytest.raises(SystemExit):
        main(argv)
    out, err = capsys.readouterr()
    for command in ("audit", "certs", "check", "review", "serve", "test", "webhook-config"):
        assert command in out + err


@pytest.mark.skipif(not corpus_files(), reason="the shared corpus is not beside this checkout")
@pytest.mark.parametrize("output", ["json", "yaml"])
def test_a_report_reads_the_same_on_every_run(capsys: pytest.CaptureFixture[str], output: str) -> None:
    """Patch values are maps CEL builds, with no order of their own: the report sorts their keys,
    so deciding the same manifests twice prints the same bytes."""
    files = [str(f) for f in corpus_files()]
    runs = []
    for _ in range(3):
        main(["check", "-o", output, "-j", "1", *files])
        runs.append(capsys.readouterr().out)
    assert '"op"' in runs[0] or "op:" in runs[0]  # some manifest was patched
    assert runs[1:] == runs[:1] * 2
