"""Credentials: an ApiClient from a kubeconfig file or the pod's service account."""

from __future__ import annotations

from kubernetes import client
from kubernetes import config as kube_config

from webhook.cluster.watch import ClusterError


def api_client(
    *, kubeconfig: str | None = None, in_cluster: bool = False, connections: int | None = None
) -> client.ApiClient:
    """An ApiClient from a kubeconfig file, or from the pod's service account.

    `connections` sizes the connection pool for that many requests at once (each open watch holds
    one): past the pool's size urllib3 drops the surplus connection after each request, warning
    "Connection pool is full", and the next request pays for a new TLS handshake.
    """
    configuration = client.Configuration()
    try:
        if kubeconfig is not None:
            kube_config.load_kube_config(  # type: ignore[no-untyped-call]
                config_file=kubeconfig, client_configuration=configuration
            )
        elif in_cluster:
            kube_config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
        else:
            raise ClusterError("no cluster credentials: give --kubeconfig or --in-cluster")
    except kube_config.ConfigException as exc:
        raise ClusterError(f"cannot load cluster credentials: {exc}") from exc
    if connections is not None:
        configuration.connection_pool_maxsize = max(connections, configuration.connection_pool_maxsize)
    return client.ApiClient(configuration)
