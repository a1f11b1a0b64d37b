"""`serve --audit` whose Lease namespace does not exist: said once, shown by /readyz, no traceback.

Admission stays ready (a failed probe would take the webhook out of service for the audit's sake);
/readyz names what is not ready. Once the namespace is created, the Lease is taken and the note
goes away.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .controlplane import ControlPlane
from .waiting import wait_for
from .webhook_server import WebhookServer

pytestmark = pytest.mark.e2e

LEASE_NAMESPACE = "audit-lease-missing"


class AuditWithoutNamespace(WebhookServer):
    def argv(self) -> list[str]:
        # Two workers: one audits, and /readyz must say the same whichever answers.
        return [*super().argv(), "--audit", "--webhook-namespace", LEASE_NAMESPACE, "--workers", "2"]


def log_records(server: WebhookServer) -> list[dict[str, Any]]:
    records = []
    for line in server.log.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            records.append(json.loads(line))
        except ValueError:
            records.append({"msg": line})
    return records


def messages(server: WebhookServer, words: str) -> list[dict[str, Any]]:
    return [r for r in log_records(server) if words in str(r.get("msg", ""))]


@pytest.fixture(scope="module")
def server(
    control_plane: ControlPlane,
    webhook_certs: Path,
    platform_config: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[AuditWithoutNamespace]:
    control_plane.kubectl(
        "delete", "namespace", LEASE_NAMESPACE, "--ignore-not-found", "--wait=false", check=False
    )
    workdir = tmp_path_factory.mktemp("audit-namespace")
    server = AuditWithoutNamespace(
        certs=webhook_certs,
        config=platform_config,
        kubeconfig=control_plane.kubeconfig,
        log=workdir / "serve.log",
    )
    server.start()
    try:
        yield server
    finally:
        try:
            server.stop()
        finally:
            server.kill()
            control_plane.kubectl(
                "delete", "namespace", LEASE_NAMESPACE, "--ignore-not-found", "--wait=false", check=False
            )


def test_a_missing_lease_namespace_is_said_once_and_shown_by_readyz(
    control_plane: ControlPlane, server: AuditWithoutNamespace
) -> None:
    missing = f"namespace {LEASE_NAMESPACE} does not exist"
    wait_for("the missing namespace to be reported", lambda: messages(server, missing), log=server.log_tail)
    # Retries go on quietly (at debug level): wait for two of them, then count what was said.
    wait_for("two quiet retries", lambda: len(messages(server, "still failing")) >= 2, log=server.log_tail)
    said = [r for r in messages(server, missing) if r["level"] != "debug"]
    assert len(said) == 1, said
    assert said[0]["level"] == "error" and "traceback" not in said[0]
    assert not [r for r in log_records(server) if "traceback" in r or "Traceback" in str(r.get("msg"))]
    assert not messages(server, "Connection pool is full")

    for _ in range(12):  # a new connection each time: both workers answer some of them
        status, body = server.get("/readyz")
        assert status == 200, body  # admission itself is ready
        assert missing in json.loads(body)["not ready"]["reports"]

    control_plane.kubectl("create", "namespace", LEASE_NAMESPACE)
    wait_for(
        "the note to go away",
        lambda: "not ready" not in json.loads(server.get("/readyz")[1] or "{}"),
        log=server.log_tail,
    )
    assert all("not ready" not in json.loads(server.get("/readyz")[1]) for _ in range(12))
    assert messages(server, "reachable again")
    lease = control_plane.kubectl_json("get", "lease", "trainguard-audit", "-n", LEASE_NAMESPACE)
    assert lease["spec"]["holderIdentity"]
