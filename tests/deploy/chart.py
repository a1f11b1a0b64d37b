"""The chart under test and the real `helm` that renders it (see tools.py for how it is built)."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "deploy" / "helm" / "trainguard"
RELEASE = "trainguard"
NAMESPACE = "trainguard-system"

Obj = dict[str, Any]


@dataclass(frozen=True)
class Helm:
    binary: Path

    def run(self, *args: str, timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.binary), *args], capture_output=True, text=True, timeout=timeout, check=False
        )

    def template(
        self,
        values: Mapping[str, Any] | None = None,
        *,
        namespace: str = NAMESPACE,
        extra: tuple[str, ...] = (),
        tmp: Path | None = None,
    ) -> subprocess.CompletedProcess[str]:
        args = ["template", RELEASE, str(CHART), "--namespace", namespace, *extra]
        if values is not None:
            assert tmp is not None, "values need a directory for their file"
            path = tmp / "values.json"
            path.write_text(json.dumps(values), encoding="utf-8")
            args += ["--values", str(path)]
        return self.run(*args)

    def objects(self, values: Mapping[str, Any] | None = None, **kwargs: Any) -> list[Obj]:
        result = self.template(values, **kwargs)
        assert result.returncode == 0, result.stderr
        return [d for d in yaml.safe_load_all(result.stdout) if d is not None]


def find(objects: list[Obj], kind: str, name: str) -> Obj:
    found = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    assert len(found) == 1, (kind, name, [(o["kind"], o["metadata"]["name"]) for o in objects])
    return found[0]
