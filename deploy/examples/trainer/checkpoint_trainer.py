#!/usr/bin/env python3
"""A reference trainer that honours trainguard's checkpoint contract.

The webhook gives every container of a workload with a checkpoint spec two variables:

  TRAINGUARD_CHECKPOINT_URI               where checkpoints go: file:///abs/dir or pvc://claim/dir
  TRAINGUARD_CHECKPOINT_INTERVAL_SECONDS  how often to save (seconds; fractions accepted)

This trainer (a small MLP on synthetic data, CPU, deterministic from --seed):

- resumes from the newest *complete* checkpoint on start; a torn or partial file is never loaded
  (each file carries a length + SHA-256 trailer, and is only ever published by rename);
- saves model, optimizer, step and every RNG state (torch, numpy, python) every interval, with an
  atomic write: temporary file, flush, fsync, rename, fsync of the directory;
- on SIGTERM (or SIGINT) saves once more at the step reached and exits 0, well inside the grace
  period;
- is bit-reproducible: the batch of step N is a function of (seed, N), not of how many times the
  process was restarted, so an interrupted-and-resumed run ends with the same weights as an
  uninterrupted one.

It prints one JSON object per line on stdout (events: start, step, save, skip, signal, done). Before
it exits it prints its measured save time (event `save-time`: the median seconds of its saves and the
annotation to put on the workload, `trainguard.dev/checkpoint-save-seconds`), from which the review
gate suggests a checkpoint interval for the tier's preemption rate.
Exit codes: 0 done or stopped by a signal after saving; 2 bad configuration (e.g. an unsupported
URI scheme).

  TRAINGUARD_CHECKPOINT_URI=file:///tmp/ckpt TRAINGUARD_CHECKPOINT_INTERVAL_SECONDS=1 \\
      python checkpoint_trainer.py --steps 200 --step-time 0.01
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import random
import signal
import statistics
import struct
import sys
import threading
import time
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import numpy as np
import torch

MAGIC = b"TGCKPT1\n"
TRAILER = struct.Struct(">Q32s8s")  # payload length, sha256(payload), end marker
END = b"TGCKEND\n"
PREFIX, SUFFIX = "ckpt-", ".pt"
EXIT_CONFIG = 2


class ConfigError(Exception):
    pass


def log(event: str, **fields: Any) -> None:
    print(json.dumps({"event": event, **fields}, sort_keys=True), flush=True)


# --- where checkpoints go ------------------------------------------------------------------------


def checkpoint_dir(uri: str) -> Path:
    """file:///abs/dir → /abs/dir; pvc://claim/dir → $TRAINGUARD_PVC_ROOT/claim/dir (root: /mnt)."""
    parts = urlsplit(uri)
    if parts.scheme == "file":
        if parts.netloc not in ("", "localhost"):
            raise ConfigError(f"file URI must be file:///absolute/path, got {uri!r}")
        path = unquote(parts.path)
        if not path.startswith("/"):
            raise ConfigError(f"file URI must name an absolute path, got {uri!r}")
        return Path(path)
    if parts.scheme == "pvc":
        claim = parts.netloc
        if not claim:
            raise ConfigError(f"pvc URI must be pvc://<claim>/<path>, got {uri!r}")
        root = Path(os.environ.get("TRAINGUARD_PVC_ROOT", "/mnt"))
        return root / claim / unquote(parts.path).lstrip("/")
    scheme = parts.scheme or "(none)"
    raise ConfigError(
        f"unsupported checkpoint URI scheme {scheme!r} in {uri!r}: this trainer writes to a mounted "
        "filesystem (file:///abs/path, or pvc://claim/path mounted under $TRAINGUARD_PVC_ROOT)"
    )


# --- atomic, verifiable checkpoint files ---------------------------------------------------------


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


_saves_done = 0


def write_checkpoint(directory: Path, step: int, state: dict[str, Any]) -> tuple[Path, int]:
    global _saves_done
    buf = io.BytesIO()
    torch.save(state, buf)
    payload = buf.getvalue()
    blob = MAGIC + payload + TRAILER.pack(len(payload), hashlib.sha256(payload).digest(), END)
    final = directory / f"{PREFIX}{step:012d}{SUFFIX}"
    tmp = directory / f".{final.name}.{os.getpid()}.tmp"
    # Test hook: after TRAINGUARD_TEST_WRITE_DELAY_AFTER complete saves, pause half-way through each
    # write for TRAINGUARD_TEST_WRITE_DELAY seconds, so that a test can kill the process mid-write.
    delay = float(os.environ.get("TRAINGUARD_TEST_WRITE_DELAY", "0") or 0)
    if _saves_done < int(os.environ.get("TRAINGUARD_TEST_WRITE_DELAY_AFTER", "0") or 0):
        delay = 0
    with open(tmp, "wb") as f:
        half = len(blob) // 2
        f.write(blob[:half])
        if delay:
            f.flush()
            os.fsync(f.fileno())
            log("write-paused", step=step, tmp=tmp.name)
            time.sleep(delay)
        f.write(blob[half:])
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, final)
    _fsync_dir(directory)
    _saves_done += 1
    return final, len(blob)


def read_checkpoint(path: Path) -> dict[str, Any]:
    """The state in a checkpoint file; ValueError when the file is not complete and intact."""
    data = path.read_bytes()
    if len(data) < len(MAGIC) + TRAILER.size or not data.startswith(MAGIC):
        raise ValueError("truncated or not a checkpoint")
    length, digest, end = TRAILER.unpack(data[-TRAILER.size :])
    payload = data[len(MAGIC) : -TRAILER.size]
    if end != END or length != len(payload):
        raise ValueError(f"length mismatch: trailer says {length}, file holds {len(payload)}")
    if hashlib.sha256(payload).digest() != digest:
        raise ValueError("checksum mismatch")
    state: dict[str, Any] = torch.load(io.BytesIO(payload), weights_only=True)
    return state


def complete_checkpoints(directory: Path) -> list[tuple[int, Path]]:
    out = []
    for p in directory.glob(f"{PREFIX}*{SUFFIX}"):
        digits = p.name[len(PREFIX) : -len(SUFFIX)]
        if digits.isdigit():
            out.append((int(digits), p))
    return sorted(out, reverse=True)


def load_newest(directory: Path) -> dict[str, Any] | None:
    for step, path in complete_checkpoints(directory):
        try:
            state = read_checkpoint(path)
        except (ValueError, OSError, RuntimeError, EOFError) as e:  # torn, corrupt, unreadable
            log("skip", path=path.name, step=step, reason=str(e))
            continue
        if state.get("step") != step:
            log("skip", path=path.name, step=step, reason="step in file does not match its name")
            continue
        return state
    return None


def prune(directory: Path, keep: int) -> None:
    for _, path in complete_checkpoints(directory)[keep:]:
        path.unlink(missing_ok=True)
    for tmp in directory.glob(f".{PREFIX}*.tmp"):  # left behind by a killed writer
        tmp.unlink(missing_ok=True)


# --- the training job ----------------------------------------------------------------------------

IN, HIDDEN, OUT, BATCH = 16, 32, 4, 32


def build(seed: int) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(seed)
    model = torch.nn.Sequential(
        torch.nn.Linear(IN, HIDDEN), torch.nn.ReLU(), torch.nn.Dropout(0.1), torch.nn.Linear(HIDDEN, OUT)
    )
    return model, torch.optim.Adam(model.parameters(), lr=1e-2)


def batch(seed: int, step: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The data of step `step`: a function of (seed, step) only."""
    g = torch.Generator().manual_seed(seed * 1_000_003 + step)
    x = torch.randn(BATCH, IN, generator=g)
    w = torch.randn(IN, OUT, generator=torch.Generator().manual_seed(seed))  # the task itself
    return x, x @ w


def train_step(model: torch.nn.Module, opt: torch.optim.Optimizer, seed: int, step: int) -> float:
    x, y = batch(seed, step)
    # The process-wide RNGs are used too, so resuming must restore them to stay bit-identical:
    # torch's by dropout, numpy's and python's by label noise and a loss weight.
    y = y + torch.from_numpy(np.random.normal(0.0, 0.01, size=tuple(y.shape)).astype(np.float32))
    weight = 1.0 + 0.1 * random.random()
    opt.zero_grad(set_to_none=True)
    loss = weight * torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    opt.step()
    return float(loss.detach())


def weights_hash(model: torch.nn.Module) -> str:
    h = hashlib.sha256()
    for name, t in model.state_dict().items():
        h.update(name.encode())
        h.update(t.detach().contiguous().numpy().tobytes())
    return h.hexdigest()


def rng_state() -> dict[str, Any]:
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    return {
        "torch": torch.get_rng_state(),
        "numpy": [kind, torch.from_numpy(keys.astype(np.int64)), pos, has_gauss, cached],
        "python": random.getstate(),
    }


def set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    kind, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((kind, keys.numpy().astype(np.uint32), pos, has_gauss, cached))
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))


def report_save_time(times: list[float]) -> None:
    """The measured save time C, as the workload annotation the checkpoint advice reads."""
    if not times:
        return
    median = statistics.median(times)
    value = f"{max(median, 0.001):.3f}".rstrip("0").rstrip(".")
    log(
        "save-time",
        saves=len(times),
        median_seconds=round(median, 6),
        max_seconds=round(max(times), 6),
        annotation={"trainguard.dev/checkpoint-save-seconds": value},
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=200, help="total optimisation steps")
    ap.add_argument("--step-time", type=float, default=0.0, help="extra seconds per step (simulated compute)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--keep", type=int, default=2, help="complete checkpoints to keep")
    ap.add_argument("--checkpoint-uri", default=os.environ.get("TRAINGUARD_CHECKPOINT_URI"))
    interval = os.environ.get("TRAINGUARD_CHECKPOINT_INTERVAL_SECONDS") or "300"
    ap.add_argument("--interval", type=float, default=float(interval), help="seconds between checkpoints")
    ap.add_argument("--print-hash", action="store_true", help="print the final weights' SHA-256 alone")
    args = ap.parse_args(argv)
    started = time.monotonic()

    try:
        if not args.checkpoint_uri:
            raise ConfigError("TRAINGUARD_CHECKPOINT_URI is not set (the webhook injects it)")
        if not args.interval > 0:
            raise ConfigError(f"checkpoint interval must be > 0 seconds, got {args.interval}")
        directory = checkpoint_dir(args.checkpoint_uri)
        directory.mkdir(parents=True, exist_ok=True)
    except (ConfigError, OSError) as e:
        print(f"checkpoint_trainer: {e}", file=sys.stderr)
        return EXIT_CONFIG

    stop = threading.Event()
    received: list[int] = []

    def on_signal(signum: int, _frame: object) -> None:
        received.append(signum)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    random.seed(args.seed)
    np.random.seed(args.seed)
    model, opt = build(args.seed)
    step = 0
    state = load_newest(directory)
    if state is not None:
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        set_rng_state(state["rng"])
        step = state["step"]
    log("start", resumed_from=step if state else None, directory=str(directory), pid=os.getpid())

    save_seconds = 0.0
    save_times: list[float] = []

    def save(reason: str) -> None:
        nonlocal save_seconds, last_save
        t0 = time.monotonic()
        snapshot = {
            "step": step,
            "model": model.state_dict(),
            "optimizer": opt.state_dict(),
            "rng": rng_state(),
        }
        path, size = write_checkpoint(directory, step, snapshot)
        prune(directory, args.keep)
        spent = time.monotonic() - t0
        save_seconds += spent
        save_times.append(spent)
        last_save = time.monotonic()
        log("save", step=step, reason=reason, bytes=size, seconds=round(spent, 6), path=path.name)

    last_save = time.monotonic()
    while step < args.steps and not stop.is_set():
        loss = train_step(model, opt, args.seed, step)
        step += 1
        log("step", step=step, loss=round(loss, 6))
        if args.step_time:
            stop.wait(args.step_time)  # wakes at once on SIGTERM
        if stop.is_set():
            break
        if time.monotonic() - last_save >= args.interval:
            save("interval")

    wall = time.monotonic() - started
    if stop.is_set():
        log("signal", signal=signal.Signals(received[0]).name, step=step)
        save("signal")
        report_save_time(save_times)
        wall = time.monotonic() - started
        log("exit", step=step, save_seconds=round(save_seconds, 6), wall_seconds=round(wall, 6))
        return 0
    if not complete_checkpoints(directory) or complete_checkpoints(directory)[0][0] != step:
        save("final")
    report_save_time(save_times)
    digest = weights_hash(model)
    log(
        "done",
        step=step,
        weights_sha256=digest,
        save_seconds=round(save_seconds, 6),
        wall_seconds=round(wall, 6),
    )
    if args.print_hash:
        print(digest, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
