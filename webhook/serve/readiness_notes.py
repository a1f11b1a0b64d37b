"""What a side task (the audit's reports) cannot do right now, as /readyz reports it.

One worker process runs the side task, but the kubelet's probe reaches whichever worker accepts
its connection: with several workers the notes are kept in a small JSON file in the directory
the workers already share for their metric files, so that every worker answers the same.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

__all__ = ["Notes"]

_FILE = "trainguard-notes.json"


class Notes:
    def __init__(self, shared_dir: str | None = None) -> None:
        """`shared_dir`: where the workers' metric files live (None: $PROMETHEUS_MULTIPROC_DIR;
        empty: this process only)."""
        self._local: dict[str, str] = {}
        directory = shared_dir if shared_dir is not None else os.environ.get("PROMETHEUS_MULTIPROC_DIR")
        self._path = Path(directory) / _FILE if directory else None

    def set(self, task: str, problem: str | None) -> None:
        """Record (or, with None, clear) why `task` is not ready."""
        if problem is None:
            self._local.pop(task, None)
        else:
            self._local[task] = problem
        if self._path is not None:
            self._write(self._path, self._local)

    def current(self) -> dict[str, str]:
        if self._path is None:
            return dict(self._local)
        try:
            data = json.loads(self._path.read_bytes())
        except (OSError, ValueError):
            return {}
        return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}

    @staticmethod
    def _write(path: Path, notes: dict[str, str]) -> None:
        # Replaced whole, so a worker never reads half a file.
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".notes-")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                json.dump(notes, fh)
            os.replace(tmp, path)
        except OSError:
            Path(tmp).unlink(missing_ok=True)
