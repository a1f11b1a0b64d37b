"""Errors that cross module boundaries.

    TrainguardError
    ├── InputError          a manifest or AdmissionReview we cannot decide on  -> HTTP 400 / exit 2
    │   └── DuplicateKeyError   a YAML mapping names the same key twice
    ├── PolicyError         a policy file that does not load or compile        -> exit 2, last good set kept
    └── ConfigError         a PlatformConfig file that does not load            -> exit 2, last good set kept

A policy *outcome* (deny, warn) is never an exception: it is a Decision value.
An exception raised while a policy evaluates becomes an ERROR evaluation that the policy's
failurePolicy turns into deny or allow (engine/decide.py).
"""

from __future__ import annotations


class TrainguardError(Exception):
    """Base class for all errors trainguard reports to a user."""


class InputError(TrainguardError):
    """Input we cannot decide on, located as precisely as we know."""

    def __init__(
        self,
        message: str,
        *,
        source: str | None = None,
        document: int | None = None,
        line: int | None = None,
        field: str | None = None,
    ) -> None:
        self.message = message
        self.source = source
        self.document = document
        self.line = line
        self.field = field
        super().__init__(self.describe())

    def describe(self) -> str:
        return _located(
            self.message,
            self.source,
            None if self.document is None else f"document {self.document}",
            None if self.line is None else f"line {self.line}",
            f"field {self.field}" if self.field else None,
        )


class DuplicateKeyError(InputError):
    """A mapping repeats a key; YAML loaders silently keep the last value, we refuse."""


class PolicyError(TrainguardError):
    """A policy file that does not load or compile."""

    def __init__(
        self,
        message: str,
        *,
        path: str | None = None,
        policy: str | None = None,
        position: str | None = None,
    ) -> None:
        self.message = message
        self.path = path
        self.policy = policy
        self.position = position
        super().__init__(_located(message, path, f"policy {policy}" if policy else None, position))


class ConfigError(TrainguardError):
    """A PlatformConfig file that does not load."""


def _located(message: str, *where: str | None) -> str:
    """The message after the places it concerns (the ones known), as "file, document 2: message"."""
    prefix = ", ".join(w for w in where if w)
    return f"{prefix}: {message}" if prefix else message
