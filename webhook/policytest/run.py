"""Running cases on the webhook's engine: one compiled set per policy list, one engine per file."""

from __future__ import annotations

import copy
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from webhook.engine import (
    AdmissionInput,
    ClusterFacts,
    Engine,
    PolicySet,
    build_engine,
    load_policy_set,
)
from webhook.errors import InputError
from webhook.policytest.diff import (
    differences,
)
from webhook.policytest.model import (
    CaseResult,
    PolicyTestCase,
    PolicyTestFile,
    display_path,
)


@dataclass
class Runner:
    """Runs cases, compiling each policy set once per backend and building each file's engine once."""

    backend: str | None = None
    _sets: dict[tuple[str, ...], PolicySet] = field(default_factory=dict)
    _engines: dict[Path, Engine] = field(default_factory=dict)

    def policy_set(self, test: PolicyTestFile) -> PolicySet:
        key = tuple(str(p) for p in test.policies)
        if key not in self._sets:
            self._sets[key] = load_policy_set(list(test.policies), self.backend)
        return self._sets[key]

    def engine(self, test: PolicyTestFile) -> Engine:
        if test.path not in self._engines:
            policies = self.policy_set(test)
            check_policy_names(test, policies)
            facts = ClusterFacts.of_objects((r.obj for r in test.resources), test.exceptions)
            self._engines[test.path] = build_engine(policies, test.config, facts)
        return self._engines[test.path]

    def run(self, test: PolicyTestFile, case: PolicyTestCase) -> CaseResult:
        if case.skip is not None:
            return CaseResult(test, case, "skipped", case.skip)
        engine = self.engine(test)
        decision = engine.decide(
            AdmissionInput(
                object=copy.deepcopy(case.resource.obj),
                operation=test.operation,
                old_object=copy.deepcopy(case.old.obj) if case.old else None,
                namespace=test.namespace,
                user_info=test.user_info,
            ),
            now=test.now,
        )
        result = next((x for x in decision.results if x.policy == case.policy), None)
        messages: tuple[str, ...]
        if result is None:
            outcome, messages = "skip", (decision.skipped_reason or "policy not evaluated",)
        else:
            outcome, messages = result.outcome, result.messages
        joined = "\n".join(messages)
        if outcome != case.result:
            detail = f": {'; '.join(messages)}" if messages else ""
            return CaseResult(test, case, "failed", f"expected {case.result}, got {outcome}{detail}", outcome)
        if case.message is not None and not case.message.search(joined):
            return CaseResult(
                test, case, "failed", f"message /{case.message.pattern}/ not found in {joined!r}", outcome
            )
        if case.patched_resource is not None:
            diffs = differences(case.patched_resource, decision.mutated)
            if diffs:
                return CaseResult(
                    test, case, "failed", f"patchedResource differs: {'; '.join(diffs)}", outcome
                )
        return CaseResult(test, case, "passed", None, outcome)


def run_case(
    test: PolicyTestFile, case: PolicyTestCase, *, backend: str | None = None, runner: Runner | None = None
) -> CaseResult:
    """Run one case (for pytest parametrization); pass a shared Runner to compile policies once."""
    return (runner or Runner(backend)).run(test, case)


def run_file(test: PolicyTestFile, runner: Runner) -> Iterator[CaseResult]:
    for case in test.cases:
        yield runner.run(test, case)


def check_policy_names(test: PolicyTestFile, policies: PolicySet) -> None:
    names = set(policies.names())
    for case in test.cases:
        if case.policy not in names:
            raise InputError(
                f"policy {case.policy!r} is not in the tested policy set ({', '.join(sorted(names))})",
                source=str(test.path),
                field=f"cases[{case.index}].policy",
            )


def untested_policies(tests: Iterable[PolicyTestFile], runner: Runner) -> list[tuple[str, str]]:
    """(policy, file) for every policy of the tested sets that no case names."""
    named: set[str] = set()
    available: dict[str, str] = {}
    for test in tests:
        named.update(c.policy for c in test.cases)
        for cp in runner.policy_set(test).policies:
            available.setdefault(cp.name, display_path(Path(cp.policy.path)))
    return sorted((name, path) for name, path in available.items() if name not in named)
