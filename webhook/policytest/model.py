"""What a PolicyTest file holds once read: resources, cases, and a case's result."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

from webhook.config import PlatformConfig
from webhook.engine import (
    Outcome,
    PolicyException,
)

API_VERSION = "trainguard.dev/v1alpha1"
KIND = "PolicyTest"
SUFFIXES = (".yaml", ".yml")
OUTCOMES: tuple[Outcome, ...] = ("pass", "fail", "warn", "audit", "skip", "error", "exempt")
OPERATIONS = ("CREATE", "UPDATE", "DELETE", "CONNECT")


_TOP_FIELDS = {
    "apiVersion", "kind", "metadata", "policies", "config", "request", "exceptions", "now",
    "resources", "oldResources", "cases",
}  # fmt: skip
_CASE_FIELDS = {"name", "resource", "policy", "result", "message", "patchedResource", "skip"}
_REQUEST_FIELDS = {"operation", "namespace", "userInfo"}

Status = Literal["passed", "failed", "skipped"]


@dataclass(frozen=True, slots=True)
class Resource:
    obj: dict[str, Any]
    origin: str  # "resources/job.yaml#1" or "resources[2]"
    namespace: str  # metadata.namespace, else the request's namespace

    @property
    def kind(self) -> str:
        return str(self.obj.get("kind"))

    @property
    def name(self) -> str:
        meta = self.obj.get("metadata")
        return str((meta.get("name") or meta.get("generateName") or "") if isinstance(meta, dict) else "")

    @property
    def ident(self) -> str:
        return f"{self.kind}/{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class PolicyTestCase:
    name: str
    resource: Resource
    old: Resource | None
    policy: str
    result: Outcome
    message: re.Pattern[str] | None = None
    patched_resource: dict[str, Any] | None = None
    skip: str | None = None
    index: int = 0


@dataclass(frozen=True, slots=True)
class PolicyTestFile:
    path: Path
    name: str
    policies: tuple[Path, ...]  # files or directories; the shipped directory when the file names none
    config: PlatformConfig
    operation: str
    namespace: str
    user_info: dict[str, Any]
    exceptions: tuple[PolicyException, ...]
    resources: tuple[Resource, ...]
    cases: tuple[PolicyTestCase, ...]
    now: datetime | None = None

    @property
    def display(self) -> str:
        return display_path(self.path)

    def case_id(self, case: PolicyTestCase) -> str:
        return f"{self.display}::{case.name}"


@dataclass(frozen=True, slots=True)
class CaseResult:
    test: PolicyTestFile
    case: PolicyTestCase
    status: Status
    reason: str | None = None
    outcome: str | None = None  # what the engine concluded

    @property
    def id(self) -> str:
        return self.test.case_id(self.case)


def display_path(path: Path) -> str:
    try:
        return path.resolve().relative_to(Path.cwd().resolve()).as_posix()
    except ValueError:
        return path.as_posix()
