"""/readyz notes: what the auditing worker records, every worker of the pod reads."""

from __future__ import annotations

from pathlib import Path

import pytest

from webhook.serve.readiness_notes import Notes


@pytest.mark.parametrize("shared", [True, False], ids=["workers-sharing-a-directory", "one-process"])
def test_a_note_is_read_by_every_reader_until_cleared(tmp_path: Path, shared: bool) -> None:
    writer = Notes(str(tmp_path) if shared else "")  # "": not shared, whatever the environment
    reader = Notes(str(tmp_path)) if shared else writer  # another worker's view of the same pod
    writer.set("reports", "namespace trainguard-system does not exist")
    assert reader.current() == {"reports": "namespace trainguard-system does not exist"}
    writer.set("reports", None)
    assert reader.current() == {}


def test_an_unreadable_notes_file_is_no_note(tmp_path: Path) -> None:
    (tmp_path / "trainguard-notes.json").write_text("{not json")
    assert Notes(str(tmp_path)).current() == {}
