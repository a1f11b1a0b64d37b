"""The checkpoint contract under preemption, with the reference trainer as a real process.

- An uninterrupted run gives the reference weights.
- The same job, SIGTERMed at (seeded) random moments and restarted each time, plus one SIGKILL
  without warning, must end with bit-identical weights; after a SIGTERM whose save completed no
  step is lost, after the SIGKILL at most one checkpoint interval's worth.
- One of those preemptions is a SIGKILL in the middle of a checkpoint write: the torn file is never
  loaded, not even when its bytes are copied under a checkpoint's final name; the next start resumes
  from the previous complete checkpoint. No truncation or sampled bit flip of a checkpoint loads.

The checkpoint overhead (time spent saving / wall time) is printed.
"""

from __future__ import annotations

import json
import math
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import pytest

# CI installs torch (tests/torch/install_torch.sh). Ask for a submodule: with tests/ on sys.path and
# no torch installed, `import torch` would find this directory as a namespace package.
pytest.importorskip("torch.distributed.run")

pytestmark = pytest.mark.torch

TRAINER = Path(__file__).resolve().parents[2] / "deploy" / "examples" / "trainer" / "checkpoint_trainer.py"
STEPS = 60
STEP_TIME = 0.04  # seconds of simulated compute per step
INTERVAL = 0.4  # checkpoint interval, seconds (about 10 steps)
SEED = 1234
WAIT = 180.0  # generous: a cold `import torch` on a busy 2-core machine takes many seconds
STEPS_PER_INTERVAL = math.ceil(INTERVAL / STEP_TIME) + 1  # the most steps between two interval saves


class Run:
    """One trainer process, its JSON events collected as they arrive."""

    def __init__(self, directory: Path, log_dir: Path, name: str, **env: str) -> None:
        self.name = name
        self.events: list[dict[str, Any]] = []
        self.cond = threading.Condition()
        self.stderr = log_dir / f"{name}.stderr"
        full_env = {
            **os.environ,
            "TRAINGUARD_CHECKPOINT_URI": directory.as_uri(),
            "TRAINGUARD_CHECKPOINT_INTERVAL_SECONDS": str(INTERVAL),
            **env,
        }
        with open(self.stderr, "w") as err:
            self.proc = subprocess.Popen(
                [sys.executable, str(TRAINER), "--steps", str(STEPS), "--step-time", str(STEP_TIME)]
                + ["--seed", str(SEED)],
                stdout=subprocess.PIPE,
                stderr=err,
                text=True,
                env=full_env,
            )
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            event = json.loads(line)
            with self.cond:
                self.events.append(event)
                self.cond.notify_all()
        with self.cond:
            self.events.append({"event": "<eof>"})
            self.cond.notify_all()

    def wait_for(self, pred: Callable[[dict[str, Any]], bool], what: str) -> dict[str, Any]:
        deadline = time.monotonic() + WAIT
        with self.cond:
            while True:
                for e in self.events:
                    if pred(e):
                        return e
                left = deadline - time.monotonic()
                if left <= 0 or self.events[-1:] == [{"event": "<eof>"}]:
                    pytest.fail(
                        f"{self.name}: no {what}; events: {self.events[-5:]}; {self.stderr.read_text()}"
                    )
                self.cond.wait(left)

    def event(self, name: str) -> dict[str, Any]:
        return self.wait_for(lambda e: e["event"] == name, f"{name!r} event")

    def all(self, name: str) -> list[dict[str, Any]]:
        with self.cond:
            return [e for e in self.events if e["event"] == name]

    def last_step(self) -> int:
        steps = self.all("step")
        return steps[-1]["step"] if steps else 0

    def finish(self) -> int:
        rc = self.proc.wait(WAIT)
        self.reader.join(WAIT)
        assert self.proc.stdout is not None
        self.proc.stdout.close()
        return rc


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Run:
    """The uninterrupted run, started at once so that it overlaps with the preempted one."""
    d = tmp_path_factory.mktemp("reference")
    return Run(d / "ckpt", d, "reference")


def reference_hash(reference: Run) -> str:
    if reference.proc.returncode is None:
        assert reference.finish() == 0, reference.stderr.read_text()
    assert reference.proc.returncode == 0, reference.stderr.read_text()
    done = reference.event("done")
    assert done["step"] == STEPS
    return str(done["weights_sha256"])


def test_preempted_run_reaches_identical_weights(reference: Run, tmp_path: Path) -> None:
    """SIGTERM at random moments, and one SIGKILL in the middle of a checkpoint write."""
    rng = random.Random(SEED)
    ckpt = tmp_path / "ckpt"
    plan = ["SIGTERM", "SIGTERM", "SIGKILL-mid-write", "SIGTERM"]
    preemptions: list[dict[str, Any]] = []
    save_seconds = wall_seconds = 0.0
    saves = 0
    resumed = 0
    forged: Path | None = None
    for i, how in enumerate(plan):
        env = {}
        if how == "SIGKILL-mid-write":  # the first save completes, the second pauses half-way
            env = {"TRAINGUARD_TEST_WRITE_DELAY": "60", "TRAINGUARD_TEST_WRITE_DELAY_AFTER": "1"}
        run = Run(ckpt, tmp_path, f"run{i}", **env)
        start = run.event("start")
        assert (start["resumed_from"] or 0) == resumed
        if forged is not None:  # (c) the torn file was skipped, not loaded
            skip = run.event("skip")
            assert skip["path"] == forged.name and start["resumed_from"] < skip["step"]
            forged = None
        if how == "SIGTERM":
            # A random moment: a random number of steps in, then a random fraction of a step.
            target = resumed + rng.randint(3, 12)
            run.wait_for(partial(_step_at_least, target), f"step {target}")
            time.sleep(rng.uniform(0, STEP_TIME))
            run.proc.send_signal(signal.SIGTERM)
            assert run.finish() == 0, run.stderr.read_text()
            sig, exit_ = run.event("signal"), run.event("exit")
            saved = [s for s in run.all("save") if s["reason"] == "signal"]
            assert saved and saved[-1]["step"] == sig["step"]
            reached, last_saved = sig["step"], saved[-1]["step"]
            save_seconds += exit_["save_seconds"]
            wall_seconds += exit_["wall_seconds"]
        else:
            complete = run.event("save")
            paused = run.event("write-paused")
            run.proc.send_signal(signal.SIGKILL)
            assert run.finish() == -signal.SIGKILL
            torn = ckpt / paused["tmp"]
            assert torn.stat().st_size > 0
            assert sorted(p.name for p in ckpt.glob("ckpt-*.pt"))[-1] == complete["path"]
            # Worse than a torn temporary file: the same bytes under a final name (as a non-atomic
            # copy or sync of the directory would leave them), newer than every complete checkpoint.
            forged = ckpt / f"ckpt-{paused['step']:012d}.pt"
            forged.write_bytes(torn.read_bytes())
            reached, last_saved = run.last_step(), complete["step"]
        saves += len(run.all("save"))
        preemptions.append({"how": how, "reached": reached, "saved": last_saved})
        resumed = last_saved

    final = Run(ckpt, tmp_path, "final")
    start = final.event("start")
    assert start["resumed_from"] == resumed
    assert final.finish() == 0, final.stderr.read_text()
    assert not list(ckpt.glob("*.tmp"))  # the killed writer's leftover is cleaned up
    done = final.event("done")
    save_seconds += done["save_seconds"]
    wall_seconds += done["wall_seconds"]
    saves += len(final.all("save"))

    # (a) bit-identical final weights
    assert done["weights_sha256"] == reference_hash(reference)
    # (b) work lost per preemption: none after a completed SIGTERM save, at most one interval otherwise
    for p in preemptions:
        lost = p["reached"] - p["saved"]
        if p["how"] == "SIGTERM":
            assert lost == 0, p
        else:
            assert 0 <= lost <= STEPS_PER_INTERVAL, p
    ref_done = reference.event("done")
    print(
        f"\npreemption: (how, step reached, step resumed from) {[tuple(p.values()) for p in preemptions]}; "
        f"checkpoint overhead {save_seconds * 1000:.0f} ms over {saves} saves = "
        f"{100 * save_seconds / wall_seconds:.2f}% of {wall_seconds:.1f} s trainer wall time "
        f"(interval {INTERVAL} s, {save_seconds / saves * 1000:.1f} ms per save, "
        f"{run_bytes(tmp_path)} B per checkpoint); uninterrupted run: "
        f"{100 * ref_done['save_seconds'] / ref_done['wall_seconds']:.2f}% "
        f"({len(reference.all('save'))} saves in {ref_done['wall_seconds']:.1f} s)"
    )


def run_bytes(tmp_path: Path) -> int:
    files = sorted((tmp_path / "ckpt").glob("ckpt-*.pt"))
    return files[-1].stat().st_size if files else 0


def _trainer_module() -> Any:
    sys.path.insert(0, str(TRAINER.parent))
    try:
        import checkpoint_trainer
    finally:
        sys.path.remove(str(TRAINER.parent))
    return checkpoint_trainer


def test_no_torn_or_altered_file_loads(tmp_path: Path) -> None:
    """Every truncation of a checkpoint, and every single-byte change sampled, is refused."""
    ct = _trainer_module()
    model, opt = ct.build(0)
    state = {"step": 7, "model": model.state_dict(), "optimizer": opt.state_dict(), "rng": ct.rng_state()}
    path, size = ct.write_checkpoint(tmp_path, 7, state)
    blob = path.read_bytes()
    assert ct.read_checkpoint(path)["step"] == 7
    victim = tmp_path / "victim.pt"
    rng = random.Random(SEED)
    cuts = list(range(0, size, 97)) + [size - 1, size - ct.TRAILER.size, len(ct.MAGIC)]
    for cut in cuts:
        victim.write_bytes(blob[:cut])
        with pytest.raises(ValueError):
            ct.read_checkpoint(victim)
    for pos in rng.sample(range(size), 200):
        altered = bytearray(blob)
        altered[pos] ^= 1 << rng.randrange(8)
        victim.write_bytes(bytes(altered))
        with pytest.raises(ValueError):
            ct.read_checkpoint(victim)


@pytest.mark.parametrize(
    ("uri", "message"),
    [
        pytest.param("s3://bucket/ckpt", "unsupported checkpoint URI scheme 's3'", id="s3"),
        pytest.param("gs://bucket/ckpt", "unsupported checkpoint URI scheme 'gs'", id="gs"),
        pytest.param("file://host/ckpt", "file URI must be file:///absolute/path", id="file-with-host"),
        pytest.param("relative/dir", "unsupported checkpoint URI scheme '(none)'", id="no-scheme"),
    ],
)
def test_unsupported_uri_exits_2(uri: str, message: str) -> None:
    checkpoint_trainer = _trainer_module()
    with pytest.raises(checkpoint_trainer.ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        checkpoint_trainer.checkpoint_dir(uri)
    assert checkpoint_trainer.main(["--checkpoint-uri", uri]) == 2


def test_pvc_uri_maps_under_pvc_root(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    checkpoint_trainer = _trainer_module()
    assert checkpoint_trainer.checkpoint_dir("pvc://train-ckpt/jobs/llama") == Path(
        "/mnt/train-ckpt/jobs/llama"
    )
    monkeypatch.setenv("TRAINGUARD_PVC_ROOT", str(tmp_path))
    assert checkpoint_trainer.checkpoint_dir("pvc://c/x/y") == tmp_path / "c" / "x" / "y"
    assert checkpoint_trainer.checkpoint_dir("file:///data/ckpt") == Path("/data/ckpt")


def _step_at_least(target: int, event: dict[str, Any]) -> bool:
    return bool(event["event"] == "step" and event["step"] >= target)
