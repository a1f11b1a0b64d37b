"""One way to build an Engine from what a front door knows about the cluster.

`check`, `review`, `test`, `audit` and the webhook learn the cluster's facts differently (documents
beside the workloads, one LIST of each kind, watch caches), but decide with the same engine only
when every fact reaches it the same way: a front door that forgot the eviction records would patch
a resumed workload's pods differently. Each builds its engine here, from a ClusterFacts.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from webhook.config import PlatformConfig
from webhook.context import Runtimes, context_objects, evictions
from webhook.engine.adaptations import Adaptations
from webhook.engine.compile import PolicySet
from webhook.engine.phase import Exemption
from webhook.engine.pipeline import Engine


@dataclass(frozen=True, slots=True)
class ClusterFacts:
    """What the cluster says that decisions depend on (the platform's params are the config).

    A value: the mappings are copied and read-only, so a source that keeps changing its own
    (a watch cache, a CLI run reading more documents) cannot change an engine built from it.
    """

    priority_classes: Mapping[str, int] = field(default_factory=dict)  # PriorityClass name -> value
    runtimes: Runtimes = field(default_factory=dict)  # (namespace or None, name) -> TrainingRuntime
    exceptions: Sequence[Exemption] = ()  # PolicyExceptions, from files and from the cluster
    evictions: Mapping[str, dict[str, Any]] = field(default_factory=dict)  # context.eviction_key -> record

    def __post_init__(self) -> None:
        # frozen: the dataclass's own __setattr__ refuses, even here
        object.__setattr__(self, "priority_classes", MappingProxyType(dict(self.priority_classes)))
        object.__setattr__(self, "runtimes", MappingProxyType(dict(self.runtimes)))
        object.__setattr__(self, "exceptions", tuple(self.exceptions))
        object.__setattr__(self, "evictions", MappingProxyType(dict(self.evictions)))

    @classmethod
    def of_objects(cls, objects: Iterable[Any], exceptions: Sequence[Exemption] = ()) -> ClusterFacts:
        """The facts a list of objects holds (manifests, a policy test's resources): the
        TrainingRuntimes and PriorityClasses among them and the evictions their status records,
        later objects winning; `exceptions` as loaded from their files."""
        items = list(objects)
        runtimes, priority_classes = context_objects(items)
        return cls(priority_classes, runtimes, exceptions, evictions(items))


def build_engine(
    policies: PolicySet,
    config: PlatformConfig,
    facts: ClusterFacts | None = None,
    *,
    adaptations: Adaptations | None = None,
) -> Engine:
    """The engine every front door decides with; `adaptations` as Engine takes it (the webhook's)."""
    facts = facts if facts is not None else ClusterFacts()
    return Engine(
        policies,
        config,
        priority_classes=facts.priority_classes,
        runtimes=facts.runtimes,
        exceptions=facts.exceptions,
        cluster={"evictions": facts.evictions},
        adaptations=adaptations,
    )
