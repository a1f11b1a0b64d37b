"""`trainguard serve`'s flags take their defaults from Settings: what `--help` says is what a
server built from Settings alone (the tests', the benchmarks') does."""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

import pytest

from webhook.cli import build_parser
from webhook.cli.serve import settings_from
from webhook.serve.app import ServerState
from webhook.serve.http_protocol import HttpLimits
from webhook.serve.settings import ServerError, Settings

TLS = ["--tls-cert", "tls.crt", "--tls-key", "tls.key"]


def serve_parser() -> argparse.ArgumentParser:
    parser = build_parser("serve")
    (sub,) = (a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices["serve"]


def setting_flags() -> list[Any]:
    """Every serve flag whose destination is a Settings field, with that field."""
    settings = {f.name: f for f in dataclasses.fields(Settings)}
    return [
        pytest.param(action, settings[action.dest], id=action.option_strings[0])
        for action in serve_parser()._actions
        if action.dest in settings and action.option_strings
    ]


@pytest.fixture(autouse=True)
def no_pod_namespace(monkeypatch: pytest.MonkeyPatch) -> None:
    # In a pod, --webhook-namespace defaults to the pod's namespace instead.
    monkeypatch.delenv("POD_NAMESPACE", raising=False)


def test_every_server_option_has_a_flag() -> None:
    """The Settings fields `serve` has no flag for: tuning the benchmarks and tests reach."""
    flags = {action.dest for action in serve_parser()._actions}
    unflagged = sorted(f.name for f in dataclasses.fields(Settings) if f.name not in flags)
    assert unflagged == [
        "decision_threads",
        "max_connections",
        "max_header_bytes",
        "max_headers",
        "max_queued",  # --max-in-flight sets it: 16 waiting per slot
        "metrics_sample_every",
        "queue_wait",
    ]


@pytest.mark.parametrize(("action", "setting"), setting_flags())
def test_a_flag_defaults_to_its_settings_field(
    action: argparse.Action, setting: dataclasses.Field[object]
) -> None:
    if setting.default is dataclasses.MISSING:  # --tls-cert, --tls-key: required when serving
        assert action.default is None
    elif action.dest in ("policies", "exceptions"):  # repeatable: none given is None, no files
        assert action.default is None and setting.default == ()
    else:
        assert action.default == setting.default


def shown_defaults() -> list[Any]:
    """The flags with a default value to show (the others' help says what leaving them out means)."""
    return [
        case
        for case in setting_flags()
        if case.values[0].default is not None and not isinstance(case.values[0], argparse._StoreTrueAction)
    ]


@pytest.mark.parametrize(("action", "setting"), shown_defaults())
def test_help_shows_each_default(action: argparse.Action, setting: dataclasses.Field[object]) -> None:
    formatter = serve_parser()._get_formatter()
    formatter.add_argument(action)
    help_text = " ".join(formatter.format_help().split())  # argparse wraps lines
    assert f"default: {action.default}" in help_text


def test_no_flags_give_the_settings_defaults() -> None:
    args = serve_parser().parse_args(TLS)
    assert settings_from(args) == Settings(tls_cert="tls.crt", tls_key="tls.key")


def test_the_pod_namespace_is_the_default_namespace_in_a_pod(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POD_NAMESPACE", "ml-platform")
    args = serve_parser().parse_args(TLS)
    assert settings_from(args).webhook_namespace == "ml-platform"


FLAGS = [
    pytest.param(
        ["--max-in-flight", "4"], {"max_in_flight": 4, "max_queued": 64}, id="slots-and-their-queue"
    ),
    pytest.param(["--policies", "a", "--policies", "b"], {"policies": ("a", "b")}, id="policies-repeated"),
    pytest.param(["--cel", "auto"], {"cel": None}, id="cel-auto-picks"),
    pytest.param(
        ["--workers", "3", "--recycle-after", "0"], {"workers": 3, "recycle_after": 0}, id="workers"
    ),
    pytest.param(["--in-cluster"], {"in_cluster": True}, id="in-cluster"),
]


@pytest.mark.parametrize(("argv", "fields"), FLAGS)
def test_a_flag_sets_its_field(argv: list[str], fields: dict[str, Any]) -> None:
    settings = settings_from(serve_parser().parse_args(TLS + argv))
    assert settings == dataclasses.replace(Settings(tls_cert="tls.crt", tls_key="tls.key"), **fields)


def test_serving_without_tls_names_the_missing_flags() -> None:
    with pytest.raises(ServerError, match="--tls-cert and --tls-key required"):
        settings_from(serve_parser().parse_args([]))


def test_the_http_app_and_limits_default_to_the_settings() -> None:
    """A ServerState or HttpLimits made without Settings (as the tests make them) is the one a
    server built from the default Settings gets."""
    settings = Settings(tls_cert="tls.crt", tls_key="tls.key")
    bare, built = ServerState(), ServerState.from_settings(settings)
    for state in (bare, built):
        assert (state.max_body_bytes, state.budget, state.inline_slice) == (
            settings.max_body_bytes,
            settings.request_budget,
            settings.inline_slice,
        )
        assert (state.slots.size, state.slots.queue, state.threads.size) == (
            settings.max_in_flight,
            settings.max_queued,
            settings.decision_threads,
        )
        assert state.slots.wait == settings.queue_wait
        assert state.bodies.limit == 4 * settings.max_body_bytes  # four of the largest bodies on their way
    assert HttpLimits() == HttpLimits.from_settings(settings)
