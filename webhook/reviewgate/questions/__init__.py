"""The five platform review questions, one module each, answered for one workload.

    gang        multi-node -> gang + min-available enforced?
    topology    constrained (keys, levels, required or preferred) or best-effort declared?
    preemption  tier; checkpoint owner, interval, location; grace period per pod group
    recovery    restart bound, resume priority, cooldown
    pool        which pool it targets; shared with inference or isolated

Each module describes what the workload declares and where (the evidence), reading the object
*after* mutation; a piece of evidence a trainguard mutation put there names the policy that added
it. The verdict is not computed here: it is what the policies that answer the question (their
`trainguard.dev/review-question` annotation) concluded. A finding from one of them makes it
`needs attention`, a policy that ran and passed makes it `ok`, and when none of them applied it
is `not applicable`. A platform that edits a policy changes the review with it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from webhook.engine import PolicyResult
from webhook.reviewgate.questions import gang, pool, preemption, recovery, topology
from webhook.reviewgate.questions._facts import Described, Evidence, Facts
from webhook.reviewgate.questions.preemption import tier_source

Verdict = Literal["ok", "needs attention", "not applicable"]
OK: Verdict = "ok"
ATTENTION: Verdict = "needs attention"
NA: Verdict = "not applicable"

QUESTIONS: tuple[tuple[str, str], ...] = (
    ("gang", "Gang and min-available"),
    ("topology", "Topology"),
    ("preemption", "Preemption and checkpoints"),
    ("recovery", "Recovery"),
    ("pool", "Pool"),
)
_DESCRIBE: dict[str, Callable[[Facts], Described]] = {
    "gang": gang.describe,
    "topology": topology.describe,
    "preemption": preemption.describe,
    "recovery": recovery.describe,
    "pool": pool.describe,
}

__all__ = [
    "ATTENTION",
    "NA",
    "OK",
    "QUESTIONS",
    "Answer",
    "Evidence",
    "Facts",
    "Verdict",
    "answer_all",
    "tier_source",
]


@dataclass(frozen=True, slots=True)
class Answer:
    key: str
    question: str
    verdict: Verdict
    summary: str
    evidence: tuple[Evidence, ...] = ()


def answer_all(f: Facts) -> tuple[Answer, ...]:
    return tuple(answer(f, key, title) for key, title in QUESTIONS)


def answer(f: Facts, key: str, title: str) -> Answer:
    described = _DESCRIBE[key](f)
    results = f.answering(key)
    verdict, notes = _verdict(results)
    summary = " ".join([described.summary, *notes])
    # The findings' own fields and messages are in the report's Findings; the evidence is where
    # the workload declares what the question asks about.
    return Answer(key, title, verdict, summary, _unique(described.evidence))


_FINDINGS = ("fail", "warn", "audit", "error")


def _verdict(results: list[PolicyResult]) -> tuple[Verdict, list[str]]:
    """The verdict the answering policies' results give, and the sentences that say why."""
    found = [r.policy for r in results if r.outcome in _FINDINGS]
    waived = [r.policy for r in results if r.outcome == "exempt" and r.messages]
    exempt = [r.policy for r in results if r.outcome == "exempt"]
    ran = [r.policy for r in results if r.outcome != "skip"]
    notes = []
    if found:
        notes.append(f"Policy {', '.join(found)} reports a finding (see Findings).")
    if exempt:
        notes.append(f"Waived for {', '.join(exempt)} by a PolicyException (see Findings).")
    if found or waived:
        return ATTENTION, notes
    if ran:
        return OK, notes
    if not results:
        notes.append("No loaded policy answers this question.")
    return NA, notes


def _unique(evidence: list[Evidence]) -> tuple[Evidence, ...]:
    seen: set[tuple[str, str]] = set()
    out = []
    for e in evidence:
        ident = (e.field, repr(e.value))
        if ident not in seen:
            seen.add(ident)
            out.append(e)
    return tuple(out)
