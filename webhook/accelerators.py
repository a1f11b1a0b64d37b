"""The extended resources that are accelerators: the one list the adapters (GPU counts), the engine's
node-level skip and the webhook configurations' `not-node-level` matchCondition all read."""

from __future__ import annotations

import re

ACCELERATORS: frozenset[str] = frozenset(
    (
        "nvidia.com/gpu",
        "nvidia.com/gpu.shared",
        "amd.com/gpu",
        "google.com/tpu",
        "aws.amazon.com/neuron",
        "aws.amazon.com/neuroncore",
        "habana.ai/gaudi",
    )
)
# MIG slices (nvidia.com/mig-1g.5gb, nvidia.com/mig-3g.40gb, …): written for RE2 too, since the
# matchCondition's CEL `matches()` uses it as it stands.
MIG_PATTERN = r"^nvidia\.com/mig-[0-9]+g\.[0-9]+gb$"
_MIG = re.compile(MIG_PATTERN)


def is_accelerator_name(resource: str) -> bool:
    return resource in ACCELERATORS or (
        resource.startswith("nvidia.com/mig-") and _MIG.match(resource) is not None
    )
