"""trainguard admitting real requests from a real kube-apiserver, driven by the real kubectl.

No AdmissionReview is built here: kubectl sends the manifest, the API server decodes, defaults and
validates it against the CRD schema, calls trainguard's mutating webhook, applies its JSON Patch,
re-runs its built-in mutating plugins, calls the validating webhook, and stores the object (or not).
The tests read the outcome back with ``kubectl get -o json``.

The last tests stop and restart the server: keep them last in this module.
"""

from __future__ import annotations

import base64
import json
import re
import time
from dataclasses import dataclass
from typing import Any

import jsonpatch
import jsonpointer
import pytest
import yaml

from .webhook_server import (
    CHECKPOINT_SPEC,
    CLASS_LABEL,
    CORPUS_NS,
    MUTATING_WEBHOOK,
    OTHER_NS,
    POOL_KEY,
    PRIORITY_CLASSES,
    QUEUE_LABEL,
    RACK_KEY,
    REPO_ROOT,
    SYSTEM_NS,
    TEAM_NS,
    TEAM_QUEUE,
    TIER_LABEL,
    VALIDATING_WEBHOOK,
    Admission,
    CorpusDocument,
    CorpusRun,
    corpus_documents,
    leaderworkerset,
    pod,
    pytorchjob,
    run_corpus,
    served_kinds,
)

DENIED = f'admission webhook "{VALIDATING_WEBHOOK}" denied the request: '
INVALID = "The request is invalid: "  # what kubectl prints for a 422 denial
POLICY_NAMES = frozenset(
    yaml.safe_load(path.read_text(encoding="utf-8"))["metadata"]["name"]
    for path in sorted((REPO_ROOT / "policies").glob("*.yaml"))
) | {"trainguard"}


# --- helpers -----------------------------------------------------------------------------------------


def denial(stderr: str) -> str:
    """What trainguard said when the validating webhook denied the request ('' when it did not)."""
    for line in stderr.splitlines():
        _, found, message = line.partition(DENIED)
        if found:
            return message
    return ""


def denied_by(message: str) -> set[str]:
    """The policies named in a denial: `POLICY: message; POLICY: message (field F)`."""
    return {part.partition(": ")[0] for part in re.split(r"; (?=[a-z-]+: )", message)} & POLICY_NAMES


def trainguard_warnings(stderr: str) -> list[str]:
    """kubectl's `Warning: POLICY: message` lines whose POLICY is one of ours."""
    found = []
    for line in stderr.splitlines():
        if line.startswith("Warning: "):
            text = line.removeprefix("Warning: ")
            if text.partition(": ")[0] in POLICY_NAMES:
                found.append(text)
    return found


def templates(job: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {role: spec["template"] for role, spec in job["spec"]["pytorchReplicaSpecs"].items()}


def contained(expected: Any, actual: Any) -> bool:
    """`expected` is a part of `actual`: mappings key by key, lists element by element (any order:
    the API server adds its own defaults, such as DefaultTolerationSeconds' tolerations)."""
    if isinstance(expected, dict):
        return isinstance(actual, dict) and all(
            k in actual and contained(v, actual[k]) for k, v in expected.items()
        )
    if isinstance(expected, list):
        return isinstance(actual, list) and all(any(contained(e, a) for a in actual) for e in expected)
    return bool(expected == actual)


_ABSENT = object()


def patch_not_kept(
    submitted: dict[str, Any], patch: list[dict[str, Any]], stored: dict[str, Any]
) -> list[str]:
    """The operations of the CLI's `patch` whose result is not in the object the API server returned.

    The CLI patches the manifest as written; the webhook patched the object after CRD defaulting, so
    the operations may differ (add vs replace, list indexes): the comparison is on the values they
    produce, at the path they name (a list as a whole when the path ends in an index or `-`).
    """
    expected = jsonpatch.apply_patch(submitted, patch)
    problems = []
    for op in patch:
        path = op["path"]
        parent, _, last = path.rpartition("/")
        if op["op"] != "remove" and (last == "-" or last.isdigit()):
            path = parent
        got = jsonpointer.resolve_pointer(stored, path, _ABSENT)
        if op["op"] == "remove":
            if got is not _ABSENT:
                problems.append(f"remove {op['path']}: still stored as {got!r}")
            continue
        want = jsonpointer.resolve_pointer(expected, path)
        if got is _ABSENT:
            problems.append(f"{op['op']} {op['path']}: CLI makes it {want!r}, not stored")
        elif not contained(want, got):
            problems.append(f"{op['op']} {op['path']}: CLI makes it {want!r}, stored {got!r}")
    return problems


def cli_denial_parts(record: dict[str, Any]) -> list[str]:
    return [f"{v['policy']}: {v['message']}" for v in record["violations"]]


def defaulted(message: str) -> str:
    """A message as the webhook words it after the API server's defaulting: the unset
    terminationGracePeriodSeconds of a built-in Pod template (a batch Job's), which the CLI reports
    as "unset (30)", reaches the webhook as 30. (CRDs' pod templates are not defaulted.)"""
    return re.sub(
        r"terminationGracePeriodSeconds is unset \((\d+)\)", r"terminationGracePeriodSeconds is \1", message
    )


def cli_warnings(record: dict[str, Any]) -> list[str]:
    return [f"{w['policy']}: {w['message']}" for w in record["warnings"]]


# --- the registration itself -------------------------------------------------------------------------


def test_rendered_webhook_configurations_are_stored_as_rendered(admission: Admission) -> None:
    validating = admission.plane.kubectl_json("get", "validatingwebhookconfiguration", "trainguard")
    mutating = admission.plane.kubectl_json("get", "mutatingwebhookconfiguration", "trainguard")
    ca = (admission.certs / "ca.crt").read_bytes()
    for configuration, name, path, failure_policy in (
        (validating, VALIDATING_WEBHOOK, "/validate", "Fail"),
        (mutating, MUTATING_WEBHOOK, "/mutate", "Ignore"),
    ):
        (hook,) = configuration["webhooks"]
        assert hook["name"] == name
        # --url is the server's base URL: the renderer appends each webhook's path once.
        assert hook["clientConfig"]["url"] == admission.server.url + path
        assert base64.b64decode(hook["clientConfig"]["caBundle"]) == ca
        assert hook["failurePolicy"] == failure_policy
        assert [c["name"] for c in hook["matchConditions"]] == [
            "not-trainguard-itself",
            "not-node-level",
            "not-plain-cpu-infrastructure",
        ]
        (excluded,) = hook["namespaceSelector"]["matchExpressions"]
        assert excluded["operator"] == "NotIn"
        assert {"kube-system", SYSTEM_NS} <= set(excluded["values"])
    assert mutating["webhooks"][0]["reinvocationPolicy"] == "IfNeeded"


# --- 1, 3, 4: refused by `kubectl apply` -------------------------------------------------------------


@dataclass(frozen=True)
class Refusal:
    id: str
    manifest: dict[str, Any]
    policy: str
    mentions: tuple[str, ...]  # what the message must name: the fields to set
    # How kubectl introduces the denial, which follows its reason: 403 Forbidden, 422 Invalid.
    kubectl_says: str = "Error from server (Forbidden)"

    def __str__(self) -> str:
        return self.id


def torchrun_pod(name: str, namespace: str, **kwargs: Any) -> dict[str, Any]:
    """One of 4 bare pods that run a 4-node torchrun: only a pod group gangs them."""
    manifest = pod(name, namespace, gpus=8, **kwargs)
    manifest["spec"]["containers"][0]["command"] = [
        "torchrun",
        "--nnodes=4",
        "--nproc-per-node=8",
        "train.py",
    ]
    return manifest


REFUSALS = [
    Refusal(
        "gang-required:bare-torchrun-pods-with-only-a-queue-label",
        torchrun_pod(
            "tg-queued-node-0",
            OTHER_NS,
            labels={QUEUE_LABEL: TEAM_QUEUE},
            annotations={"trainguard.dev/topology-slo": "best-effort"},
        ),
        "gang-required",
        (
            "makes each pod its own one-pod Kueue workload",
            'annotation kueue.x-k8s.io/pod-group-total-count: "4"',
        ),
    ),
    # Readable but wrong: a denial (422 Invalid) naming the fix, not a failed webhook call.
    Refusal(
        "pod-group-count:kueue-pod-group-without-its-count",
        pod("tg-group-no-count-0", OTHER_NS, gpus=8, labels={"kueue.x-k8s.io/pod-group-name": "tg-run"}),
        "pod-group-count",
        (
            "metadata.labels['kueue.x-k8s.io/pod-group-name'] is \"tg-run\" but annotation "
            "kueue.x-k8s.io/pod-group-total-count is missing: Kueue refuses a pod group without its size",
        ),
        kubectl_says=INVALID,
    ),
    Refusal(
        "checkpoint-required:relative-file-checkpoint-uri",
        pytorchjob(
            "tg-relative-file-uri",
            TEAM_NS,
            workers=2,
            gpus=4,
            elastic={"minReplicas": 1, "maxReplicas": 4, "maxRestarts": 3},
            annotations={**CHECKPOINT_SPEC, "trainguard.dev/checkpoint-uri": "file://checkpoints/run-7"},
            grace_period=120,
        ),
        "checkpoint-required",
        (
            'metadata.annotations[trainguard.dev/checkpoint-uri] is "file://checkpoints/run-7": a file:// URI '
            "must be an absolute path",
            "write file:///checkpoints/run-7",
        ),
        kubectl_says=INVALID,
    ),
    Refusal(
        "gang-required:multi-node-pytorchjob-without-queue",
        pytorchjob("tg-no-gang", OTHER_NS),
        "gang-required",
        (
            "class B training PyTorchJob with 4 pods",
            QUEUE_LABEL,
            "spec.runPolicy.schedulingPolicy.minAvailable: 4",
        ),
    ),
    Refusal(
        "checkpoint-required:elastic-pytorchjob-without-checkpoint-spec",
        pytorchjob(
            "tg-elastic-no-ckpt",
            TEAM_NS,
            workers=2,
            gpus=4,
            elastic={"minReplicas": 1, "maxReplicas": 4, "maxRestarts": 3},
        ),
        "checkpoint-required",
        (*CHECKPOINT_SPEC, "terminationGracePeriodSeconds"),
    ),
    Refusal(
        "pool-separation:training-pinned-to-inference-pool",
        pytorchjob("tg-train-on-inference", TEAM_NS, node_selector={POOL_KEY: "inference"}),
        "pool-separation",
        ("training PyTorchJob targets the inference pool", "nodeSelector", f"{POOL_KEY}=training"),
    ),
    Refusal(
        "pool-separation:inference-lws-pinned-to-training-pool",
        leaderworkerset("tg-serve-on-training", OTHER_NS, pool="training"),
        "pool-separation",
        ("inference LeaderWorkerSet targets the training pool", "nodeSelector", f"{POOL_KEY}=inference"),
    ),
]


@pytest.mark.parametrize("case", REFUSALS, ids=str)
def test_kubectl_apply_is_refused(admission: Admission, case: Refusal) -> None:
    result = admission.apply(case.manifest, transcript=f"refused-{case.policy}", title=f"refused: {case.id}")
    assert result.returncode != 0, result.stdout
    message = denial(result.stderr)
    assert message, f"not denied by {VALIDATING_WEBHOOK}:\n{result.stderr}"
    assert case.kubectl_says in result.stderr, result.stderr
    assert denied_by(message) == {case.policy}, message
    for mention in case.mentions:
        assert mention in message
    assert admission.get(case.manifest) is None


# --- 2: every default mutation, as stored ------------------------------------------------------------


@pytest.fixture(scope="module")
def team_job(admission: Admission) -> tuple[dict[str, Any], dict[str, Any]]:
    """The refused multi-node job, applied in the queue-mapped namespace: (manifest, stored object)."""
    manifest = pytorchjob("tg-team-job", TEAM_NS)
    result = admission.apply(manifest, transcript="mutated-job", title="admitted in e2e-team, then read back")
    assert result.returncode == 0, result.stderr
    stored = admission.get(manifest)
    assert stored is not None
    admission.kubectl(
        "get", "pytorchjob.kubeflow.org", "tg-team-job", "-n", TEAM_NS, "-o", "yaml", transcript="mutated-job"
    )
    return manifest, stored


def _per_role(job: dict[str, Any], read: Any) -> dict[str, Any]:
    return {role: read(template) for role, template in templates(job).items()}


def _pool_terms(template: dict[str, Any]) -> Any:
    required = template["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    return required["nodeSelectorTerms"]


def _pool_tolerations(template: dict[str, Any]) -> Any:
    return [t for t in template["spec"].get("tolerations", []) if t.get("key") == POOL_KEY]


def _rack_affinity(template: dict[str, Any]) -> Any:
    """Topology keys of the preferred pod affinity terms that select this template's own pods."""
    labels = template["metadata"]["labels"]
    terms = template["spec"]["affinity"]["podAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    return [
        t["podAffinityTerm"]["topologyKey"]
        for t in terms
        if contained(t["podAffinityTerm"]["labelSelector"]["matchLabels"], labels)
    ]


BOTH = ("Master", "Worker")
MUTATIONS = {
    "class-label": (lambda job: job["metadata"]["labels"].get(CLASS_LABEL), "B"),
    "queue-label": (lambda job: job["metadata"]["labels"].get(QUEUE_LABEL), TEAM_QUEUE),
    "suspended-for-kueue": (lambda job: job["spec"]["runPolicy"].get("suspend"), True),
    "template-class-label": (
        lambda job: _per_role(job, lambda t: t["metadata"]["labels"].get(CLASS_LABEL)),
        dict.fromkeys(BOTH, "B"),
    ),
    "priority-class-from-tier": (
        lambda job: _per_role(job, lambda t: t["spec"].get("priorityClassName")),
        dict.fromkeys(BOTH, "training-high"),
    ),
    "training-pool-node-affinity": (
        lambda job: _per_role(job, _pool_terms),
        dict.fromkeys(
            BOTH, [{"matchExpressions": [{"key": POOL_KEY, "operator": "In", "values": ["training"]}]}]
        ),
    ),
    "training-pool-toleration": (
        lambda job: _per_role(job, _pool_tolerations),
        dict.fromkeys(
            BOTH, [{"key": POOL_KEY, "operator": "Equal", "value": "training", "effect": "NoSchedule"}]
        ),
    ),
    "preferred-rack-pod-affinity": (
        lambda job: _per_role(job, _rack_affinity),
        dict.fromkeys(BOTH, [RACK_KEY]),
    ),
}


@pytest.mark.parametrize("mutation", MUTATIONS)
def test_stored_job_carries_the_default_mutation(
    team_job: tuple[dict[str, Any], dict[str, Any]], mutation: str
) -> None:
    read, expected = MUTATIONS[mutation]
    assert read(team_job[1]) == expected


def test_stored_job_carries_the_cli_patch(
    admission: Admission, team_job: tuple[dict[str, Any], dict[str, Any]]
) -> None:
    manifest, stored = team_job
    record = admission.check_manifest(manifest, TEAM_NS)
    assert record["allowed"] is True
    assert record["patch"], "the CLI mutates nothing"
    assert patch_not_kept(manifest, record["patch"], stored) == []


# --- 3, 6: elastic jobs: the checkpoint contract, and a Warn-mode policy -----------------------------

ELASTIC = {"minReplicas": 1, "maxReplicas": 4}


@pytest.mark.parametrize(
    "restarts, warned",
    [
        pytest.param({"maxRestarts": 3}, False, id="bounded-restarts"),
        pytest.param({}, True, id="no-restart-bound"),
    ],
)
def test_elastic_job_with_checkpoint_spec_is_created_with_checkpoint_env(
    admission: Admission, restarts: dict[str, int], warned: bool
) -> None:
    name = "tg-elastic-warned" if warned else "tg-elastic"
    manifest = pytorchjob(
        name,
        TEAM_NS,
        workers=2,
        gpus=4,
        elastic={**ELASTIC, **restarts},
        annotations=CHECKPOINT_SPEC,
        grace_period=120,
    )
    result = admission.apply(
        manifest,
        transcript="warned-recovery-policy" if warned else "elastic-with-checkpoint",
        title=f"elastic PyTorchJob with a checkpoint spec, {'no' if warned else 'a'} restart bound",
    )
    assert result.returncode == 0, result.stderr
    warnings = trainguard_warnings(result.stderr)
    if warned:
        assert warnings == [
            "recovery-policy: preemptible class C training PyTorchJob declares no restart bound: "
            "set spec.elasticPolicy.maxRestarts (at most 10)"
        ]
    else:
        assert warnings == []
    stored = admission.get(manifest)
    assert stored is not None
    assert stored["metadata"]["labels"][CLASS_LABEL] == "C"
    (template,) = templates(stored).values()
    (container,) = template["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in container.get("env", [])}
    assert env["TRAINGUARD_CHECKPOINT_URI"] == CHECKPOINT_SPEC["trainguard.dev/checkpoint-uri"]
    assert env["TRAINGUARD_CHECKPOINT_INTERVAL_SECONDS"] == "1800"
    # Preemptible (class C by default): the spot priority class.
    assert template["spec"]["priorityClassName"] == "training-spot"


# --- 5: a bare GPU Pod and the Priority admission plugin ---------------------------------------------


def _priority_class(admission: Admission, name: str) -> dict[str, Any]:
    return admission.plane.kubectl_json("get", "priorityclass", name)


def test_bare_gpu_pod_gets_a_priority_class_and_the_matching_priority(admission: Admission) -> None:
    manifest = pod("tg-gpu-pod", TEAM_NS, gpus=1)
    result = admission.apply(manifest, transcript="bare-gpu-pod", title="a bare GPU Pod (guaranteed tier)")
    assert result.returncode == 0, result.stderr
    stored = admission.get(manifest)
    assert stored is not None
    admission.kubectl("get", "pod", "tg-gpu-pod", "-n", TEAM_NS, "-o", "yaml", transcript="bare-gpu-pod")
    high = _priority_class(admission, "training-high")
    spec = stored["spec"]
    assert spec["priorityClassName"] == "training-high"
    assert spec["priority"] == high["value"] == PRIORITY_CLASSES["training-high"]["value"]
    # The Priority plugin ran again after the webhook's patch and resolved the same class.
    assert spec["preemptionPolicy"] == high.get("preemptionPolicy", "PreemptLowerPriority")
    assert stored["metadata"]["labels"][CLASS_LABEL] == "A"
    assert {"key": POOL_KEY, "operator": "Equal", "value": "training", "effect": "NoSchedule"} in spec[
        "tolerations"
    ]


def test_bare_preemptible_pod_gets_a_non_preempting_class_consistently(admission: Admission) -> None:
    manifest = pod(
        "tg-spot-pod",
        TEAM_NS,
        gpus=1,
        labels={TIER_LABEL: "preemptible"},
        annotations=CHECKPOINT_SPEC,
        grace_period=120,
    )
    result = admission.apply(
        manifest,
        transcript="bare-preemptible-pod",
        title="a bare GPU Pod, preemptible tier (class preemptionPolicy: Never)",
    )
    assert result.returncode == 0, result.stderr
    stored = admission.get(manifest)
    assert stored is not None
    assert stored["spec"]["priorityClassName"] == "training-spot"
    assert stored["spec"]["priority"] == PRIORITY_CLASSES["training-spot"]["value"]
    assert stored["spec"]["preemptionPolicy"] == "Never"


# --- 7: server-side dry run --------------------------------------------------------------------------


def test_server_dry_run_is_refused_like_the_real_apply(admission: Admission) -> None:
    manifest = pytorchjob("tg-dry-run-refused", OTHER_NS)
    dry = admission.apply(
        manifest, "--dry-run=server", transcript="dry-run", title="dry run of a refused job"
    )
    real = admission.apply(manifest, transcript="dry-run", title="the same job, really applied")
    assert dry.returncode != 0 and real.returncode != 0
    assert denial(dry.stderr).startswith("gang-required: ")
    assert denial(dry.stderr) == denial(real.stderr)
    assert admission.get(manifest) is None


def test_server_dry_run_is_mutated_like_the_real_apply_and_persists_nothing(admission: Admission) -> None:
    manifest = pytorchjob("tg-dry-run", TEAM_NS)
    dry = admission.apply(
        manifest, "--dry-run=server", "-o", "json", transcript="dry-run", title="dry run of an admitted job"
    )
    assert dry.returncode == 0, dry.stderr
    answered = json.loads(dry.stdout)
    assert answered["metadata"]["labels"][QUEUE_LABEL] == TEAM_QUEUE
    assert answered["metadata"]["labels"][CLASS_LABEL] == "B"
    assert admission.get(manifest) is None
    logged = [
        json.loads(line)
        for line in admission.server.log.read_text(encoding="utf-8").splitlines()
        if '"object_name":"tg-dry-run"' in line
    ]
    assert {entry["endpoint"] for entry in logged} == {"mutate", "validate"}
    assert all(entry.get("dry_run") is True for entry in logged)

    real = admission.apply(manifest, transcript="dry-run", title="the same job, really applied")
    assert real.returncode == 0, real.stderr
    stored = admission.get(manifest)
    assert stored is not None
    assert stored["spec"] == answered["spec"]
    assert stored["metadata"]["labels"] == answered["metadata"]["labels"]


# --- 8: excluded namespaces --------------------------------------------------------------------------


@pytest.mark.parametrize("namespace", ["kube-system", SYSTEM_NS])
def test_excluded_namespaces_are_never_sent_to_the_webhook(admission: Admission, namespace: str) -> None:
    manifest = pytorchjob("tg-excluded", namespace)  # refused anywhere else (gang-required)
    before = admission.server.admission_calls()
    result = admission.apply(
        manifest, transcript="excluded-namespaces", title=f"a would-be-refused job in {namespace}"
    )
    assert result.returncode == 0, result.stderr
    stored = admission.get(manifest)
    assert stored is not None
    assert CLASS_LABEL not in stored["metadata"].get("labels", {})
    assert admission.server.admission_calls() == before
    # The counter does move for a namespace that is not excluded.
    probe = admission.apply(pytorchjob("tg-excluded", OTHER_NS), "--dry-run=server")
    assert "gang-required" in denial(probe.stderr)
    assert admission.server.admission_calls() >= before + 2  # mutate, then validate


# --- 9: UPDATE of a running job -----------------------------------------------------------------------


def test_queue_of_a_running_job_cannot_change(admission: Admission) -> None:
    manifest = pytorchjob("tg-queue-move", TEAM_NS)
    assert admission.apply(manifest).returncode == 0
    target = ("pytorchjob.kubeflow.org", "tg-queue-move", "-n", TEAM_NS)

    def suspend(value: bool) -> None:
        patch = json.dumps({"spec": {"runPolicy": {"suspend": value}}})
        title = "the job is suspended again" if value else "Kueue admits the job: it runs"
        result = admission.kubectl(
            "patch", *target, "--type=merge", "-p", patch, transcript="queue-immutable", title=title
        )
        assert result.returncode == 0, result.stderr

    def relabel(queue: str) -> Any:
        return admission.kubectl(
            "label",
            *target,
            f"{QUEUE_LABEL}={queue}",
            "--overwrite",
            transcript="queue-immutable",
            title=f"move the job to the queue {queue}",
        )

    suspend(False)  # what Kueue does when it admits the job: now it runs
    moved = relabel("other-queue")
    assert moved.returncode != 0
    assert denial(moved.stderr) == (
        f'queue-immutable: label {QUEUE_LABEL} cannot change while the job runs (it was "{TEAM_QUEUE}", '
        'now "other-queue"): suspend the job (spec.runPolicy.suspend: true) first '
        f"(field metadata.labels[{QUEUE_LABEL}])"
    )
    assert admission.get(manifest)["metadata"]["labels"][QUEUE_LABEL] == TEAM_QUEUE  # type: ignore[index]

    suspend(True)
    assert relabel("other-queue").returncode == 0
    assert admission.get(manifest)["metadata"]["labels"][QUEUE_LABEL] == "other-queue"  # type: ignore[index]


# --- 11: the CLI and the API server agree on the whole corpus ---------------------------------------

CORPUS = corpus_documents()
PARITY_NAMESPACES = (TEAM_NS, OTHER_NS)

# Served by no API of the suite's cluster: kubectl cannot map them to a resource ("no matches for kind").
NOT_SERVED: dict[tuple[str, str], str] = {
    ("scheduling.k8s.io/v1alpha2", "Workload"): "workload-aware scheduling, an alpha API newer than 1.34",
    ("scheduling.k8s.io/v1alpha2", "PodGroup"): "workload-aware scheduling, an alpha API newer than 1.34",
    ("kubeflow.org/v1", "MPIJob"): "the suite installs the mpi-operator's kubeflow.org/v2beta1 MPIJob",
    ("scheduling.run.ai/v2", "Queue"): "the KAI scheduler's Queue: no CRD in the shared folder",
    (
        "kubescheduler.config.k8s.io/v1",
        "KubeSchedulerConfiguration",
    ): "a scheduler config file, not an API object",
}

# Documents the API server rejects before trainguard is asked: CRD schema validation and kubectl's
# strict field validation (these upstream samples are wrong for the CRD versions installed).
SCHEMA_REJECTED: dict[str, str] = {
    "jobset/host-maintenance-event-model.yaml#1": "spec.failurePolicy.rules[0].name: Required value",
    "kubeflow-trainer-v2/torch_distributed-v2.0.0.yaml#1": 'strict decoding error: unknown field "spec.mlPolicy.torch.numProcPerNode"',
    "volcano/elastic-job.yaml#1": 'strict decoding error: unknown field "spec.tasks[0].template.spec.priorityClass"',
}


@dataclass(frozen=True)
class ParityCase:
    namespace: str
    document: CorpusDocument

    def __str__(self) -> str:
        return f"{self.namespace}:{self.document.key}"


def _parity_cases() -> list[ParityCase]:
    """Every document in the first namespace; in the others, only those a namespace can change (not
    cluster-scoped kinds, not kinds no API serves; what is namespaced is only known from discovery,
    so a few cluster-scoped kinds known from the corpus are named here)."""
    cluster_scoped = {
        "ClusterQueue",
        "ClusterTrainingRuntime",
        "ResourceFlavor",
        "Topology",
        "WorkloadPriorityClass",
        "Queue",
        "HyperNode",
    }
    first, *others = PARITY_NAMESPACES
    cases = [ParityCase(first, document) for document in CORPUS]
    for namespace in others:
        cases += [
            ParityCase(namespace, d)
            for d in CORPUS
            if d.gvk[1] not in cluster_scoped and d.gvk not in NOT_SERVED and d.key not in SCHEMA_REJECTED
        ]
    return cases


PARITY_CASES = _parity_cases()


@pytest.fixture(scope="module")
def served(admission: Admission) -> dict[tuple[str, str], bool]:
    return served_kinds(admission.plane)


@pytest.fixture(scope="module")
def corpus_runs(admission: Admission, served: dict[tuple[str, str], bool]) -> dict[str, CorpusRun]:
    return {ns: run_corpus(admission, CORPUS, ns, served) for ns in PARITY_NAMESPACES}


@dataclass(frozen=True)
class Outcome:
    """What the API server did with one document."""

    verdict: str  # created | denied | not-served | rejected
    message: str
    warnings: list[str]
    answered: dict[str, Any] | None


def outcome(result: Any) -> Outcome:
    warnings = trainguard_warnings(result.stderr)
    if result.returncode == 0:
        return Outcome("created", "", warnings, json.loads(result.stdout))
    message = denial(result.stderr)
    if message:
        return Outcome("denied", message, warnings, None)
    text = result.stderr.strip()
    if "no matches for kind" in text:
        return Outcome("not-served", text, warnings, None)
    return Outcome("rejected", text, warnings, None)


def test_corpus_is_present() -> None:
    assert CORPUS, "no corpus documents found: set TRAINGUARD_SHARED_DIR to the shared folder"


@pytest.mark.parametrize("case", PARITY_CASES, ids=str)
def test_cli_and_api_server_agree_on_the_corpus(
    admission: Admission,
    corpus_runs: dict[str, CorpusRun],
    served: dict[tuple[str, str], bool],
    case: ParityCase,
) -> None:
    run = corpus_runs[case.namespace]
    document = case.document
    record = run.records[document.key]
    path = run.files[document.key]
    result = admission.kubectl(
        "create", "--dry-run=server", "-o", "json", "-n", case.namespace, "-f", str(path)
    )
    seen = outcome(result)
    if record["allowed"]:
        cli = f"admitted ({len(record['patch'])} patch operations, {len(record['warnings'])} warnings)"
    else:
        cli = f"denied by {', '.join(sorted({v['policy'] for v in record['violations']}))}"
    admission.transcripts.record_line(
        "corpus-parity", f"{case}  {document.gvk[1]}: CLI {cli}; API server: {seen.verdict}"
    )

    if document.gvk in NOT_SERVED:
        assert seen.verdict == "not-served", result.stderr
        return
    assert document.gvk in served, f"{document.gvk} is not served: {result.stderr}"
    if document.key in SCHEMA_REJECTED:
        assert seen.verdict == "rejected", f"expected a schema rejection, got {seen}"
        assert SCHEMA_REJECTED[document.key] in seen.message
        assert DENIED not in seen.message
        return

    expected_warnings = cli_warnings(record)
    assert seen.warnings == expected_warnings
    if record["allowed"]:
        assert seen.verdict == "created", f"the CLI admits it; the API server:\n{result.stderr}"
        assert seen.answered is not None
        submitted = json.loads(path.read_text(encoding="utf-8"))
        assert patch_not_kept(submitted, record["patch"], seen.answered) == []
    else:
        assert seen.verdict == "denied", (
            f"the CLI denies it ({cli_denial_parts(record)}); the API server:\n{result.stderr}"
        )
        for part in cli_denial_parts(record):
            assert part in seen.message or defaulted(part) in seen.message
        assert {v["policy"] for v in record["violations"]} == denied_by(seen.message)


# Really created (not a dry run): one corpus object of each workload API, in a queue-mapped namespace,
# read back with `kubectl get` and compared with the CLI's patch.
STORED_SAMPLE = (
    "kubeflow-training-operator-v1/pytorch_job_mnist_nccl.yaml#1",
    "kubeflow-mpi-operator/tensorflow-benchmarks.yaml#1",
    "kubeflow-trainer-v2/03-kueue-integration.yaml#1",
    "jobset/mnist.yaml#1",
    "kuberay/ray-job.pytorch-distributed-training.yaml#1",
    "kueue/ray-cluster-sample.yaml#1",
    "lws/vllm-gpu-lws.yaml#1",
    "kueue/sample-job.yaml#1",
    "kueue/kueue-pod.yaml#1",
    "volcano/mindspore-gpu.yaml#1",
    "volcano/deployment.yaml#1",
)


@pytest.fixture(scope="module")
def stored_sample_run(admission: Admission, served: dict[tuple[str, str], bool]) -> CorpusRun:
    documents = [d for d in CORPUS if d.key in STORED_SAMPLE]
    assert sorted(d.key for d in documents) == sorted(STORED_SAMPLE), "a sample document left the corpus"
    return run_corpus(admission, documents, CORPUS_NS, served)


@pytest.mark.parametrize("key", STORED_SAMPLE)
def test_really_created_corpus_object_carries_the_cli_patch(
    admission: Admission, stored_sample_run: CorpusRun, key: str
) -> None:
    record = stored_sample_run.records[key]
    assert record["allowed"], f"the sample must be admitted by the CLI: {cli_denial_parts(record)}"
    path = stored_sample_run.files[key]
    created = admission.kubectl("create", "-o", "json", "-n", CORPUS_NS, "-f", str(path))
    assert created.returncode == 0, created.stderr
    assert trainguard_warnings(created.stderr) == cli_warnings(record)
    answered = json.loads(created.stdout)
    stored = admission.get(answered)  # by the stored name (some samples use generateName)
    assert stored is not None
    assert stored["metadata"]["uid"] == answered["metadata"]["uid"]
    submitted = json.loads(path.read_text(encoding="utf-8"))
    assert patch_not_kept(submitted, record["patch"], stored) == []


def test_a_training_runtime_reaches_the_webhook_as_it_reaches_the_cli(admission: Admission) -> None:
    """A TrainJob's gang lives in its runtime: the webhook reads runtimes from its cluster cache, the
    CLI from the files beside the TrainJob. Both must decide the TrainJob alike once it exists."""
    (runtime_doc, trainjob_doc) = [
        d for d in CORPUS if d.relpath == "kubeflow-trainer-v2/04-volcano-integration.yaml"
    ]
    runtime = json.loads(json.dumps(runtime_doc.data))
    trainjob = json.loads(json.dumps(trainjob_doc.data))
    name = "torch-distributed-volcano-e2e"  # not the corpus name: the dry-run comparison must not see it
    runtime["metadata"]["name"] = trainjob["spec"]["runtimeRef"]["name"] = name
    trainjob["metadata"].update(name="tg-volcano-trainjob", namespace=OTHER_NS)

    def dry_run() -> Any:
        return admission.kubectl(
            "create", "--dry-run=server", "-o", "json", "-f", "-", input=json.dumps(trainjob)
        )

    before = dry_run()
    assert before.returncode == 0, f"a runtime it cannot see is no reason to deny:\n{before.stderr}"
    unknown = (
        f"trainjob-runtime: spec.runtimeRef names ClusterTrainingRuntime/{name}, which is not known here"
    )
    assert any(w.startswith(unknown) for w in trainguard_warnings(before.stderr)), before.stderr
    created = admission.kubectl("create", "-f", "-", input=json.dumps(runtime), transcript="training-runtime")
    assert created.returncode == 0, created.stderr
    after = _wait_for_runtime(dry_run)
    assert after.returncode == 0 and "trainjob-runtime" not in after.stderr, (
        f"the webhook never saw the runtime:\n{after.stderr}"
    )

    files = []
    for number, document in enumerate((runtime, trainjob)):
        files.append(admission.workdir / f"runtime-{number}.json")
        files[-1].write_text(json.dumps(document), encoding="utf-8")
    records = admission.check(files, OTHER_NS)["results"]
    assert records[1]["kind"] == "TrainJob" and records[1]["allowed"], records[1]
    result = admission.kubectl("create", "-f", "-", input=json.dumps(trainjob), transcript="training-runtime")
    assert result.returncode == 0, result.stderr
    stored = admission.get(trainjob)
    assert stored is not None
    assert patch_not_kept(trainjob, records[1]["patch"], stored) == []


def _wait_for_runtime(dry_run: Any) -> Any:
    """Dry-run until the webhook's cache knows the TrainJob's runtime (its watch delivers it within
    moments); returns the last answer."""
    deadline = time.monotonic() + 20
    while "trainjob-runtime" in (result := dry_run()).stderr and time.monotonic() < deadline:
        time.sleep(0.2)
    return result


def _gpu_runtime(name: str) -> dict[str, Any]:
    """A ClusterTrainingRuntime with a coscheduling gang and no topology: trainguard must add one."""
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "ClusterTrainingRuntime",
        "metadata": {"name": name},
        "spec": {
            "mlPolicy": {"numNodes": 2, "torch": {}},
            "podGroupPolicy": {"coscheduling": {"scheduleTimeoutSeconds": 120}},
            "template": {
                "spec": {
                    "replicatedJobs": [
                        {
                            "name": "node",
                            "template": {
                                "metadata": {
                                    "labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}
                                },
                                "spec": {
                                    "template": {
                                        "spec": {
                                            "containers": [
                                                {
                                                    "name": "node",
                                                    "image": "pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime",
                                                    "command": ["torchrun", "train.py"],
                                                    "resources": {"limits": {"nvidia.com/gpu": 8}},
                                                }
                                            ]
                                        }
                                    }
                                },
                            },
                        }
                    ]
                }
            },
        },
    }


def _trainjob(name: str, runtime: str, patches: list[dict[str, Any]]) -> dict[str, Any]:
    spec: dict[str, Any] = {"runtimeRef": {"name": runtime}, "trainer": {"numNodes": 4}}
    if patches:
        spec["runtimePatches"] = patches
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": name, "namespace": OTHER_NS},
        "spec": spec,
    }


def _pod_patch(manager: str, metadata: dict[str, Any], spec: dict[str, Any]) -> dict[str, Any]:
    pod: dict[str, Any] = {"metadata": metadata, "spec": spec} if spec else {"metadata": metadata}
    return {
        "manager": manager,
        "trainingRuntimeSpec": {
            "template": {
                "spec": {"replicatedJobs": [{"name": "node", "template": {"spec": {"template": pod}}}]}
            }
        },
    }


def test_trainjob_topology_is_a_runtime_patch_the_api_server_keeps(admission: Admission) -> None:
    """A TrainJob has no pod templates: trainguard writes its topology as a runtimePatches entry of
    its own manager, beside the entries of other managers, and reads theirs as constraints. The CLI
    and the API server (with the upstream TrainJob CRD's schema) must agree on all of it."""
    runtime = _gpu_runtime("tg-torch-no-topology-e2e")
    placement = _pod_patch(
        "platform.example.com/placement",
        {"labels": {"team": "vision"}},
        {"nodeSelector": {POOL_KEY: "training"}},
    )
    tas = _pod_patch(
        "platform.example.com/topology",
        {"annotations": {"kueue.x-k8s.io/podset-preferred-topology": RACK_KEY}},
        {},
    )
    plain = _trainjob("tg-trainjob-patched", runtime["metadata"]["name"], [placement])
    constrained = _trainjob("tg-trainjob-constrained", runtime["metadata"]["name"], [tas])
    created = admission.kubectl("create", "-f", "-", input=json.dumps(runtime), transcript="trainjob-patches")
    assert created.returncode == 0, created.stderr
    after = _wait_for_runtime(
        lambda: admission.kubectl(
            "create", "--dry-run=server", "-o", "json", "-f", "-", input=json.dumps(plain)
        )
    )
    assert "trainjob-runtime" not in after.stderr, f"the webhook never saw the runtime:\n{after.stderr}"

    files = []
    for number, document in enumerate((runtime, plain, constrained)):
        files.append(admission.workdir / f"trainjob-patches-{number}.json")
        files[-1].write_text(json.dumps(document), encoding="utf-8")
    records = {r["name"]: r for r in admission.check(files, OTHER_NS)["results"]}
    for trainjob in (plain, constrained):
        record = records[trainjob["metadata"]["name"]]
        assert record["allowed"], cli_denial_parts(record)
        result = admission.kubectl("create", "-o", "json", "-f", "-", input=json.dumps(trainjob))
        assert result.returncode == 0, f"the API server refused the patched TrainJob:\n{result.stderr}"
        assert trainguard_warnings(result.stderr) == cli_warnings(record)
        stored = admission.get(trainjob)
        assert stored is not None
        assert patch_not_kept(trainjob, record["patch"], stored) == []
        managers = [p["manager"] for p in stored["spec"]["runtimePatches"]]
        if trainjob is plain:
            assert managers == ["platform.example.com/placement", "trainguard.dev/webhook"]
            (ours,) = [
                p for p in stored["spec"]["runtimePatches"] if p["manager"] == "trainguard.dev/webhook"
            ]
            (job,) = ours["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
            pod = job["template"]["spec"]["template"]
            assert job["name"] == "node"
            assert pod["metadata"]["labels"] == {"trainguard.dev/workload": "tg-trainjob-patched"}
            term = pod["spec"]["affinity"]["podAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"][
                0
            ]
            assert term["podAffinityTerm"]["topologyKey"] == RACK_KEY
        else:
            assert managers == ["platform.example.com/topology"], "its own patch already constrains it"


def test_a_policy_exception_object_exempts_until_deleted(admission: Admission) -> None:
    """The same PolicyException as a file, applied as a cluster object: the webhook's cache honours
    it (the job is created, the exemption recorded), and deleting it restores enforcement."""
    job = pytorchjob("tg-exempted", OTHER_NS)
    exception = {
        "apiVersion": "trainguard.dev/v1alpha1",
        "kind": "PolicyException",
        "metadata": {"name": "tg-legacy", "namespace": OTHER_NS},
        "spec": {
            "policies": ["gang-required"],
            "match": {"workloads": [{"namespace": OTHER_NS, "name": "tg-exempted"}]},
            "justification": "legacy job, moves to Kueue next sprint",
            "owner": "e2e",
            "expiresAt": "2999-01-01T00:00:00Z",
        },
    }

    def dry_run() -> Any:
        return admission.kubectl("create", "--dry-run=server", "-o", "json", "-f", "-", input=json.dumps(job))

    assert "gang-required" in denial(dry_run().stderr)
    created = admission.kubectl(
        "apply", "-f", "-", input=json.dumps(exception), transcript="policy-exception"
    )
    assert created.returncode == 0, created.stderr
    try:
        deadline = time.monotonic() + 20
        while (exempted := dry_run()).returncode != 0 and time.monotonic() < deadline:
            time.sleep(0.2)  # the webhook's watch delivers the exception within moments
        assert exempted.returncode == 0, f"the webhook never honoured the exception:\n{exempted.stderr}"
    finally:
        admission.kubectl("delete", "-f", "-", input=json.dumps(exception), transcript="policy-exception")
    deadline = time.monotonic() + 20
    while (restored := dry_run()).returncode == 0 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert "gang-required" in denial(restored.stderr), "deleting the exception restores enforcement"


# --- 10: the webhook is down: failurePolicy decides; then it is back -------------------------------


def test_failure_policy_decides_while_the_webhook_is_down_and_enforcement_resumes(
    admission: Admission,
) -> None:
    server = admission.server
    started = time.monotonic()
    assert server.stop() == 0, f"trainguard serve did not drain cleanly:\n{server.log_tail()}"
    assert time.monotonic() - started < 10, "SIGTERM took too long to stop the server"

    try:
        # Validating webhook, failurePolicy Fail: refused, with the webhook named and the reason.
        job = pytorchjob("tg-webhook-down", OTHER_NS)
        refused = admission.apply(job, transcript="webhook-down", title="the webhook is down: a GPU job")
        assert refused.returncode != 0
        assert f'failed calling webhook "{VALIDATING_WEBHOOK}"' in refused.stderr
        assert "connection refused" in refused.stderr
        assert admission.get(job) is None

        # A plain CPU Pod only goes to the mutating webhook (the validating one skips it by its
        # matchConditions): failurePolicy Ignore admits it, unmutated.
        plain = pod("tg-plain-while-down", TEAM_NS)
        admitted = admission.apply(
            plain, transcript="webhook-down", title="the webhook is down: a plain CPU Pod"
        )
        assert admitted.returncode == 0, admitted.stderr
        stored = admission.get(plain)
        assert stored is not None
        assert not {CLASS_LABEL, QUEUE_LABEL} & set(stored["metadata"].get("labels", {}))
    finally:
        server.start()

    refused = admission.apply(job, transcript="webhook-down", title="the webhook is back: the same GPU job")
    assert denial(refused.stderr).startswith("gang-required: "), refused.stderr
    plain = pod("tg-plain-while-up", TEAM_NS)
    admitted = admission.apply(plain, transcript="webhook-down", title="the webhook is back: a plain CPU Pod")
    assert admitted.returncode == 0, admitted.stderr
    stored = admission.get(plain)
    assert stored is not None
    assert stored["metadata"]["labels"][CLASS_LABEL] == "A"
