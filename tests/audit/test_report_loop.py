"""The `serve --audit` loop, one pass at a time (run_once), writing into an in-memory report store.

The API-server side (server-side apply, the Lease, watches) is covered by tests/e2e/test_audit.py;
here: what gets written, rewritten and deleted as workloads, policies and leadership change.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from webhook.audit.report_loop import Reporter
from webhook.audit.report_objects import ReportApi
from webhook.config import load_config
from webhook.engine import Engine, build_engine, default_policies_dir, load_policy_set

REPO = Path(__file__).parents[2]


class MemoryStore:
    """Report objects by (plural, namespace, name), with a log of writes; `fail` makes writes raise."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str | None, str], dict[str, Any]] = {}
        self.log: list[tuple[str, str | None, str]] = []
        self.fail = False

    def apply(self, api: ReportApi, report: dict[str, Any]) -> None:
        if self.fail:
            raise ConnectionError("API server unreachable")
        meta = report["metadata"]
        plural = api.plural if meta.get("namespace") else api.cluster_plural
        self.objects[(plural, meta.get("namespace"), meta["name"])] = copy.deepcopy(report)
        self.log.append(("apply", meta.get("namespace"), meta["name"]))

    def delete(self, api: ReportApi, namespace: str | None, name: str) -> None:
        if self.fail:
            raise ConnectionError("API server unreachable")
        self.objects.pop((api.plural if namespace else api.cluster_plural, namespace, name), None)
        self.log.append(("delete", namespace, name))

    def existing(self, api: ReportApi) -> set[tuple[str | None, str]]:
        return {
            (ns, name) for (plural, ns, name) in self.objects if plural in (api.plural, api.cluster_plural)
        }

    def summary(self, namespace: str) -> dict[str, int]:
        return self.objects[("policyreports", namespace, "trainguard-audit")]["summary"]


def manifest(path: str, namespace: str, uid: str, version: str = "1") -> dict[str, Any]:
    obj = yaml.safe_load((REPO / path).read_text(encoding="utf-8"))
    obj["metadata"].update(namespace=namespace, uid=uid, resourceVersion=version)
    return obj


COMPLIANT = "deploy/examples/volcano-gang-b.yaml"
NO_GANG = "deploy/counterexamples/pytorchjob-no-gang.yaml"


@pytest.fixture
def engine() -> Engine:
    return build_engine(load_policy_set([default_policies_dir()]), load_config())


def reporter(objects: dict[str, dict[str, Any]], engine_ref: list[Engine], store: MemoryStore) -> Reporter:
    r = Reporter(
        objects=lambda: list(objects.values()), engine=lambda: engine_ref[0], store=store, writes_per_second=0
    )
    r.start_leading()
    return r


def test_first_pass_writes_one_report_per_namespace(engine) -> None:
    objects = {"a": manifest(COMPLIANT, "ns-a", "a"), "b": manifest(NO_GANG, "ns-b", "b")}
    store = MemoryStore()
    reporter(objects, [engine], store).run_once()
    assert sorted(str(k[1]) for k in store.objects) == ["ns-a", "ns-b"]
    assert store.summary("ns-a")["fail"] == 0
    assert store.summary("ns-b")["fail"] == 2  # gang-required, topology-slo


def test_unchanged_objects_are_not_rewritten_and_a_fix_rewrites_only_its_namespace(engine) -> None:
    objects = {"a": manifest(COMPLIANT, "ns-a", "a"), "b": manifest(NO_GANG, "ns-b", "b")}
    store = MemoryStore()
    r = reporter(objects, [engine], store)
    r.run_once()
    store.log.clear()
    r.run_once()
    assert store.log == []
    # A status-only change: a new resourceVersion, the same findings: nothing to write.
    objects["b"]["metadata"]["resourceVersion"] = "2"
    r.run_once()
    assert store.log == []
    fixed = manifest(NO_GANG, "ns-b", "b", "3")
    fixed["metadata"].setdefault("labels", {})["kueue.x-k8s.io/queue-name"] = "team"
    objects["b"] = fixed
    r.run_once()
    assert store.log == [("apply", "ns-b", "trainguard-audit")]
    assert store.summary("ns-b")["fail"] == 1  # topology-slo still fails


def test_deleted_workloads_disappear_and_an_empty_namespace_loses_its_report(engine) -> None:
    objects = {"a": manifest(COMPLIANT, "ns-a", "a"), "b": manifest(NO_GANG, "ns-b", "b")}
    store = MemoryStore()
    r = reporter(objects, [engine], store)
    r.run_once()
    del objects["b"]
    r.run_once()
    assert sorted(str(k[1]) for k in store.objects) == ["ns-a"]


def test_a_new_policy_set_redecides_everything(engine, tmp_path) -> None:
    objects = {"b": manifest(NO_GANG, "ns-b", "b")}
    store = MemoryStore()
    current = [engine]
    r = reporter(objects, current, store)
    r.run_once()
    assert store.summary("ns-b")["fail"] == 2
    text = (REPO / "policies" / "gang-required.yaml").read_text(encoding="utf-8")
    (tmp_path / "gang-required.yaml").write_text(
        text.replace("mode: Enforce", "mode: Warn"), encoding="utf-8"
    )
    current[0] = build_engine(load_policy_set([tmp_path]), load_config())
    r.run_once()
    assert store.summary("ns-b") == {"pass": 0, "fail": 0, "warn": 1, "error": 0, "skip": 0}


def test_a_new_leader_deletes_reports_nothing_backs_any_more(engine) -> None:
    store = MemoryStore()
    stale = {"apiVersion": "wgpolicyk8s.io/v1alpha2", "kind": "PolicyReport"}
    store.objects[("policyreports", "gone", "trainguard-audit")] = {
        **stale,
        "metadata": {"namespace": "gone"},
    }
    store.objects[("policyreports", "ns-a", "trainguard-audit-2")] = {
        **stale,
        "metadata": {"namespace": "ns-a"},
    }
    objects = {"a": manifest(COMPLIANT, "ns-a", "a")}
    reporter(objects, [engine], store).run_once()
    assert sorted(k[1:] for k in store.objects) == [("ns-a", "trainguard-audit")]


def test_a_failed_write_is_retried_at_the_next_pass(engine) -> None:
    objects = {"b": manifest(NO_GANG, "ns-b", "b")}
    store = MemoryStore()
    store.fail = True
    r = reporter(objects, [engine], store)
    r.run_once()
    assert store.objects == {} and not r.complete.is_set()
    store.fail = False
    r.run_once()
    assert store.summary("ns-b")["fail"] == 2 and r.complete.is_set()


def test_a_standby_writes_nothing(engine) -> None:
    objects = {"b": manifest(NO_GANG, "ns-b", "b")}
    store = MemoryStore()
    r = reporter(objects, [engine], store)
    r.stop_leading()
    r.start()
    try:
        r.wake()
        assert not r.complete.wait(1.5)
    finally:
        r.stop()
    assert store.objects == {}


def test_both_formats(engine) -> None:
    objects = {"b": manifest(NO_GANG, "ns-b", "b")}
    store = MemoryStore()
    r = Reporter(
        objects=lambda: list(objects.values()),
        engine=lambda: engine,
        store=store,
        formats=("wgpolicy", "openreports"),
        writes_per_second=0,
    )
    r.start_leading()
    r.run_once()
    assert sorted(k[0] for k in store.objects) == ["policyreports", "reports"]
    assert store.objects[("reports", "ns-b", "trainguard-audit")]["apiVersion"] == "openreports.io/v1alpha1"
