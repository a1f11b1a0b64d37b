"""`trainguard audit`: decide what already runs in a cluster, with the webhook's engine.

Exit 0 when nothing fails (at the --fail-on level), 1 when something does (with
--compare-policies: when something would newly fail), 2 on bad input, policies, config or when
the cluster cannot be read.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from webhook.cli import EXIT_ALLOWED, EXIT_DENIED
from webhook.cli._file_engine import add_policy_args, load_policy_exceptions
from webhook.config import load_config
from webhook.engine import Engine, build_engine, load_policy_set

if TYPE_CHECKING:
    from webhook.audit.decide import ObjectAudit


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "audit",
        help="decide the workloads already in a cluster as the admission webhook would (read only)",
        description="List every workload of the supported kinds (and pods no workload owns) with "
        "paginated LISTs and decide each with the webhook's engine: validations on the stored "
        "object, mutations shown as 'would patch' (nothing is written), exceptions honoured. "
        "--compare-policies previews a policy change. Exit 0 when nothing fails, 1 when something "
        "does, 2 on bad input or when the cluster cannot be read.",
    )
    access = p.add_mutually_exclusive_group()
    access.add_argument(
        "--kubeconfig", metavar="FILE", help="cluster credentials (default: $KUBECONFIG, else ~/.kube/config)"
    )
    access.add_argument("--in-cluster", action="store_true", help="credentials of the pod's service account")
    p.add_argument("--context", metavar="NAME", help="kubeconfig context (default: the current one)")
    scope = p.add_mutually_exclusive_group()
    scope.add_argument("--namespace", "-n", metavar="NS", help="audit one namespace")
    scope.add_argument(
        "--all-namespaces", "-A", action="store_true", help="audit every namespace (the default)"
    )
    add_policy_args(p)
    p.add_argument(
        "--exceptions",
        action="append",
        metavar="PATH",
        help="PolicyException files or directories (repeatable); PolicyException objects in the "
        "cluster are honoured too",
    )
    p.add_argument(
        "--compare-policies",
        action="append",
        metavar="DIR",
        help="a proposed policy set (files or directories, repeatable): report which workloads "
        "would newly fail or newly pass with it",
    )
    p.add_argument("-o", "--output", choices=("table", "json", "markdown", "sarif"), default="table")
    p.add_argument(
        "--fail-on",
        choices=("fail", "warn", "never"),
        default="fail",
        help="exit 1 when a workload fails (default), also when it only warns, or never",
    )
    p.add_argument(
        "--page-size", type=_page_size, default=500, metavar="N", help="LIST page size (default 500)"
    )
    p.set_defaults(run=run)


def _page_size(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 1 <= value <= 10_000:
        raise argparse.ArgumentTypeError(f"must be between 1 and 10000, got {value}")
    return value


def run(args: argparse.Namespace) -> int:
    # The kubernetes client and tqdm are imported here: `trainguard check` does not pay for them.
    from webhook.audit import cluster
    from webhook.audit.compare import compare
    from webhook.audit.decide import Result
    from webhook.audit.render import AuditRun, write

    config = load_config(args.config)
    policies = load_policy_set(args.policies or (), args.cel)
    proposed = load_policy_set(args.compare_policies, args.cel) if args.compare_policies else None
    file_exceptions = load_policy_exceptions(args, policies)
    namespace = None if args.all_namespaces else args.namespace
    scope = f"namespace {namespace}" if namespace else "all namespaces"

    api = cluster.api_client(kubeconfig=args.kubeconfig, context=args.context, in_cluster=args.in_cluster)
    with cluster.reading():
        # The cluster's facts as the webhook's caches hold them, its eviction records included.
        facts = cluster.listed_facts(api, file_exceptions)
        current = build_engine(policies, config, facts)
        candidate = build_engine(proposed, config, facts) if proposed is not None else None
        audits, pairs, missing = _scan(api, namespace, args.page_size, current, candidate)

    audits.sort(key=lambda a: (a.ref.namespace or "", a.ref.kind, a.ref.name))
    level: Result = "warn" if args.fail_on == "warn" else "fail"
    comparison = compare(pairs, level=level) if proposed is not None else None
    run_ = AuditRun(
        audits,
        [cp.policy for cp in policies.policies],
        scope,
        missing,
        comparison,
        ", ".join(args.compare_policies) if args.compare_policies else None,
    )
    write(run_, args.output, sys.stdout)
    if args.fail_on == "never":
        return EXIT_ALLOWED
    if comparison is not None:
        return EXIT_DENIED if comparison.newly_failing else EXIT_ALLOWED
    return EXIT_DENIED if any(a.failing(level) for a in audits) else EXIT_ALLOWED


def _scan(
    api: Any, namespace: str | None, page_size: int, current: Engine, candidate: Engine | None
) -> tuple[list[ObjectAudit], list[tuple[ObjectAudit | None, ObjectAudit | None]], list[str]]:
    """Every listed object decided by `current` (and by `candidate`, to compare): the audits, the
    pairs of audits where either engine has one, and the resources the cluster does not serve."""
    from webhook.audit import cluster
    from webhook.audit.decide import Auditor
    from webhook.audit.scan import scan

    by_current = Auditor(current)
    by_candidate = Auditor(candidate) if candidate is not None else None
    missing: list[str] = []
    audits: list[ObjectAudit] = []
    pairs: list[tuple[ObjectAudit | None, ObjectAudit | None]] = []
    with _progress() as bar:
        for obj in scan(
            cluster.ClusterLister(api),
            namespace,
            page_size=page_size,
            on_page=_counter(bar),
            on_missing=lambda kind: missing.append(f"{kind.plural}.{kind.group or 'core'}"),
        ):
            audit = by_current.audit(obj)
            if audit is not None:
                audits.append(audit)
            if by_candidate is not None:
                after = by_candidate.audit(obj)
                if audit is not None or after is not None:
                    pairs.append((audit, after))
            if bar is not None:
                bar.update(1)
    return audits, pairs, missing


def _counter(bar: Any) -> Any:
    """Grow the bar's total as pages arrive: a kind's first page says how many remain, when the
    API server knows; otherwise each page adds what it holds."""
    from webhook.audit.scan import controlled

    known: set[Any] = set()

    def on_page(kind: Any, page: Any) -> None:
        if bar is None:
            return
        if kind not in known:
            bar.total = (bar.total or 0) + len(page.items) + (page.remaining or 0)
            if page.remaining is not None or not page.continue_token:
                known.add(kind)
        # Pods a controller owns are counted in the total but never decided: count them as done.
        bar.update(sum(1 for item in page.items if controlled(item)) if kind.kind == "Pod" else 0)

    return on_page


class _progress:
    """A tqdm bar on stderr when it is a terminal; None (no output at all) otherwise."""

    def __enter__(self) -> Any:
        if not sys.stderr.isatty():
            self.bar = None
            return None
        from tqdm import tqdm

        self.bar = tqdm(total=0, unit=" objects", desc="audit", file=sys.stderr, leave=False)
        return self.bar

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.close()
