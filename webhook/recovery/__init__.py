"""Recovery governance: pods of preempted workloads wait behind the resume gate, and a leader-elected
controller lets them start one whole workload at a time.

    plan           which gated workload resumes next (pure)
    cluster_state  watch caches: the eviction records policies read as `cluster.evictions`, and
                   the pods the resume gate marked (kubernetes client)
    controller     lifts gates as the plan says, with events, under the `trainguard-resume` Lease

Only `plan` is free of the kubernetes client; importing the package imports nothing else.
"""
