"""MPIJob (kubeflow.org/v2beta1 and the legacy v1): Launcher + Worker replica specs, runPolicy.

The launcher is always one pod; workers default to 0 replicas (the mpi-operator defaulter).
Horovod elasticity lives inside the launcher's command: the pod count is fixed, so an MPIJob is
never class C.
"""

from __future__ import annotations

from webhook.workloads._kubeflow import read_replica_specs, read_run_policy
from webhook.workloads.draft import Draft
from webhook.workloads.torchrun.mpi import set_mpirun_np


def adapt(d: Draft) -> None:
    read_replica_specs(d, "mpiReplicaSpecs", {"launcher": 1, "worker": 0})
    read_run_policy(d)
    d.elastic_declared = True
    _launcher_process_counts(d)


def _launcher_process_counts(d: Draft) -> None:
    """`mpirun -np N` of the Launcher's containers, for the launch-consistency policy."""
    set_mpirun_np(d.groups, lambda group, container: group.name.lower() == "launcher")
