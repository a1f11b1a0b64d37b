"""`trainguard check -j N`: worker processes change how long a run takes, never what it prints."""

from __future__ import annotations

import io
import json
import os
import shutil
from pathlib import Path

import pytest

from tests.conftest import REPO
from webhook.cli import _parallel, main
from webhook.documents import collect_file, manifest_inputs

EXAMPLES = REPO / "deploy" / "examples"
COUNTER = REPO / "deploy" / "counterexamples"

RUNTIME = """apiVersion: trainer.kubeflow.org/v1alpha1
kind: ClusterTrainingRuntime
metadata: {name: torch-gang}
spec:
  mlPolicy: {numNodes: 2, torch: {}}
  podGroupPolicy: {coscheduling: {scheduleTimeoutSeconds: 120}}
  template:
    spec:
      replicatedJobs:
        - name: node
          template:
            metadata:
              labels: {trainer.kubeflow.org/trainjob-ancestor-step: trainer}
            spec:
              template:
                spec:
                  containers:
                    - name: node
                      image: pytorch:2
                      command: [torchrun, train.py]
                      resources: {limits: {nvidia.com/gpu: 8}}
"""
TRAINJOB = """apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainJob
metadata: {name: known-runtime, namespace: ml}
spec:
  runtimeRef: {name: torch-gang}
  trainer: {numNodes: 4}
"""


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["check", *argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def mixed(tmp_path: Path) -> list[str]:
    """Arguments naming admitted, denied and unreadable documents, in several files and directories."""
    tree = tmp_path / "tree"
    shutil.copytree(EXAMPLES, tree / "examples")
    shutil.copytree(COUNTER, tree / "counter")
    (tree / "bad").mkdir()
    (tree / "bad" / "a-broken.yaml").write_text("apiVersion: v1\nkind: Pod\nmetadata: {name: [x\n")
    (tree / "bad" / "b-dup.yaml").write_text("apiVersion: v1\nkind: Pod\nmetadata: {name: a, name: b}\n")
    (tree / "bad" / "c-empty.yaml").write_text("")
    (tree / "bad" / "d-list.yaml").write_text(
        "- not an object\n---\napiVersion: v1\nkind: Pod\nmetadata: {name: p}\n"
    )
    (tree / "bad" / "e-undecidable.yaml").write_text(
        "apiVersion: kubeflow.org/v1\nkind: PyTorchJob\nmetadata: {name: p}\nspec:\n"
        "  pytorchReplicaSpecs:\n    Worker: {replicas: many}\n"
    )
    empty_dir = tmp_path / "nothing"
    empty_dir.mkdir()
    (empty_dir / "comment.yaml").write_text("# no document\n")
    return [
        str(tree),
        str(COUNTER / "pytorchjob-no-gang.yaml"),  # named twice: decided twice, as serially
        str(empty_dir),
        str(tmp_path / "missing.yaml"),
        str(tree / "bad" / "c-empty.yaml"),
    ]


@pytest.mark.parametrize("output", ["json", "yaml", "table"])
@pytest.mark.parametrize("jobs", ["2", "5"], ids=["two-workers", "five-workers"])
def test_workers_print_what_one_process_prints(
    capsys: pytest.CaptureFixture[str], mixed: list[str], output: str, jobs: str
) -> None:
    serial = _run(capsys, *mixed, "-o", output, "-j", "1")
    assert serial[0] == 2 and "Traceback" not in serial[2]
    code, out, err = _run(capsys, *mixed, "-o", output, "-j", jobs)
    assert (code, out, err) == serial


def test_documents_in_other_workers_files_still_inform_a_decision(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    (tmp_path / "a-runtime.yaml").write_text(RUNTIME)
    (tmp_path / "b-job.yaml").write_text((EXAMPLES / "pytorchjob-kueue-b.yaml").read_text())
    (tmp_path / "c-trainjob.yaml").write_text(TRAINJOB)
    code, out, err = _run(capsys, str(tmp_path), "-o", "json", "-j", "3")  # one file per worker
    assert (code, err) == (0, "")
    trainjob = json.loads(out)["results"][-1]
    assert trainjob["name"] == "known-runtime"
    assert [w["policy"] for w in trainjob["warnings"]] == [], "the runtime was not seen"
    (tmp_path / "a-runtime.yaml").unlink()
    _, out, _ = _run(capsys, str(tmp_path), "-o", "json", "-j", "2")
    warned = [w["policy"] for w in json.loads(out)["results"][-1]["warnings"]]
    assert "trainjob-runtime" in warned, "without the runtime the TrainJob is warned about"


def test_stdin_is_read_in_this_process(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO((COUNTER / "bare-torchrun-pod.yaml").read_text()))
    code, out, _ = _run(capsys, "-", str(EXAMPLES), "-o", "json", "-j", "4")
    assert code == 1
    assert json.loads(out)["results"][0]["source"] == "<stdin>#1"


def test_a_worker_that_dies_is_an_error_not_a_hang(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, mixed: list[str]
) -> None:
    real = collect_file

    def dies_on_the_counterexamples(path: str, out: object, **kwargs: object) -> None:
        if "counter" in path:
            os._exit(9)  # as the kernel's OOM killer would end it: no message, no result
        real(path, out, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(_parallel, "collect_file", dies_on_the_counterexamples)
    code, out, err = _run(capsys, *mixed, "-j", "3")
    assert code == 2
    assert "trainguard: error: a worker process ended without its results" in err
    assert "Traceback" not in err


@pytest.mark.parametrize("value", ["0", "-2", "many"])
def test_jobs_must_be_a_positive_number(capsys: pytest.CaptureFixture[str], value: str) -> None:
    with pytest.raises(SystemExit) as info:
        main(["check", str(EXAMPLES), "-j", value])
    assert info.value.code == 2
    assert "expected a whole number of at least 1" in capsys.readouterr().err


def _big_input(tmp_path: Path) -> list[str]:
    """Two files that together just reach the size from which a run gets workers."""
    pod = "---\napiVersion: v1\nkind: Pod\nmetadata: {name: p}\n"
    for name in ("a.yaml", "b.yaml"):
        (tmp_path / name).write_text(pod * (_parallel.MIN_PARALLEL_BYTES // 2 // len(pod) + 1))
    return [str(tmp_path)]


@pytest.mark.parametrize(
    ("make", "jobs", "busy", "expected"),
    [
        pytest.param(lambda p: [str(EXAMPLES)], None, 0, 1, id="small-input-stays-in-one-process"),
        pytest.param(
            _big_input, None, 0, min(_parallel._usable_cpus(), 8, 2), id="large-input-one-worker-per-cpu"
        ),
        pytest.param(_big_input, None, 64, 1, id="large-input-on-busy-cpus-stays-in-one-process"),
        pytest.param(_big_input, 1, 0, 1, id="j1-never-forks"),
        pytest.param(lambda p: [str(EXAMPLES)], 3, 64, 3, id="j3-asked-for"),
        pytest.param(
            lambda p: [str(COUNTER / "pytorchjob-no-gang.yaml")], 4, 0, 1, id="no-more-workers-than-files"
        ),
        pytest.param(lambda p: ["-", str(EXAMPLES)], 4, 0, 1, id="stdin-stays-in-one-process"),
    ],
)
def test_how_many_workers_a_run_gets(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, make: object, jobs: int | None, busy: int, expected: int
) -> None:
    monkeypatch.setattr(_parallel, "_other_running_tasks", lambda: busy)
    assert _parallel.workers_for(manifest_inputs(make(tmp_path)), jobs) == expected  # type: ignore[operator]
