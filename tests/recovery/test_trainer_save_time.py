"""The reference trainer prints its measured save time as the annotation the checkpoint advice reads."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

# torch.distributed, not torch: tests/torch/ (the oracle's folder, no __init__.py) is an importable
# namespace package called torch wherever the real one is missing, so `import torch` alone succeeds there.
pytest.importorskip(
    "torch.distributed", reason="the reference trainer needs torch (bash .ci/setup --with-torch)"
)

TRAINER = Path(__file__).resolve().parents[2] / "deploy" / "examples" / "trainer" / "checkpoint_trainer.py"


def test_the_trainer_reports_the_median_of_its_saves(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, str(TRAINER), "--steps", "30", "--interval", "0.000001"],
        env={"TRAINGUARD_CHECKPOINT_URI": f"file://{tmp_path}/ckpt", "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    events = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    saves = sorted(e["seconds"] for e in events if e["event"] == "save")
    (report,) = [e for e in events if e["event"] == "save-time"]
    assert report["saves"] == len(saves) >= 2
    assert saves[0] <= report["median_seconds"] <= saves[-1]
    annotated = float(report["annotation"]["trainguard.dev/checkpoint-save-seconds"])
    assert annotated == pytest.approx(max(report["median_seconds"], 0.001), abs=0.0006)
