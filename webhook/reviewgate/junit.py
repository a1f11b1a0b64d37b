"""Report -> JUnit XML, for CI systems that show test results (GitLab, Jenkins, Azure, …).

A <testsuite> per file; a <testcase> per workload × validating policy, named
`<Kind>/<namespace>/<name> :: <policy>`. A denial is a <failure>, an evaluation error that denies
is an <error>, a policy that does not apply or is exempted is <skipped> with the reason, and
warnings and audit records go to <system-out> of a passing case.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections import Counter

from webhook.engine import PolicyResult, PolicySet
from webhook.reviewgate.report import FindingRecord, Report, WorkloadReview


def render(report: Report) -> str:
    root = ET.Element("testsuites", name="trainguard review")
    totals: Counter[str] = Counter()
    for path in report.files:
        suite = ET.SubElement(root, "testsuite", name=path)
        counts: Counter[str] = Counter()
        for review in (r for r in report.reviews if r.doc.path == path):
            for result in review.results(report.policies):
                counts[_case(suite, path, review, result, report.policies)] += 1
        _count(suite, counts)
        totals.update(counts)
    _count(root, totals)
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def _count(element: ET.Element, counts: Counter[str]) -> None:
    element.set("tests", str(sum(counts.values())))
    for key in ("failures", "errors", "skipped"):
        element.set(key, str(counts[key]))


def _case(
    suite: ET.Element, path: str, review: WorkloadReview, result: PolicyResult, policies: PolicySet
) -> str:
    """Append the testcase; returns which counter it adds to (passed, failures, errors, skipped)."""
    case = ET.SubElement(suite, "testcase", classname=path, name=f"{review.ident} :: {result.policy}")
    findings = [f for f in review.findings if f.policy == result.policy]
    outcome = result.outcome
    if outcome == "error":
        fail = next(
            (cp.policy.failure_policy == "Fail" for cp in policies.policies if cp.name == result.policy), True
        )
        if fail:
            _detail(
                case,
                "error",
                "; ".join(result.messages) or "policy could not be evaluated",
                "error",
                findings,
            )
            return "errors"
        _output(case, findings)
        return "passed"
    if outcome == "fail":
        _detail(case, "failure", findings[0].message if findings else "denied", "deny", findings)
        return "failures"
    if outcome == "skip":
        ET.SubElement(
            case, "skipped", message=f"not applicable: {'; '.join(result.messages) or 'not matched'}"
        )
        return "skipped"
    if outcome == "exempt":
        ET.SubElement(case, "skipped", message=f"exempted: {result.exemption or ''}")
        _output(case, [f for f in findings if f.message])
        return "skipped"
    _output(case, findings)
    return "passed"


def _detail(case: ET.Element, tag: str, message: str, kind: str, findings: list[FindingRecord]) -> None:
    element = ET.SubElement(case, tag, message=message, type=kind)
    element.text = "\n".join(_line(f) for f in findings) or message


def _output(case: ET.Element, findings: list[FindingRecord]) -> None:
    if findings:
        ET.SubElement(case, "system-out").text = "\n".join(f"{f.level}: {_line(f)}" for f in findings)


def _line(f: FindingRecord) -> str:
    where = f"{f.location.path}:{f.location.line}"
    return f"{where}: {f.field}: {f.message}" if f.field else f"{where}: {f.message}"
