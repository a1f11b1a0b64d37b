"""`mpirun -np N` from an MPI launcher's command line."""

from __future__ import annotations

from typing import Any

import pytest

from webhook.config import load_config
from webhook.workloads import AdaptContext, build_workload
from webhook.workloads.torchrun.mpi import mpirun_np


@pytest.mark.parametrize(
    ("command", "args", "env", "expected"),
    [
        pytest.param(["mpirun"], ["-n", "2", "/home/mpiuser/pi"], {}, 2, id="command-plus-args"),
        pytest.param(["mpirun", "--allow-run-as-root", "-np", "16", "python", "t.py"], [], {}, 16, id="np"),
        pytest.param(["mpiexec", "--np=6", "x"], [], {}, 6, id="mpiexec-equals"),
        pytest.param(["timeout", "600", "orterun", "-c", "4", "x"], [], {}, 4, id="wrapped-orterun"),
        pytest.param(["sh", "-c", "cd /w && mpirun -np $(NP) x"], [], {"NP": "8"}, 8, id="shell-kubelet-var"),
        pytest.param(["bash", "-c", "mpirun -np $N x"], [], {"N": "8"}, 8, id="shell-var"),
        pytest.param(["bash", "-c", "mpirun -np $N x"], [], {}, None, id="unknown-count"),
        pytest.param(["mpirun", "--hostfile", "/etc/mpi/hostfile", "x"], [], {}, None, id="no-count"),
        pytest.param(["python", "train.py", "-n", "3"], [], {}, None, id="not-mpi"),
    ],
)
def test_mpirun_np(
    command: list[str], args: list[str], env: dict[str, str | None], expected: int | None
) -> None:
    assert mpirun_np(command, args, env) == expected


@pytest.mark.parametrize(
    ("obj", "expected"),
    [
        pytest.param(
            {
                "apiVersion": "kubeflow.org/v2beta1",
                "kind": "MPIJob",
                "metadata": {"name": "m"},
                "spec": {
                    "mpiReplicaSpecs": {
                        "Launcher": {"template": {"spec": {"containers": [{"name": "l", "command": ["mpirun", "-np", "4", "x"]}]}}},
                        "Worker": {"replicas": 2, "template": {"spec": {"containers": [{"name": "w", "command": ["mpirun", "-np", "9"]}]}}},
                    }
                },
            },
            {("Launcher", "l"): 4, ("Worker", "w"): None},
            id="mpijob-launcher-only",
        ),
        pytest.param(
            {
                "apiVersion": "trainer.kubeflow.org/v1alpha1",
                "kind": "TrainJob",
                "metadata": {"name": "t"},
                "spec": {"runtimeRef": {"name": "unknown"}, "trainer": {"command": ["mpirun", "-np", "8", "x"]}},
            },
            {("node", "node"): 8},
            id="trainjob-trainer-container",
        ),
    ],
)  # fmt: skip
def test_adapters_fill_the_launchers_process_count(
    obj: dict[str, Any], expected: dict[tuple[str, str], int | None]
) -> None:
    workload = build_workload(obj, AdaptContext(config=load_config(), namespace="ml"))
    assert workload is not None
    assert {(g.name, c.name): c.mpirun_np for g in workload.groups for c in g.containers} == expected
