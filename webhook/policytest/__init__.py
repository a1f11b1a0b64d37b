"""Declarative policy tests: `PolicyTest` files, run on the webhook's engine (Kyverno-test style).

    apiVersion: trainguard.dev/v1alpha1
    kind: PolicyTest
    metadata: {name: gang-required}
    policies: [../../policies/gang-required.yaml]   # relative to this file; omitted: the shipped set
    config: platform.yaml                            # or an inline PlatformConfig mapping; optional
    request: {operation: CREATE, namespace: team-a}   # defaults: CREATE, default
    exceptions: [exceptions.yaml]                    # files and/or inline PolicyExceptions; optional
    now: "2026-06-01T00:00:00Z"                       # the clock exceptions expire by; optional
    resources: [resources/job.yaml, {apiVersion: v1, kind: Pod, ...}]
    oldResources: [...]                              # UPDATE: matched by apiVersion/kind/namespace/name
    cases:
      - name: multi-node-without-gang-is-denied
        resource: no-gang             # name, Kind/name, namespace/name or Kind/namespace/name
        policy: gang-required
        result: fail                  # pass | fail | warn | audit | skip | error | exempt
        message: "no gang mechanism"  # optional regex, searched in the joined messages
        patchedResource: {...}        # optional: the whole object after the whole set's patch
        skip: "reason"                # optional: report the case as skipped

`result` is the policy's PolicyResult outcome as the engine reports it: a mutation policy that
matched is `pass` whether or not it changed anything (idempotent mutations change nothing the
second time), so what a mutation did is asserted with `patchedResource`. A case whose object the
engine does not decide at all (not a workload, excluded namespace) is `skip`. A malformed file
raises InputError naming file and field (the CLI exits 2).
"""

from __future__ import annotations

from webhook.policytest.diff import differences
from webhook.policytest.load import discover, load_test_file
from webhook.policytest.model import CaseResult, PolicyTestCase, PolicyTestFile, Resource, display_path
from webhook.policytest.run import Runner, check_policy_names, run_case, run_file, untested_policies

__all__ = [
    "CaseResult",
    "PolicyTestCase",
    "PolicyTestFile",
    "Resource",
    "Runner",
    "check_policy_names",
    "differences",
    "discover",
    "display_path",
    "load_test_file",
    "run_case",
    "run_file",
    "untested_policies",
]
