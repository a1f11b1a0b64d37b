"""deploy/grafana and deploy/prometheus: every metric a panel or a rule reads is one the server exports.

Every expression is parsed with promql-parser (a PromQL parser on PyPI; a `promtool` built from the
Prometheus Go module did not finish within 15 minutes on the 2-core machine this was written on, so
the rules file is checked here for PromQL syntax and for the structure `promtool check rules`
requires). A real `trainguard serve` on 127.0.0.1 (certificates from `trainguard certs`) decides a few
AdmissionReviews and refuses a malformed one; its /metrics is scraped and every metric name in
every dashboard query and alert expression must be among the exported series. The panels of the
dashboard's "serve --audit" row read metrics that exist only with `serve --audit`; they are
required by the end-to-end test that runs the server that way. Likewise the resume gate's row: its
metrics carry values only where the resume controller runs (a PlatformConfig with recovery.tiers and
cluster access), and the end-to-end recovery test (tests/e2e/test_recovery.py) requires them there.
"""

from __future__ import annotations

import json
import re
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import promql_parser
import pytest
import yaml
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from webhook.metrics import Metrics

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "deploy" / "grafana" / "trainguard.json"
RULES = ROOT / "deploy" / "prometheus" / "rules.yaml"
AUDIT_ROW = "Audit (trainguard serve --audit)"
RESUME_ROW = "Resume gate (recovery.tiers in the PlatformConfig)"
# Rows whose metrics a server fills only in a mode of its own: checked by the test that runs it so.
MODE_ROWS = (AUDIT_ROW, RESUME_ROW)
# Grafana's variables, replaced by values of their kind before parsing.
GRAFANA_VARIABLES = {"$__rate_interval": "5m", "$namespace": ".*"}
START_TIMEOUT = 60.0

SUFFIXES = {
    "counter": ("_total", "_created"),
    "histogram": ("_bucket", "_count", "_sum", "_created"),
    "summary": ("", "_count", "_sum", "_created"),
    "gauge": ("",),
    "info": ("_info",),
}


def dashboard_queries() -> dict[str, list[str]]:
    """Panel title -> its queries; panels under a MODE_ROWS row get the row's title as a prefix."""
    dashboard = json.loads(DASHBOARD.read_text("utf-8"))
    queries: dict[str, list[str]] = {}
    row = ""
    for panel in dashboard["panels"]:
        if panel["type"] == "row":
            row = panel["title"]
            continue
        title = f"{row} / {panel['title']}" if row in MODE_ROWS else panel["title"]
        queries[title] = [target["expr"] for target in panel["targets"]]
    return queries


def rule_expressions() -> dict[str, str]:
    rules = yaml.safe_load(RULES.read_text("utf-8"))
    return {rule["alert"]: rule["expr"] for group in rules["groups"] for rule in group["rules"]}


def parse(expression: str) -> Any:
    for variable, value in GRAFANA_VARIABLES.items():
        expression = expression.replace(variable, value)
    return promql_parser.parse(expression)


def _selectors(node: Any) -> Iterator[str]:
    if isinstance(node, promql_parser.VectorSelector) and node.name:
        yield node.name
    for child in ("lhs", "rhs", "expr", "param", "vector_selector"):
        if getattr(node, child, None) is not None:
            yield from _selectors(getattr(node, child))
    for arg in getattr(node, "args", None) or ():
        yield from _selectors(arg)


def names(expressions: list[str]) -> set[str]:
    """The metric names the expressions select, read from their syntax trees."""
    found = {name for expression in expressions for name in _selectors(parse(expression))}
    assert found and all(n.startswith("trainguard_") for n in found), (expressions, found)
    return found


def row_metric_names(row: str) -> set[str]:
    return set().union(*(names(q) for title, q in dashboard_queries().items() if title.startswith(row)))


def audit_metric_names() -> set[str]:
    return row_metric_names(AUDIT_ROW)


def resume_metric_names() -> set[str]:
    return row_metric_names(RESUME_ROW)


# --- the server ------------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class Server:
    def __init__(self, certs: Path, log: Path, *extra: str) -> None:
        self.port = _free_port()
        self.log = log
        self.context = ssl.create_default_context(cafile=str(certs / "ca.crt"))
        argv = [
            sys.executable,
            "-m",
            "webhook",
            "serve",
            *("--tls-cert", str(certs / "tls.crt"), "--tls-key", str(certs / "tls.key")),
            *("--host", "127.0.0.1", "--port", str(self.port), "--shutdown-delay", "0"),
            *extra,
        ]
        with log.open("wb") as out:
            self.process = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT
            )

    def request(self, path: str, body: bytes | None = None) -> tuple[int, bytes]:
        headers = {"content-type": "application/json"} if body is not None else {}
        req = urllib.request.Request(f"https://127.0.0.1:{self.port}{path}", data=body, headers=headers)
        try:
            with urllib.request.urlopen(req, context=self.context, timeout=10) as response:
                return int(response.status), response.read()
        except urllib.error.HTTPError as error:
            return int(error.code), error.read()
        except OSError:
            return 0, b""

    def wait_ready(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            assert self.process.poll() is None, self.log.read_text(errors="replace")[-3000:]
            if self.request("/readyz")[0] == 200:
                return
            time.sleep(0.1)
        pytest.fail(f"trainguard serve not ready in {START_TIMEOUT:.0f} s:\n{self.log.read_text()[-3000:]}")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)

    def exported(self) -> set[str]:
        """Every series name /metrics declares: the samples' names and those their types imply."""
        status, body = self.request("/metrics")
        assert status == 200, body[:500]
        exported: set[str] = set()
        for family in text_string_to_metric_families(body.decode()):
            exported.update(family.name + suffix for suffix in SUFFIXES.get(family.type, ("",)))
            exported.update(sample.name for sample in family.samples)
        return exported


def make_certs(directory: Path) -> Path:
    subprocess.run(
        [sys.executable, "-m", "webhook", "certs", "--out", str(directory), "--host", "127.0.0.1"],
        check=True,
        capture_output=True,
        timeout=60,
    )
    return directory


def review(uid: str, obj: dict[str, Any]) -> bytes:
    return json.dumps(
        {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": uid,
                "kind": {"group": "", "version": "v1", "kind": obj["kind"]},
                "resource": {"group": "", "version": "v1", "resource": "pods"},
                "operation": "CREATE",
                "namespace": "research",
                "object": obj,
            },
        }
    ).encode()


def send_admissions(server: Server) -> None:
    """Allowed and denied reviews to each endpoint, and one malformed call (HTTP 400).

    Twenty rounds: the server times policies on 1 admission in 16, and a series appears on /metrics
    once it has a sample (the workers' metrics are merged from their files).
    """
    plain = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "web"},
        "spec": {"containers": [{"name": "c", "image": "nginx"}]},
    }
    denied = yaml.safe_load(
        (ROOT / "deploy" / "counterexamples" / "bare-torchrun-pod.yaml").read_text("utf-8")
    )
    for round_ in range(20):
        for i, obj in enumerate([plain, denied]):
            for endpoint in ("/mutate", "/validate"):
                status, body = server.request(endpoint, review(f"uid-{round_}-{i}", obj))
                assert status == 200, body[:500]
    verdict = json.loads(server.request("/validate", review("uid-d", denied))[1])
    assert verdict["response"]["allowed"] is False
    assert server.request("/validate", b"{not json")[0] == 400


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> Iterator[set[str]]:
    directory = tmp_path_factory.mktemp("serve")
    server = Server(make_certs(directory / "certs"), directory / "serve.log")
    try:
        server.wait_ready()
        send_admissions(server)
        # A series appears once it has a sample; a counter of rare events (engine errors, reload
        # failures) may have none yet, so the names the server's registry declares count too.
        declared = {
            family.name + suffix
            for family in Metrics(registry=CollectorRegistry()).registry.collect()
            for suffix in SUFFIXES.get(family.type, ("",))
        }
        yield server.exported() | declared
    finally:
        server.stop()


@pytest.mark.parametrize(
    ("title", "queries"),
    [
        pytest.param(t, q, id=t)
        for t, q in dashboard_queries().items()
        if not any(t.startswith(row) for row in MODE_ROWS)
    ],
)
def test_every_panel_reads_exported_metrics(exported: set[str], title: str, queries: list[str]) -> None:
    assert names(queries) <= exported, f"{title}: {sorted(names(queries) - exported)} not exported"


@pytest.mark.parametrize(
    ("alert", "expression"), [pytest.param(a, e, id=a) for a, e in rule_expressions().items()]
)
def test_every_rule_reads_exported_metrics(exported: set[str], alert: str, expression: str) -> None:
    assert names([expression]) <= exported, f"{alert}: {sorted(names([expression]) - exported)} not exported"


def test_every_rule_has_what_promtool_requires() -> None:
    rules = yaml.safe_load(RULES.read_text("utf-8"))
    assert [group["name"] for group in rules["groups"]] == ["trainguard"]
    for group in rules["groups"]:
        assert set(group) == {"name", "rules"}
        for rule in group["rules"]:
            assert set(rule) <= {"alert", "expr", "for", "labels", "annotations"}, rule["alert"]
            assert re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", rule["alert"])
            promql_parser.parse_duration(rule["for"])
            assert rule["labels"]["severity"] in ("critical", "warning")
            assert rule["annotations"]["summary"] and rule["annotations"]["description"]


def test_a_broken_expression_is_refused() -> None:
    """The parser is the check on the rules' syntax: it must refuse what promtool refuses."""
    with pytest.raises(ValueError, match="parenthesis"):
        parse("sum(rate(trainguard_ready[5m])")


def test_the_alerts_the_operators_need_are_there() -> None:
    assert sorted(rule_expressions()) == sorted(
        [
            "TrainguardNoReadyReplica",
            "TrainguardWebhookErrors",
            "TrainguardWebhookSlow",
            "TrainguardCertificateExpiringSoon",
            "TrainguardReloadFailing",
            "TrainguardResumeBoundReached",
        ]
    )
    # Half of the shipped webhook timeout (5 s): the margin the slow-webhook alert leaves.
    assert "> 2.5" in rule_expressions()["TrainguardWebhookSlow"]
    assert "14 * 86400" in rule_expressions()["TrainguardCertificateExpiringSoon"]


def test_audit_panels_are_only_in_the_audit_row() -> None:
    """The split the end-to-end audit test relies on: audit metrics appear under the audit row only."""
    audit = audit_metric_names()
    assert audit and all(name.startswith("trainguard_audit_") for name in audit)
    for title, queries in dashboard_queries().items():
        if not title.startswith(AUDIT_ROW):
            assert not names(queries) & audit, title


def test_resume_panels_are_only_in_the_resume_row() -> None:
    """The resume row shows gated workloads, releases, the bound and the time gated, and only it."""
    resume = resume_metric_names()
    assert resume == {
        "trainguard_resume_gated_workloads",
        "trainguard_resume_releases_total",
        "trainguard_resume_bound_after_release_total",
        "trainguard_resume_gated_seconds_bucket",
    }
    for title, queries in dashboard_queries().items():
        if not title.startswith(RESUME_ROW):
            assert not names(queries) & resume, title
