"""LeaderWorkerSet (leaderworkerset.x-k8s.io/v1): replicas groups of `size` pods; inference role.

Each group has one leader (leaderTemplate, else the workerTemplate) and size-1 workers. Gang is
per group: Kueue (one Workload per group) or Volcano (`schedulerName: volcano`, one PodGroup of
`size` per group when LWS runs with the volcano scheduler provider).
"""

from __future__ import annotations

from webhook.workloads.draft import Draft, count, mapping
from webhook.workloads.podtemplate import read_template

_EXCLUSIVE = (
    ("leaderworkerset.sigs.k8s.io/exclusive-topology", "lws-exclusive-topology"),
    ("leaderworkerset.sigs.k8s.io/subgroup-exclusive-topology", "lws-subgroup-exclusive-topology"),
)


def adapt(d: Draft) -> None:
    replicas = count(d.spec.get("replicas"), "spec.replicas", 1)
    lwt = mapping(d.spec.get("leaderWorkerTemplate"), "spec.leaderWorkerTemplate")
    size = count(lwt.get("size"), "spec.leaderWorkerTemplate.size", 1)
    base = "/spec/leaderWorkerTemplate"
    if lwt.get("leaderTemplate") is not None:
        read_template(d, lwt["leaderTemplate"], f"{base}/leaderTemplate", "leader", replicas)
        workers = replicas * max(size - 1, 0)
    else:
        workers = replicas * size  # the worker template stamps the leaders too
    read_template(d, lwt.get("workerTemplate"), f"{base}/workerTemplate", "worker", workers)
    if any(g.scheduler_name == "volcano" for g in d.groups):
        d.gang("volcano")
    for key, source in _EXCLUSIVE:
        value = d.annotations.get(key)
        if value:
            d.constraint(source, value, True)
