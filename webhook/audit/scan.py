"""What to audit: every object of the supported kinds, page by page, plus the pods no workload owns.

The listing itself is a `Lister` (webhook.audit.cluster implements it with the kubernetes client);
this module only walks the pages, so memory stays bounded by one page however large the cluster.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from webhook.kinds import KINDS, KindInfo

DEFAULT_PAGE_SIZE = 500


class NotServed(Exception):
    """The API server does not serve this kind (its CRD is not installed)."""


@dataclass(frozen=True, slots=True)
class Page:
    items: list[dict[str, Any]]
    continue_token: str | None
    remaining: int | None  # the API server's remainingItemCount, when it knows it


class Lister(Protocol):
    def list_page(self, kind: KindInfo, namespace: str | None, limit: int, token: str | None) -> Page:
        """One LIST page of `kind` (all namespaces when `namespace` is None); NotServed if unknown."""


def controlled(obj: Mapping[str, Any]) -> bool:
    """True for an object that a controller owns (its owner is what gets audited)."""
    meta = obj.get("metadata")
    refs = meta.get("ownerReferences") if isinstance(meta, Mapping) else None
    return isinstance(refs, list) and any(
        isinstance(r, Mapping) and r.get("controller") is True for r in refs
    )


def scan(
    lister: Lister,
    namespace: str | None = None,
    *,
    kinds: tuple[KindInfo, ...] = KINDS,
    page_size: int = DEFAULT_PAGE_SIZE,
    on_page: Callable[[KindInfo, Page], None] | None = None,
    on_missing: Callable[[KindInfo], None] | None = None,
    max_pages: int = 1_000_000,
) -> Iterator[dict[str, Any]]:
    """Every object to audit, kind after kind; apiVersion and kind are set on each item.

    Pods with a controlling owner are left out here (cheaply, before any decision); pods that a
    workload owns only by labels are left out by the engine.
    """
    for kind in kinds:
        token: str | None = None
        for _ in range(max_pages):
            try:
                page = lister.list_page(kind, namespace, page_size, token)
            except NotServed:
                if on_missing is not None:
                    on_missing(kind)
                break
            if on_page is not None:
                on_page(kind, page)
            for item in page.items:
                item.setdefault("apiVersion", kind.api_versions[0])
                item.setdefault("kind", kind.kind)
                if kind.kind == "Pod" and kind.group == "" and controlled(item):
                    continue
                yield item
            token = page.continue_token
            if not token:
                break
