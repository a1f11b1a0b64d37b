"""The engine shows policies only the eviction records under the admitted workload's own names."""

from __future__ import annotations

from pathlib import Path

import pytest

from webhook.config import load_config
from webhook.context import evictions
from webhook.engine import AdmissionInput, ClusterFacts, build_engine, load_policy_set

POLICY = """\
apiVersion: trainguard.dev/v1alpha1
kind: TrainingPolicy
metadata: {name: show-evictions}
spec:
  mode: Warn
  match: {memberPods: Include}
  validations:
    - expression: "false"
      messageExpression: >-
        "sees " + cluster.evictions.map(k, k).join(",")
"""


def kueue_workload(name: str, namespace: str, owner: str | None = None) -> dict[str, object]:
    meta: dict[str, object] = {"name": name, "namespace": namespace}
    if owner:
        meta["ownerReferences"] = [{"kind": "PyTorchJob", "name": owner}]
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": meta,
        "status": {"requeueState": {"count": 1}},
    }


RECORDS = evictions(
    [
        kueue_workload("grp", "ml"),
        kueue_workload("pytorchjob-train-1", "ml", owner="train"),
        kueue_workload("grp", "other"),
        kueue_workload("unrelated", "ml"),
    ]
)


@pytest.mark.parametrize(
    ("obj", "seen"),
    [
        pytest.param(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": "grp-0",
                    "namespace": "ml",
                    "annotations": {
                        "kueue.x-k8s.io/pod-group-name": "grp",
                        "kueue.x-k8s.io/pod-group-total-count": "1",
                    },
                },
                "spec": {"containers": [{"name": "t", "image": "x"}]},
            },
            "sees ml/Workload/grp",
            id="pod-group-in-its-own-namespace-only",
        ),
        pytest.param(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": "train-worker-0",
                    "namespace": "ml",
                    "labels": {"training.kubeflow.org/job-name": "train"},
                },
                "spec": {"containers": [{"name": "t", "image": "x"}]},
            },
            "sees ml/PyTorchJob/train",
            id="member-pod-through-its-owner",
        ),
        pytest.param(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "fresh-0", "namespace": "ml"},
                "spec": {"containers": [{"name": "t", "image": "x"}]},
            },
            "sees ",
            id="a-first-start-sees-none",
        ),
    ],
)
@pytest.mark.parametrize("backend", ["cel-expr-python", "cel-python"])
def test_policies_see_only_the_workloads_own_records(
    tmp_path: Path, obj: dict[str, object], seen: str, backend: str
) -> None:
    (tmp_path / "p.yaml").write_text(POLICY)
    engine = build_engine(
        load_policy_set([tmp_path], backend), load_config(), ClusterFacts(evictions=RECORDS)
    )
    decision = engine.decide(AdmissionInput(object=obj))
    (finding,) = [f for f in decision.warnings if f.policy == "show-evictions"]
    assert finding.message == seen
