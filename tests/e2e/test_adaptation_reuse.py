"""The validating call reuses what the mutating call adapted, and the decision made ahead for it,
through the real kube-apiserver.

The API server calls /mutate, applies trainguard's patch, then calls /validate with the patched
object, to which it has added a uid, a creationTimestamp, a generation, a status and (for
generateName) the name. trainguard's /metrics says whether that call found the adaptation its
mutating call left; the decisions must be the CLI's, which decides in one call and keeps nothing.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from typing import Any

import pytest

from .test_admission import DENIED, cli_denial_parts, denial, denied_by
from .webhook_server import CLASS_LABEL, OTHER_NS, TEAM_NS, Admission, pod

REUSED = "trainguard_adaptations_reused_total"
AHEAD = "trainguard_validations_decided_ahead_total"
POD_GROUP = "kueue.x-k8s.io/pod-group-name"
POD_GROUP_TOTAL = "kueue.x-k8s.io/pod-group-total-count"


def reused(admission: Admission, counter: str = REUSED) -> dict[str, float]:
    return {
        dict(labels)["result"]: value
        for (name, labels), value in admission.server.metrics().items()
        if name == counter
    }


def torchrun_group_pod(namespace: str) -> dict[str, Any]:
    """One of 2 bare pods of a Kueue pod group running a 2-node torchrun, named by the API server.

    Without trainguard's patch (the pod group's affinity to one rack) topology-slo would deny it:
    only the patched object, as the validating call receives it, is allowed.
    """
    manifest = pod("unused", namespace, gpus=8, labels={POD_GROUP: "tg-reuse"})
    del manifest["metadata"]["name"]
    manifest["metadata"]["generateName"] = "tg-reuse-worker-"
    manifest["metadata"]["annotations"] = {POD_GROUP_TOTAL: "2"}
    manifest["spec"]["containers"][0]["command"] = ["torchrun", "--nnodes=2", "--nproc-per-node=8", "t.py"]
    return manifest


def batch_job(namespace: str) -> dict[str, Any]:
    """A one-pod GPU Job: before the validating call the API server adds spec.selector and the pod
    template's controller-uid and job-name labels, which the adaptation reads: never reused."""
    template = pod("unused", namespace, gpus=1)
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "tg-reuse-job", "namespace": namespace},
        "spec": {"template": {"spec": {**template["spec"], "restartPolicy": "Never"}}},
    }


@dataclass(frozen=True)
class Case:
    id: str
    manifest: dict[str, Any]
    denied_by: str | None  # the policy whose denial the API server returns; None: created
    reused: bool = True  # whether the validating call finds the mutating call's adaptation

    def __str__(self) -> str:
        return self.id


CASES = [
    Case("allowed-once-patched:generated-name", torchrun_group_pod(TEAM_NS), None),
    Case(
        "denied-once-patched:pod-group-without-its-count",
        pod("tg-reuse-no-count", OTHER_NS, gpus=8, labels={POD_GROUP: "tg-reuse-2"}),
        "pod-group-count",
    ),
    Case("missed-changed-by-the-api-server:batch-job", batch_job(TEAM_NS), None, reused=False),
]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_the_validating_call_reuses_the_mutating_calls_adaptation(admission: Admission, case: Case) -> None:
    before, ahead_before = reused(admission), reused(admission, AHEAD)
    result = admission.kubectl(
        "create",
        "-o",
        "json",
        "-f",
        "-",
        input=json.dumps(case.manifest),
        transcript="adaptation-reuse",
        title=f"the validating call reuses the mutating call's adaptation: {case.id}",
    )
    after, ahead_after = reused(admission), reused(admission, AHEAD)
    counted = {result: after.get(result, 0) - before.get(result, 0) for result in ("hit", "miss")}
    assert counted == ({"hit": 1, "miss": 0} if case.reused else {"hit": 0, "miss": 1}), result.stderr
    # Decided ahead where the adaptation was found; not where it was missed. A decision made ahead
    # that ran out of its slice (a stalled machine) is made by its call instead: counted not-used.
    ahead = {r: ahead_after.get(r, 0) - ahead_before.get(r, 0) for r in ("used", "not-used")}
    assert ahead["used"] + ahead["not-used"] == 1, ahead
    if not case.reused:
        assert ahead == {"used": 0, "not-used": 1}

    # The same decision as the CLI's, which mutates and validates in one call and keeps nothing
    named = copy.deepcopy(case.manifest)
    named["metadata"].setdefault("name", "tg-reuse-worker-cli")
    record = admission.check_manifest(named, named["metadata"]["namespace"])
    assert record["patch"], "trainguard does not patch this object: nothing would be reused"
    if case.denied_by is None:
        assert result.returncode == 0, result.stderr
        stored = json.loads(result.stdout)
        submitted = case.manifest["metadata"]
        assert stored["metadata"]["name"].startswith(submitted.get("name") or submitted["generateName"])
        assert CLASS_LABEL in stored["metadata"]["labels"]  # trainguard's patch, applied
        assert record["allowed"], record
    else:
        assert result.returncode != 0 and DENIED in result.stderr, result.stderr
        message = denial(result.stderr)
        assert denied_by(message) == {case.denied_by} == {v["policy"] for v in record["violations"]}
        for part in cli_denial_parts(record):
            assert part in message
