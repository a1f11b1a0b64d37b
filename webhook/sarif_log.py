"""The SARIF 2.1.0 log trainguard writes, the same for `trainguard review` and `trainguard audit`.

One rule per policy (level by mode: Enforce error, Warn warning, Audit note), so that a policy
reads the same in a pull request's code scanning and in a cluster audit; the front doors add
their own results (a file and line for a manifest, the object for a cluster audit).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

from webhook import __version__
from webhook.engine import Policy

__all__ = ["MODE_LEVELS", "fingerprint", "log", "resource", "rule", "suppression"]

SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
MODE_LEVELS = {"Enforce": "error", "Warn": "warning", "Audit": "note"}
_FINGERPRINT = "trainguardFinding/v1"


def log(policies: Sequence[Policy], results: list[dict[str, Any]], **run: Any) -> dict[str, Any]:
    """The log of one run: a rule per policy, the results, and the run's own members (`run`)."""
    return {
        "$schema": SCHEMA,
        "version": "2.1.0",
        "runs": [
            {
                "tool": {
                    "driver": {
                        "name": "trainguard",
                        "version": __version__,
                        "semanticVersion": __version__,
                        "rules": [rule(p) for p in policies],
                    }
                },
                "results": results,
                **run,
            }
        ],
    }


def rule(p: Policy) -> dict[str, Any]:
    description = p.description or p.title
    level = MODE_LEVELS[p.mode] if not p.mutating else "none"
    return {
        "id": p.name,
        "name": "".join(part.capitalize() for part in p.name.replace("_", "-").split("-")),
        "shortDescription": {"text": p.title},
        "fullDescription": {"text": description},
        "help": {"text": description},
        "defaultConfiguration": {"level": level},
        "properties": {"tags": ["trainguard", "mutation" if p.mutating else "validation"], "mode": p.mode},
    }


def fingerprint(*parts: str) -> dict[str, str]:
    """A result's partialFingerprints: stable while `parts` (what the finding is about) stay the same,
    so that code scanning tracks one finding across line moves and runs."""
    key = "\x00".join(parts)
    return {_FINGERPRINT: hashlib.sha256(key.encode()).hexdigest()[:32]}


def resource(name: str, qualified: str) -> dict[str, str]:
    """A logical location: the Kubernetes object a result is about."""
    return {"name": name, "fullyQualifiedName": qualified, "kind": "resource"}


def suppression(justification: str) -> dict[str, Any]:
    """An exempted finding stays a result, with the exception's justification as its suppression."""
    return {"kind": "external", "status": "accepted", "justification": justification}
