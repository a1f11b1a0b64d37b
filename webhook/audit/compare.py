"""Preview a policy change: the same stored objects decided by the current set and by a proposed one.

A workload *newly fails* when it fails (or errors) under the proposed set and did not under the
current one; it *newly passes* the other way round. The policies behind each change are listed:
those failing only under the proposed set, and those failing only under the current one.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from webhook.audit.decide import ObjectAudit, ObjectRef, Result


@dataclass(frozen=True, slots=True)
class Change:
    ref: ObjectRef
    before: Result
    after: Result
    policies: tuple[str, ...]  # failing only after (newly failing) or only before (newly passing)
    messages: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Comparison:
    newly_failing: tuple[Change, ...]
    newly_passing: tuple[Change, ...]
    unchanged: int

    def records(self) -> dict[str, object]:
        def one(c: Change) -> dict[str, object]:
            return {
                "apiVersion": c.ref.api_version,
                "kind": c.ref.kind,
                "namespace": c.ref.namespace,
                "name": c.ref.name,
                "uid": c.ref.uid,
                "before": c.before,
                "after": c.after,
                "policies": list(c.policies),
                "messages": list(c.messages),
            }

        return {
            "newlyFailing": [one(c) for c in self.newly_failing],
            "newlyPassing": [one(c) for c in self.newly_passing],
            "unchanged": self.unchanged,
        }


def _failing(audit: ObjectAudit | None, level: Result) -> dict[str, str]:
    if audit is None:
        return {}
    return {r.policy: r.message for r in audit.failing(level)}


def compare(
    pairs: Iterable[tuple[ObjectAudit | None, ObjectAudit | None]], *, level: Result = "fail"
) -> Comparison:
    """`pairs`: (current, proposed) audits of the same object; None where a set does not decide it."""
    failing: list[Change] = []
    passing: list[Change] = []
    unchanged = 0
    for before, after in pairs:
        either = after or before
        if either is None:
            continue
        ref = either.ref
        old, new = _failing(before, level), _failing(after, level)
        old_verdict = before.verdict if before is not None else "pass"
        new_verdict = after.verdict if after is not None else "pass"
        if new and not old:
            added = sorted(set(new) - set(old))
            failing.append(Change(ref, old_verdict, new_verdict, tuple(added), tuple(new[p] for p in added)))
        elif old and not new:
            gone = sorted(set(old) - set(new))
            passing.append(Change(ref, old_verdict, new_verdict, tuple(gone), tuple(old[p] for p in gone)))
        else:
            unchanged += 1
    key = _sort_key
    return Comparison(tuple(sorted(failing, key=key)), tuple(sorted(passing, key=key)), unchanged)


def _sort_key(c: Change) -> tuple[str, str, str]:
    return (c.ref.namespace or "", c.ref.kind, c.ref.name)
