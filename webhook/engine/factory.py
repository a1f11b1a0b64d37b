"""One way to build an Engine from what a front door knows about the cluster.

`check`, `audit` and the webhook learn the cluster's facts differently (documents beside the
workloads, one LIST of each kind, watch caches), but decide with the same engine only when every
fact reaches it the same way: a front door that forgot the eviction records would patch a resumed
workload's pods differently. Each builds its engine here, from a ClusterFacts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from webhook.config import PlatformConfig
from webhook.context import Runtimes
from webhook.engine.compile import PolicySet
from webhook.engine.pipeline import Engine, Exemption


@dataclass(frozen=True, slots=True)
class ClusterFacts:
    """What the cluster says that decisions depend on (the platform's params are the config)."""

    priority_classes: Mapping[str, int] = field(default_factory=dict)  # PriorityClass name -> value
    runtimes: Runtimes = field(default_factory=dict)  # (namespace or None, name) -> TrainingRuntime
    exceptions: Sequence[Exemption] = ()  # PolicyExceptions, from files and from the cluster
    evictions: Mapping[str, dict[str, Any]] = field(default_factory=dict)  # context.eviction_key -> record


def build_engine(
    policies: PolicySet, config: PlatformConfig, facts: ClusterFacts | None = None, *, remember: int = 0
) -> Engine:
    """The engine every front door decides with; `remember` as Engine takes it (the webhook's)."""
    facts = facts if facts is not None else ClusterFacts()
    return Engine(
        policies,
        config,
        priority_classes=facts.priority_classes,
        runtimes=facts.runtimes,
        exceptions=facts.exceptions,
        cluster={"evictions": facts.evictions},
        remember=remember,
    )
