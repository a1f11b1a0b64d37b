"""The validating call's decision, made ahead, while the API server applies the mutating call's patch.

The API server calls /mutate, applies the patch (about a millisecond for a training Pod), and
calls /validate with the patched object. Once /mutate is answered, the webhook adapts the patched
object for that call (adaptations.py) and, where this module allows it, also decides it as the
validating call will: the Decision waits beside the adaptation, and the validating call that
brings the same object answers with it instead of evaluating the validating policies again.

The validating call must get the decision it would have made itself. Between the two calls the
API server sets the object's `metadata.uid`, `creationTimestamp`, `generation`, `resourceVersion`,
`status` and, for `generateName`, `metadata.name` (adaptations.py); the adaptation's key also
leaves out `metadata.managedFields`; the rest of the object is the same or the key does not
match. So a decision is made ahead (Conditions.made) only for a CREATE (an UPDATE's oldObject
would need a key of its own), and only when no validating policy reads those fields of `object`,
or `object` whole. It is used (Conditions.usable) only:

- by the engine that made it (a reload, or a changed cluster fact, builds another engine);
- for the same operation, namespace, userInfo and dryRun as the mutating call (request_key():
  the store hands a call only a decision made for its request, Adaptations.take);
- when no exception has expired since it was made (the decision reads the time only there);
- when the name is the mutating call's, or nothing in the validating phase can see a name: no
  policy reads `request.name`, `object.metadata.name` or `workload.name` (nor the whole of
  them), no exception names workloads, no eviction record is looked up for the workload.

Anything else, and the validating call decides as it always does.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from webhook.engine.model import Decision
from webhook.engine.reads import ELEMENT, Tree

# What the API server sets between the two calls, in `object.metadata` (the name apart), and what
# the adaptation's key leaves out besides (adaptations.py)
_SET_METADATA = frozenset(("uid", "creationTimestamp", "generation", "resourceVersion", "managedFields"))
_SOME_KEYS = ""  # reads.py: a map of which no key is read (sized), whose size the new keys change


@dataclass(frozen=True, slots=True)
class Ahead:
    """A validating decision made for an object a mutating call patched."""

    engine: object  # the token of the Engine that made it
    request: tuple[Any, ...]  # request_key() of the mutating call
    name: str | None  # the object's metadata.name when it was made (None: to be generated)
    made_at: datetime
    decision: Decision


def request_key(
    operation: str, namespace: str | None, user_info: Mapping[str, Any], dry_run: bool
) -> tuple[Any, ...]:
    """What a decision reads of the admission request besides the object and its name."""
    return (operation, namespace, dict(user_info), dry_run)


@dataclass(frozen=True, slots=True)
class Conditions:
    """When one Engine's validating decisions may be made ahead and used (see the module's docstring)."""

    made: bool  # no validating policy reads what the API server sets between the calls
    name_blind: bool  # nothing in the validating phase sees the object's name
    expiries: tuple[datetime, ...]  # when the engine's exceptions expire, in order

    @classmethod
    def of(
        cls,
        tree: Mapping[str, Tree],
        exceptions: Sequence[Any],
        *,
        evictions: bool,
    ) -> Conditions:
        """`tree`: what the validating policies read of each CEL variable (bindings.ReadPlan.tree,
        `request` included); `exceptions`: the engine's; `evictions`: whether it holds records."""
        expiries = [getattr(e, "expires_at", None) for e in exceptions]
        known = all(isinstance(at, datetime) for at in expiries)
        return cls(
            made=known and not _reads_set_fields(tree.get("object")),
            name_blind=(
                not _reads_key(tree.get("request"), "name")
                and not _reads_key(tree.get("workload"), "name")
                and not _reads_key((tree.get("object") or {}).get("metadata"), "name")
                and not (evictions and "cluster" in tree)
                and not any(getattr(e, "workloads", True) for e in exceptions)
            ),
            expiries=tuple(sorted(at for at in expiries if isinstance(at, datetime))),
        )

    def usable(self, ahead: Ahead, engine: object, name: str | None, now: datetime) -> bool:
        """Whether `ahead`, made for the call's request (Adaptations.take matches it), is the
        decision a validating call of `engine` for an object named `name` would make at `now`."""
        if ahead.engine is not engine:
            return False
        if any(ahead.made_at < at <= now for at in self.expiries):
            return False
        return ahead.name == name or self.name_blind


def _reads_set_fields(tree: Tree | None) -> bool:
    """Whether a read tree of `object` reaches what the API server sets between the two calls."""
    if tree is None:
        return False
    if _whole_or_keys(tree) or "status" in tree:
        return True
    meta = tree.get("metadata")
    return meta is not None and (_whole_or_keys(meta) or not _SET_METADATA.isdisjoint(meta))


def _reads_key(tree: Tree | None, key: str) -> bool:
    """Whether a read tree reaches `key` of its value (or the value whole, or its keys)."""
    return tree is not None and (_whole_or_keys(tree) or key in tree)


def _whole_or_keys(tree: Tree) -> bool:
    return not tree or ELEMENT in tree or _SOME_KEYS in tree
