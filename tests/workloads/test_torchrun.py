"""The torchrun launch-line parser: table-driven cases, real corpus command lines, and a corpus sweep.

`tests/torch/test_torchrun_oracle.py` checks the same parser against torch's own argparse parser.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import shared_dir
from webhook.workloads.model import TorchrunSpec
from webhook.workloads.torchrun import ARGV, INVALID, LIMIT, parse_container, parse_launch


def spec(launcher: str = "torchrun", **kw: Any) -> TorchrunSpec:
    """Expected spec; nnodes_min/max and nproc_per_node_int are derived when not given."""
    nnodes = kw.get("nnodes")
    if nnodes is not None and "nnodes_min" not in kw and "nnodes" not in kw.get("unresolved", ()):
        lo, _, hi = nnodes.partition(":")
        kw["nnodes_min"], kw["nnodes_max"] = int(lo), int(hi or lo)
    nproc = kw.get("nproc_per_node")
    if nproc is not None and "nproc_per_node_int" not in kw and nproc.lstrip("-").isdigit():
        kw["nproc_per_node_int"] = int(nproc)
    return TorchrunSpec(launcher=launcher, **kw)


F = "flag"
E = "env"

CASES = [
    # --- launchers -----------------------------------------------------------------------------
    pytest.param(
        ["torchrun", "--nnodes=2", "--nproc-per-node=8", "train.py"],
        [],
        {},
        spec(nnodes="2", nproc_per_node="8", sources={"nnodes": F, "nproc_per_node": F}),
        id="torchrun-equals-form",
    ),
    pytest.param(
        ["/usr/local/bin/torchrun", "--nnodes", "4", "--nproc_per_node", "1", "train.py"],
        [],
        {},
        spec(nnodes="4", nproc_per_node="1", sources={"nnodes": F, "nproc_per_node": F}),
        id="torchrun-absolute-path-space-form-underscore",
    ),
    pytest.param(
        ["python", "-m", "torch.distributed.run", "--nnodes=1:4", "train.py"],
        [],
        {},
        spec("torch.distributed.run", nnodes="1:4", sources={"nnodes": F}),
        id="python-m-torch-distributed-run",
    ),
    pytest.param(
        ["python3", "-u", "-m", "torch.distributed.launch", "--use_env", "--nproc_per_node=2", "t.py"],
        [],
        {},
        spec("torch.distributed.launch", nproc_per_node="2", sources={"nproc_per_node": F}),
        id="python3-u-m-torch-distributed-launch",
    ),
    pytest.param(
        [
            "python3.11",
            "-X",
            "dev",
            "-W",
            "ignore",
            "-B",
            "-m",
            "torch.distributed.run",
            "--standalone",
            "t.py",
        ],
        [],
        {},
        spec("torch.distributed.run", standalone=True, sources={"standalone": F}),
        id="interpreter-flags-with-values-before-m",
    ),
    pytest.param(
        ["/opt/conda/bin/python", "-uBmtorch.distributed.run", "--nnodes=3", "t.py"],
        [],
        {},
        spec("torch.distributed.run", nnodes="3", sources={"nnodes": F}),
        id="interpreter-clustered-flags-module-glued",
    ),
    pytest.param(
        ["python", "/usr/local/bin/torchrun", "--nnodes=2", "t.py"],
        [],
        {},
        spec(nnodes="2", sources={"nnodes": F}),
        id="interpreter-running-torchrun-console-script",
    ),
    pytest.param(
        ["python", "/usr/lib/python3/site-packages/torch/distributed/run.py", "--nnodes=2", "t.py"],
        [],
        {},
        spec("torch.distributed.run", nnodes="2", sources={"nnodes": F}),
        id="interpreter-running-run-py-by-path",
    ),
    pytest.param(["python", "-c", "import torch", "--nnodes=2"], [], {}, None, id="python-c-is-not-a-launch"),
    pytest.param(["python", "train.py", "--nnodes=2"], [], {}, None, id="plain-python-script"),
    pytest.param(["python", "-m", "torch.utils.collect_env"], [], {}, None, id="other-torch-module"),
    pytest.param(["/bin/echo", "torchrun", "--nnodes=2", "t.py"], [], {}, None, id="torchrun-as-an-argument"),
    # --- command + args (Kubernetes semantics) -------------------------------------------------
    pytest.param(
        ["torchrun"],
        ["--nnodes=2", "train.py", "--lr=0.1"],
        {},
        spec(nnodes="2", sources={"nnodes": F}),
        id="command-plus-args",
    ),
    pytest.param(
        [],
        ["torchrun", "--nproc-per-node=gpu", "train.py"],
        {},
        spec(nproc_per_node="gpu", sources={"nproc_per_node": F}),
        id="args-only-starting-with-torchrun",
    ),
    pytest.param([], ["--nnodes=2", "train.py"], {}, None, id="args-only-unknown-entrypoint"),
    pytest.param(
        ["/bin/sh", "-c"],
        ["torchrun --nnodes=2 train.py"],
        {},
        spec(nnodes="2", sources={"nnodes": F}),
        id="shell-in-command-script-in-args",
    ),
    # --- shells --------------------------------------------------------------------------------
    pytest.param(
        ["sh", "-c", "torchrun --nnodes 2 --nproc-per-node 4 train.py"],
        [],
        {},
        spec(nnodes="2", nproc_per_node="4", sources={"nnodes": F, "nproc_per_node": F}),
        id="sh-c",
    ),
    pytest.param(
        ["bash", "-lc", "cd /workspace && torchrun --nnodes=3 train.py"],
        [],
        {},
        spec(nnodes="3", sources={"nnodes": F}),
        id="bash-lc-after-and-and",
    ),
    pytest.param(
        ["bash", "-euxo", "pipefail", "-c", "pip install -r req.txt; exec torchrun --nnodes=2 t.py | tee /l"],
        [],
        {},
        spec(nnodes="2", sources={"nnodes": F}),
        id="bash-option-with-value-semicolon-exec-pipe",
    ),
    pytest.param(
        [
            "bash",
            "-c",
            "set -ex\n# torchrun --nnodes=9 is the old way\nnvidia-smi\n"
            "torchrun \\\n  --nnodes=2 \\\n  --nproc-per-node=8 \\\n  train.py \\\n  --nnodes=7\n",
        ],
        [],
        {},
        spec(nnodes="2", nproc_per_node="8", sources={"nnodes": F, "nproc_per_node": F}),
        id="multiline-script-comments-continuations",
    ),
    pytest.param(
        ["bash", "-c", "FOO=1 PET_NNODES=3 torchrun train.py"],
        [],
        {},
        spec(nnodes="3", sources={"nnodes": E}),
        id="env-assignment-prefix-feeds-pet",
    ),
    pytest.param(
        ["sh", "-c", "export PET_NPROC_PER_NODE=4\nN=2\ntorchrun --nnodes=$N t.py"],
        [],
        {},
        spec(nnodes="2", nproc_per_node="4", sources={"nnodes": F, "nproc_per_node": E}),
        id="script-exports-and-variables",
    ),
    pytest.param(
        # N=2 is exported only if the image's environment already had N: we cannot tell.
        ["sh", "-c", "N=2\nbash -c 'torchrun --nnodes=${N:-5} t.py'"],
        [],
        {},
        spec(sources={"nnodes": F}, unresolved=("nnodes",)),
        id="nested-shell-unexported-variable-is-unknown",
    ),
    pytest.param(
        ["sh", "-c", "N=2\nbash -c 'torchrun --nnodes=${N:-5} t.py'"],
        [],
        {"N": "3"},
        spec(nnodes="2", sources={"nnodes": F}),
        id="nested-shell-sees-reassigned-env-variable",
    ),
    pytest.param(
        ["sh", "-c", "export N=2\nbash -c 'torchrun --nnodes=${N:-5} t.py'"],
        [],
        {},
        spec(nnodes="2", sources={"nnodes": F}),
        id="nested-shell-inherits-exported-variable",
    ),
    pytest.param(
        ["bash", "-c", 'exec torchrun "$@"', "--", "--nnodes=4", "train.py"],
        [],
        {},
        spec(nnodes="4", sources={"nnodes": F}),
        id="bash-c-quoted-at-parameters",
    ),
    pytest.param(
        ["sh", "-c", 'ARGS="--nnodes 2 --nproc-per-node 8"\ntorchrun $ARGS train.py'],
        [],
        {},
        spec(nnodes="2", nproc_per_node="8", sources={"nnodes": F, "nproc_per_node": F}),
        id="unquoted-variable-is-field-split",
    ),
    pytest.param(
        ["sh", "-c", "torchrun --nnodes='1:4' --rdzv-backend \"c10d\" --rdzv-conf=$'a=1,b=2' t.py"],
        [],
        {},
        spec(nnodes="1:4", rdzv_backend="c10d", sources={"nnodes": F, "rdzv_backend": F}),
        id="quoted-values",
    ),
    pytest.param(
        [
            "sh",
            "-c",
            "echo 'torchrun --nnodes=2' > /tmp/cmd; cat <<EOF\ntorchrun --nnodes=9\nEOF\npython t.py",
        ],
        [],
        {},
        None,
        id="torchrun-in-strings-and-heredoc-is-not-a-launch",
    ),
    pytest.param(
        [
            "sh",
            "-c",
            "cat <<'EOF' > /tmp/x\nhello\nEOF\nenv -u FOO PET_NNODES=2 nohup torchrun t.py 2>&1 &\nwait",
        ],
        [],
        {},
        spec(nnodes="2", sources={"nnodes": E}),
        id="heredoc-then-env-nohup-background",
    ),
    pytest.param(
        ["sh", "-c", 'if [ "$RANK" = 0 ]; then torchrun --nnodes=2 --node-rank=0 t.py; fi'],
        [],
        {},
        spec(nnodes="2", sources={"nnodes": F}),
        id="torchrun-inside-if",
    ),
    pytest.param(
        ["sh", "-c", 'eval "torchrun --nnodes=6 t.py"'],
        [],
        {},
        spec(nnodes="6", sources={"nnodes": F}),
        id="eval",
    ),
    pytest.param(
        ["sh", "-c", "(cd /w; python -u -m torch.distributed.run --nnodes=2 t.py)"],
        [],
        {},
        spec("torch.distributed.run", nnodes="2", sources={"nnodes": F}),
        id="subshell-python-m",
    ),
    pytest.param(
        ["sh", "-c", "torchrun 'unterminated --nnodes=2"],
        [],
        {},
        spec(unresolved=(ARGV,)),
        id="unlexable-script-mentioning-torchrun",
    ),
    pytest.param(["sh", "/entrypoint.sh"], [], {}, None, id="shell-running-a-script-file"),
    pytest.param(
        ["sh", "-c", "echo x\n" * 20_000 + "torchrun --nnodes=2 t.py"],
        [],
        {},
        spec(
            unresolved=(ARGV, LIMIT),
            limit="a shell script has 140,024 bytes, over the cap of 65,536",
        ),
        id="oversized-script-is-not-lexed-and-says-so",
    ),
    # --- flags ---------------------------------------------------------------------------------
    pytest.param(
        ["torchrun", "--nnodes=2:8", "--rdzv-backend=c10d", "--max-restarts=3", "t.py"],
        [],
        {},
        spec(
            nnodes="2:8",
            rdzv_backend="c10d",
            max_restarts=3,
            sources={"nnodes": F, "rdzv_backend": F, "max_restarts": F},
        ),
        id="elastic-range",
    ),
    pytest.param(
        ["torchrun", "--rdzv_backend", "etcd-v2", "--max_restarts", "0", "t.py"],
        [],
        {},
        spec(rdzv_backend="etcd-v2", max_restarts=0, sources={"rdzv_backend": F, "max_restarts": F}),
        id="underscore-spellings",
    ),
    pytest.param(
        ["torchrun", "--nnodes=1", "--nnodes=3", "t.py"],
        [],
        {},
        spec(nnodes="3", sources={"nnodes": F}),
        id="repeated-flag-last-wins",
    ),
    pytest.param(
        ["torchrun", "--nproc-per-node", "auto", "t.py"],
        [],
        {},
        spec(nproc_per_node="auto", sources={"nproc_per_node": F}),
        id="nproc-auto",
    ),
    pytest.param(
        ["torchrun", "--nproc_per_node=xpu", "t.py"],
        [],
        {},
        spec(nproc_per_node="xpu", sources={"nproc_per_node": F}),
        id="nproc-xpu",
    ),
    pytest.param(
        ["torchrun", "--nproc_per=4", "--nno", "2", "--stan", "--max-=1", "t.py"],
        [],
        {},
        spec(
            nnodes="2",
            nproc_per_node="4",
            standalone=True,
            max_restarts=1,
            sources={"nnodes": F, "nproc_per_node": F, "standalone": F, "max_restarts": F},
        ),
        id="unique-prefix-abbreviations",
    ),
    pytest.param(
        ["torchrun", "--nproc", "4", "t.py"],
        [],
        {},
        spec(unresolved=(INVALID,)),
        id="ambiguous-abbreviation-both-spellings",
    ),
    pytest.param(
        ["torchrun", "t.py", "--local", "x"],
        [],
        {},
        spec(unresolved=(INVALID,)),
        id="ambiguous-abbreviation-after-script-still-fails",
    ),
    pytest.param(
        ["torchrun", "--nnodes=2", "train.py", "--nnodes=5", "--standalone", "--max-restarts", "9"],
        [],
        {},
        spec(nnodes="2", sources={"nnodes": F}),
        id="options-after-script-belong-to-script",
    ),
    pytest.param(
        ["torchrun", "--nnodes=2", "--", "--standalone", "--nnodes=5"],
        [],
        {},
        spec(nnodes="2", sources={"nnodes": F}),
        id="double-dash-then-script-looking-like-option",
    ),
    pytest.param(
        ["torchrun", "-mr3", "--no_python", "--run-path", "-t", "0", "pkg.mod"],
        [],
        {},
        spec(),
        id="clustered-short-options-and-booleans",
    ),
    pytest.param(
        ["torchrun", "--standalone", "--nproc-per-node=gpu", "t.py"],
        [],
        {},
        spec(standalone=True, nproc_per_node="gpu", sources={"standalone": F, "nproc_per_node": F}),
        id="standalone",
    ),
    pytest.param(
        [
            "torchrun",
            "--master-addr",
            "h",
            "--master-port",
            "29500",
            "--node-rank",
            "1",
            "--rdzv-id",
            "j",
            "--rdzv-endpoint",
            "h:29400",
            "--rdzv-conf",
            "timeout=60",
            "--monitor-interval",
            "5",
            "--start-method",
            "fork",
            "--role",
            "w",
            "--log-dir",
            "/l",
            "--redirects",
            "3",
            "--tee",
            "0:1",
            "--local-ranks-filter",
            "0",
            "--local-addr",
            "a",
            "--logs-specs",
            "x",
            "--numa-binding",
            "node",
            "--signals-to-handle",
            "SIGUSR1",
            "--event-log-handler",
            "null",
            "--shutdown-timeout",
            "5",
            "--virtual-local-rank",
            "--log-line-prefix-template",
            "x",
            "--duplicate-stdout-filters",
            "a,b",
            "t.py",
        ],
        [],
        {},
        spec(),
        id="every-other-option-accepted",
    ),
    # --- PET_* environment ---------------------------------------------------------------------
    pytest.param(
        ["torchrun", "train.py"],
        [],
        {
            "PET_NNODES": "2:4",
            "PET_NPROC_PER_NODE": "8",
            "PET_STANDALONE": "0",
            "PET_RDZV_BACKEND": "c10d",
            "PET_MAX_RESTARTS": "5",
        },
        spec(
            nnodes="2:4",
            nproc_per_node="8",
            rdzv_backend="c10d",
            max_restarts=5,
            sources={"nnodes": E, "nproc_per_node": E, "standalone": E, "rdzv_backend": E, "max_restarts": E},
        ),
        id="pet-env-fallbacks",
    ),
    pytest.param(
        ["torchrun", "--nnodes=3", "train.py"],
        [],
        {"PET_NNODES": "2"},
        spec(nnodes="3", sources={"nnodes": F}),
        id="flag-overrides-pet-env",
    ),
    pytest.param(
        ["torchrun", "train.py"],
        [],
        {"PET_STANDALONE": "1"},
        spec(standalone=True, sources={"standalone": E}),
        id="pet-standalone",
    ),
    pytest.param(
        ["python", "train.py"],
        [],
        {"PET_NNODES": "2", "PET_NPROC_PER_NODE": "auto"},
        spec("env", nnodes="2", nproc_per_node="auto", sources={"nnodes": E, "nproc_per_node": E}),
        id="env-only-launcher",
    ),
    pytest.param(
        [],
        [],
        {"PET_NPROC_PER_NODE": "4"},
        spec("env", nproc_per_node="4", sources={"nproc_per_node": E}),
        id="env-only-no-command",
    ),
    pytest.param(
        ["python", "t.py"], [], {"PET_MAX_RESTARTS": "3"}, None, id="other-pet-alone-is-not-a-launch"
    ),
    pytest.param(
        ["torchrun", "t.py"],
        [],
        {"PET_NNODES": None},
        spec(sources={"nnodes": E}, unresolved=("nnodes",)),
        id="pet-env-from-valuefrom-is-unknown",
    ),
    # --- $VAR references -----------------------------------------------------------------------
    pytest.param(
        ["sh", "-c", "torchrun --nnodes=$N --nproc-per-node=${GPUS} t.py"],
        [],
        {"N": "2", "GPUS": "8"},
        spec(nnodes="2", nproc_per_node="8", sources={"nnodes": F, "nproc_per_node": F}),
        id="shell-vars-resolved-from-container-env",
    ),
    pytest.param(
        ["sh", "-c", "torchrun --nnodes=$N --nproc-per-node=$GPUS t.py"],
        [],
        {"N": None},
        spec(sources={"nnodes": F, "nproc_per_node": F}, unresolved=("nnodes", "nproc_per_node")),
        id="shell-vars-unresolved",
    ),
    pytest.param(
        ["torchrun", "--nnodes=$(NNODES)", "--nproc-per-node", "$(GPUS)", "t.py"],
        [],
        {"NNODES": "4", "GPUS": None},
        spec(nnodes="4", sources={"nnodes": F, "nproc_per_node": F}, unresolved=("nproc_per_node",)),
        id="kubelet-dollar-paren-expansion",
    ),
    pytest.param(
        ["torchrun", "--nnodes=$$(NNODES)", "t.py"],
        [],
        {"NNODES": "4"},
        spec(nnodes="$(NNODES)", sources={"nnodes": F}, unresolved=(INVALID, "nnodes")),
        id="kubelet-escaped-dollar-is-literal",
    ),
    pytest.param(
        ["torchrun", "--nnodes=$NNODES", "t.py"],
        [],
        {"NNODES": "4"},
        spec(nnodes="$NNODES", sources={"nnodes": F}, unresolved=(INVALID, "nnodes")),
        id="exec-form-dollar-var-reaches-torch-literally",
    ),
    pytest.param(
        ["sh", "-c", "torchrun --nnodes=$(cat /etc/nnodes) --max-restarts=`echo 3` t.py"],
        [],
        {},
        spec(sources={"nnodes": F, "max_restarts": F}, unresolved=("nnodes", "max_restarts")),
        id="command-substitution-is-unknown",
    ),
    pytest.param(
        ["sh", "-c", "torchrun $EXTRA_ARGS --nnodes=2 t.py"],
        [],
        {},
        spec(unresolved=(ARGV,)),
        id="unknown-word-in-option-position",
    ),
    pytest.param(
        ["sh", "-c", "torchrun --nnodes=2 t.py $EXTRA_ARGS"],
        [],
        {},
        spec(nnodes="2", sources={"nnodes": F}),
        id="unknown-word-after-script-is-harmless",
    ),
    # --- invalid (torch would exit) ------------------------------------------------------------
    pytest.param(
        ["torchrun", "--nnodes=0", "t.py"],
        [],
        {},
        spec(nnodes="0", sources={"nnodes": F}, unresolved=(INVALID, "nnodes")),
        id="invalid-nnodes-zero",
    ),
    pytest.param(
        ["torchrun", "--nnodes=4:2", "t.py"],
        [],
        {},
        spec(nnodes="4:2", sources={"nnodes": F}, unresolved=(INVALID, "nnodes")),
        id="invalid-nnodes-min-above-max",
    ),
    pytest.param(
        ["torchrun", "--nnodes=1:2:3", "t.py"],
        [],
        {},
        spec(nnodes="1:2:3", sources={"nnodes": F}, unresolved=(INVALID, "nnodes")),
        id="invalid-nnodes-three-parts",
    ),
    pytest.param(
        ["torchrun", "--max-restarts=-1", "t.py"],
        [],
        {},
        spec(sources={"max_restarts": F}, unresolved=(INVALID, "max_restarts")),
        id="invalid-negative-max-restarts",
    ),
    pytest.param(
        ["torchrun", "--nnodes=2", "--bogus", "t.py"],
        [],
        {},
        spec(nnodes="2", sources={"nnodes": F}, unresolved=(INVALID,)),
        id="invalid-unknown-option",
    ),
    pytest.param(
        ["torchrun", "--nnodes=2"],
        [],
        {},
        spec(nnodes="2", sources={"nnodes": F}, unresolved=(INVALID,)),
        id="invalid-missing-script",
    ),
    pytest.param(["torchrun", "t.py", "--nnodes"], [], {}, spec(), id="dangling-option-after-script-is-fine"),
    pytest.param(["torchrun", "--nnodes"], [], {}, spec(unresolved=(INVALID,)), id="invalid-missing-value"),
    pytest.param(
        ["torchrun", "--standalone=1", "t.py"],
        [],
        {},
        spec(unresolved=(INVALID,)),
        id="invalid-flag-with-value",
    ),
    pytest.param(
        ["torchrun", "--start-method=thread", "t.py"],
        [],
        {},
        spec(unresolved=(INVALID,)),
        id="invalid-choice",
    ),
    pytest.param(["torchrun", "--help"], [], {}, spec(unresolved=(INVALID,)), id="help-never-launches"),
    pytest.param(
        ["torchrun", "t.py"],
        [],
        {"PET_STANDALONE": "true"},
        spec(unresolved=(INVALID, "standalone")),
        id="invalid-pet-boolean-not-an-integer",
    ),
    pytest.param(
        ["torchrun", "t.py"],
        [],
        {"PET_NNODES": ""},
        spec(nnodes="", sources={"nnodes": E}, unresolved=(INVALID, "nnodes")),
        id="invalid-empty-pet-nnodes",
    ),
    pytest.param(
        ["torchrun", "t.py"],
        [],
        {"PET_MASTER_PORT": "http"},
        spec(unresolved=(INVALID,)),
        id="invalid-pet-int-option",
    ),
    # --- real command lines from the corpus (../shared/corpus) ---------------------------------
    pytest.param(
        [
            "bash",
            "-xc",
            "torchrun --rdzv_id=123 --nnodes=4 --nproc_per_node=1 --master_addr=$MASTER_ADDR "
            "--master_port=$MASTER_PORT --node_rank=$RANK mnist.py --epochs=1 --log-interval=1\n",
        ],
        [],
        {
            "MASTER_ADDR": "pytorch-workers-0-0.pytorch",
            "MASTER_PORT": "3389",
            "RANK": None,
            "PYTHONUNBUFFERED": "0",
        },
        spec(nnodes="4", nproc_per_node="1", sources={"nnodes": F, "nproc_per_node": F}),
        id="corpus-jobset-mnist",
    ),
    pytest.param(
        [
            "bash",
            "-xc",
            "torchrun --nproc_per_node=1 --master_addr=$MASTER_ADDR --master_port=$MASTER_PORT "
            "resnet.py --backend=gloo --num_epochs=2\n",
        ],
        [],
        {"MASTER_ADDR": "pytorch-workers-0-0.pytorch", "MASTER_PORT": "3389", "PYTHONUNBUFFERED": "0"},
        spec(nproc_per_node="1", sources={"nproc_per_node": F}),
        id="corpus-jobset-resnet",
    ),
    pytest.param(
        [
            "python",
            "-m",
            "torch.distributed.run",
            "/workspace/examples/imagenet.py",
            "--arch=resnet18",
            "--epochs=1",
            "--batch-size=32",
            "--workers=0",
            "/workspace/data/tiny-imagenet-200",
        ],
        [],
        {"LOGLEVEL": "DEBUG"},
        spec("torch.distributed.run"),
        id="corpus-pytorchjob-elastic-imagenet",
    ),
    pytest.param(
        ["python", "-m", "torch.distributed.run", "--rdzv_backend=c10d", "./echo.py"],
        [],
        {"LOGLEVEL": "DEBUG"},
        spec("torch.distributed.run", rdzv_backend="c10d", sources={"rdzv_backend": F}),
        id="corpus-pytorchjob-elastic-echo",
    ),
    pytest.param(["torchrun", "demo.py"], [], {}, spec(), id="corpus-pytorchjob-cpu-demo"),
    pytest.param(
        ["torchrun", "/train_bert_ds.py", "--checkpoint_dir", "/root/deepspeed_data"],
        [],
        {},
        spec(),
        id="corpus-pytorchjob-deepspeed",
    ),
    pytest.param(
        ["torchrun", "--no-python", "python3", "-c", "import os\nimport torch\nprint(os.environ['RANK'])\n"],
        [],
        {},
        spec(),
        id="corpus-trainjob-no-python",
    ),
]


@pytest.mark.parametrize(("command", "args", "env", "expected"), CASES)
def test_parse_container(
    command: list[str], args: list[str], env: dict[str, str | None], expected: TorchrunSpec | None
) -> None:
    assert parse_container(command, args, env) == expected


@pytest.mark.parametrize(
    ("command", "reason"),
    [
        pytest.param(["torchrun", "--nproc", "4", "t.py"], "ambiguous option: --nproc", id="ambiguous"),
        pytest.param(["torchrun", "--bogus", "t.py"], "unrecognized arguments: --bogus", id="unknown"),
        pytest.param(["torchrun", "--nnodes=2"], "required: training_script", id="no-script"),
        pytest.param(["torchrun", "--nnodes=x", "t.py"], "nnodes='x'", id="nnodes-not-int"),
        pytest.param(["torchrun", "--node-rank=x", "t.py"], "invalid int value: 'x'", id="int-option"),
    ],
)
def test_invalid_reason(command: list[str], reason: str) -> None:
    parsed = parse_launch(command, [], {})
    assert parsed.spec is not None and INVALID in parsed.spec.unresolved
    assert parsed.error is not None and reason in parsed.error


def test_launch_argv_is_what_torch_receives() -> None:
    parsed = parse_launch(
        ["bash", "-c", "N=2; exec torchrun --nnodes=$N \\\n  'my script.py' \"$HOME\""], [], {}
    )
    assert parsed.argv == ("--nnodes=2", "my script.py", "\x00")


# --- corpus sweep ------------------------------------------------------------------------------

CORPUS = (shared_dir() or Path("/nonexistent")) / "corpus"


def _containers(node: Any) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    if isinstance(node, dict):
        if "image" in node and ("command" in node or "args" in node):
            found.append(node)
        for value in node.values():
            found.extend(_containers(value))
    elif isinstance(node, list):
        for value in node:
            found.extend(_containers(value))
    return found


def _corpus_containers() -> list[tuple[str, dict[str, Any]]]:
    out: list[tuple[str, dict[str, Any]]] = []
    for path in sorted(CORPUS.rglob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            out.extend((str(path.relative_to(CORPUS)), c) for c in _containers(doc))
    return out


@pytest.mark.skipif(not CORPUS.is_dir(), reason="shared corpus not present next to the repository")
def test_corpus_sweep() -> None:
    """Every container in the corpus parses; each that names a launcher yields a spec."""
    launches = 0
    for name, c in _corpus_containers():
        env = {e["name"]: e.get("value") for e in c.get("env") or []}
        command = [str(x) for x in c.get("command") or []]
        args = [str(x) for x in c.get("args") or []]
        got = parse_container(command, args, env)
        text = " ".join(command + args)
        names_launcher = "torchrun" in text.split() or "torch.distributed.run" in text.split()
        if names_launcher or "torchrun " in text:
            assert got is not None, name
            launches += 1
        if got is not None:
            assert INVALID not in got.unresolved, (name, got)
    assert launches >= 8
