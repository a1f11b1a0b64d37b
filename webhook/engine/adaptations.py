"""Adaptations a mutating call leaves for the validating call that follows it on the same object.

The API server calls /mutate, applies the patch, and calls /validate with the patched object.
Adapting that object again from scratch is about a third of the validating call's engine time, so
the mutating call files the patched object's adaptation here, by content, and the validating call
takes it instead of adapting.

What the API server adds between the two calls was checked with a real kube-apiserver (v1.34,
creates of a Pod, a batch Job and a PyTorchJob): `metadata.uid`, `metadata.creationTimestamp`,
`metadata.generation`, `status` (a Pod's phase and QoS class) and, for an object created with
`generateName`, `metadata.name`; no defaults on what the patch added. None of the first four
reach an adaptation, and the name reaches only `Workload.name` (tests/engine/test_adaptations.py
holds both over the corpus), so the key leaves them out and a hit takes the caller's name. A
name is left out only when it is one the API server could have generated from the object's
`generateName`; any other change to the object changes the key, and so never hits. A batch Job
always misses: the API server also adds its `spec.selector` and the pod template's
controller-uid and job-name labels, and adaptations read template labels. The key also leaves
out `metadata.managedFields`, which no adaptation reads (the watch caches drop them too): half of
a real Pod's text, and the dearest half to put in canonical order.

The key also holds the namespace the object is adapted in and a digest of everything else an
adaptation reads (the platform config, the TrainingRuntimes and PriorityClasses known): engines
rebuilt on other facts share one store without sharing answers.

Beside an adaptation, the store keeps the validating decisions made ahead for it (ahead.py), one
per mutating call that asked for one: each handed out once, to a call for the same request that
finds the adaptation. Pods created at once from one template (a Job's, a JobSet's) are the same
object, so several mutating calls leave theirs under one key before their validating calls come.

Bounded by bytes (the canonical JSON text of the objects kept, a measure of their adapted size)
and by entries; the least recently used go first. Thread-safe: the server decides on its event
loop and on deciding threads at once.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
import threading
from collections import OrderedDict, deque
from collections.abc import Callable, Mapping
from time import monotonic
from typing import Any

import orjson

from webhook.config import PlatformConfig
from webhook.engine.ahead import Ahead
from webhook.workloads import AdaptContext, Workload, build_workload, workload_name

# Set by the API server between the mutating and the validating call (see above), and the field
# managers' record. Never read by an adaptation.
_KEYLESS_METADATA = frozenset(("uid", "creationTimestamp", "generation", "resourceVersion", "managedFields"))
# What names.SimpleNameGenerator appends to generateName (cut to 58 characters): 5 of these.
_GENERATED_SUFFIX = re.compile(r"[bcdfghjklmnpqrstvwxz2456789]{5}")
_GENERATED_PREFIX_LENGTH = 58
# One object may take at most this share of the store: a few huge objects cannot flush it.
_LARGEST_SHARE = 4
# Mutating calls whose adaptation waits for settle() at most; more are dropped (never filed).
_PENDING_KEPT = 64
# Decisions made ahead kept for one object at most (a worker decides 8 admissions at once)
_AHEADS_KEPT = 16

Key = tuple[str | None, bytes, bytes]
# Decides the adapted object as its validating call would (ahead.py), giving up (Deferred) at the
# time.monotonic() instant it is given
AheadMaker = Callable[[Workload, float], Ahead]


@dataclasses.dataclass(slots=True)
class _Entry:
    workload: Workload
    size: int
    aheads: list[Ahead]  # each taken by one call that finds the entry, oldest first


class Adaptations:
    """Workloads adapted from objects, kept by content for a later call on the same object."""

    DEFAULT_MAX_BYTES = 4 * 1024 * 1024  # about 350 training Pods of 12 KB; 1.4 times that in memory
    DEFAULT_MAX_ENTRIES = 1024
    DEFAULT_AHEAD_SECONDS = 0.02  # serve's inline slice: what an inline decision may take

    def __init__(
        self,
        max_bytes: int | None = None,
        *,
        max_entries: int | None = None,
        on_lookup: Callable[[bool], None] | None = None,
        ahead_seconds: float = DEFAULT_AHEAD_SECONDS,
    ) -> None:
        """`on_lookup(hit)` is told the outcome of every lookup (the server counts them);
        `ahead_seconds` bounds a decision made ahead (settle() runs on the server's event loop)."""
        self.max_bytes = self.DEFAULT_MAX_BYTES if max_bytes is None else max_bytes
        self.max_entries = self.DEFAULT_MAX_ENTRIES if max_entries is None else max_entries
        if self.max_bytes < 0 or self.max_entries < 0:
            raise ValueError("the bounds of the adaptations kept must not be negative")
        self.bytes = 0
        self.ahead_seconds = ahead_seconds
        self._on_lookup = on_lookup
        self._kept: OrderedDict[Key, _Entry] = OrderedDict()
        self._pending: deque[
            tuple[dict[str, Any], AdaptContext, bytes, Workload | None, AheadMaker | None]
        ] = deque(maxlen=_PENDING_KEPT)
        self._lock = threading.Lock()

    @property
    def enabled(self) -> bool:
        return self.max_bytes > 0 and self.max_entries > 0

    @property
    def entries(self) -> int:
        """How many adaptations are kept (no __len__: an empty store is still a store)."""
        return len(self._kept)

    def leave(
        self,
        obj: dict[str, Any],
        ctx: AdaptContext,
        facts: bytes,
        workload: Workload | None = None,
        ahead: AheadMaker | None = None,
    ) -> None:
        """Keep `obj`'s adaptation for a call that will bring it back: `workload` when the caller
        has it, else adapted by settle(), after the caller has answered; with the decision
        `ahead(workload)` makes there, when given. `facts`: facts_digest() of the engine whose
        context `ctx` is. `obj` must not change afterwards."""
        if self.enabled:
            with self._lock:
                self._pending.append((obj, ctx, facts, workload, ahead))

    def settle(self) -> None:
        """Adapt, decide ahead and keep what leave() was given. Never raises: an object that
        cannot be adapted or decided here (or would defer) is not kept, or kept without its
        decision, and its validating call adapts or decides it itself and says what went wrong."""
        while True:
            with self._lock:
                if not self._pending:
                    return
                obj, ctx, facts, workload, ahead = self._pending.popleft()
            if workload is None:
                try:
                    workload = build_workload(obj, ctx)
                except Exception:  # InputError, Deferred: the validating call meets them itself
                    continue
            if workload is None:
                continue
            made = None
            if ahead is not None:
                try:
                    made = ahead(workload, monotonic() + self.ahead_seconds)
                except Exception:  # Deferred, or what the validating call will meet and report
                    made = None
            key, size = self._key(obj, ctx.namespace, facts)
            self._put(key, size, workload, made)

    def adapt(self, obj: dict[str, Any], ctx: AdaptContext, facts: bytes) -> Workload | None:
        """`obj`'s adaptation: the one kept for its content when there is one, else build_workload()."""
        return self.take(obj, ctx, facts)[0]

    def take(
        self, obj: dict[str, Any], ctx: AdaptContext, facts: bytes, request: tuple[Any, ...] | None = None
    ) -> tuple[Workload | None, Ahead | None]:
        """As adapt(), with a decision made ahead for the adaptation found, for `request`
        (ahead.request_key()), taken: no other call gets it. None when there is none, or when
        `request` is None (adapt() takes none)."""
        if not self.enabled:
            return build_workload(obj, ctx), None
        self.settle()
        key, _ = self._key(obj, ctx.namespace, facts)
        with self._lock:
            found = self._kept.get(key)
            ahead = None
            if found is not None:
                self._kept.move_to_end(key)
                ahead = _taken(found.aheads, request)
        if self._on_lookup is not None:
            self._on_lookup(found is not None)
        if found is None:
            return build_workload(obj, ctx), None
        workload = found.workload
        name = _workload_name(obj)
        return (workload if workload.name == name else dataclasses.replace(workload, name=name)), ahead

    def _put(self, key: Key, size: int, workload: Workload, ahead: Ahead | None) -> None:
        if size * _LARGEST_SHARE > self.max_bytes:
            return
        with self._lock:
            old = self._kept.pop(key, None)
            aheads = []
            if old is not None:
                self.bytes -= old.size
                aheads = old.aheads
            if ahead is not None:
                aheads.append(ahead)
                del aheads[:-_AHEADS_KEPT]  # the oldest go first
            while self._kept and (self.bytes + size > self.max_bytes or len(self._kept) >= self.max_entries):
                _, dropped = self._kept.popitem(last=False)
                self.bytes -= dropped.size
            self._kept[key] = _Entry(workload, size, aheads)
            self.bytes += size

    @staticmethod
    def _key(obj: dict[str, Any], namespace: str | None, facts: bytes) -> tuple[Key, int]:
        text = orjson.dumps(_as_adapted(obj), option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS)
        return (namespace, facts, hashlib.blake2b(text, digest_size=32).digest()), len(text)


def _taken(aheads: list[Ahead], request: tuple[Any, ...] | None) -> Ahead | None:
    """The oldest of `aheads` made for `request`, removed from the list; None for None."""
    if request is None:
        return None
    for i, ahead in enumerate(aheads):
        if ahead.request == request:
            return aheads.pop(i)
    return None


def facts_digest(
    config: PlatformConfig, runtimes: Mapping[Any, Any], priority_classes: Mapping[str, int]
) -> bytes:
    """A digest of what an adaptation reads beside the object (AdaptContext's config, runtimes and
    PriorityClasses): computed once per engine, part of every key."""
    text = orjson.dumps(
        [config.raw, sorted(([*k, v] for k, v in runtimes.items()), key=repr), priority_classes],
        option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS,
    )
    return hashlib.blake2b(text, digest_size=32).digest()


def _as_adapted(obj: dict[str, Any]) -> dict[str, Any]:
    """`obj` without what the API server sets between the two calls (see the module's docstring)."""
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        return obj
    kept = {k: v for k, v in meta.items() if k not in _KEYLESS_METADATA}
    if _generated(kept.get("name"), kept.get("generateName")):
        del kept["name"]
    out = {k: v for k, v in obj.items() if k != "status"}
    out["metadata"] = kept
    return out


def _generated(name: Any, prefix: Any) -> bool:
    """Whether `name` is one the API server may have generated from `prefix` (generateName)."""
    if not isinstance(name, str) or not isinstance(prefix, str) or not prefix:
        return False
    base = prefix[:_GENERATED_PREFIX_LENGTH]
    if len(name) != len(base) + 5 or not name.startswith(base):
        return False
    return _GENERATED_SUFFIX.fullmatch(name, len(base)) is not None


def _workload_name(obj: dict[str, Any]) -> str:
    """The name an adaptation gives `obj`'s workload."""
    meta = obj.get("metadata")
    return workload_name(meta) if isinstance(meta, dict) else ""
