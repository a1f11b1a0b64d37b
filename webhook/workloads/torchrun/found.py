"""What following a command to its launch finds: the launcher, the argv it runs, its environment.

Its own module because both sides of a shell script produce it: the launcher finder (launcher.py)
and the shell interpreter it follows (shell.py), which calls back into the finder for each command.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class Found:
    launcher: str
    argv: tuple[str, ...] | None  # None: the launch line could not be followed
    env: dict[str, str | None]  # the PET_* environment the launcher receives
