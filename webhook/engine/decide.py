"""PolicyResults -> one Decision: modes and failurePolicy are applied here and nowhere else.

fail  + Enforce -> violation (deny)     error + Fail   -> violation naming the error
fail  + Warn    -> warning              error + Ignore -> warning naming the error
fail  + Audit   -> audit record         exempt         -> reported, never denies
"""

from __future__ import annotations

from webhook.engine.model import Decision, Finding, Outcome, Policy, PolicyResult


def _findings(policy: Policy, result: PolicyResult) -> list[Finding]:
    if result.outcome == "error":
        message = f"policy could not be evaluated ({'; '.join(result.messages)})"
        return [Finding(policy.name, message, None, "InternalError")]
    return [
        Finding(
            policy.name,
            message,
            (result.fields[i] if i < len(result.fields) else "") or None,
            result.reasons[i] if i < len(result.reasons) else "Forbidden",
        )
        for i, message in enumerate(result.messages)
    ]


def classify(policy: Policy, result: PolicyResult) -> PolicyResult:
    """Map a raw fail to the outcome its mode gives it (fail / warn / audit)."""
    if result.outcome == "fail" and policy.mode != "Enforce":
        outcome: Outcome = "warn" if policy.mode == "Warn" else "audit"
        return PolicyResult(
            result.policy,
            outcome,
            result.messages,
            result.fields,
            result.patch,
            result.exemption,
            result.reasons,
        )
    return result


def decide(decision: Decision, evaluated: list[tuple[Policy, PolicyResult]]) -> Decision:
    for policy, result in evaluated:
        result = classify(policy, result)
        decision.results.append(result)
        if result.outcome in ("pass", "skip", "exempt"):
            continue
        findings = _findings(policy, result)
        if result.outcome == "error":
            target = decision.violations if policy.failure_policy == "Fail" else decision.warnings
        elif result.outcome == "fail":
            target = decision.violations
        elif result.outcome == "warn":
            target = decision.warnings
        else:
            target = decision.audits
        target.extend(findings)
    decision.allowed = not decision.violations
    return decision
