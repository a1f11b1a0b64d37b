"""trainguard_engine_fallbacks_total: policies the engine evaluated expression by expression
instead of in its phase's one program, as the served webhook exports them on /metrics (one
process through starlette's test client, and two forked workers behind real TLS)."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.test_server_metrics_port import served
from tests.test_server_tls import REVIEW, WAIT, client_context, wait_for
from webhook import certs
from webhook.config import load_config
from webhook.engine import build_engine, default_policies_dir, load_policy_set
from webhook.metrics import Metrics
from webhook.serve.app import ServerState, create_app

with warnings.catch_warnings():
    from starlette.exceptions import StarletteDeprecationWarning

    warnings.simplefilter("ignore", StarletteDeprecationWarning)
    from starlette.testclient import TestClient

JSON = {"content-type": "application/json"}
FALLBACKS = "trainguard_engine_fallbacks_total"
# Nested lists count against the runtime parser's 32 levels: this one compiles alone but not
# inside the phase's program, which nests every policy a few levels deeper.
_DEEP = "[" * 29 + "3" + "]" * 29
TOO_DEEP_TO_JOIN = f"  validations:\n    - expression: '{_DEEP}.size() == 2'\n      message: not two\n"
# A missing field fails the phase's program as a whole: the policy's error must be its own.
FAILS_TO_EVALUATE = "  validations:\n    - expression: object.spec.missing == 1\n      message: m\n"
ADMISSIONS = 5


def write_policy(directory: Path, spec: str) -> Path:
    directory.mkdir(exist_ok=True)
    (directory / "p.yaml").write_text(
        "apiVersion: trainguard.dev/v1alpha1\nkind: TrainingPolicy\nmetadata:\n  name: p\n"
        "spec:\n  mode: Enforce\n" + spec
    )
    return directory


def fallbacks(scrape: str) -> dict[str, float]:
    """The counter's series on a /metrics page, by their labels."""
    return {
        line.split("{", 1)[1].rsplit("}", 1)[0]: float(line.rsplit(" ", 1)[1])
        for line in scrape.splitlines()
        if line.startswith(FALLBACKS + "{")
    }


@pytest.fixture
def served_state() -> Iterator[tuple[ServerState, TestClient]]:
    state = ServerState(metrics=Metrics(sample_every=1_000_000))
    with TestClient(create_app(state)) as client:
        yield state, client


@pytest.mark.parametrize(
    ("spec", "series"),
    [
        pytest.param(
            TOO_DEEP_TO_JOIN, 'phase="validating",reason="does-not-compile-joined"', id="refused-at-load"
        ),
        pytest.param(
            FAILS_TO_EVALUATE, 'phase="validating",reason="evaluation-failed"', id="failed-on-the-request"
        ),
    ],
)
def test_each_admission_a_policy_falls_back_in_adds_one_across_a_reload(
    tmp_path: Path, served_state: tuple[ServerState, TestClient], spec: str, series: str
) -> None:
    state, client = served_state
    policies = load_policy_set([write_policy(tmp_path / "policies", spec)], "cel-expr-python")
    state.install(build_engine(policies, load_config()))
    seen = []
    for admission in range(ADMISSIONS):
        if admission == 2:  # a reload builds a new engine, counting from zero: the counter goes on
            state.install(build_engine(policies, load_config()))
        assert client.post("/validate", content=REVIEW, headers=JSON).status_code == 200
        seen.append(fallbacks(client.get("/metrics").text))
    assert seen == [{series: float(n)} for n in range(1, ADMISSIONS + 1)]
    # the mutating phase holds no policy here: nothing falls back on /mutate
    assert client.post("/mutate", content=REVIEW, headers=JSON).status_code == 200
    assert fallbacks(client.get("/metrics").text) == {series: float(ADMISSIONS)}


def test_the_shipped_policies_never_fall_back(served_state: tuple[ServerState, TestClient]) -> None:
    state, client = served_state
    state.install(build_engine(load_policy_set([default_policies_dir()], "cel-expr-python"), load_config()))
    for path in ("/validate", "/mutate") * 3:
        assert client.post(path, content=REVIEW, headers=JSON).status_code == 200
    assert not any(fallbacks(client.get("/metrics").text).values())


def test_two_workers_sum_their_fallbacks(tmp_path: Path) -> None:
    files = tmp_path
    certs.write_bundle(files / "certs", hosts=["127.0.0.1"], days=2)
    write_policy(files / "policies", TOO_DEEP_TO_JOIN)
    with served(files, "--workers", "2") as (_, port, metrics_port):
        for _ in range(ADMISSIONS):  # a new connection each: the kernel spreads them over the workers
            with httpx.Client(verify=client_context(files), timeout=WAIT) as client:
                answer = client.post(f"https://127.0.0.1:{port}/validate", content=REVIEW, headers=JSON)
                assert answer.json()["response"]["allowed"] is False

        def counted() -> dict[str, float] | None:
            # a worker that does not answer the scrape writes its counts on its next tick
            with httpx.Client(verify=client_context(files), timeout=WAIT) as client:
                scrape = client.get(f"https://127.0.0.1:{metrics_port}/metrics").text
            found = fallbacks(scrape)
            return found if sum(found.values()) >= ADMISSIONS else None

        found = wait_for(counted, f"{ADMISSIONS} fallbacks on /metrics", timeout=3 * WAIT)
    assert found == {'phase="validating",reason="does-not-compile-joined"': float(ADMISSIONS)}
