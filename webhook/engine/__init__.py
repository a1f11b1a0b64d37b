"""The engine's public face: everything a front door (webhook, CLI, review gate, policy tests,
audit) and the tests outside ``tests/engine`` may import from the engine.

The submodules are the engine's own business (load → compile → adapt → for each phase, which
policies apply, then their one program or the generic path → decide; ``pipeline`` runs it,
``phase`` evaluates a phase); importing them from outside is refused by the layer contract in
``.importlinter``.
"""

from __future__ import annotations

from webhook.engine.adaptations import Adaptations
from webhook.engine.compile import CompiledPolicy, PolicySet, load_policy_set
from webhook.engine.factory import ClusterFacts, build_engine
from webhook.engine.load import default_policies_dir, policy_files
from webhook.engine.model import Decision, Finding, Outcome, Policy, PolicyResult
from webhook.engine.pipeline import AdmissionInput, Engine
from webhook.engine.waivers import (
    PolicyException,
    exemption_for,
    load_exceptions,
    parse_exception,
    unknown_policies,
)
from webhook.workloads import Deferred

__all__ = [
    "Adaptations",
    "AdmissionInput",
    "ClusterFacts",
    "CompiledPolicy",
    "Decision",
    "Deferred",
    "Engine",
    "Finding",
    "Outcome",
    "Policy",
    "PolicyException",
    "PolicyResult",
    "PolicySet",
    "build_engine",
    "default_policies_dir",
    "exemption_for",
    "load_exceptions",
    "load_policy_set",
    "parse_exception",
    "policy_files",
    "unknown_policies",
]
