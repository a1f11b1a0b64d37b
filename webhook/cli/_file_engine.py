"""What the commands that read files share: policy and engine options, and an Engine built from files."""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from webhook import fields
from webhook.config import PlatformConfig, load_config
from webhook.context import Evictions, context_objects, evictions
from webhook.documents import Document, load_yaml_documents, read_manifests
from webhook.engine import (
    AdmissionInput,
    ClusterFacts,
    Decision,
    Engine,
    PolicyException,
    PolicySet,
    load_exceptions,
    load_policy_set,
    unknown_policies,
)
from webhook.engine import build_engine as engine_from_facts
from webhook.errors import InputError


def add_policy_args(parser: argparse.ArgumentParser) -> None:
    """--policies, --config and --cel: what every command that builds an engine takes."""
    parser.add_argument(
        "--policies",
        action="append",
        metavar="DIR",
        help="policy files or directories (repeatable; default: the shipped policies)",
    )
    parser.add_argument("--config", metavar="FILE", help="PlatformConfig file (default: embedded defaults)")
    parser.add_argument(
        "--cel",
        choices=("auto", "cel-expr-python", "cel-python"),
        default=None,
        help="CEL runtime (default: cel-expr-python when installed)",
    )


def add_engine_args(parser: argparse.ArgumentParser) -> None:
    """The manifest files to decide, the policy options, and what deciding files adds to them."""
    parser.add_argument(
        "paths",
        nargs="+",
        metavar="PATH",
        help="files, directories (searched for .yaml/.yml/.json), or - for stdin",
    )
    add_policy_args(parser)
    parser.add_argument(
        "--namespace",
        "-n",
        default="default",
        metavar="NS",
        help="namespace for objects that name none (default: default)",
    )
    parser.add_argument(
        "--exceptions",
        action="append",
        metavar="PATH",
        help="PolicyException files or directories (repeatable; default: none)",
    )


def load_inputs(
    args: argparse.Namespace, *, track_lines: bool = False
) -> tuple[PlatformConfig, PolicySet, list[Document]]:
    config = load_config(args.config)
    policies = load_policy_set(args.policies or (), args.cel)
    docs = read_manifests(args.paths, stdin=sys.stdin, track_lines=track_lines)
    return config, policies, docs


def load_policy_exceptions(args: argparse.Namespace, policies: PolicySet) -> list[PolicyException]:
    """The --exceptions files; an exception naming a policy that is not loaded is worth a warning."""
    exceptions = load_exceptions(getattr(args, "exceptions", None) or [])
    for message in unknown_policies(exceptions, policies.names()):
        print(f"trainguard: warning: {message}", file=sys.stderr)
    return exceptions


@dataclass(slots=True)
class Context:
    """What documents tell the engine about each other: the TrainingRuntimes and PriorityClasses
    among them, and the evictions their status records (later documents win)."""

    runtimes: dict[tuple[str | None, str], dict[str, Any]] = field(default_factory=dict)
    priority_classes: dict[str, int] = field(default_factory=dict)
    evictions: Evictions = field(default_factory=dict)

    @classmethod
    def of(cls, docs: list[Document]) -> Context:
        runtimes, priority_classes = context_objects(doc.data for doc in docs)
        return cls(runtimes, priority_classes, evictions(doc.data for doc in docs))

    def update(self, later: Context) -> None:
        """Add what documents after these ones say, as `of` would over both lists."""
        self.runtimes.update(later.runtimes)
        self.priority_classes.update(later.priority_classes)
        self.evictions.update(later.evictions)


def build_engine(
    policies: PolicySet, config: PlatformConfig, docs: list[Document], exceptions: Any = ()
) -> Engine:
    """The engine for all of `docs` at once (review): the facts they hold, and `exceptions`."""
    return engine_from_facts(policies, config, ClusterFacts.of_objects((d.data for d in docs), exceptions))


def engine_for(policies: PolicySet, config: PlatformConfig, context: Context, exceptions: Any = ()) -> Engine:
    """The engine for documents read in batches (check): the facts gathered so far."""
    facts = ClusterFacts(
        priority_classes=context.priority_classes,
        runtimes=context.runtimes,
        exceptions=tuple(exceptions),
        evictions=context.evictions,
    )
    return engine_from_facts(policies, config, facts)


def decide_all(engine: Engine, docs: list[Document], namespace: str) -> list[Decision]:
    return [decide_document(engine, doc, namespace) for doc in docs]


def decide_document(engine: Engine, doc: Document, namespace: str) -> Decision:
    try:
        return engine.decide(AdmissionInput(object=doc.data, namespace=namespace))
    except InputError as exc:
        if exc.source is not None:
            raise
        raise InputError(
            exc.message, source=doc.path, document=doc.index, line=_line_of(doc, exc.field), field=exc.field
        ) from None


def _line_of(doc: Document, field: str | None) -> int:
    """The line of `field` in the document, re-reading the file with line tracking (errors only)."""
    if not field or doc.path == "<stdin>":
        return doc.line
    try:
        text = Path(doc.path).read_text("utf-8")
        # Other documents of the file may be unreadable: they must not hide this one's lines.
        tracked = load_yaml_documents(text, doc.path, track_lines=True, errors=[])
    except (OSError, InputError):
        return doc.line
    for candidate in tracked:
        if candidate.index == doc.index:
            return candidate.line_of(fields.pointer(fields.parse(field), candidate.data))
    return doc.line
