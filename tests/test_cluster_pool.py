"""The kubernetes client's connection pool holds every request one serving process keeps open."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from webhook.cluster import ClusterCaches, api_client
from webhook.kinds import KINDS
from webhook.serve.cluster_hooks import connections
from webhook.serve.settings import Settings


def kubeconfig(tmp_path: Path) -> Path:
    path = tmp_path / "kubeconfig"
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )
    return path


@pytest.mark.parametrize("audit", [False, True], ids=["caches", "caches-and-audit"])
def test_the_pool_holds_every_watch_of_the_process(tmp_path: Path, audit: bool) -> None:
    settings = Settings(tls_cert="c", tls_key="k", kubeconfig=str(kubeconfig(tmp_path)), audit=audit)
    api = api_client(kubeconfig=settings.kubeconfig, connections=connections(settings))
    pool_size = api.rest_client.pool_manager.connection_pool_kw["maxsize"]
    watches = len(ClusterCaches(api, on_change=lambda *_: None).caches) + (len(KINDS) if audit else 0)
    # Every watch holds a connection; the Lease, the caBundle writer and the report writer need theirs.
    assert pool_size >= watches + 3
