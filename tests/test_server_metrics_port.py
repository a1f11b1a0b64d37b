"""`serve --metrics-port`: /metrics on a listener of its own, so a NetworkPolicy can tell scrapers from
the API server by port. The served process (real TLS, one and two workers) on free ports of 127.0.0.1.
"""

from __future__ import annotations

import contextlib
import signal
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import orjson
import pytest

from tests.test_server_tls import (
    REVIEW,
    WAIT,
    client_context,
    denied_by_gang,
    free_port,
    serve_argv,
    served_process,
)
from webhook.cli import main as cli_main

ADMISSIONS = 12


@contextlib.contextmanager
def served(files: Path, *extra: str) -> Iterator[tuple[subprocess.Popen[str], int, int]]:
    """`trainguard serve --metrics-port` as its own process, ready; yields it, its port, its metrics port."""
    metrics_port = free_port()
    with served_process(files, "--metrics-port", str(metrics_port), "--shutdown-delay", "0", *extra) as (
        process,
        port,
    ):
        yield process, port, metrics_port


def validate_count(scrape: str) -> float:
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in scrape.splitlines()
        if line.startswith("trainguard_admission_requests_total{") and 'endpoint="validate"' in line
    )


@pytest.mark.parametrize(
    "extra",
    [
        pytest.param(("--workers", "1"), id="one-process"),
        pytest.param(("--workers", "2"), id="two-workers"),
        # Workers replaced every 4 admissions: the replacements accept on the metrics port too, and
        # the counts of the retired ones stay in the sums.
        pytest.param(("--workers", "2", "--recycle-after", "4"), id="recycled-workers"),
    ],
)
def test_metrics_are_served_on_their_own_port_only(files: Path, extra: tuple[str, ...]) -> None:
    with served(files, *extra) as (process, port, metrics_port):
        admission, metrics = f"https://127.0.0.1:{port}", f"https://127.0.0.1:{metrics_port}"
        for _ in range(ADMISSIONS):  # a new connection each: the kernel spreads them over the workers
            with httpx.Client(verify=client_context(files), timeout=WAIT) as client:
                answer = client.post(
                    f"{admission}/validate", content=REVIEW, headers={"content-type": "application/json"}
                )
                assert denied_by_gang(answer.json()["response"])
        scrapes, elsewhere = [], {}
        for _ in range(6):  # each on a new connection, so with two workers both answer some
            with httpx.Client(verify=client_context(files), timeout=WAIT) as client:
                scrapes.append(client.get(f"{metrics}/metrics"))
        with httpx.Client(verify=client_context(files), timeout=WAIT) as client:
            elsewhere["metrics on the admission port"] = client.get(f"{admission}/metrics").status_code
            elsewhere["validate on the metrics port"] = client.post(
                f"{metrics}/validate", content=REVIEW, headers={"content-type": "application/json"}
            ).status_code
            elsewhere["mutate on the metrics port"] = client.post(
                f"{metrics}/mutate", content=REVIEW, headers={"content-type": "application/json"}
            ).status_code
            elsewhere["readyz on the metrics port"] = client.get(f"{metrics}/readyz").status_code
            elsewhere["healthz on the admission port"] = client.get(f"{admission}/healthz").status_code
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=WAIT)
    assert process.returncode == 0, stderr[-2000:]
    assert elsewhere == {
        "metrics on the admission port": 404,
        "validate on the metrics port": 404,
        "mutate on the metrics port": 404,
        "readyz on the metrics port": 404,
        "healthz on the admission port": 200,
    }
    for scrape in scrapes:
        assert scrape.status_code == 200
        assert scrape.headers["content-type"].startswith("text/plain")
        assert validate_count(scrape.text) == ADMISSIONS, scrape.text
    if "2" in extra:
        deciders = {orjson.loads(line).get("worker") for line in stderr.splitlines() if '"admission"' in line}
        assert deciders  # the admission log lines say which worker decided


def test_a_metrics_port_that_is_the_admission_port_is_refused(
    files: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    port = str(free_port())
    assert cli_main(serve_argv(files, "--port", port, "--metrics-port", port)) == 2
    assert f"--metrics-port {port} is the admission port" in capsys.readouterr().err


def test_a_metrics_port_in_use_is_refused_naming_the_option(
    files: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = taken.getsockname()[1]
        assert cli_main(serve_argv(files, "--port", "0", "--metrics-port", str(busy))) == 2
    err = capsys.readouterr().err
    assert f"--metrics-port {busy}: cannot listen on 127.0.0.1:{busy}" in err, err
