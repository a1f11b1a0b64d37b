"""Fail-safe configuration: an empty policy set is refused everywhere; a policy that errors is visible.

An emptied ConfigMap or a wrong --policies path must never turn enforcement off: `serve` refuses to
start, a reload keeps the last good set (and says so in the log and /metrics, /readyz unchanged),
and `check` exits 2. A policy whose CEL fails at run time is counted per policy in /metrics and
logged, without a line per request.
"""

from __future__ import annotations

import io
import logging
from collections.abc import Callable
from pathlib import Path

import httpx
import orjson
import pytest

from tests.test_server_tls import (
    client_context,
    metric,
    running,
    settings_for,
    url,
    validate,
    wait_for,
)
from webhook.cli import main as cli_main
from webhook.engine import default_policies_dir
from webhook.errors import PolicyError
from webhook.serve import logs
from webhook.serve.server import build

DIVIDE_BY_ZERO = """\
apiVersion: trainguard.dev/v1alpha1
kind: TrainingPolicy
metadata:
  name: divide
spec:
  mode: Enforce
  failurePolicy: Ignore
  validations:
    - expression: "1 / (size(object.metadata.name) - size(object.metadata.name)) == 0"
      message: never reached
"""


def _empty_dir(root: Path) -> Path:
    (root / "empty").mkdir()
    return root / "empty"


def _only_other_files(root: Path) -> Path:
    (root / "other").mkdir()
    (root / "other" / "README.md").write_text("policies go here\n")
    return root / "other"


def _yaml_without_policies(root: Path) -> Path:
    (root / "blank").mkdir()
    (root / "blank" / "policies.yaml").write_text("# all policies moved elsewhere\n")
    return root / "blank"


def _missing(root: Path) -> Path:
    return root / "no-such-directory"


EMPTY_SETS = [
    pytest.param(_empty_dir, "no policy files", id="empty-directory"),
    pytest.param(_only_other_files, "no policy files", id="no-yaml-files"),
    pytest.param(_yaml_without_policies, "hold no TrainingPolicy", id="yaml-without-policies"),
    pytest.param(_missing, "no such file or directory", id="missing-directory"),
]


@pytest.mark.parametrize(("make", "message"), EMPTY_SETS)
def test_check_refuses_an_empty_policy_set_with_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], make: Callable[[Path], Path], message: str
) -> None:
    manifest = tmp_path / "pod.yaml"
    manifest.write_text("apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {containers: []}\n")
    assert cli_main(["check", "--policies", str(make(tmp_path)), str(manifest)]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


@pytest.mark.parametrize(("make", "message"), EMPTY_SETS)
def test_serve_refuses_to_start_with_an_empty_policy_set(
    files: Path, capsys: pytest.CaptureFixture[str], make: Callable[[Path], Path], message: str
) -> None:
    policies = make(files)
    with pytest.raises(PolicyError, match=message):
        build(settings_for(files, policies=(str(policies),)))
    argv = ["serve", "--host", "127.0.0.1", "--port", "0", "--policies", str(policies)]
    argv += ["--tls-cert", str(files / "certs" / "tls.crt"), "--tls-key", str(files / "certs" / "tls.key")]
    assert cli_main(argv) == 2
    assert message in capsys.readouterr().err


def test_a_reload_to_an_empty_policy_set_keeps_the_last_good_set(files: Path) -> None:
    with running(settings_for(files)) as server, httpx.Client(verify=client_context(files)) as client:
        assert validate(client, server)["allowed"] is False  # gang-required denies
        for policy in (files / "policies").iterdir():
            policy.unlink()  # the ConfigMap was emptied
        wait_for(
            lambda: metric(server, "trainguard_reloads_total", source="policies", result="failure") == 1,
            "the empty set to be refused",
        )
        assert client.get(url(server, "/readyz")).status_code == 200
        assert validate(client, server)["allowed"] is False  # still enforced
        assert metric(server, "trainguard_policy_set_policies") == len(
            list(default_policies_dir().glob("*.yaml"))
        )


def test_a_policy_erroring_at_run_time_is_counted_per_policy_and_logged_once(files: Path) -> None:
    (files / "policies" / "divide.yaml").write_text(DIVIDE_BY_ZERO)
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(logs.JsonFormatter())
    admission = logging.getLogger(logs.ADMISSION_LOGGER)
    admission.addHandler(handler)
    try:
        with running(settings_for(files)) as server, httpx.Client(verify=client_context(files)) as client:
            answers = [validate(client, server) for _ in range(3)]
            text = client.get(url(server, "/metrics")).text
    finally:
        admission.removeHandler(handler)
    assert all(
        any(w.startswith("divide: policy could not be evaluated") for w in a["warnings"]) for a in answers
    )
    assert 'trainguard_policy_errors_total{policy="divide"} 3.0' in text
    assert 'trainguard_policy_errors_total{policy="gang-required"}' not in text
    records = [orjson.loads(line) for line in out.getvalue().splitlines()]
    errors = [r for r in records if r["msg"] == "policy could not be evaluated"]
    assert len(errors) == 1, errors  # rate limited: one line per policy per 10 s
    assert errors[0]["policy"] == "divide", errors
    assert "validations[0].expression" in " ".join(errors[0]["problem"]), errors
