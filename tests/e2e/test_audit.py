"""`trainguard audit` and `serve --audit` against a real kube-apiserver, with the webhook NOT registered.

Workloads are created with kubectl as they are (nothing mutates or refuses them), some compliant,
some not. Then:

* `trainguard audit` finds exactly the non-compliant ones, and the workloads `trainguard check`
  denies are the ones the audit fails;
* `--compare-policies` previews a change (what would newly pass);
* `serve --audit` (two replicas, one Lease) writes PolicyReports that `kubectl get policyreports`
  shows with the counts the CLI computed; fixing a workload and changing the policy set update
  them; killing the leader hands writing to the other replica.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import uuid
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import yaml

from .controlplane import ControlPlane, free_port
from .waiting import WAIT, wait_for
from .webhook_server import REPO_ROOT, WebhookServer, _environment, trainguard

EXAMPLES = REPO_ROOT / "deploy" / "examples"
COUNTER = REPO_ROOT / "deploy" / "counterexamples"
# name -> manifest file, and whether the stored object complies with the shipped policies
COMPLIANT = {
    "lora-finetune": EXAMPLES / "finetune-single-node-a.yaml",  # batch Job, single node
    "mpi-allreduce": EXAMPLES / "volcano-gang-b.yaml",  # Volcano Job with a gang
    "vllm-70b": EXAMPLES / "lws-inference.yaml",  # LeaderWorkerSet, inference
    "bert-elastic": EXAMPLES / "pytorchjob-elastic-c.yaml",  # elastic PyTorchJob with checkpoints
}
NON_COMPLIANT = {
    "no-gang": COUNTER / "pytorchjob-no-gang.yaml",  # PyTorchJob: gang-required, topology-slo
    "torchrun-node-0": COUNTER / "bare-torchrun-pod.yaml",  # bare Pod: gang-required, topology-slo
    "elastic-no-ckpt": COUNTER / "elastic-no-checkpoint.yaml",  # PyTorchJob: checkpoint-required
}


def manifest(path: Path, namespace: str) -> dict[str, Any]:
    obj: dict[str, Any] = yaml.safe_load(path.read_text(encoding="utf-8"))
    obj["metadata"]["namespace"] = namespace
    return obj


@pytest.fixture(scope="module")
def cluster(
    control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Any]]:
    """Two fresh namespaces: `good` holds compliant workloads only, `mixed` holds the rest."""
    suffix = uuid.uuid4().hex[:6]
    good, mixed, system = f"audit-good-{suffix}", f"audit-mixed-{suffix}", f"audit-system-{suffix}"
    for ns in (good, mixed, system):
        control_plane.kubectl("create", "namespace", ns)
    # Not admitted by trainguard: nothing decides these objects on the way in.
    webhooks = control_plane.kubectl("get", "validatingwebhookconfigurations", "-o", "name").stdout
    assert "trainguard" not in webhooks
    docs = [manifest(COMPLIANT["lora-finetune"], good), manifest(COMPLIANT["mpi-allreduce"], good)]
    docs += [manifest(COMPLIANT["vllm-70b"], mixed), manifest(COMPLIANT["bert-elastic"], mixed)]
    docs += [manifest(path, mixed) for path in NON_COMPLIANT.values()]
    # Pods a workload owns are audited through their owner, never on their own.
    member = manifest(NON_COMPLIANT["torchrun-node-0"], mixed)
    member["metadata"]["name"] = "no-gang-worker-0"
    member["metadata"]["labels"] = {"training.kubeflow.org/job-name": "no-gang"}
    docs.append(member)
    control_plane.kubectl("apply", "--server-side", "-f", "-", input=yaml.safe_dump_all(docs))
    workdir = tmp_path_factory.mktemp("audit")
    policies = workdir / "policies"
    shutil.copytree(REPO_ROOT / "policies", policies)
    config = workdir / "platform.yaml"
    config.write_text("apiVersion: trainguard.dev/v1alpha1\nkind: PlatformConfig\n", encoding="utf-8")
    yield {
        "good": good,
        "mixed": mixed,
        "system": system,
        "workdir": workdir,
        "policies": policies,
        "config": config,
        "docs": docs,
    }


def audit(plane: ControlPlane, setup: dict[str, Any], *args: str) -> subprocess.CompletedProcess[str]:
    """The CLI with the policies and config the servers of this module use."""
    options = ["--kubeconfig", str(plane.kubeconfig), "--config", str(setup["config"])]
    return trainguard("audit", *options, "--policies", str(setup["policies"]), *args, timeout=300)


def ours(report: dict[str, Any], setup: dict[str, Any]) -> list[dict[str, Any]]:
    return [r for r in report["results"] if r["namespace"] in (setup["good"], setup["mixed"])]


def test_audit_finds_exactly_the_non_compliant_workloads(control_plane, cluster) -> None:
    result = audit(control_plane, cluster, "-A", "-o", "json", "--page-size", "2")
    assert result.returncode == 1, result.stderr
    records = ours(json.loads(result.stdout), cluster)
    assert sorted(r["name"] for r in records) == sorted([*COMPLIANT, *NON_COMPLIANT])
    failing = {r["name"] for r in records if r["verdict"] == "fail"}
    assert failing == set(NON_COMPLIANT)
    by_name = {r["name"]: r for r in records}
    assert {x["policy"] for x in by_name["elastic-no-ckpt"]["results"] if x["result"] == "fail"} == {
        "checkpoint-required"
    }
    assert by_name["no-gang"]["kind"] == "PyTorchJob" and by_name["torchrun-node-0"]["kind"] == "Pod"
    # Mutations are reported, never written: the stored object is unchanged.
    assert by_name["no-gang"]["wouldPatch"]
    stored = control_plane.kubectl_json("get", "pytorchjob.kubeflow.org", "no-gang", "-n", cluster["mixed"])
    assert "trainguard.dev/class" not in (stored["metadata"].get("labels") or {})


def test_audit_of_a_compliant_namespace_exits_0_and_prints_a_table(control_plane, cluster) -> None:
    result = audit(control_plane, cluster, "-n", cluster["good"])
    assert result.returncode == 0, result.stderr + result.stdout
    assert "2 workloads in namespace " in result.stdout and "0 failing" in result.stdout
    assert result.stderr == ""  # no progress bar when stderr is not a terminal


def test_audit_and_check_deny_the_same_workloads(control_plane, cluster) -> None:
    files = []
    for i, doc in enumerate(cluster["docs"]):
        path = cluster["workdir"] / f"doc-{i}.json"
        path.write_text(json.dumps(doc), encoding="utf-8")
        files.append(str(path))
    check = trainguard("check", "-o", "json", "--config", str(cluster["config"]), *files)
    denied = {r["name"] for r in json.loads(check.stdout)["results"] if r["class"] and not r["allowed"]}
    result = audit(control_plane, cluster, "-A", "-o", "json")
    failing = {r["name"] for r in ours(json.loads(result.stdout), cluster) if r["verdict"] == "fail"}
    assert denied == failing == set(NON_COMPLIANT)


def test_compare_policies_previews_what_would_newly_pass(control_plane, cluster, tmp_path) -> None:
    proposed = tmp_path / "proposed"
    shutil.copytree(cluster["policies"], proposed)
    (proposed / "topology-slo.yaml").unlink()
    gang = proposed / "gang-required.yaml"
    gang.write_text(gang.read_text(encoding="utf-8").replace("mode: Enforce", "mode: Warn"), encoding="utf-8")
    result = audit(
        control_plane, cluster, "-n", cluster["mixed"], "--compare-policies", str(proposed), "-o", "json"
    )
    assert result.returncode == 0, result.stderr  # nothing would newly fail
    comparison = json.loads(result.stdout)["comparison"]
    assert comparison["newlyFailing"] == []
    assert sorted(c["name"] for c in comparison["newlyPassing"]) == ["no-gang", "torchrun-node-0"]
    table = audit(control_plane, cluster, "-n", cluster["mixed"], "--compare-policies", str(proposed))
    assert "2 would newly pass" in table.stdout and "0 would newly fail" in table.stdout


def test_compare_policies_exits_1_when_a_passing_workload_would_newly_fail(
    control_plane, cluster, tmp_path
) -> None:
    stricter = tmp_path / "stricter"
    shutil.copytree(cluster["policies"], stricter)
    (stricter / "require-team.yaml").write_text(
        """apiVersion: trainguard.dev/v1alpha1
kind: TrainingPolicy
metadata:
  name: require-team
spec:
  mode: Enforce
  match:
    kinds: [Job]
  validations:
    - expression: has(workload.labels.team)
      message: label team is required
""",
        encoding="utf-8",
    )
    result = audit(
        control_plane, cluster, "-n", cluster["good"], "--compare-policies", str(stricter), "-o", "json"
    )
    assert result.returncode == 1, result.stderr
    comparison = json.loads(result.stdout)["comparison"]
    # Both objects in `good` are Jobs (batch and Volcano), neither labelled `team`.
    assert sorted((c["name"], c["policies"][0]) for c in comparison["newlyFailing"]) == [
        ("lora-finetune", "require-team"),
        ("mpi-allreduce", "require-team"),
    ]


def test_audit_without_credentials_exits_2(cluster, tmp_path) -> None:
    result = trainguard("audit", "--kubeconfig", str(tmp_path / "missing"))
    assert result.returncode == 2
    assert "cannot load cluster credentials" in result.stderr and "Traceback" not in result.stderr


# --- serve --audit -----------------------------------------------------------------------------------


class AuditServer(WebhookServer):
    """`trainguard serve --audit` under a given replica name (POD_NAME, the name in the Lease)."""

    def __init__(self, *, replica: str, policies: Path, lease_namespace: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.replica = replica
        self.policies = policies
        self.lease_namespace = lease_namespace

    def argv(self) -> list[str]:
        return [
            *super().argv(),
            "--audit",
            "--policies",
            str(self.policies),
            "--webhook-namespace",
            self.lease_namespace,
            "--reload-interval",
            "0.5",
        ]

    def start(self, timeout: float = WAIT) -> AuditServer:
        self.port = free_port()
        env = {**_environment(), "POD_NAME": self.replica}
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(
                self.argv(),
                cwd=REPO_ROOT,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        wait_for(f"{self.replica} ready", lambda: self.get("/readyz")[0] == 200, timeout, self.log_tail)
        return self


@pytest.fixture(scope="module")
def replicas(control_plane, cluster, webhook_certs) -> Iterator[list[AuditServer]]:
    servers = [
        AuditServer(
            replica=name,
            policies=cluster["policies"],
            lease_namespace=cluster["system"],
            certs=webhook_certs,
            config=cluster["config"],
            kubeconfig=control_plane.kubeconfig,
            log=cluster["workdir"] / f"{name}.log",
        )
        for name in ("replica-a", "replica-b")
    ]
    try:
        for server in servers:
            server.start()
        yield servers
    finally:
        for server in servers:
            server.kill()


def holder(plane: ControlPlane, setup: dict[str, Any]) -> str:
    lease = plane.kubectl(
        "get", "lease", "trainguard-audit", "-n", setup["system"], "-o", "json", check=False
    )
    if lease.returncode != 0:
        return ""
    return str(json.loads(lease.stdout)["spec"].get("holderIdentity") or "")


def summary(plane: ControlPlane, namespace: str) -> dict[str, int] | None:
    found = plane.kubectl("get", "policyreports", "-n", namespace, "-o", "json").stdout
    reports = json.loads(found)["items"]
    if not reports:
        return None
    total: dict[str, int] = {}
    for report in reports:
        for key, n in report["summary"].items():
            total[key] = total.get(key, 0) + n
    return total


def expected_summary(plane: ControlPlane, setup: dict[str, Any], namespace: str) -> dict[str, int]:
    """What the report must say: the CLI's validation results for the same namespace."""
    records = json.loads(audit(plane, setup, "-n", namespace, "-o", "json").stdout)["results"]
    counts = dict.fromkeys(("pass", "fail", "warn", "error", "skip"), 0)
    for record in records:
        for r in record["results"]:
            if r["category"] == "validation":
                counts[r["result"]] += 1
    return counts


def logs(servers: list[AuditServer]) -> Callable[[], str]:
    return lambda: "\n".join(f"--- {s.replica}\n{s.log_tail()}" for s in servers)


def _shows(control_plane: Any, namespace: str, want: Any) -> bool:
    return bool(summary(control_plane, namespace) == want)


def test_serve_audit_writes_reports_kubectl_shows_with_the_cli_counts(
    control_plane, cluster, replicas
) -> None:
    lead = wait_for("a leader", lambda: holder(control_plane, cluster), log=logs(replicas))
    assert lead.split("_")[0] in ("replica-a", "replica-b")
    for ns in (cluster["good"], cluster["mixed"]):
        want = expected_summary(control_plane, cluster, ns)
        wait_for(f"the report of {ns}", partial(_shows, control_plane, ns, want), log=logs(replicas))
    mixed = expected_summary(control_plane, cluster, cluster["mixed"])
    assert mixed["fail"] == 5  # no-gang 2, torchrun-node-0 2, elastic-no-ckpt 1
    table = control_plane.kubectl("get", "policyreports", "-A").stdout
    (row,) = [line.split() for line in table.splitlines() if line.startswith(cluster["mixed"])]
    # NAMESPACE NAME KIND NAME PASS FAIL WARN ERROR SKIP AGE: the scope columns are empty here
    assert row[1] == "trainguard-audit" and row[2:6] == [str(mixed["pass"]), "5", "0", "0"]
    shown = control_plane.kubectl(
        "get",
        "policyreport",
        "trainguard-audit",
        "-n",
        cluster["mixed"],
        "-o",
        "json",
        "--show-managed-fields",
    )
    report = json.loads(shown.stdout)
    managers = {m["manager"] for m in report["metadata"]["managedFields"]}
    assert managers == {"trainguard"} and {m["operation"] for m in report["metadata"]["managedFields"]} == {
        "Apply"
    }
    uids = {r["resources"][0]["uid"] for r in report["results"]}
    stored = control_plane.kubectl_json("get", "pytorchjob.kubeflow.org", "no-gang", "-n", cluster["mixed"])
    assert stored["metadata"]["uid"] in uids


def test_fixing_a_workload_updates_its_report(control_plane, cluster, replicas) -> None:
    fixed = manifest(NON_COMPLIANT["no-gang"], cluster["mixed"])
    fixed["metadata"].setdefault("labels", {})["kueue.x-k8s.io/queue-name"] = "team-queue"
    fixed["metadata"].setdefault("annotations", {})["trainguard.dev/topology-slo"] = "best-effort"
    control_plane.kubectl("apply", "--server-side", "-f", "-", input=json.dumps(fixed))
    want = expected_summary(control_plane, cluster, cluster["mixed"])
    assert want["fail"] == 3
    wait_for(
        "the fixed workload's report",
        lambda: summary(control_plane, cluster["mixed"]) == want,
        log=logs(replicas),
    )


def test_changing_the_policy_set_updates_the_reports(control_plane, cluster, replicas) -> None:
    checkpoint = cluster["policies"] / "checkpoint-required.yaml"
    checkpoint.write_text(
        checkpoint.read_text(encoding="utf-8").replace("mode: Enforce", "mode: Warn"), encoding="utf-8"
    )
    want = expected_summary(control_plane, cluster, cluster["mixed"])
    assert want["warn"] >= 1 and want["fail"] == 2
    wait_for(
        "reports after the policy change",
        lambda: summary(control_plane, cluster["mixed"]) == want,
        log=logs(replicas),
    )


def test_killing_the_leader_hands_writing_to_the_other_replica(control_plane, cluster, replicas) -> None:
    lead = holder(control_plane, cluster).split("_")[0]
    leader = next(s for s in replicas if s.replica == lead)
    standby = next(s for s in replicas if s.replica != lead)
    leader.kill()  # SIGKILL: no release; the standby waits for the Lease to expire
    wait_for(
        "the standby to take the Lease",
        lambda: holder(control_plane, cluster).split("_")[0] == standby.replica,
        timeout=60,
        log=logs(replicas),
    )
    # The new leader writes: a deleted workload disappears from the report.
    control_plane.kubectl("delete", "pod", "torchrun-node-0", "-n", cluster["mixed"], "--wait=false")
    want = expected_summary(control_plane, cluster, cluster["mixed"])
    assert want["fail"] == 0
    wait_for(
        "the new leader's report",
        lambda: summary(control_plane, cluster["mixed"]) == want,
        log=logs(replicas),
    )
    names = {
        r["resources"][0]["name"]
        for r in control_plane.kubectl_json(
            "get", "policyreport", "trainguard-audit", "-n", cluster["mixed"]
        )["results"]
    }
    assert "torchrun-node-0" not in names
