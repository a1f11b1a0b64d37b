"""Deployment and StatefulSet (apps/v1): `replicas` pods of one template; inference role.

Kueue's Deployment and StatefulSet integrations read the queue label from the object and copy it
to the pod template; a label found only on the template is read too.
"""

from __future__ import annotations

from webhook.workloads.draft import QUEUE_LABEL, Draft, count
from webhook.workloads.podtemplate import read_template


def adapt(d: Draft) -> None:
    replicas = count(d.spec.get("replicas"), "spec.replicas", 1)
    group = read_template(d, d.spec.get("template"), "/spec/template", "main", replicas)
    if d.queue_name is None:
        queue = group.labels.get(QUEUE_LABEL)
        if queue:
            d.gang("kueue")
            d.queue_name = queue
