"""The normalised Workload: what every adapter produces and every policy reads.

An adapter (one module per API in this package) turns an object into a Workload. Policies see it
as the CEL variable `workload` through `view()`, in camelCase, so a policy never needs to know
where PyTorchJob and JobSet keep their replica counts.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import MISSING, dataclass, field, fields, is_dataclass
from types import UnionType
from typing import Any, Literal, TypeVar, Union, get_args, get_origin, get_type_hints

from webhook.fields import pointer_to_path

_T = TypeVar("_T")


def _fast_init(cls: type[_T]) -> type[_T]:
    """Give a frozen, slotted dataclass an __init__ that fills its slots through their descriptors.

    A Workload and its parts are built on every admission. The generated frozen __init__ goes
    through object.__setattr__ for each field (a global, an attribute and a call that looks the
    name up again): about 1,600 instructions a field, where the slot's own setter takes 1,000.
    Same signature, defaults and default factories; the instance stays frozen (its __setattr__
    still raises).

    Accepts a frozen dataclass with slots, whose field names are identifiers (the generated
    source holds only those and names made here); refuses anything else with TypeError, when
    the module is imported.
    """
    if not (is_dataclass(cls) and cls.__dataclass_params__.frozen and "__slots__" in cls.__dict__):  # type: ignore[attr-defined]
        raise TypeError(f"_fast_init takes a frozen dataclass with slots, not {cls.__qualname__}")
    params: list[str] = []
    lines: list[str] = []
    names: dict[str, Any] = {"_FACTORY": _FACTORY}
    for f in fields(cls):
        setter = f"_set_{f.name}"
        names[setter] = cls.__dict__[f.name].__set__
        if f.default is not MISSING:
            names[f"_default_{f.name}"] = f.default
            params.append(f"{f.name}=_default_{f.name}")
            lines.append(f"{setter}(self, {f.name})")
        elif f.default_factory is not MISSING:
            names[f"_factory_{f.name}"] = f.default_factory
            params.append(f"{f.name}=_FACTORY")
            lines.append(f"{setter}(self, _factory_{f.name}() if {f.name} is _FACTORY else {f.name})")
        else:
            params.append(f.name)
            lines.append(f"{setter}(self, {f.name})")
    # The source holds only field names (identifiers) and the names made here.
    source = f"def __init__(self, {', '.join(params)}) -> None:\n    " + "\n    ".join(lines) + "\n"
    exec(compile(source, f"<init of {cls.__name__}>", "exec"), names)
    init = names["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__module__ = cls.__module__
    cls.__init__ = init  # type: ignore[method-assign]
    return cls


_FACTORY: Any = object()  # "use the field's default factory", as a parameter default

Role = Literal["training", "inference"]
WorkloadClass = Literal["A", "B", "C"]
Tier = Literal["guaranteed", "preemptible"]


@_fast_init
@dataclass(frozen=True, slots=True)
class TorchrunSpec:
    """What a torchrun launch line (and its PET_* environment) says about the job's shape."""

    # "torchrun" | "torch.distributed.run" | "torch.distributed.launch" | "env", or "accelerate" /
    # "deepspeed" (their node and per-node process counts, read by torchrun.launchers)
    launcher: str
    nnodes: str | None = None  # raw value, "4" or "2:8"
    nnodes_min: int | None = None
    nnodes_max: int | None = None
    nproc_per_node: str | None = None  # raw value: "8", "gpu", "auto", "cpu"
    nproc_per_node_int: int | None = None  # set only when the raw value is a number
    standalone: bool = False
    rdzv_backend: str | None = None
    max_restarts: int | None = None
    # Field name -> "flag" | "env" | "operator": where each value came from.
    sources: dict[str, str] = field(default_factory=dict)
    # Fields whose value was a $VAR reference we could not resolve from the container env, and the
    # markers "argv", "invalid", "limit" (webhook.workloads.torchrun.unknown).
    unresolved: tuple[str, ...] = ()
    # For each "operator" source: the workload field the training operator injects it from
    # ("nproc_per_node" -> "spec.nprocPerNode").
    injected: dict[str, str] = field(default_factory=dict)
    # Set when the launch line was past one of the parser's caps (its facts are then unknown):
    # which cap, in words ("command + args has 175,000 words, over the cap of 1,024").
    limit: str | None = None


@_fast_init
@dataclass(frozen=True, slots=True)
class Container:
    name: str
    pointer: str  # JSON pointer of the container object
    gpus: int  # whole accelerators + MIG slices requested (limits, else requests)
    accelerators: dict[str, int]  # accelerator resource name -> count
    # The raw launch line and environment stay out of the CEL view (policies read `object` for
    # them, and the parsed torchrun facts from `workload.torchrun`): converting a few hundred env
    # values into CEL on every admission would cost more than the policies themselves.
    command: tuple[str, ...] = field(metadata={"view": False})
    args: tuple[str, ...] = field(metadata={"view": False})
    env: dict[str, str | None] = field(metadata={"view": False})  # valueFrom entries map to None
    torchrun: TorchrunSpec | None = field(default=None, metadata={"view": False})
    # The process count of an `mpirun -np N` launch line (MPIJob launchers), when N is a number.
    mpirun_np: int | None = None


@_fast_init
@dataclass(frozen=True, slots=True)
class PodGroup:
    """One pod template of a workload and how many pods it stamps out."""

    name: str  # replica type / task / group name ("Worker", "workers", "pod")
    replicas: int
    template_pointer: str  # JSON pointer of the pod template (has /metadata and /spec); "" for a Pod
    containers: tuple[Container, ...]
    gpus_per_pod: int
    labels: dict[str, str]
    annotations: dict[str, str]
    priority_class_name: str | None
    scheduler_name: str | None
    node_selector: dict[str, str]
    # Each required nodeSelectorTerm as its list of matchExpressions (terms are ORed).
    required_node_terms: tuple[tuple[dict[str, Any], ...], ...]
    tolerations: tuple[dict[str, Any], ...]
    termination_grace_period_seconds: int | None  # None when unset (Kubernetes default: 30)
    pod_affinity_topology_keys: tuple[str, ...]  # topology keys of (anti-)affinity terms
    restart_policy: str | None = None
    # False when the template is not inside this object (a TrainJob's runtime templates):
    # mutations must not write at template_pointer.
    patchable: bool = True
    # Where such a template is: "ClusterTrainingRuntime/torch:spec.template.spec.replicatedJobs[1]
    # .template.spec.template", so that messages name a field the user can find. "" otherwise.
    source_field: str = field(default="", metadata={"view": False})


@_fast_init
@dataclass(frozen=True, slots=True)
class Gang:
    """How the scheduler is told to place the workload all-or-nothing."""

    # e.g. "kueue", "scheduling-policy", "volcano", "runtime-podgroup", "kueue-pod-group",
    # "coscheduling", "volcano-podgroup", "workload-api", "ray-batch-scheduler"
    mechanisms: tuple[str, ...] = ()
    min_available: int | None = None  # declared minimum, if any
    min_field: str | None = None  # dotted field path where the minimum is declared
    queue_name: str | None = None  # Kueue LocalQueue, if labelled
    # A bare pod's group (Kueue pod-group-name, else the coscheduling or Volcano group name): the
    # identity its pods share. None for job kinds, whose identity is their own name.
    group_name: str | None = None
    # Pod templates that escape a gang the others join: [{"group", "field", "problem"}], where
    # "problem" says, after the field, what takes the template's pods out of the gang.
    gaps: tuple[dict[str, str], ...] = ()
    # A Kueue pod group that Kueue refuses: its name without a usable pod-group-total-count.
    # [{"group", "groupField", "countField", "count"}], "count" as written ("" when missing).
    group_count_errors: tuple[dict[str, str], ...] = ()


@_fast_init
@dataclass(frozen=True, slots=True)
class ElasticRange:
    """An elastic range in pods, `fixed` of them outside the elastic replicas (a Master)."""

    min: int
    max: int
    field: str  # dotted path of the declaration
    fixed: int = 0  # pods counted in min and max that the declaration does not count
    launcher: bool = False  # the range comes from a torchrun launch line, not from the kind


@_fast_init
@dataclass(frozen=True, slots=True)
class Checkpoint:
    """The checkpoint contract annotations, parsed but not judged against platform bounds."""

    interval: str | None = None
    interval_seconds: int | None = None  # None when absent or not a valid duration
    uri: str | None = None
    uri_scheme: str | None = None
    # What stands between "://" and the next "/": a bucket or claim name, or "" for file:///path.
    # None when the URI has no "://".
    uri_authority: str | None = None
    uri_path: str | None = None  # the rest, from the "/" after the authority ("" when none)
    owner: str | None = None
    declared: bool = False  # any of the three annotations present


@_fast_init
@dataclass(frozen=True, slots=True)
class TopologyConstraint:
    source: str  # "kueue-tas-required", "kueue-tas-preferred", "volcano-network-topology", ...
    key: str  # topology key or level
    required: bool
    group: str | None = None  # pod group it applies to, None for the whole workload


@_fast_init
@dataclass(frozen=True, slots=True)
class Topology:
    constraints: tuple[TopologyConstraint, ...] = ()
    best_effort: bool = False  # trainguard.dev/topology-slo: best-effort


@_fast_init
@dataclass(frozen=True, slots=True)
class Restarts:
    bound: int | None = None  # maxRestarts / backoffLimit / maxRetry
    field: str | None = None


@_fast_init
@dataclass(frozen=True, slots=True)
class TierConflict:
    """A priority class the platform maps to another tier than the `trainguard.dev/tier` label says."""

    group: str  # the pod template's group; "" for a class the workload sets for all its pods
    priority_class: str
    tier: str  # the tier the platform maps the class to
    field: str  # dotted path of the template's priorityClassName; "" for a workload-level class


@_fast_init
@dataclass(frozen=True, slots=True)
class Owner:
    """For a Pod that a controller created: the workload it belongs to."""

    kind: str  # top-level kind as far as labels tell ("PyTorchJob", "JobSet", "Job", …)
    name: str
    via: str  # the label or ownerReference that told us


@_fast_init
@dataclass(frozen=True, slots=True)
class Workload:
    api_version: str
    kind: str
    namespace: str | None
    name: str
    role: Role
    klass: WorkloadClass
    tier: Tier
    tier_source: str  # "label" | "priority-class" | "default"
    groups: tuple[PodGroup, ...]
    total_pods: int
    total_gpus: int
    gang: Gang
    elastic: ElasticRange | None
    checkpoint: Checkpoint
    topology: Topology
    restarts: Restarts
    labels: dict[str, str]
    annotations: dict[str, str]
    # Pool values this workload targets through nodeSelector, required affinity or tolerations,
    # each with the dotted field that does it and how:
    # [{"pool": "inference", "field": "spec…nodeSelector", "via": "nodeSelector"|"affinity"|"toleration"}]
    # A toleration with operator Exists and no value on the pool taint key tolerates every pool: "*".
    pool_targets: tuple[dict[str, str], ...] = ()
    suspend_path: str | None = None  # JSON pointer; None for kinds without suspend
    suspended: bool | None = None
    priority_class: str | None = None
    owner: Owner | None = None  # set for controller-created pods
    kueue_managed: bool = False  # a Kueue-managed pod: never relabel it
    # A TrainJob whose (Cluster)TrainingRuntime is not known ("ClusterTrainingRuntime/torch"):
    # it is decided on what the TrainJob states, and a policy warns about what went unchecked.
    unknown_runtime: str | None = None
    # What the role and tier labels are checked against (webhook/workloads/claims.py): the launch
    # fact that makes the job multi-node, in words, and the priority classes that contradict the
    # tier label.
    multi_node_launch: str | None = None
    tier_conflicts: tuple[TierConflict, ...] = ()

    @property
    def member(self) -> bool:
        return self.owner is not None

    @property
    def group_identity(self) -> str:
        """What names this workload's pods together (DESIGN, group identity); "" for a lone pod.

        A job's pods share its name. Bare pods share only their pod group: a pod without one is
        its own group, and an affinity that selects only itself would constrain nothing.
        """
        if self.kind == "Pod" and self.owner is None:
            return self.gang.group_name or ""
        return self.name

    @property
    def torchrun(self) -> tuple[tuple[PodGroup, Container, TorchrunSpec], ...]:
        return tuple((g, c, c.torchrun) for g in self.groups for c in g.containers if c.torchrun is not None)

    def view(self) -> dict[str, Any]:
        """The CEL `workload` variable: plain JSON-like data, camelCase keys (viewer() builds just
        the paths the policies read).

        Containers carry name, pointer and accelerators, not their raw command line and env
        (those are on `object`; torchrun's parsed facts are in `torchrun`). Besides the fields,
        it carries what policies need to write good messages: each group's
        `fieldPrefix` ("spec.pytorchReplicaSpecs.Worker.template.", the runtime's template for a
        TrainJob, "" for a Pod) and each
        torchrun entry's container field path.
        """
        view: dict[str, Any] = _to_view(self)
        return view

    def _torchrun_view(self) -> list[dict[str, Any]]:
        return [
            {
                "group": g.name,
                "container": c.name,
                "containerPointer": c.pointer,
                "containerField": _path(c.pointer),
                "gpus": c.gpus,
            }
            | _to_view(t)
            for g, c, t in self.torchrun
        ]

    def _torchrun_pods(self) -> int:
        if self.kind == "Pod":
            return self.total_pods
        torchrun_groups = {g.name for g in self.groups for c in g.containers if c.torchrun is not None}
        if not torchrun_groups:
            return 0
        return sum(g.replicas for g in self.groups if g.name in torchrun_groups)


def _path(pointer: str) -> str:
    """pointer_to_path(), remembered: a view renders the same template and container pointers on
    every admission, and each takes a split and a loop to turn into a path. Pointers hold names
    from objects: only short ones are remembered."""
    return _remembered_path(pointer) if len(pointer) <= 256 else pointer_to_path(pointer)


_remembered_path = functools.lru_cache(maxsize=4096)(pointer_to_path)


def _field_prefix(group: PodGroup) -> str:
    if group.template_pointer:
        return _path(group.template_pointer) + "."
    return group.source_field + "." if group.source_field else ""


# The view's keys computed from the fields rather than copied from one, after the fields.
_COMPUTED: dict[type, dict[str, Callable[[Any], Any]]] = {
    Workload: {
        "member": lambda w: w.member,
        "torchrun": Workload._torchrun_view,
        "torchrunPods": Workload._torchrun_pods,
        "gpuPods": lambda w: sum(g.replicas for g in w.groups if g.gpus_per_pod > 0),
        "podLabelValue": lambda w: pod_label_value(w.group_identity),
        "suspendField": lambda w: _path(w.suspend_path) if w.suspend_path else None,
    },
    PodGroup: {"fieldPrefix": _field_prefix},
}


def pod_label_value(name: str) -> str:
    """A valid label value (<= 63 chars, alphanumeric at both ends) naming the workload's pods.

    "" when the name has nothing to build one from. A `generateName: train-` object reaches the
    mutating webhook before the API server picks its name, so "train-" stands for the family.
    """
    value = name.strip("-._")
    if len(value) <= 63:
        return value
    import hashlib

    return value[:52].rstrip("-._") + "-" + hashlib.sha256(value.encode()).hexdigest()[:10]


def _camel(name: str) -> str:
    if name == "klass":
        return "class"
    head, *rest = name.split("_")
    return head + "".join(p[:1].upper() + p[1:] for p in rest)


# The view is built for every admission (twice when a mutation changes the object): the type
# dispatch below avoids is_dataclass()/fields()/_camel() per value, with the same result.
_SCALARS = frozenset((str, int, float, bool, type(None)))
_VIEW_FIELDS: dict[type, tuple[tuple[str, str], ...] | None] = {}  # None: not a dataclass


def _view_fields(cls: type) -> tuple[tuple[str, str], ...] | None:
    """(attribute, camelCase key) of each field of a dataclass type, else None; computed once."""
    try:
        return _VIEW_FIELDS[cls]
    except KeyError:
        pass
    names = (
        tuple((f.name, _camel(f.name)) for f in fields(cls) if f.metadata.get("view", True))
        if is_dataclass(cls)
        else None
    )
    _VIEW_FIELDS[cls] = names
    return names


def _to_view(value: Any) -> Any:
    cls = type(value)
    if cls in _SCALARS:
        return value
    names = _view_fields(cls)
    if names is not None:
        out = {}
        for name, key in names:
            v = getattr(value, name)
            out[key] = v if type(v) in _SCALARS else _to_view(v)
        computed = _COMPUTED.get(cls)
        if computed:
            for key, compute in computed.items():
                out[key] = compute(value)
        return out
    if isinstance(value, tuple | list):
        return [v if type(v) in _SCALARS else _to_view(v) for v in value]
    if isinstance(value, dict):
        return {k: v if type(v) in _SCALARS else _to_view(v) for k, v in value.items()}
    return value


# A view with only some paths, in the form webhook/engine/reads.py writes them: {} is the whole
# value; a map lists the keys kept, each with its own paths; under "*", the paths kept of each
# element of a list (a map iterated or sized, whose keys are its elements, is kept whole).
Paths = Mapping[str, Any]
View = Callable[[Any], Any]
_ELEMENT = "*"


def viewer(paths: Paths) -> View:
    """A function that renders a Workload's view (or any value's) with only `paths`.

    Made once per policy set: each call then copies just what the policies read, where building
    the whole view and trimming it would walk every container and torchrun spec on every request.
    What it renders is the whole view with the unread paths left out, nothing else.
    """
    if not paths:
        return _to_view
    plans: dict[type, View] = {}

    def render(value: Any) -> Any:
        cls = type(value)
        plan = plans.get(cls)
        if plan is None:
            plan = plans[cls] = _plan(cls, paths)
        return plan(value)

    return render


def _plan(cls: type, paths: Paths) -> View:
    """How to render a value of type `cls` with only `paths`."""
    if cls in _SCALARS:
        return _same
    names = _view_fields(cls)
    if names is not None and _ELEMENT not in paths:
        # None: the field is read whole (copied inline, as _to_view does, without a call)
        copied = tuple(
            (name, key, viewer(paths[key]) if paths[key] else None) for name, key in names if key in paths
        )
        planned = _PLANNED.get(cls, {})
        derived = tuple(
            planned[key](paths[key]) if key in planned else _then(compute, viewer(paths[key]))
            for key, compute in _COMPUTED.get(cls, {}).items()
            if key in paths
        )
        keys = tuple(key for key in _COMPUTED.get(cls, {}) if key in paths)

        def render(value: Any) -> dict[str, Any]:
            out = {}
            for name, key, view in copied:
                v = getattr(value, name)
                if view is not None:
                    out[key] = view(v)
                else:
                    out[key] = v if type(v) in _SCALARS else _to_view(v)
            for key, compute in zip(keys, derived, strict=True):
                out[key] = compute(value)
            return out

        return render
    if issubclass(cls, tuple | list):
        element = paths.get(_ELEMENT)
        if element is None:  # a list read by a field name is an error whatever it holds
            return _to_view
        each = viewer(element)
        return lambda value: [each(v) for v in value]
    if issubclass(cls, dict) and _ELEMENT not in paths:
        kept = tuple((key, viewer(sub)) for key, sub in paths.items())
        return lambda value: {key: view(value[key]) for key, view in kept if key in value}
    return _to_view


def _same(value: Any) -> Any:
    return value


def _then(compute: Callable[[Any], Any], view: View) -> View:
    if view is _to_view:
        return compute  # computed values are plain data already
    return lambda value: view(compute(value))


_TORCHRUN_ENTRY = ("group", "container", "containerPointer", "containerField", "gpus")


def _torchrun_plan(paths: Paths) -> View:
    """The `torchrun` view with only `paths` of each entry, built without the parts not read."""
    element = paths.get(_ELEMENT)
    if not element or _ELEMENT in element:  # read whole, by a field name, or an entry iterated
        return Workload._torchrun_view
    spec = compiled_viewer(TorchrunSpec, element)
    keep = frozenset(k for k in _TORCHRUN_ENTRY if k in element)

    def render(workload: Workload) -> list[dict[str, Any]]:
        out = []
        for g, c, t in workload.torchrun:
            entry = {
                "group": g.name,
                "container": c.name,
                "containerPointer": c.pointer,
                "containerField": _path(c.pointer) if "containerField" in keep else None,
                "gpus": c.gpus,
            }
            out.append({k: v for k, v in entry.items() if k in keep} | spec(t))
        return out

    return render


# Computed keys that can be built for some paths directly, not built whole and trimmed.
_PLANNED: dict[type, dict[str, Callable[[Paths], View]]] = {Workload: {"torchrun": _torchrun_plan}}


def compiled_viewer(cls: type, paths: Paths) -> View:
    """viewer(paths) for values of the dataclass `cls`, as one generated function.

    The view of a workload is built on every admission, per phase. viewer() makes a call or
    two per value it renders; this writes the whole rendering, from the field types, as one
    expression of nested dict displays and comprehensions, about half the work.

    Accepts a dataclass type and the paths to render. Refuses, returning viewer(paths), which
    renders any value: no paths (the whole view), paths that iterate the value itself ("*"), a
    type that is not a dataclass, field types that do not resolve (NameError). Within the
    rendering, a part whose type does not say enough (Any, a union) is rendered by viewer().
    """
    if not paths or _ELEMENT in paths or _view_fields(cls) is None:
        return viewer(paths)
    emitter = _Emitter()
    try:
        body = emitter.dataclass("v0", cls, paths)
    except NameError:  # a field type that does not resolve: the generic rendering serves
        return viewer(paths)
    namespace = emitter.names
    # The source is made of field names, camelCase keys quoted by repr() and the emitter's own
    # names: nothing a policy writes reaches it but keys, which are identifiers (engine/reads.py).
    exec(compile(f"def render(v0):\n    return {body}\n", f"<view of {cls.__name__}>", "exec"), namespace)
    render: View = namespace["render"]
    return render


_NONE = type(None)
_SCALAR_TYPES = frozenset((str, int, float, bool, _NONE))


def _whole(hint: Any) -> Paths | None:
    """Paths that name every key of a dataclass (or optional dataclass) type's view, else None."""
    origin, args = get_origin(hint), get_args(hint)
    if (origin is Union or origin is UnionType) and len(args) == 2 and _NONE in args:
        hint = args[0] if args[1] is _NONE else args[1]
    if not isinstance(hint, type):
        return None
    names = _view_fields(hint)
    if names is None:
        return None
    return {key: {} for _, key in names} | {key: {} for key in _COMPUTED.get(hint, {})}


def _scalar(hint: Any) -> bool:
    origin = get_origin(hint)
    if origin is Literal:
        return True
    if origin is Union or origin is UnionType:
        return all(_scalar(a) for a in get_args(hint))
    return hint in _SCALAR_TYPES


class _Emitter:
    """Writes the Python expression that renders a value with only some paths (compiled_viewer)."""

    def __init__(self) -> None:
        self.names: dict[str, Any] = {"_to_view": _to_view}
        self._count = 0

    def _new(self, prefix: str) -> str:
        self._count += 1
        return f"{prefix}{self._count}"

    def constant(self, value: Any) -> str:
        name = self._new("_c")
        self.names[name] = value
        return name

    def value(self, code: str, hint: Any, paths: Paths) -> str:
        if _scalar(hint):
            return code
        origin, args = get_origin(hint), get_args(hint)
        if not paths:
            # what _to_view makes of a map or list of scalars, without its call per item
            if origin is dict and len(args) == 2 and _scalar(args[1]):
                return f"dict({code})"
            if origin is tuple and len(args) == 2 and args[1] is Ellipsis and _scalar(args[0]):
                return f"list({code})"
            whole = _whole(hint)
            if whole is None:
                return f"_to_view({code})"
            paths = whole  # a dataclass read whole: every field, written out as for some paths
        if (origin is Union or origin is UnionType) and len(args) == 2 and _NONE in args:
            kind = args[0] if args[1] is _NONE else args[1]
            return f"(None if {code} is None else {self.value(code, kind, paths)})"
        if isinstance(hint, type) and _view_fields(hint) is not None and _ELEMENT not in paths:
            return self.dataclass(code, hint, paths)
        element = paths.get(_ELEMENT)
        if element is not None and origin is tuple and len(args) == 2 and args[1] is Ellipsis:
            item = self._new("v")
            each = self.value(item, args[0], element)
            if each == item:  # the elements as they are
                return f"list({code})"
            return f"[{each} for {item} in {code}]"
        if origin is dict and element is None and len(args) == 2 and not any(paths.values()):
            key = self._new("k")
            value = self.value(f"{code}[{key}]", args[1], {})
            return f"{{{key}: {value} for {key} in {self.constant(tuple(paths))} if {key} in {code}}}"
        return f"{self.constant(viewer(paths))}({code})"

    def dataclass(self, code: str, cls: type, paths: Paths) -> str:
        return "{" + ", ".join(self.items(code, cls, paths)) + "}"

    def items(self, code: str, cls: type, paths: Paths) -> list[str]:
        """The `key: value` items of the dataclass value `code` with only `paths`."""
        hints = get_type_hints(cls)
        items = [
            f"{key!r}: {self.value(f'{code}.{name}', hints[name], paths[key])}"
            for name, key in _view_fields(cls) or ()
            if key in paths
        ]
        planned = _PLANNED.get(cls, {})
        for key, compute in _COMPUTED.get(cls, {}).items():
            if key not in paths:
                continue
            if cls is Workload and key == "torchrun":
                inline = self.torchrun(code, paths[key])
                if inline is not None:
                    items.append(f"{key!r}: {inline}")
                    continue
            render = planned[key](paths[key]) if key in planned else _then(compute, viewer(paths[key]))
            items.append(f"{key!r}: {self.constant(render)}({code})")
        return items

    def torchrun(self, code: str, paths: Paths) -> str | None:
        """The `torchrun` entries as one comprehension (what _torchrun_plan renders), or None
        where that plan renders them whole."""
        element = paths.get(_ELEMENT)
        if not element or _ELEMENT in element:
            return None
        g, c, t = self._new("g"), self._new("c"), self._new("t")
        entry = {
            "group": f"{g}.name",
            "container": f"{c}.name",
            "containerPointer": f"{c}.pointer",
            "containerField": f"{self.constant(_path)}({c}.pointer)",
            "gpus": f"{c}.gpus",
        }
        items = [f"{key!r}: {entry[key]}" for key in _TORCHRUN_ENTRY if key in element]
        items += self.items(t, TorchrunSpec, element)
        return (
            f"[{{{', '.join(items)}}} for {g} in {code}.groups for {c} in {g}.containers"
            f" if ({t} := {c}.torchrun) is not None]"
        )
