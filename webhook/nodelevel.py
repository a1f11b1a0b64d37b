"""Node-level Pods: the agents a node needs before anything else runs on it.

A CNI, CSI or GPU-operator agent that waits on a fail-closed webhook can keep a node from ever
becoming usable, the webhook's own node included. Such Pods are never sent to trainguard (the
webhook configurations' `not-node-level` matchCondition) and the engine leaves them alone too, so
`trainguard check` and the cluster decide them alike. This module is the Python side of that
definition; `webhookconfig` renders the CEL side and the tests hold the two to the same table.

A node-level Pod has an agent's shape and asks for no accelerator. The shapes:
- owned (as controller) by a DaemonSet;
- of priority class `system-node-critical` or `system-cluster-critical`;
- tolerating every taint (a toleration with `operator: Exists` and no key).
Asking for an accelerator is requesting (or limiting) one of the PlatformConfig's `accelerators`
in any container or init container, or any DRA claim. A Pod of one of these shapes that asks for
GPUs is decided like any other: a DaemonSet is a tenant's object like any workload, and a training job
must not slip past the webhook by borrowing an agent's shape. Agents (device plugins, feature
discovery, DCGM exporters) see the GPUs through the device plugin API, not by requesting them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from webhook.accelerators import AcceleratorTest

CRITICAL_PRIORITY_CLASSES = ("system-node-critical", "system-cluster-critical")


def node_level_reason(pod: Mapping[str, Any], accelerators: AcceleratorTest) -> str | None:
    """Why `pod` (a v1 Pod as a dict) is node-level; None when it is not. `accelerators` is the
    PlatformConfig's test (`webhook.accelerators.accelerators_of`)."""
    reason = None
    meta = pod.get("metadata")
    owners = meta.get("ownerReferences") if isinstance(meta, Mapping) else None
    for ref in owners if isinstance(owners, list) else ():
        if (
            isinstance(ref, Mapping)
            and ref.get("kind") == "DaemonSet"
            and str(ref.get("apiVersion", "")).startswith("apps/")
            and ref.get("controller") is True
        ):
            reason = f"node-level Pod: owned by DaemonSet {ref.get('name')}"
            break
    spec = pod.get("spec")
    if not isinstance(spec, Mapping):
        spec = {}
    if reason is None:
        priority_class = spec.get("priorityClassName")
        if priority_class in CRITICAL_PRIORITY_CLASSES:
            reason = f"node-level Pod: priority class {priority_class}"
        else:
            tolerations = spec.get("tolerations")
            for tol in tolerations if isinstance(tolerations, list) else ():
                if isinstance(tol, Mapping) and not tol.get("key") and tol.get("operator") == "Exists":
                    reason = "node-level Pod: tolerates every taint"
                    break
    # Every Pod admitted passes here: its containers are read only when the shape is an agent's.
    if reason is None or asks_for_accelerators(spec, accelerators):
        return None
    return reason


def asks_for_accelerators(spec: Mapping[str, Any], accelerators: AcceleratorTest) -> bool:
    """Any accelerator requested or limited by a container or init container, or a DRA claim."""
    # Presence, as the matchCondition's has() sees it.
    if "resourceClaims" in spec:
        return True
    containers: list[Any] = []
    for field in ("containers", "initContainers"):
        value = spec.get(field)
        if isinstance(value, list):
            containers += value
    for c in containers:
        resources = c.get("resources") if isinstance(c, Mapping) else None
        if not isinstance(resources, Mapping):
            continue
        if "claims" in resources:
            return True
        for part in ("requests", "limits"):
            amounts = resources.get(part)
            if isinstance(amounts, Mapping) and any(
                isinstance(name, str) and accelerators(name) for name in amounts
            ):
                return True
    return False
