"""`mpirun -np N` from an MPI launcher's command line."""

from __future__ import annotations

import pytest

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
