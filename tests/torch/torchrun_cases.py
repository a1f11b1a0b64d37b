"""Launch lines for the torchrun oracle: trainguard's parser against torch's own.

Three kinds of data:

- HAND_CASES: edge cases written out, each a container (command, args, env) the way a pod spec
  has it. Exec-form ones name the launcher directly; shell-form ones (`bash -c`, `sh -c`) are run by
  a real shell with a `torchrun` stand-in on PATH that records the argv and PET_* environment it
  receives, so torch's parser is fed exactly what torch would see;
- generated_cases(): a seeded combinatorial sample of flag spellings, values, PET_* environments,
  launchers and options after the script (a few hundred);
- DIFFERENCES: where trainguard answers differently from torch on purpose, with both answers
  written down and tested.
"""

from __future__ import annotations

import random
import shlex
from dataclasses import dataclass, field
from typing import TypeVar

SHELLS = ("sh", "bash", "/bin/sh", "/bin/bash")
_T = TypeVar("_T")


@dataclass(frozen=True)
class Case:
    id: str
    command: tuple[str, ...]
    args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)

    @property
    def shell(self) -> bool:
        return self.command[0] in SHELLS if self.command else False


def _c(id: str, *command: str, env: dict[str, str] | None = None, args: tuple[str, ...] = ()) -> Case:
    return Case(id=id, command=tuple(command), args=args, env=dict(env or {}))


def _t(id: str, *argv: str, env: dict[str, str] | None = None) -> Case:
    return _c(id, "torchrun", *argv, env=env)


HAND_CASES: list[Case] = [
    # shapes
    _t("nnodes-eq", "--nnodes=2", "t.py"),
    _t("nnodes-space", "--nnodes", "2", "t.py"),
    _t("nnodes-range", "--nnodes=2:8", "t.py"),
    _t("nnodes-range-space", "--nnodes", "1:1", "t.py"),
    _t("nnodes-default", "t.py"),
    _t("nnodes-whitespace-int", "--nnodes= 3", "t.py"),
    _t("nnodes-underscore-int", "--nnodes=1_0", "t.py"),
    _t("nnodes-plus-sign", "--nnodes=+2", "t.py"),
    _t("nnodes-unicode-digit", "--nnodes=\u0663", "t.py"),
    _t("nnodes-zero", "--nnodes=0", "t.py"),
    _t("nnodes-negative-value-token", "--nnodes", "-1", "t.py"),
    _t("nnodes-min-above-max", "--nnodes=4:2", "t.py"),
    _t("nnodes-three-parts", "--nnodes=1:2:3", "t.py"),
    _t("nnodes-trailing-colon", "--nnodes=3:", "t.py"),
    _t("nnodes-empty", "--nnodes=", "t.py"),
    _t("nnodes-word", "--nnodes=two", "t.py"),
    _t("nnodes-dollar-literal", "--nnodes=$N", "t.py", env={"N": "2"}),
    _t("nproc-int", "--nproc-per-node=8", "t.py"),
    _t("nproc-gpu", "--nproc-per-node", "gpu", "t.py"),
    _t("nproc-auto", "--nproc_per_node=auto", "t.py"),
    _t("nproc-cpu", "--nproc_per_node", "cpu", "t.py"),
    _t("nproc-xpu", "--nproc-per-node=xpu", "t.py"),
    _t("nproc-negative", "--nproc-per-node=-1", "t.py"),
    _t("nproc-empty", "--nproc-per-node=", "t.py"),
    _t("standalone", "--standalone", "t.py"),
    _t("standalone-with-value", "--standalone=1", "t.py"),
    _t("standalone-twice", "--standalone", "--standalone", "t.py"),
    _t("rdzv-c10d", "--rdzv-backend=c10d", "--rdzv-endpoint=h:29400", "--rdzv-id=j", "t.py"),
    _t("rdzv-underscore", "--rdzv_backend", "etcd-v2", "--rdzv_conf", "a=1,b=2", "t.py"),
    _t("max-restarts", "--max-restarts=3", "t.py"),
    _t("max-restarts-underscore", "--max_restarts", "0", "t.py"),
    _t("max-restarts-negative", "--max-restarts=-1", "t.py"),
    _t("max-restarts-float", "--max-restarts=1.5", "t.py"),
    # argparse mechanics
    _t("repeated-last-wins", "--nnodes=1", "--nnodes=3", "t.py"),
    _t("abbrev-unique", "--nno=2", "--nproc_per=4", "--stan", "--max-=2", "--rdzv-b", "c10d", "t.py"),
    _t("abbrev-ambiguous-nproc", "--nproc", "4", "t.py"),
    _t("abbrev-ambiguous-max", "--max", "1", "t.py"),
    _t("abbrev-ambiguous-rdzv", "--rdzv=c10d", "t.py"),
    _t("abbrev-ambiguous-st", "--st", "t.py"),
    _t("abbrev-ambiguous-after-script", "t.py", "--lo", "x"),
    _t("abbrev-ambiguous-after-double-dash", "--", "t.py", "--lo", "x"),
    _t("abbrev-unique-after-script", "t.py", "--nno", "5"),
    _t("double-dash-everything-equals", "--=x", "t.py"),
    _t("unknown-option", "--bogus", "t.py"),
    _t("unknown-option-after-script", "t.py", "--bogus"),
    _t("unknown-short-option", "-x", "t.py"),
    _t("option-with-space-is-positional", "--lr 0.1", "--nnodes=2"),
    _t("missing-script", "--nnodes=2"),
    _t("missing-value", "--nnodes"),
    _t("value-looks-like-option", "--rdzv-conf", "--x", "t.py"),
    _t("value-is-double-dash", "--nnodes", "--", "t.py"),
    _t("double-dash-before-script", "--nnodes=2", "--", "t.py", "--nnodes", "5"),
    _t("double-dash-script-like-option", "--", "--standalone"),
    _t("double-dash-alone", "--nnodes=2", "--"),
    _t("script-args-not-ours", "--nnodes=2", "t.py", "--nnodes=5", "--standalone", "--max-restarts", "-4"),
    _t("short-m-cluster", "-mr3", "pkg.mod"),
    _t("short-r-glued", "-r3", "-t=1", "t.py"),
    _t("short-m-bad-cluster", "-mz", "t.py"),
    _t("short-m-equals", "-m=1", "t.py"),
    _t("no-python", "--no-python", "python3", "-c", "print(1)"),
    _t("run-path", "--run_path", "/abs/t.py"),
    _t("bad-int-option", "--node-rank=x", "t.py"),
    _t("bad-float-option", "--monitor-interval=fast", "t.py"),
    _t("bad-choice", "--start-method=thread", "t.py"),
    _t("good-choice", "--start-method=forkserver", "--numa-binding=socket", "t.py"),
    _t("bad-numa-choice", "--numa-binding=all", "t.py"),
    _t("help", "--help"),
    _t("help-abbrev", "--he", "t.py"),
    _t("print-completion", "--print-completion", "bash"),
    _t("use-env-is-launch-only", "--use-env", "t.py"),
    _t("empty-script-name", "", "x"),
    _t("single-dash-script", "-", "x"),
    _t("negative-number-script", "-5", "x"),
    # PET_* environment
    _t(
        "pet-all",
        "t.py",
        env={
            "PET_NNODES": "2:4",
            "PET_NPROC_PER_NODE": "gpu",
            "PET_RDZV_BACKEND": "c10d",
            "PET_MAX_RESTARTS": "3",
            "PET_STANDALONE": "0",
        },
    ),
    _t(
        "pet-overridden-by-flags",
        "--nnodes=3",
        "--nproc-per-node=2",
        "--max-restarts=1",
        "t.py",
        env={"PET_NNODES": "2:4", "PET_NPROC_PER_NODE": "gpu", "PET_MAX_RESTARTS": "3"},
    ),
    _t("pet-standalone-1", "t.py", env={"PET_STANDALONE": "1"}),
    _t("pet-standalone-with-flag-0", "--standalone", "t.py", env={"PET_STANDALONE": "0"}),
    _t("pet-standalone-not-int", "t.py", env={"PET_STANDALONE": "true"}),
    _t("pet-standalone-not-int-flag-given", "--standalone", "t.py", env={"PET_STANDALONE": "yes"}),
    _t("pet-module-not-int", "t.py", env={"PET_MODULE": "x"}),
    _t("pet-nnodes-empty", "t.py", env={"PET_NNODES": ""}),
    _t("pet-nnodes-invalid", "t.py", env={"PET_NNODES": "0:2"}),
    _t("pet-nnodes-invalid-flag-fixes-it", "--nnodes=2", "t.py", env={"PET_NNODES": "0:2"}),
    _t("pet-max-restarts-bad", "t.py", env={"PET_MAX_RESTARTS": "many"}),
    _t("pet-max-restarts-bad-flag-fixes-it", "--max-restarts=1", "t.py", env={"PET_MAX_RESTARTS": "many"}),
    _t("pet-master-port-bad", "t.py", env={"PET_MASTER_PORT": "http"}),
    _t("pet-monitor-interval-bad", "t.py", env={"PET_MONITOR_INTERVAL": "x"}),
    _t("pet-start-method-no-choice-check", "t.py", env={"PET_START_METHOD": "thread"}),
    _t("pet-unrelated", "t.py", env={"PET_FOO": "1", "NNODES": "9"}),
    # launchers
    _c("python-m-run", "python", "-m", "torch.distributed.run", "--nnodes=2", "t.py"),
    _c("python3-u-m-launch", "python3", "-u", "-m", "torch.distributed.launch", "--nproc_per_node=2", "t.py"),
    _c("launch-use-env", "python", "-m", "torch.distributed.launch", "--use_env", "--nnodes=1:2", "t.py"),
    _c("launch-use-ambiguous", "python", "-m", "torch.distributed.launch", "--use", "t.py"),
    _c(
        "launch-local-rank-is-script-arg",
        "python",
        "-m",
        "torch.distributed.launch",
        "t.py",
        "--local-rank=0",
    ),
    _c(
        "python-flags-before-m",
        "python",
        "-X",
        "dev",
        "-W",
        "ignore",
        "-u",
        "-m",
        "torch.distributed.run",
        "--standalone",
        "t.py",
    ),
    _c("command-plus-args", "torchrun", args=("--nnodes=2:3", "t.py", "--nnodes=9")),
    _c("args-only", args=("torchrun", "--nproc-per-node=4", "t.py")),
    # shells (run by a real shell)
    _c("sh-c", "sh", "-c", "torchrun --nnodes=2 --nproc-per-node 4 t.py"),
    _c(
        "bash-xc-corpus-mnist",
        "bash",
        "-xc",
        "torchrun --rdzv_id=123 --nnodes=4 --nproc_per_node=1 --master_addr=$MASTER_ADDR "
        "--master_port=$MASTER_PORT --node_rank=$RANK mnist.py --epochs=1 --log-interval=1\n",
        env={"MASTER_ADDR": "pytorch-workers-0-0.pytorch", "MASTER_PORT": "3389", "RANK": "0"},
    ),
    _c("bash-ec-and-and", "bash", "-ec", "cd / && torchrun --nnodes=3 --standalone t.py"),
    _c(
        "bash-multiline",
        "bash",
        "-c",
        "set -e\n# torchrun --nnodes=9\ntrue\n"
        "torchrun \\\n  --nnodes=2:4 \\\n  --max_restarts=3 \\\n  t.py --x\n",
    ),
    _c("sh-env-prefix", "sh", "-c", "FOO=1 PET_NNODES=3 torchrun t.py"),
    _c("sh-export", "sh", "-c", "export PET_NPROC_PER_NODE=4; N=2; exec torchrun --nnodes=$N t.py"),
    _c("sh-exec-env", "sh", "-c", "exec env PET_MAX_RESTARTS=2 torchrun t.py"),
    _c("bash-quoted-at", "bash", "-c", 'exec torchrun "$@"', "--", "--nnodes=4", "t.py"),
    _c("bash-field-split", "bash", "-c", 'A="--nnodes 2 --nproc_per_node gpu"; torchrun $A t.py'),
    _c("bash-quoted-no-split", "bash", "-c", 'A="--nnodes 2"; torchrun "$A" t.py'),
    _c(
        "bash-quotes", "bash", "-c", "torchrun --nnodes='1:2' --rdzv-backend \"c10d\" --rdzv-conf=$'a=1' t.py"
    ),
    _c("bash-default-expansion", "bash", "-c", "torchrun --nnodes=${N:-3} t.py", env={"N": ""}),
    _c(
        "bash-env-var",
        "bash",
        "-c",
        "torchrun --nnodes=${NNODES} --nproc-per-node=$GPUS t.py",
        env={"NNODES": "2", "GPUS": "8"},
    ),
    _c("bash-pet-from-container-env", "bash", "-c", "torchrun t.py", env={"PET_NNODES": "2:3"}),
    _c("bash-pipe-tee", "bash", "-o", "pipefail", "-c", "torchrun --nnodes=2 t.py 2>&1 | tee /dev/null"),
    _c(
        "bash-heredoc",
        "bash",
        "-c",
        "cat <<EOF >/dev/null\ntorchrun --nnodes=9\nEOF\ntorchrun --nnodes=2 t.py",
    ),
    _c("bash-echo-mention", "bash", "-c", "echo 'torchrun --nnodes=9' >/dev/null; torchrun --nnodes=5 t.py"),
    _c("bash-eval", "bash", "-c", "eval 'torchrun --nnodes=6 t.py'"),
    _c("bash-subshell", "bash", "-c", "(cd / ; torchrun --nnodes=7 t.py)"),
    _c("bash-nested", "bash", "-c", "export N=2; bash -c 'torchrun --nnodes=$N t.py'"),
    _c("bash-in-command-script-in-args", "/bin/bash", "-c", args=("torchrun --max-restarts 4 t.py",)),
    _c("sh-options-after-script", "sh", "-c", "torchrun --nnodes=2 t.py --nnodes 7 --standalone"),
    _c("sh-ambiguous-after-script", "sh", "-c", "torchrun --nnodes=2 t.py --lo 1"),
]


# --------------------------------------------------------------------------------------------------
# Generated cases
# --------------------------------------------------------------------------------------------------

# Each pool: (values torch accepts, values torch rejects). A generated line draws from the second
# with probability BAD, so that about half of the lines are valid.
_NNODES_VALUES = (["1", "2", "4", "1:1", "2:8", "1:4", " 2", "3:3"], ["0", "4:2", "x", "1:2:3", "2:", ""])
_NNODES_SPELLINGS: tuple[list[str], list[str]] = (["--nnodes={}", "--nnodes {}", "--nnod={}", "--nno {}"], [])
_NPROC_VALUES: tuple[list[str], list[str]] = (["1", "8", "gpu", "auto", "cpu", "xpu", "0"], [])
_NPROC_SPELLINGS = (
    ["--nproc-per-node={}", "--nproc_per_node={}", "--nproc-per-node {}", "--nproc_per_node {}"]
    + ["--nproc-per={}", "--nproc_per {}"],
    ["--nproc {}", "--nproc={}"],  # ambiguous: both spellings match
)
_STANDALONE = (["--standalone", "--stand", "--standa"], ["--standalone=1", "--st"])
_RDZV = (
    ["--rdzv-backend=c10d", "--rdzv_backend static", "--rdzv-backend etcd-v2", "--rdzv-b=c10d"],
    ["--rdzv c10d", "--rdzv_backend"],
)
_RESTARTS = (
    ["--max-restarts=3", "--max_restarts 0", "--max-r=2", "--max_restarts=10"],
    ["--max-restarts=-1", "--max-restarts=x", "--max 1"],
)
_TRAILING = (
    [[], [], ["--nnodes", "9"], ["--lr", "0.1", "--standalone"], ["--", "--nproc", "x"], ["--nno", "1"]],
    [["--lo", "1"], ["--nproc", "2"]],  # ambiguous even after the script: argparse classifies them all
)
_ENVS: tuple[list[dict[str, str]], list[dict[str, str]]] = (
    [
        {"PET_NNODES": "2"},
        {"PET_NNODES": "1:4", "PET_NPROC_PER_NODE": "gpu"},
        {"PET_NPROC_PER_NODE": "8", "PET_MAX_RESTARTS": "2"},
        {"PET_STANDALONE": "1"},
        {"PET_STANDALONE": "0", "PET_RDZV_BACKEND": "c10d"},
        {"PET_NNODES": "2:2", "PET_NODE_RANK": "1", "PET_MASTER_PORT": "29500"},
    ],
    [{"PET_STANDALONE": "on"}, {"PET_MAX_RESTARTS": "bad"}, {"PET_NNODES": "0"}, {"PET_MASTER_PORT": "x"}],
)
_LAUNCHERS = [
    ("torchrun",),
    ("/usr/local/bin/torchrun",),
    ("python", "-m", "torch.distributed.run"),
    ("python3", "-u", "-m", "torch.distributed.launch"),
]
BAD = 0.07


def _pick(rng: random.Random, pool: tuple[list[_T], list[_T]]) -> _T:
    good, bad = pool
    return rng.choice(bad if bad and rng.random() < BAD else good)


def generated_cases(n: int = 320, seed: int = 20260611) -> list[Case]:
    rng = random.Random(seed)
    cases: list[Case] = []
    seen: set[tuple[object, ...]] = set()
    while len(cases) < n:
        argv: list[str] = []
        if rng.random() < 0.75:
            argv += _pick(rng, _NNODES_SPELLINGS).format(_pick(rng, _NNODES_VALUES)).split(" ", 1)
        if rng.random() < 0.6:
            argv += _pick(rng, _NPROC_SPELLINGS).format(_pick(rng, _NPROC_VALUES)).split(" ", 1)
        if rng.random() < 0.2:
            argv.append(_pick(rng, _STANDALONE))
        if rng.random() < 0.3:
            argv += _pick(rng, _RDZV).split(" ", 1)
        if rng.random() < 0.3:
            argv += _pick(rng, _RESTARTS).split(" ", 1)
        rng.shuffle(pairs := _pairs(argv))
        argv = [w for p in pairs for w in p]
        if rng.random() < 0.03:
            argv.append("--bogus")
        if rng.random() > 0.02:
            argv.append("train.py")
        trailing: list[str] = _pick(rng, _TRAILING)
        argv += trailing
        env: dict[str, str] = {}
        if rng.random() < 0.4:
            picked: dict[str, str] = _pick(rng, _ENVS)
            env = dict(picked)
        launcher = rng.choice(_LAUNCHERS)
        key = (launcher, tuple(argv), tuple(sorted(env.items())))
        if key in seen:
            continue
        seen.add(key)
        idx = len(cases)
        if rng.random() < 0.15:  # the same line wrapped in a shell script
            script = " ".join(shlex.quote(w) for w in ("torchrun", *argv))
            if env and rng.random() < 0.5:
                prefix = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
                cases.append(Case(f"gen-{idx:03d}-sh-prefix", ("sh", "-c", f"{prefix} {script}")))
            else:
                cases.append(Case(f"gen-{idx:03d}-bash", ("bash", "-c", f"cd / && exec {script}"), env=env))
        else:
            cases.append(Case(f"gen-{idx:03d}", (*launcher, *argv), env=env))
    return cases


def _pairs(argv: list[str]) -> list[list[str]]:
    """Group an option with its separate value so shuffling keeps them together."""
    out: list[list[str]] = []
    for w in argv:
        if out and w and not w.startswith("-") and len(out[-1]) == 1 and "=" not in out[-1][0]:
            out[-1].append(w)
        else:
            out.append([w])
    return out


ALL_CASES: list[Case] = HAND_CASES + generated_cases()


# --------------------------------------------------------------------------------------------------
# Documented differences
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Difference:
    """trainguard answers differently from torch here, on purpose.

    `trainguard` and `torch` are the two answers (a dict of compared fields, or "invalid");
    `why` is the reason, as the README states it.
    """

    case: Case
    trainguard: dict[str, object] | str
    torch: dict[str, object] | str
    why: str


DIFFERENCES: list[Difference] = [
    Difference(
        _c("shell-unset-variable", "bash", "-c", "torchrun --nnodes=${N:-2} t.py"),
        trainguard={"unknown": "nnodes"},
        torch={"nnodes": (2, 2)},
        why="N is not in the container's env, but the image's ENV (which the webhook cannot see) may set "
        "it: the value is unknown, not the shell's default.",
    ),
    Difference(
        _c("shell-unknown-words", "bash", "-c", "torchrun $EXTRA_ARGS t.py"),
        trainguard={"unknown": "argv"},
        torch={"nnodes": (1, 1)},
        why="An unquoted expansion we cannot resolve may hold any flag, so the whole line is marked unknown "
        "(`argv`), even though it is empty in this test's shell.",
    ),
    Difference(
        _c("kubelet-undefined-reference", "torchrun", "--nnodes=$(NNODES)", "t.py"),
        trainguard={"unknown": "nnodes"},
        torch="invalid",
        why="The kubelet passes an undefined $(NNODES) through literally, and torch rejects it; but envFrom, "
        "which the parser does not see, may define it, so it is unknown rather than invalid.",
    ),
    Difference(
        _c(
            "control-flow-not-evaluated",
            "bash",
            "-c",
            "if false; then torchrun --nnodes=9 t.py; fi; torchrun --nnodes=2 t.py",
        ),
        trainguard={"nnodes": (9, 9)},
        torch={"nnodes": (2, 2)},
        why="Conditions are not evaluated: the first torch launch in the script text is the launch line.",
    ),
    Difference(
        _t("nproc-unsupported-value", "--nproc-per-node=many", "t.py"),
        trainguard={"nproc_per_node": "many", "nproc_per_node_int": None},
        torch={"nproc_per_node": "many", "launch_error": "Unsupported nproc_per_node value"},
        why="torch's parser accepts any string and only determine_local_world_size() rejects it when the "
        "job starts; a privateuse1 backend may give it a meaning, so trainguard keeps the raw value.",
    ),
]
