"""`trainguard check` reads eviction records from the Kueue Workloads given beside the pods."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from webhook.cli import main

WORKLOAD = """\
apiVersion: kueue.x-k8s.io/v1beta2
kind: Workload
metadata: {name: grp, namespace: ml}
spec: {queueName: lq, podSets: [{name: main, count: 1, template: {spec: {containers: [{name: t, image: x}]}}}]}
status:
  conditions:
    - {type: Evicted, status: "True", reason: Preempted, message: m, lastTransitionTime: "2026-06-01T10:00:00Z"}
"""
POD = """\
apiVersion: v1
kind: Pod
metadata:
  name: grp-0
  namespace: ml
  labels: {trainguard.dev/tier: preemptible}
  annotations:
    kueue.x-k8s.io/pod-group-name: grp
    kueue.x-k8s.io/pod-group-total-count: "1"
    trainguard.dev/checkpoint-interval: 30m
    trainguard.dev/checkpoint-uri: s3://bucket/run
    trainguard.dev/checkpoint-owner: team
spec: {terminationGracePeriodSeconds: 120, containers: [{name: t, image: x}]}
"""
CONFIG = "kind: PlatformConfig\nrecovery:\n  tiers:\n    preemptible: {cooldown: 5m}\n"


def gate_ops(capsys: pytest.CaptureFixture[str], *args: str) -> list[dict[str, object]]:
    assert main(["check", *args, "-o", "json"]) == 0
    (pod,) = [r for r in json.loads(capsys.readouterr().out)["results"] if r["kind"] == "Pod"]
    return [op for op in pod["patch"] if "schedulingGates" in str(op["path"])]


@pytest.mark.parametrize(
    ("with_workload", "with_config", "gated"),
    [
        pytest.param(True, True, True, id="evicted-and-governed"),
        pytest.param(False, True, False, id="no-eviction-record-first-start"),
        pytest.param(True, False, False, id="embedded-defaults-govern-nothing"),
    ],
)
def test_the_cli_gates_as_the_webhook_does(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], with_workload: bool, with_config: bool, gated: bool
) -> None:
    (tmp_path / "pod.yaml").write_text(POD)
    (tmp_path / "workload.yaml").write_text(WORKLOAD)
    (tmp_path / "platform.yaml").write_text(CONFIG)
    args = [str(tmp_path / "pod.yaml")]
    args += [str(tmp_path / "workload.yaml")] if with_workload else []
    args += ["--config", str(tmp_path / "platform.yaml")] if with_config else []
    expected = [{"op": "add", "path": "/spec/schedulingGates", "value": [{"name": "trainguard.dev/resume"}]}]
    assert gate_ops(capsys, *args) == (expected if gated else [])
