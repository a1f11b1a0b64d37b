"""The validating call reuses what the mutating call adapted, through the real kube-apiserver.

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
POD_GROUP = "kueue.x-k8s.io/pod-group-name"
POD_GROUP_TOTAL = "kueue.x-k8s.io/pod-group-total-count"


def reused(admission: Admission) -> dict[str, float]:
    return {
        dict(labels)["result"]: value
        for (name, labels), value in admission.server.metrics().items()
        if name == REUSED
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


@dataclass(frozen=True)
class Case:
    id: str
    manifest: dict[str, Any]
    denied_by: str | None  # the policy whose denial the API server returns; None: created

    def __str__(self) -> str:
        return self.id


CASES = [
    Case("allowed-once-patched:generated-name", torchrun_group_pod(TEAM_NS), None),
    Case(
        "denied-once-patched:pod-group-without-its-count",
        pod("tg-reuse-no-count", OTHER_NS, gpus=8, labels={POD_GROUP: "tg-reuse-2"}),
        "pod-group-count",
    ),
]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_the_validating_call_reuses_the_mutating_calls_adaptation(admission: Admission, case: Case) -> None:
    before = reused(admission)
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
    after = reused(admission)
    assert after.get("hit", 0) - before.get("hit", 0) == 1, (before, after, result.stderr)
    assert after.get("miss", 0) == before.get("miss", 0)

    # The same decision as the CLI's, which mutates and validates in one call and keeps nothing
    named = copy.deepcopy(case.manifest)
    named["metadata"].setdefault("name", "tg-reuse-worker-cli")
    record = admission.check_manifest(named, named["metadata"]["namespace"])
    assert record["patch"], "trainguard does not patch this object: nothing would be reused"
    if case.denied_by is None:
        assert result.returncode == 0, result.stderr
        stored = json.loads(result.stdout)
        assert stored["metadata"]["name"].startswith("tg-reuse-worker-")
        assert CLASS_LABEL in stored["metadata"]["labels"]  # trainguard's patch, applied
        assert record["allowed"], record
    else:
        assert result.returncode != 0 and DENIED in result.stderr, result.stderr
        message = denial(result.stderr)
        assert denied_by(message) == {case.denied_by} == {v["policy"] for v in record["violations"]}
        for part in cli_denial_parts(record):
            assert part in message
