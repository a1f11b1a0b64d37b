"""What every review question reads: the workload and its object after mutation, what changed
them, and where in the object a fact is written (the evidence)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from webhook import fields
from webhook.config import PlatformConfig
from webhook.engine import PolicyResult
from webhook.workloads import PodGroup, Workload

KUEUE_PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"


@dataclass(frozen=True, slots=True)
class Evidence:
    field: str  # rendered dotted path ("" for a fact that no single field holds)
    value: Any  # JSON-like; None for a field that is not set
    added_by: str | None = None  # the mutation policy that put it there
    pointer: str | None = None  # JSON pointer in the workload's object, when it has one


@dataclass(frozen=True, slots=True)
class Described:
    """A question's description of the workload: what it declares, where, without a verdict."""

    summary: str
    evidence: list[Evidence]


@dataclass(frozen=True, slots=True)
class Facts:
    """What the answers read: the workload and object after mutation, and what changed them."""

    workload: Workload  # after mutation
    obj: dict[str, Any]  # after mutation
    original: dict[str, Any]  # as written
    mutations: tuple[PolicyResult, ...]  # mutating results, in order
    results: Mapping[str, PolicyResult]  # every result by policy name
    config: PlatformConfig
    priority_values: Mapping[str, int]  # PriorityClass name -> value, where known
    # validating policy name -> the review question it answers (its trainguard.dev/review-question)
    questions: Mapping[str, str] = field(default_factory=dict)

    def evidence(self, ptr: str, value: Any = fields.MISSING) -> Evidence:
        """Evidence for the field at `ptr` of the object, with the mutation that added it, if one did."""
        now = fields.lookup(self.obj, ptr)
        before = fields.lookup(self.original, ptr)
        shown = (None if now is fields.MISSING else now) if value is fields.MISSING else value
        added = self.added_by(ptr) if now is not fields.MISSING and now != before else None
        return Evidence(fields.from_pointer(ptr), shown, added, ptr)

    def added_by(self, ptr: str) -> str:
        """The mutation policy whose patch last wrote `ptr`, one of its parents or its children."""
        found = "a trainguard mutation"
        for result in self.mutations:
            for op in result.patch:
                if _op_writes(op, ptr):
                    found = result.policy
        return found

    def field_evidence(self, field: str | None, value: Any = fields.MISSING) -> Evidence:
        """Evidence for a dotted field as adapters write it (possibly in another object)."""
        if not field:
            return Evidence("", None if value is fields.MISSING else value)
        path = fields.parse(field)
        if path.object is not None:
            return Evidence(fields.render(path), None if value is fields.MISSING else value)
        return self.evidence(fields.pointer(path, self.obj), value)

    def answering(self, key: str) -> list[PolicyResult]:
        """The results of the validating policies that answer question `key`, in policy order."""
        return [r for name, r in self.results.items() if self.questions.get(name) == key]


def _op_writes(op: Mapping[str, Any], ptr: str) -> bool:
    path = str(op.get("path", ""))
    if path.endswith("/-"):  # an append writes an element of the list
        return ptr.startswith(path[:-1])
    if path == ptr or path.startswith(ptr + "/"):
        return True
    if ptr.startswith(path + "/") and op.get("op") in ("add", "replace"):
        rest = ptr[len(path) :]
        return fields.lookup(op.get("value"), rest) is not fields.MISSING
    return False


def pods(n: int) -> str:
    return f"{n} pod" if n == 1 else f"{n} pods"


def base(g: PodGroup) -> str | None:
    """The JSON pointer of a group's pod template in this object ("" for a Pod), None when elsewhere."""
    if g.template_pointer or g.patchable:
        return g.template_pointer
    return None


def as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def metadata_keys(f: Facts, at: str, keys: tuple[str, ...]) -> list[Evidence]:
    out = []
    for where in ("labels", "annotations"):
        for key in keys:
            ptr = f"{at}/metadata/{where}/{fields.escape(key)}"
            if fields.lookup(f.obj, ptr) is not fields.MISSING:
                out.append(f.evidence(ptr))
    return out


def priority_evidence(f: Facts) -> list[Evidence]:
    """Where the workload's priority class (and Kueue WorkloadPriorityClass) are set."""
    w, obj = f.workload, f.obj
    out = []
    candidates = [f"{base(g)}/spec/priorityClassName" for g in w.groups if base(g) is not None]
    candidates += [
        "/spec/runPolicy/schedulingPolicy/priorityClass",
        "/spec/priorityClassName",
        f"/metadata/labels/{fields.escape('ray.io/priority-class-name')}",
    ]
    for ptr in dict.fromkeys(candidates):
        value = fields.lookup(obj, ptr)
        if value is not fields.MISSING and value == w.priority_class:
            out.append(f.evidence(ptr))
            break
    ptr = f"/metadata/labels/{fields.escape(KUEUE_PRIORITY_LABEL)}"
    if fields.lookup(obj, ptr) is not fields.MISSING:
        out.append(f.evidence(ptr))
    return out
