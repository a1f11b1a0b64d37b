"""The audit's API-server side (kubernetes client): paginated LISTs, watches, report writes.

ClusterLister   scan.Lister over the REST API: LIST with limit/continue, raw JSON (orjson)
ReportStore     server-side apply / delete / list of the report objects, under trainguard's
                field manager
WorkloadCaches  one watch-backed cache per supported kind (webhook.cluster.WatchCache), which
                `serve --audit` re-decides from
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import orjson
from kubernetes import client
from kubernetes import config as kube_config
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from webhook.audit.report_objects import MANAGED_BY, ReportApi
from webhook.audit.scan import NotServed, Page, controlled
from webhook.cluster import (
    EXCEPTION_GROUP,
    EXCEPTION_PLURAL,
    EXCEPTION_VERSION,
    FIELD_MANAGER,
    TRAINER_GROUP,
    TRAINER_VERSION,
    ClusterError,
    Resource,
    WatchCache,
    cluster_scoped_key,
    exception_value,
    name_key,
    namespaced_key,
    object_value,
    priority_value,
)
from webhook.context import Evictions
from webhook.engine import ClusterFacts, PolicyException
from webhook.kinds import KINDS, KindInfo
from webhook.recovery.cluster_state import EVICTION_SOURCES, eviction_value

LIST_TIMEOUT_SECONDS = 60
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"


def list_function(
    api: client.ApiClient, kind: KindInfo, version: str, namespace: str | None
) -> Callable[..., Any]:
    """The generated client's list (and watch) call for one kind and version.

    Built-in groups other than core are reached through CustomObjectsApi too: its paths
    (/apis/GROUP/VERSION/[namespaces/NS/]PLURAL) are the same for every group.
    """
    if not kind.group:
        core = client.CoreV1Api(api)
        if namespace:
            return lambda **kw: core.list_namespaced_pod(namespace, **kw)
        return core.list_pod_for_all_namespaces
    custom = client.CustomObjectsApi(api)
    if namespace:
        return lambda **kw: custom.list_namespaced_custom_object(
            kind.group, version, namespace, kind.plural, **kw
        )
    return lambda **kw: custom.list_cluster_custom_object(kind.group, version, kind.plural, **kw)


def read_json(response: Any) -> dict[str, Any]:
    """The body of an unread (`_preload_content=False`) response; ApiException for a non-2xx status."""
    try:
        status = getattr(response, "status", 200)
        if isinstance(status, int) and not 200 <= status <= 299:
            raise ApiException(status=status, reason=getattr(response, "reason", None))
        data: dict[str, Any] = orjson.loads(response.data)
        return data
    finally:
        response.release_conn()


class ClusterLister:
    """Lists one page at a time, as raw JSON (no model objects: orjson straight to dicts)."""

    def __init__(self, api: client.ApiClient) -> None:
        self.api = api
        self._version: dict[KindInfo, str] = {}

    def list_page(self, kind: KindInfo, namespace: str | None, limit: int, token: str | None) -> Page:
        versions = [self._version[kind]] if kind in self._version else list(kind.versions)
        for version in versions:
            call = list_function(self.api, kind, version, namespace)
            options: dict[str, Any] = {"limit": limit}
            if token:
                options["_continue"] = token
            try:
                payload = read_json(
                    call(**options, _preload_content=False, _request_timeout=LIST_TIMEOUT_SECONDS)
                )
            except ApiException as exc:
                if exc.status == 404:
                    continue  # this version (or the whole CRD) is not served: try the next
                raise
            self._version[kind] = version
            api_version = f"{kind.group}/{version}" if kind.group else version
            items = payload.get("items") or []
            for item in items:
                item["apiVersion"], item["kind"] = api_version, kind.kind
            meta = payload.get("metadata") or {}
            remaining = meta.get("remainingItemCount")
            return Page(
                items, meta.get("continue") or None, remaining if isinstance(remaining, int) else None
            )
        raise NotServed(kind.plural)

    def served_version(self, kind: KindInfo) -> str | None:
        """The first version of `kind` the API server serves (one LIST of one item), None if none."""
        try:
            self.list_page(kind, None, 1, None)
        except NotServed:
            return None
        return self._version[kind]


class ReportStore:
    """Writes report objects with server-side apply under the `trainguard` field manager."""

    def __init__(self, api: client.ApiClient) -> None:
        self.custom = client.CustomObjectsApi(api)

    def apply(self, api: ReportApi, report: dict[str, Any]) -> None:
        meta = report["metadata"]
        kwargs: dict[str, Any] = {
            "field_manager": FIELD_MANAGER,
            "force": True,
            "_content_type": "application/apply-patch+yaml",
        }
        if meta.get("namespace"):
            self.custom.patch_namespaced_custom_object(
                api.group, api.version, meta["namespace"], api.plural, meta["name"], report, **kwargs
            )
        else:
            self.custom.patch_cluster_custom_object(
                api.group, api.version, api.cluster_plural, meta["name"], report, **kwargs
            )

    def delete(self, api: ReportApi, namespace: str | None, name: str) -> None:
        try:
            if namespace:
                self.custom.delete_namespaced_custom_object(
                    api.group, api.version, namespace, api.plural, name
                )
            else:
                self.custom.delete_cluster_custom_object(api.group, api.version, api.cluster_plural, name)
        except ApiException as exc:
            if exc.status != 404:
                raise

    def existing(self, api: ReportApi) -> set[tuple[str | None, str]]:
        """(namespace, name) of every report trainguard wrote, namespaced and cluster-scoped."""
        selector = ",".join(f"{k}={v}" for k, v in MANAGED_BY.items())
        found: set[tuple[str | None, str]] = set()
        for plural in (api.plural, api.cluster_plural):
            response = self.custom.list_cluster_custom_object(
                api.group, api.version, plural, label_selector=selector, _preload_content=False
            )
            items = read_json(response).get("items") or []
            for item in items:
                meta = item.get("metadata") or {}
                found.add((meta.get("namespace") or None, str(meta.get("name"))))
        return found


def slim(obj: Mapping[str, Any]) -> dict[str, Any]:
    """The object without what only costs memory here: managedFields, the last-applied copy."""
    meta = obj.get("metadata") if isinstance(obj.get("metadata"), Mapping) else {}
    assert isinstance(meta, Mapping)
    slimmed = {k: v for k, v in meta.items() if k != "managedFields"}
    annotations = slimmed.get("annotations")
    if isinstance(annotations, Mapping) and LAST_APPLIED in annotations:
        slimmed["annotations"] = {k: v for k, v in annotations.items() if k != LAST_APPLIED}
    return {**obj, "metadata": slimmed}


class WorkloadCaches:
    """A WatchCache per served kind (cluster-wide); `objects()` is the current set to audit.

    Kinds whose CRD is not installed when the server starts are not watched (a restart picks up a
    CRD installed later). Pods with a controlling owner are not kept: their owner is audited.
    """

    def __init__(self, api: client.ApiClient, on_change: Callable[[], None]) -> None:
        self._stop = threading.Event()
        lister = ClusterLister(api)
        self.caches: list[WatchCache] = []
        self.missing: list[str] = []
        for kind in KINDS:
            version = lister.served_version(kind)
            if version is None:
                self.missing.append(f"{kind.plural}.{kind.group or 'core'}")
                continue
            self.caches.append(WatchCache(self._resource(api, kind, version), on_change, self._stop))

    @staticmethod
    def _resource(api: client.ApiClient, kind: KindInfo, version: str) -> Resource:
        api_version = f"{kind.group}/{version}" if kind.group else version

        def value(obj: Mapping[str, Any]) -> dict[str, Any] | None:
            if kind.kind == "Pod" and not kind.group and controlled(obj):
                return None
            return {**slim(obj), "apiVersion": api_version, "kind": kind.kind}

        name = f"{kind.plural}.{kind.group or 'core'}"
        return Resource(name, list_function(api, kind, version, None), namespaced_key, value)

    def start(self) -> None:
        for cache in self.caches:
            cache.start()

    def stop(self) -> None:
        self._stop.set()
        for cache in self.caches:
            cache.interrupt()

    @property
    def synced(self) -> bool:
        """Every watched kind listed at least once."""
        return all(cache.synced.is_set() for cache in self.caches)

    def objects(self) -> Iterator[dict[str, Any]]:
        for cache in self.caches:
            yield from cache.snapshot().values()


# -- what the webhook knows from its caches, read once --------------------------------------------


def api_client(
    *, kubeconfig: str | None = None, context: str | None = None, in_cluster: bool = False
) -> client.ApiClient:
    """Credentials as kubectl finds them: --kubeconfig, else $KUBECONFIG or ~/.kube/config; or the
    pod's service account with --in-cluster. ClusterError when none is usable."""
    configuration = client.Configuration()
    try:
        if in_cluster:
            kube_config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
        else:
            kube_config.load_kube_config(  # type: ignore[no-untyped-call]
                config_file=kubeconfig, context=context, client_configuration=configuration
            )
    except (kube_config.ConfigException, OSError) as exc:
        raise ClusterError(f"cannot load cluster credentials: {exc}") from exc
    return client.ApiClient(configuration)


def _list_items(call: Callable[..., Any]) -> list[dict[str, Any]]:
    """One unpaginated LIST (small, cluster-level kinds); [] when the kind is not served."""
    try:
        return list(
            read_json(call(_preload_content=False, _request_timeout=LIST_TIMEOUT_SECONDS)).get("items") or []
        )
    except ApiException as exc:
        if exc.status == 404:
            return []
        raise


def listed_facts(api: client.ApiClient, file_exceptions: Sequence[PolicyException] = ()) -> ClusterFacts:
    """The ClusterFacts from one LIST of each source: PriorityClasses, TrainingRuntimes,
    PolicyException objects (after `file_exceptions`) and eviction records, as the webhook's
    caches hold them."""
    custom = client.CustomObjectsApi(api)
    priority_classes: dict[str, int] = {}
    for obj in _list_items(client.SchedulingV1Api(api).list_priority_class):
        name, value = name_key(obj), priority_value(obj)
        if name is not None and value is not None:
            priority_classes[name] = value
    runtimes: dict[tuple[str | None, str], dict[str, Any]] = {}
    for plural, key_of in (
        ("trainingruntimes", namespaced_key),
        ("clustertrainingruntimes", cluster_scoped_key),
    ):
        call = functools.partial(custom.list_cluster_custom_object, TRAINER_GROUP, TRAINER_VERSION, plural)
        for obj in _list_items(call):
            key = key_of(obj)
            if key is not None:
                runtimes[key] = object_value(obj)
    exceptions = [
        *file_exceptions,
        *(
            e
            for obj in _list_items(
                lambda **kw: custom.list_cluster_custom_object(
                    EXCEPTION_GROUP, EXCEPTION_VERSION, EXCEPTION_PLURAL, **kw
                )
            )
            if (e := exception_value(obj)) is not None
        ),
    ]
    # The records the resume gate reads (Kueue Workloads, the job kinds that count restarts), from
    # the same sources as the webhook's eviction caches.
    records: Evictions = {}
    for _, group, version, plural, kind in EVICTION_SOURCES:
        entries_of = eviction_value(f"{group}/{version}", kind)
        call = functools.partial(custom.list_cluster_custom_object, group, version, plural)
        for obj in _list_items(call):
            records.update(entries_of(obj) or ())
    return ClusterFacts(priority_classes, runtimes, tuple(exceptions), records)


@contextlib.contextmanager
def reading() -> Iterator[None]:
    """API errors while reading the cluster as ClusterError (exit 2 with a message, no traceback)."""
    try:
        yield
    except ApiException as exc:
        if not exc.status:  # the client's way of saying the connection failed
            raise ClusterError(f"cannot reach the API server: {exc.reason}") from None
        raise ClusterError(f"the API server refused a request: {exc.status} {exc.reason}") from None
    except HTTPError as exc:
        raise ClusterError(f"cannot reach the API server: {exc}") from None
