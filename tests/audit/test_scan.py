"""The scan walks every page of every kind, leaves controller-owned pods to their owners, and names
kinds the API server does not serve (the real API server's paging is covered in tests/e2e)."""

from __future__ import annotations

from webhook.audit.scan import NotServed, Page, scan
from webhook.kinds import KINDS, KindInfo


class PagedLister:
    """Serves `objects[kind.plural]` `limit` at a time, with a continue token; records each call."""

    def __init__(self, objects: dict[str, list[dict]], served: set[str]) -> None:
        self.objects, self.served = objects, served
        self.calls: list[tuple[str, str | None, int, str | None]] = []

    def list_page(self, kind: KindInfo, namespace: str | None, limit: int, token: str | None) -> Page:
        self.calls.append((kind.plural, namespace, limit, token))
        if kind.plural not in self.served:
            raise NotServed(kind.plural)
        items = self.objects.get(kind.plural, [])
        start = int(token or 0)
        page = [dict(o) for o in items[start : start + limit]]
        more = start + limit < len(items)
        return Page(page, str(start + limit) if more else None, len(items) - start - limit if more else None)


def pod(name: str, owner: str | None = None) -> dict:
    meta: dict = {"name": name, "namespace": "ns"}
    if owner:
        meta["ownerReferences"] = [{"kind": "ReplicaSet", "name": owner, "controller": True}]
    return {"metadata": meta}


def test_every_page_is_read_and_owned_pods_are_left_out() -> None:
    jobs = [{"metadata": {"name": f"job-{i}", "namespace": "ns"}} for i in range(7)]
    pods = [pod("bare-1"), pod("web-abc", owner="web"), pod("bare-2")]
    lister = PagedLister({"pytorchjobs": jobs, "pods": pods}, {"pytorchjobs", "pods", "deployments"})
    missing: list[str] = []
    found = list(scan(lister, "ns", page_size=3, on_missing=lambda k: missing.append(k.plural)))
    names = [o["metadata"]["name"] for o in found]
    assert names == [f"job-{i}" for i in range(7)] + ["bare-1", "bare-2"]
    assert [c[3] for c in lister.calls if c[0] == "pytorchjobs"] == [None, "3", "6"]
    assert all(c[1] == "ns" and c[2] == 3 for c in lister.calls)
    assert found[0]["kind"] == "PyTorchJob" and found[0]["apiVersion"] == "kubeflow.org/v1"
    assert len(missing) == len(KINDS) - 3
    assert "rayjobs" in missing and "deployments" not in missing


def test_progress_bar_reaches_its_total_when_owned_pods_are_skipped() -> None:
    import io

    from tqdm import tqdm

    from webhook.cli.audit import _counter

    pods = [pod(f"p-{i}", owner="rs" if i % 3 == 0 else None) for i in range(10)]
    lister = PagedLister(
        {"pods": pods, "pytorchjobs": [{"metadata": {"name": "j"}}]}, {"pods", "pytorchjobs"}
    )
    bar = tqdm(total=0, file=io.StringIO())
    for _ in scan(lister, page_size=4, on_page=_counter(bar)):
        bar.update(1)
    assert (bar.n, bar.total) == (11, 11)
