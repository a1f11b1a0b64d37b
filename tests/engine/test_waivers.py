"""PolicyExceptions: strict loading, matching by name and selector, expiry, and what the front doors show."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from webhook.cli import main
from webhook.config import load_config
from webhook.engine.compile import load_policy_set
from webhook.engine.load import default_policies_dir
from webhook.engine.pipeline import AdmissionInput, Engine
from webhook.engine.waivers import PolicyException, load_exceptions, parse_exception
from webhook.errors import PolicyError
from webhook.workloads import AdaptContext, Workload, build_workload

REPO = Path(__file__).resolve().parents[2]
CRD = REPO / "deploy/crds/trainguard.dev_policyexceptions.yaml"
NOW = datetime(2026, 6, 1, tzinfo=UTC)
EXPIRES = "2026-12-31T00:00:00Z"


def exception_doc(**spec: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "policies": ["gang-required"],
        "match": {"workloads": [{"name": "legacy-job", "kind": "PyTorchJob"}]},
        "justification": "migrating to Kueue in Q3",
        "owner": "team-a@example.com",
        "expiresAt": EXPIRES,
    }
    base.update(spec)
    return {
        "apiVersion": "trainguard.dev/v1alpha1",
        "kind": "PolicyException",
        "metadata": {"name": "legacy", "namespace": "team-a"},
        "spec": base,
    }


def exception(**spec: Any) -> PolicyException:
    return parse_exception(exception_doc(**spec), "exceptions.yaml")


def pytorchjob(name: str = "legacy-job", namespace: str = "team-a", labels: dict[str, str] | None = None):
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": name, "namespace": namespace, "labels": labels or {}},
        "spec": {
            "pytorchReplicaSpecs": {
                "Worker": {"replicas": 2, "template": {"spec": {"containers": [{"name": "t", "image": "x"}]}}}
            }
        },
    }


def workload(obj: dict[str, Any]) -> Workload:
    w = build_workload(obj, AdaptContext(config=load_config(None)))
    assert w is not None
    return w


@pytest.fixture(scope="module")
def policies():
    # Compiling the shipped set is the slow part: once per module.
    return load_policy_set([default_policies_dir()])


# --------------------------------------------------------------------------------------------
# Matching and expiry


@pytest.mark.parametrize(
    ("now", "exempted"),
    [
        pytest.param(NOW, True, id="active-before-expiry"),
        pytest.param(datetime(2026, 12, 30, 23, 59, 59, tzinfo=UTC), True, id="active-one-second-before"),
        pytest.param(datetime(2026, 12, 31, tzinfo=UTC), False, id="expired-at-expires-at"),
        pytest.param(datetime(2027, 1, 1, tzinfo=UTC), False, id="expired-after"),
    ],
)
def test_an_expired_exception_exempts_nothing(now: datetime, exempted: bool) -> None:
    got = exception().exempts("gang-required", workload(pytorchjob()), "team-a", now)
    assert got == ("migrating to Kueue in Q3" if exempted else None)


def test_expiry_respects_the_offset_written() -> None:
    exc = exception(expiresAt="2026-12-31T02:00:00+02:00")  # = 2026-12-31T00:00:00Z
    w = workload(pytorchjob())
    assert exc.exempts("gang-required", w, None, datetime(2026, 12, 30, 23, 59, tzinfo=UTC)) is not None
    assert exc.exempts("gang-required", w, None, datetime(2026, 12, 31, 0, 0, tzinfo=UTC)) is None


def test_the_wrong_policy_is_not_exempted() -> None:
    assert exception().exempts("checkpoint-required", workload(pytorchjob()), "team-a", NOW) is None


@pytest.mark.parametrize(
    ("match", "obj", "selected"),
    [
        pytest.param({"workloads": [{"name": "legacy-job"}]}, pytorchjob(), True, id="name-any-kind"),
        pytest.param(
            {"workloads": [{"name": "legacy-job", "kind": "PyTorchJob"}]},
            pytorchjob(),
            True,
            id="name-and-kind",
        ),
        pytest.param(
            {"workloads": [{"name": "legacy-job", "kind": "kubeflow.org/PyTorchJob"}]},
            pytorchjob(),
            True,
            id="group-kind",
        ),
        pytest.param(
            {"workloads": [{"name": "legacy-job", "kind": "MPIJob"}]}, pytorchjob(), False, id="other-kind"
        ),
        pytest.param({"workloads": [{"name": "legacy-job"}]}, pytorchjob("other"), False, id="other-name"),
        pytest.param(
            {"selector": {"matchLabels": {"team": "a", "legacy": "true"}}},
            pytorchjob("any", labels={"team": "a", "legacy": "true"}),
            True,
            id="selector-match-labels",
        ),
        pytest.param(
            {"selector": {"matchLabels": {"legacy": "true"}}},
            pytorchjob("any", labels={"legacy": "no"}),
            False,
            id="selector-label-differs",
        ),
        pytest.param(
            {
                "selector": {
                    "matchExpressions": [{"key": "tier", "operator": "In", "values": ["batch", "spot"]}]
                }
            },
            pytorchjob("any", labels={"tier": "spot"}),
            True,
            id="selector-in",
        ),
        pytest.param(
            {"selector": {"matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["spot"]}]}},
            pytorchjob("any", labels={"tier": "spot"}),
            False,
            id="selector-not-in",
        ),
        pytest.param(
            {"selector": {"matchExpressions": [{"key": "legacy", "operator": "Exists"}]}},
            pytorchjob("any", labels={"legacy": ""}),
            True,
            id="selector-exists",
        ),
        pytest.param(
            {"selector": {"matchExpressions": [{"key": "legacy", "operator": "DoesNotExist"}]}},
            pytorchjob("any", labels={"legacy": ""}),
            False,
            id="selector-does-not-exist",
        ),
        pytest.param({"namespaces": ["team-a"]}, pytorchjob("anything"), True, id="namespaces-alone"),
        pytest.param(
            {"workloads": [{"name": "nope"}], "selector": {"matchLabels": {"legacy": "true"}}},
            pytorchjob("x", labels={"legacy": "true"}),
            True,
            id="workloads-or-selector",
        ),
    ],
)
def test_selector_and_named_workloads(match: dict[str, Any], obj: dict[str, Any], selected: bool) -> None:
    got = exception(match=match).exempts("gang-required", workload(obj), "team-a", NOW)
    assert (got is not None) == selected


def test_an_exception_selects_only_in_its_own_namespace() -> None:
    exc = exception(match={"selector": {"matchLabels": {"legacy": "true"}}})
    other = workload(pytorchjob("x", namespace="team-b", labels={"legacy": "true"}))
    assert exc.exempts("gang-required", other, "team-b", NOW) is None


def test_namespaces_narrow_a_cluster_wide_file_exception() -> None:
    doc = exception_doc(match={"selector": {"matchLabels": {"legacy": "true"}}, "namespaces": ["team-a"]})
    del doc["metadata"]["namespace"]
    exc = parse_exception(doc, "exceptions.yaml")
    assert exc.exempts("gang-required", workload(pytorchjob("x", labels={"legacy": "true"})), None, NOW)
    other = workload(pytorchjob("x", namespace="team-b", labels={"legacy": "true"}))
    assert exc.exempts("gang-required", other, None, NOW) is None


def test_a_named_workload_covers_the_pods_its_controller_creates() -> None:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "legacy-job-worker-0",
            "namespace": "team-a",
            "labels": {"training.kubeflow.org/job-name": "legacy-job"},
        },
        "spec": {"containers": [{"name": "t", "image": "x"}]},
    }
    assert exception().exempts("gang-required", workload(pod), "team-a", NOW) is not None


# --------------------------------------------------------------------------------------------
# The engine, and every front door


def test_the_engine_reports_exempt_with_the_justification_and_admits(policies) -> None:
    engine = Engine(policies, load_config(None), exceptions=[exception()])
    decision = engine.decide(AdmissionInput(pytorchjob()), now=NOW)
    result = next(r for r in decision.results if r.policy == "gang-required")
    assert result.outcome == "exempt"
    assert result.exemption == "migrating to Kueue in Q3"
    assert "declares no gang mechanism" in result.messages[0]
    assert decision.allowed

    expired = engine.decide(AdmissionInput(pytorchjob()), now=datetime(2027, 1, 1, tzinfo=UTC))
    assert not expired.allowed
    assert next(r for r in expired.results if r.policy == "gang-required").outcome == "fail"


def _files(tmp_path: Path, expires: str) -> tuple[Path, Path]:
    manifest = tmp_path / "job.yaml"
    manifest.write_text(yaml.safe_dump(pytorchjob()))
    exc = tmp_path / "exceptions.yaml"
    exc.write_text(yaml.safe_dump(exception_doc(expiresAt=expires)))
    return manifest, exc


# The command line decides with the real clock: far-future and long-past expiries keep these stable.
FUTURE = (datetime.now(UTC) + timedelta(days=365 * 50)).strftime("%Y-%m-%dT%H:%M:%SZ")
PAST = "2000-01-01T00:00:00Z"


def test_check_json_lists_the_exemption(tmp_path, capsys) -> None:
    manifest, exc = _files(tmp_path, FUTURE)
    assert main(["check", str(manifest), "--exceptions", str(exc), "-o", "json"]) == 0
    (record,) = json.loads(capsys.readouterr().out)["results"]
    assert record["allowed"] is True
    assert record["violations"] == []
    (exemption,) = record["exemptions"]
    assert exemption["policy"] == "gang-required"
    assert exemption["justification"] == "migrating to Kueue in Q3"
    assert "declares no gang mechanism" in exemption["messages"][0]


def test_check_with_an_expired_exception_denies(tmp_path, capsys) -> None:
    manifest, exc = _files(tmp_path, PAST)
    assert main(["check", str(manifest), "--exceptions", str(exc), "-o", "json"]) == 1
    (record,) = json.loads(capsys.readouterr().out)["results"]
    assert record["exemptions"] == []
    assert [v["policy"] for v in record["violations"]] == ["gang-required"]


def test_review_sarif_shows_the_exempted_finding_as_suppressed(tmp_path, capsys) -> None:
    manifest, exc = _files(tmp_path, FUTURE)
    assert main(["review", str(manifest), "--exceptions", str(exc), "-o", "sarif"]) == 0
    (result,) = json.loads(capsys.readouterr().out)["runs"][0]["results"]
    assert result["ruleId"] == "gang-required"
    assert result["suppressions"] == [
        {
            "kind": "external",
            "status": "accepted",
            "justification": "migrating to Kueue in Q3",
            "properties": {"exception": "team-a/legacy", "owner": "team-a@example.com", "expiresAt": FUTURE},
        }
    ]


def test_an_exception_naming_an_unknown_policy_is_warned_about(tmp_path, capsys) -> None:
    manifest, exc = _files(tmp_path, FUTURE)
    exc.write_text(yaml.safe_dump(exception_doc(policies=["gang-requried"])))
    assert main(["check", str(manifest), "--exceptions", str(exc)]) == 1
    assert "names policy 'gang-requried', which is not in the policy set" in capsys.readouterr().err


# --------------------------------------------------------------------------------------------
# Loading: strict, and errors name file and field


def _broken(**changes: Any) -> dict[str, Any]:
    doc = exception_doc()
    for dotted, value in changes.items():
        *parents, leaf = dotted.split("__")
        node = doc
        for p in parents:
            node = node[p]
        if value is ...:
            del node[leaf]
        else:
            node[leaf] = value
    return doc


@pytest.mark.parametrize(
    ("doc", "where"),
    [
        pytest.param(_broken(spec__policies=...), "field spec.policies: is required", id="no-policies"),
        pytest.param(
            _broken(spec__policies=[]), "field spec.policies: must be a non-empty list", id="empty-policies"
        ),
        pytest.param(
            _broken(spec__justification=...), "field spec.justification: is required", id="no-justification"
        ),
        pytest.param(
            _broken(spec__justification="  "), "field spec.justification: must be a non-empty", id="blank"
        ),
        pytest.param(_broken(spec__owner=...), "field spec.owner: is required", id="no-owner"),
        pytest.param(_broken(spec__expiresAt=...), "field spec.expiresAt: is required", id="no-expiry"),
        pytest.param(
            _broken(spec__expiresAt="next year"), "field spec.expiresAt: must be an RFC 3339", id="bad-expiry"
        ),
        pytest.param(
            _broken(spec__expiresAt="2026-12-31"), "field spec.expiresAt: must be an RFC 3339", id="date-only"
        ),
        pytest.param(
            _broken(spec__expiresAt="2026-12-31T00:00:00"),
            "field spec.expiresAt: must be an RFC 3339",
            id="no-offset",
        ),
        pytest.param(_broken(spec__match=...), "field spec.match: is required", id="no-match"),
        pytest.param(
            _broken(spec__match={}), "needs at least one of workloads, selector, namespaces", id="empty-match"
        ),
        pytest.param(
            _broken(spec__match__workloads=[{"kind": "PyTorchJob"}]),
            "workloads[0].name: is required",
            id="ref-name",
        ),
        pytest.param(
            _broken(spec__match__workloads=[{"name": "x", "namespace": "team-b"}]),
            "workloads[0].namespace: 'team-b' is outside the exception's own namespace 'team-a'",
            id="ref-other-namespace",
        ),
        pytest.param(
            _broken(spec__match={"selector": {}}),
            "field spec.match.selector: needs matchLabels",
            id="empty-selector",
        ),
        pytest.param(
            _broken(spec__match={"selector": {"matchExpressions": [{"key": "a", "operator": "Like"}]}}),
            "matchExpressions[0].operator: must be one of In, NotIn, Exists, DoesNotExist",
            id="bad-operator",
        ),
        pytest.param(
            _broken(spec__match={"selector": {"matchExpressions": [{"key": "a", "operator": "In"}]}}),
            "matchExpressions[0].values: must be a non-empty list for operator In",
            id="in-without-values",
        ),
        pytest.param(_broken(spec__policy=["x"]), "field spec: unknown field 'policy'", id="typo"),
        pytest.param(
            _broken(kind="PolicyExemption"), "field apiVersion: expected apiVersion", id="wrong-kind"
        ),
        pytest.param(_broken(metadata__name=...), "field metadata.name: is required", id="no-name"),
    ],
)
def test_schema_errors_name_file_and_field(tmp_path: Path, doc: dict[str, Any], where: str) -> None:
    path = tmp_path / "exceptions.yaml"
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(PolicyError) as info:
        load_exceptions([path])
    assert str(info.value).startswith(str(path))
    assert where in str(info.value)


def test_unquoted_yaml_timestamps_and_directories_load(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(yaml.safe_dump(exception_doc()).replace(f"'{EXPIRES}'", EXPIRES))
    doc = exception_doc()
    doc["metadata"]["name"] = "other"
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b.yml").write_text(yaml.safe_dump(doc))
    loaded = load_exceptions([tmp_path])
    assert [e.id for e in loaded] == ["team-a/legacy", "team-a/other"]
    assert loaded[0].expires_at == datetime(2026, 12, 31, tzinfo=UTC)


def test_duplicate_exceptions_are_refused(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(yaml.safe_dump(exception_doc()))
    (tmp_path / "b.yaml").write_text(yaml.safe_dump(exception_doc()))
    with pytest.raises(PolicyError, match="duplicate PolicyException team-a/legacy"):
        load_exceptions([tmp_path])


def test_a_missing_exceptions_path_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(PolicyError, match="no such file or directory"):
        load_exceptions([tmp_path / "nope"])


# --------------------------------------------------------------------------------------------
# The CRD: the same object as a cluster resource


def _crd_schema() -> dict[str, Any]:
    crd = yaml.safe_load(CRD.read_text())
    assert crd["apiVersion"] == "apiextensions.k8s.io/v1"
    assert crd["spec"]["group"] == "trainguard.dev" and crd["spec"]["scope"] == "Namespaced"
    (version,) = crd["spec"]["versions"]
    assert version["name"] == "v1alpha1" and version["served"] and version["storage"]
    return version["schema"]["openAPIV3Schema"]


def _structural(schema: dict[str, Any], where: str = "") -> None:
    """Every node has a type (or preserves unknown fields); no properties beside additionalProperties."""
    assert "type" in schema or schema.get("x-kubernetes-preserve-unknown-fields"), where
    assert not ("properties" in schema and "additionalProperties" in schema), where
    for name, child in schema.get("properties", {}).items():
        _structural(child, f"{where}.{name}")
    if isinstance(schema.get("items"), dict):
        _structural(schema["items"], f"{where}[]")
    if isinstance(schema.get("additionalProperties"), dict):
        _structural(schema["additionalProperties"], f"{where}{{}}")


def test_the_crd_schema_is_structural() -> None:
    _structural(_crd_schema())


def test_the_crd_accepts_what_the_loader_accepts_and_refuses_the_basics() -> None:
    validator = jsonschema.Draft4Validator(_crd_schema())
    good = exception_doc(match={"workloads": [{"name": "a"}], "selector": {"matchLabels": {"x": "y"}}})
    parse_exception(good, "ok.yaml")
    validator.validate(good)
    for bad in (
        _broken(spec__policies=[]),
        _broken(spec__owner=...),
        _broken(spec__justification=""),
        _broken(spec__match__workloads=[{"kind": "PyTorchJob"}]),
        _broken(spec__match={"selector": {"matchExpressions": [{"key": "a", "operator": "Like"}]}}),
    ):
        assert not validator.is_valid(bad)
