"""accelerate launch and deepspeed: the node and per-node process counts their launch lines state."""

from __future__ import annotations

import pytest

from webhook.workloads.torchrun import ARGV, INVALID, parse_container

_K8S = {"N": "4"}


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        pytest.param(
            [
                "accelerate",
                "launch",
                "--multi_gpu",
                "--num_machines",
                "2",
                "--num_processes",
                "16",
                "train.py",
            ],
            ("accelerate", "2", 2, "8", ()),
            id="accelerate-processes-are-the-total-across-machines",
        ),
        pytest.param(
            ["accelerate", "launch", "--num-machines=4", "--num-processes=32", "--machine_rank=1", "t.py"],
            ("accelerate", "4", 4, "8", ()),
            id="accelerate-dash-spellings-and-machine-rank",
        ),
        pytest.param(
            [
                "accelerate",
                "launch",
                "--num_machines=2",
                "t.py",
                "--num_machines",
                "8",
                "--num_processes",
                "8",
            ],
            ("accelerate", "2", 2, None, ()),
            id="accelerate-the-scripts-own-arguments-are-not-read",
        ),
        pytest.param(
            ["accelerate", "launch", "--num_processes", "8", "t.py"],
            ("accelerate", None, None, None, ()),
            id="accelerate-machines-from-the-config-file-are-unknown",
        ),
        pytest.param(
            ["accelerate", "launch", "--num_machines", "2", "--num_processes", "7", "t.py"],
            ("accelerate", "2", 2, None, (INVALID,)),
            id="accelerate-processes-not-a-multiple-of-machines",
        ),
        pytest.param(
            ["accelerate", "launch", "--num_machines", "$(N)", "--num_processes", "16", "t.py"],
            ("accelerate", "4", 4, "4", ()),
            id="accelerate-kubelet-expansion",
        ),
        pytest.param(
            [
                "python",
                "-u",
                "-m",
                "accelerate.commands.launch",
                "--num_machines",
                "1",
                "--num_processes",
                "2",
                "t.py",
            ],
            ("accelerate", "1", 1, "2", ()),
            id="accelerate-as-a-python-module",
        ),
        pytest.param(
            ["sh", "-c", "cd /w && exec accelerate-launch --num_machines 2 --num_processes 4 t.py"],
            ("accelerate", "2", 2, "2", ()),
            id="accelerate-launch-console-script-in-a-shell",
        ),
        pytest.param(
            ["deepspeed", "--num_nodes", "1", "--num_gpus", "8", "train.py", "--deepspeed"],
            ("deepspeed", "1", 1, "8", ()),
            id="deepspeed-on-its-own-node",
        ),
        pytest.param(
            ["deepspeed", "--no_ssh", "--node_rank=0", "--num_nodes=2", "--num_accelerators=4", "t.py"],
            ("deepspeed", "2", 2, "4", ()),
            id="deepspeed-per-node-launch",
        ),
        pytest.param(
            ["deepspeed", "-H", "/etc/mpi/hostfile", "--num_nodes", "2", "--num_gpus", "8", "t.py"],
            ("deepspeed", None, None, None, ()),
            id="deepspeed-over-a-hostfile-says-nothing-about-its-own-pod",
        ),
        pytest.param(
            ["deepspeed", "--include", "localhost:0,1", "--num_gpus", "8", "t.py"],
            ("deepspeed", None, None, None, ()),
            id="deepspeed-gpus-picked-by-hand",
        ),
        pytest.param(
            ["python", "-m", "deepspeed.launcher.runner", "--num_gpus", "zero", "t.py"],
            ("deepspeed", None, None, None, (INVALID,)),
            id="deepspeed-count-not-a-number",
        ),
        pytest.param(
            ["accelerate", "launch", "--num_machines"],
            ("accelerate", None, None, None, (ARGV,)),
            id="accelerate-option-without-its-value",
        ),
    ],
)
def test_counts_read_from_the_launch_line(
    command: list[str], expected: tuple[str, str | None, int | None, str | None, tuple[str, ...]]
) -> None:
    spec = parse_container(command, [], _K8S)
    assert spec is not None
    assert (spec.launcher, spec.nnodes, spec.nnodes_max, spec.nproc_per_node, spec.unresolved) == expected
    assert spec.nproc_per_node_int == (int(expected[3]) if expected[3] else None)


@pytest.mark.parametrize(
    "command",
    [
        pytest.param(["accelerate", "config", "--config_file", "c.yaml"], id="accelerate-config"),
        pytest.param(["accelerate", "env"], id="accelerate-env"),
        pytest.param(["python", "-m", "accelerate.commands.config"], id="another-accelerate-module"),
    ],
)
def test_other_accelerate_commands_launch_nothing(command: list[str]) -> None:
    assert parse_container(command, [], {}) is None
