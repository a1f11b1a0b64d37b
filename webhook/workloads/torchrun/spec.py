"""The facts a launch line yields: torch's reading of the found argv and environment, as a TorchrunSpec.

Unknown values (a `valueFrom` env entry, a variable the container's env does not define, which the
image or `envFrom` may, a command substitution) are never guessed: the field is left None and its
name is listed in `TorchrunSpec.unresolved`. Markers there besides field names (unknown.py):
ARGV (part of the launch line itself is unknown, so any field may be overridden by what we could
not see), INVALID (torch would refuse this launch line; `LaunchParse.error` says why) and LIMIT (a
cap of limits.py was reached; `TorchrunSpec.limit` says which).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from webhook.workloads.model import TorchrunSpec
from webhook.workloads.torchrun import launchers
from webhook.workloads.torchrun.found import Found
from webhook.workloads.torchrun.limits import Meter
from webhook.workloads.torchrun.options import TorchExit, Values, apply_env, parse_argv
from webhook.workloads.torchrun.unknown import ARGV, INVALID, LIMIT

# The fields of TorchrunSpec that the parser fills, in report order.
FIELDS = ("nnodes", "nproc_per_node", "standalone", "rdzv_backend", "max_restarts")


@dataclass(frozen=True, slots=True)
class Injected:
    """A PET_* value the training operator adds to the container's env, and the field it comes from."""

    value: str
    field: str  # dotted path in the workload, e.g. "spec.nprocPerNode"


@dataclass(frozen=True, slots=True)
class LaunchParse:
    """The spec plus what was found on the way: the argv torch would receive and why it is invalid."""

    spec: TorchrunSpec | None
    # The arguments after the launcher (what torch's parser gets), NUL marking unknown text;
    # None when there is no launch line (env-only) or it could not be followed.
    argv: tuple[str, ...] | None = None
    # The environment of the launched process as far as it matters (PET_* names only).
    env: dict[str, str | None] = field(default_factory=dict)
    error: str | None = None  # why torch would reject it (set iff INVALID in spec.unresolved)
    limit: str | None = None  # the cap that was reached (set iff LIMIT in spec.unresolved)
    work: int = 0  # units of work spent (limits.Meter): what the complexity tests hold to the input


def evaluate(
    found: Found,
    meter: Meter,
    injected: Mapping[str, Injected] | None = None,
    limit: str | None = None,
) -> LaunchParse:
    """torch's reading of a found launch; `injected` names the PET_* values the operator set."""
    spec, error = read(found, meter, injected, limit)
    return LaunchParse(
        spec=spec, argv=found.argv, env=dict(found.env), error=error, limit=limit, work=meter.work
    )


def spec_of(
    found: Found,
    meter: Meter,
    injected: Mapping[str, Injected] | None = None,
    limit: str | None = None,
) -> TorchrunSpec:
    """evaluate's spec alone: what a container's view keeps (no LaunchParse built for it)."""
    return read(found, meter, injected, limit)[0]


def read(
    found: Found,
    meter: Meter,
    injected: Mapping[str, Injected] | None = None,
    limit: str | None = None,
) -> tuple[TorchrunSpec, str | None]:
    """The spec of a found launch, and why torch would reject it (None when it would not)."""
    if found.launcher in launchers.LAUNCHERS:
        return launchers.read(found.launcher, found.argv, meter, limit), None
    out = Values()
    error: str | None = None
    bad_field: str | None = None
    if found.argv is None:
        out.argv_unknown = True
    elif found.launcher != "env":
        try:
            parse_argv(found.argv, found.launcher, out, meter)
        except TorchExit as e:
            error, bad_field = str(e), e.field
    try:
        apply_env(found.launcher, found.env, out)
    except TorchExit as e:
        if error is None:
            error, bad_field = str(e), e.field

    # Each field: its text (None when absent or unknown) and, when present, where it came from.
    values = out.values
    unknown: set[str] = set(out.unknown)
    sources = {dest: values[dest][1] for dest in FIELDS if dest in values}
    text = {dest: str(v[0]) for dest, v in values.items() if dest not in unknown}

    nnodes = text.get("nnodes")
    nnodes_min = nnodes_max = None
    if nnodes is not None:
        try:
            nnodes_min, nnodes_max = _min_max(nnodes)
        except TorchExit as e:
            error = error or str(e)
            bad_field = bad_field or "nnodes"

    nproc = text.get("nproc_per_node")
    nproc_int: int | None = None
    if nproc is not None:
        try:
            nproc_int = int(nproc)
        except ValueError:
            nproc_int = None

    standalone = "standalone" in values and bool(values["standalone"][0]) and "standalone" not in unknown
    backend = text.get("rdzv_backend")

    restarts_raw = text.get("max_restarts")
    max_restarts: int | None = None
    if restarts_raw is not None:
        try:
            max_restarts = int(restarts_raw)
        except ValueError:
            max_restarts = None
        if max_restarts is not None and max_restarts < 0:
            error = error or f"max_restarts must be >= 0, got {max_restarts}"
            bad_field = bad_field or "max_restarts"
            max_restarts = None

    if bad_field == "nnodes":
        nnodes_min = nnodes_max = None
    if bad_field in FIELDS:
        unknown.add(bad_field)
    origins: dict[str, str] = {}
    if injected:
        for dest, source in sources.items():
            name = f"PET_{dest.upper()}"
            if source == "env" and name in injected and found.env.get(name) == injected[name].value:
                sources[dest] = "operator"
                origins[dest] = injected[name].field
    markers: list[str] = []
    if error is not None:
        markers.append(INVALID)
    if out.argv_unknown:
        markers.append(ARGV)
    if limit is not None:
        markers.append(LIMIT)
    if unknown:
        markers.extend(f for f in FIELDS if f in unknown)
    spec = TorchrunSpec(
        launcher=found.launcher,
        nnodes=nnodes,
        nnodes_min=nnodes_min,
        nnodes_max=nnodes_max,
        nproc_per_node=nproc,
        nproc_per_node_int=nproc_int,
        standalone=standalone,
        rdzv_backend=backend,
        max_restarts=max_restarts,
        sources=sources,
        unresolved=tuple(markers),
        injected=origins,
        limit=limit,
    )
    return spec, error


def _min_max(nnodes: str) -> tuple[int, int]:
    """torch's parse_min_max_nnodes plus the launch-time check 0 < min <= max."""
    parts = nnodes.split(":")
    try:
        if len(parts) == 1:
            lo = hi = int(parts[0])
        elif len(parts) == 2:
            lo, hi = int(parts[0]), int(parts[1])
        else:
            raise TorchExit(f'nnodes={nnodes} is not in "MIN:MAX" format', "nnodes")
    except ValueError:
        raise TorchExit(f"nnodes={nnodes!r} is not an integer or MIN:MAX", "nnodes") from None
    if not 0 < lo <= hi:
        raise TorchExit(f"nnodes={nnodes}: min_nodes must be > 0 and <= max_nodes", "nnodes")
    return lo, hi
