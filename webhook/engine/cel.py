"""The only module that imports a CEL library.

Two backends behind one small interface: Google's C++ runtime (`cel-expr-python`) and the pure
Python `cel-python` for platforms without its wheels. Both compile once and evaluate many times;
compile errors carry a position, evaluation errors are raised as CelEvalError.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import orjson

# Every expression sees these variables; all are dynamic (JSON-like) values.
VARIABLES = ("object", "oldObject", "request", "workload", "oldWorkload", "params", "cluster", "variables")
# The engine's own variable in a program of several policies (CppBackend.compile_selected): which
# of them the request selects. Policies cannot name it: their sources compile without it first.
SELECTED = "selected"
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_NAMES_VARIABLES = re.compile(r"\bvariables\b")


class CelCompileError(Exception):
    def __init__(self, message: str, position: str | None = None) -> None:
        self.message = message
        self.position = position
        super().__init__(f"{position}: {message}" if position else message)


class CelEvalError(Exception):
    pass


class Program(Protocol):
    def evaluate(self, activation: Any) -> Any:
        """The expression's value as plain Python data; raises CelEvalError."""


class Backend(Protocol):
    name: str
    # Whether one evaluation is bounded whatever the data: the C++ runtime stops a comprehension
    # at its iteration budget and matches with RE2; pure-Python evaluation has no such bound.
    bounded: bool

    def compile(self, expression: str) -> Program: ...

    def prepare(self, constants: Mapping[str, Any]) -> Any:
        """Values every request shares (params, cluster), converted once, for activation()."""

    def activation(self, data: Mapping[str, Any], constants: Any = None) -> Any:
        """Bindings for the variables, converted once and shared by every program of a request;
        `constants` is what prepare() returned."""


# ---------------------------------------------------------------- cel-expr-python (C++ runtime)


class _CppProgram:
    __slots__ = ("_expr", "_error_type", "_restore_none")

    def __init__(self, expr: Any, error_type: Any, restore_none: Any = None) -> None:
        self._expr = expr
        self._error_type = error_type
        self._restore_none = restore_none

    def evaluate(self, activation: Any) -> Any:
        value = self._expr.eval(activation)
        result = value.plain_value()
        # An error's plain value is its message: only a string result can be one, and asking every
        # result for its type costs more than the rest of this wrapper.
        if type(result) is str and value.type() == self._error_type:
            raise CelEvalError(str(value.value()))
        if self._restore_none is not None and result is not True and result is not False:
            self._restore_none(result)
        return result


def _none_slots(value: Any) -> int:
    """How many references to None a plain value holds (itself, list items, map values)."""
    if value is None:
        return 1
    cls = type(value)
    if cls is dict:
        items: Any = value.values()
    elif cls is list:
        items = value
    else:
        return 0
    n = 0
    for item in items:
        if item is None:
            n += 1
        elif type(item) is dict or type(item) is list:
            n += _none_slots(item)
    return n


def _may_hold_none(value: Any) -> bool:
    """False when a plain value surely holds no None (most results): screened in C, by orjson
    (a sixth of repr()'s cost on the shipped policies' results), before the walk in Python. A
    string holding "null" or a NaN (written null) only costs the walk, which counts exactly."""
    try:
        return b"null" in orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS)
    except TypeError:  # what JSON cannot write (a duration, bytes, a CEL type, a huge int)
        return "None" in repr(value)


def _none_restorer() -> Any:
    """A function that gives None back the references a plain value holds to it.

    cel-expr-python (up to at least 0.1.3) returns CEL null as a None it did not add a reference
    to, in plain_value() and value(), at any depth. Before Python 3.12 None is an ordinary object:
    every null an expression returns takes one from its reference count, and after a few thousand
    admissions the interpreter aborts ("deallocating None"). The backend measures the leak once at
    start-up and installs this restorer only when the runtime has it.
    """
    import ctypes

    incref = ctypes.pythonapi.Py_IncRef
    incref.argtypes = [ctypes.py_object]
    incref.restype = None

    def restore(value: Any) -> None:
        if value is None:
            incref(None)
        elif (type(value) is list or type(value) is dict) and _may_hold_none(value):
            for _ in range(_none_slots(value)):
                incref(None)

    return restore


def _leaks_none(env: Any) -> bool:
    """Whether this cel-expr-python drops a reference to None per null it returns (see above).

    Probed rather than assumed, three times (another thread may touch None's count meanwhile);
    giving None references it did not lose is harmless, missing a leak is not.
    """
    import sys

    if sys.version_info >= (3, 12):  # None is immortal: its reference count never reaches zero
        return False
    expr = env.compile("[null, null, null, null, null, null, null, null]")  # 8 nulls a call
    activation = env.Activation({})
    expr.eval(activation)  # one-time allocations out of the way
    calls = 4
    restore = _none_restorer()
    for _ in range(3):
        before = sys.getrefcount(None)
        for _ in range(calls):
            expr.eval(activation).plain_value()
        if before - sys.getrefcount(None) >= 8 * calls * 3 // 4:
            restore([None] * (8 * calls))  # give back what this probe took
            return True
    return False


class CppBackend:
    name = "cel-expr-python"
    bounded = True

    def __init__(self) -> None:
        from cel_expr_python import cel
        from cel_expr_python.ext import ext_strings

        self._cel = cel
        self._env = cel.NewEnv(
            variables=dict.fromkeys(VARIABLES, cel.Type.DYN),
            extensions=[ext_strings.ExtStrings()],
        )
        self._selected_env: Any = None  # with SELECTED declared: built on first use by compile_selected()
        self._restore_none = _none_restorer() if _leaks_none(self._env) else None

    def compile(self, expression: str) -> Program:
        try:
            expr = self._env.compile(expression)
        except RuntimeError as exc:
            raise _cpp_compile_error(str(exc)) from None
        return _CppProgram(expr, self._cel.Type.ERROR, self._restore_none)

    def prepare(self, constants: Mapping[str, Any]) -> Any:
        # The runtime converts a value when an evaluation first reads it and cannot keep a
        # converted one between activations; the engine keeps these small by trimming them.
        return dict(constants)

    def activation(self, data: Mapping[str, Any], constants: Any = None) -> Any:
        return self._env.Activation({**constants, **data} if constants else dict(data))

    def joined_source(
        self, conditions: Sequence[str], variables: Sequence[tuple[str, str]], body: str
    ) -> str | None:
        """The source of one policy's item in a phase's program (compile_selected): its
        conditions, variables and `body` as one expression; None when a variable's name is not
        an identifier (it could not be a key written into the source).

        Each evaluation pays a few microseconds of the runtime's own overhead and, on the first
        evaluation of an activation, the conversion of what it reads; evaluating a policy's
        conditions, variables and checks one by one pays the overhead for each and, binding
        `variables` with an activation per variable, the conversion again each time. The item
        is `c1 ? (c2 ? … : []) : []` over the matchConditions (in order, each evaluated only when
        the ones before it held, and an error where a condition is not a bool), then `body` with
        `variables` bound along a chain of maps, each holding the ones before it (each value
        dyn(), so that `variables` type-checks as the dynamic map it is on the generic path):
        `[{"a": dyn(A)}].map(variables, {"a": variables.a, "b": dyn(B)}).map(variables,
        body)[0]` where B names `variables`, `[{"a": dyn(A), "b": dyn(B)}].map(variables,
        body)[0]` where it does not. Every map's values are evaluated before the body, so that a
        variable that fails makes the whole item fail, as it does on the generic path;
        conditions stay outside the binding: they do not see the variables there either.

        Not cel.bind: the runtime (cel-expr-python 0.1) evaluates a bind's value lazily, when the
        name is first read, and takes the slot of a comprehension that stopped early
        (`exists` that found its element) for an evaluated value: after
        `workload.torchrun.exists(t, …)` in a condition, or in another policy of the same
        program, `variables` was that comprehension's last element. A map comprehension binds
        its variable on every iteration.
        """
        if not all(_IDENTIFIER.fullmatch(name) for name, _ in variables):
            return None
        source = body
        if variables:
            steps: list[list[str]] = []  # the entries of each map along the chain
            for i, (name, expression) in enumerate(variables):
                # A variable whose source names `variables` (or only seems to) may read the ones
                # before it: it starts a map of its own, which holds them all. The others join
                # the current map: fewer steps, each a comprehension and a copy of the earlier.
                if not steps or _NAMES_VARIABLES.search(expression):
                    steps.append([f'"{n}": variables.{n}' for n, _ in variables[:i]])
                steps[-1].append(f'"{name}": dyn(\n{expression}\n)')
            maps = ["{" + ", ".join(entries) + "}" for entries in steps]
            # each map a step of its own along one chain: nesting them would take a level of
            # the parser's 32 per step
            chain = "".join(f".map(variables, {m})" for m in maps[1:])
            source = f"[{maps[0]}]{chain}.map(variables, {body})[0]"
        for condition in reversed(conditions):
            source = f"(\n{condition}\n) ? ({source}) : []"
        return source

    def compile_selected(self, sources: Sequence[str | None]) -> Program:
        """One program for several policies' items (joined_source): item i is policy i's value
        when `SELECTED[i]` holds in the activation, else [] (always [] where the source is None).
        Raises CelCompileError where it does not compile (an item nested too deep).

        One evaluation per phase instead of one per policy saves the runtime's own overhead of
        each (about as much as a small policy's whole evaluation). It fails when any selected
        policy fails: the caller then evaluates them one by one, so that one policy's error
        never becomes another's.
        """
        body = ", ".join(
            "[]" if source is None else f"{SELECTED}[{i}] ? (\n{source}\n) : []"
            for i, source in enumerate(sources)
        )
        if self._selected_env is None:
            from cel_expr_python.ext import ext_strings

            self._selected_env = self._cel.NewEnv(
                variables=dict.fromkeys((*VARIABLES, SELECTED), self._cel.Type.DYN),
                extensions=[ext_strings.ExtStrings()],
            )
        try:
            expr = self._selected_env.compile(f"[{body}]")
        except RuntimeError as exc:
            raise _cpp_compile_error(str(exc)) from None
        return _CppProgram(expr, self._cel.Type.ERROR, self._restore_none)


def _cpp_compile_error(text: str) -> CelCompileError:
    # "INVALID_ARGUMENT: ERROR: <input>:1:13: Syntax error: ...\n | expr\n | ...^"
    body = text.split("ERROR: ", 1)[-1]
    position = None
    if body.startswith("<input>:"):
        loc, _, rest = body[len("<input>:") :].partition(": ")
        line, _, col = loc.partition(":")
        position, body = f"line {line}, column {col}", rest
    message = body.split("\n", 1)[0].strip()
    return CelCompileError(message, position)


# ---------------------------------------------------------------- cel-python (pure Python)


class _PyProgram:
    __slots__ = ("_program",)

    def __init__(self, program: Any) -> None:
        self._program = program

    def evaluate(self, activation: Any) -> Any:
        from celpy.evaluation import CELEvalError

        try:
            result = self._program.evaluate(activation)
        except CELEvalError as exc:
            raise CelEvalError(str(exc.args[0] if exc.args else exc)) from None
        if isinstance(result, CELEvalError):
            raise CelEvalError(str(result.args[0] if result.args else result))
        return _plain(result)


def _plain(value: Any) -> Any:
    from celpy import celtypes

    if isinstance(value, celtypes.BoolType):
        return bool(value)
    if isinstance(value, celtypes.IntType | celtypes.UintType):
        return int(value)
    if isinstance(value, celtypes.DoubleType):
        return float(value)
    if isinstance(value, celtypes.StringType):
        return str(value)
    if isinstance(value, dict):
        return {_plain(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def _py_join(items: Any, sep: Any = "") -> Any:
    from celpy import celtypes

    return celtypes.StringType(str(sep).join(str(x) for x in items))


def _is_null(value: Any) -> bool:
    from celpy import celtypes

    return value is None or isinstance(value, celtypes.NullType)


def _py_eq(a: Any, b: Any) -> Any:
    from celpy import celtypes, evaluation

    # CEL compares any value with null (heterogeneous equality); cel-python 0.5 raises "no
    # matching overload" for map/list/int against null. Policies write `x != null` everywhere.
    if _is_null(a) or _is_null(b):
        return celtypes.BoolType(_is_null(a) and _is_null(b))
    return evaluation.bool_eq(a, b)


def _py_ne(a: Any, b: Any) -> Any:
    from celpy import celtypes

    return celtypes.BoolType(not _py_eq(a, b))


# The Kubernetes CEL library functions our policies use, for cel-python (the C++ runtime gets
# them from its strings extension), and the null-equality fix. Keep the default policies inside
# what both runtimes support.
_PY_FUNCTIONS = {"join": _py_join, "_==_": _py_eq, "_!=_": _py_ne}


class PyBackend:
    name = "cel-python"
    bounded = False

    def __init__(self) -> None:
        import logging

        import celpy

        # cel-python logs every evaluation error at ERROR level; we report them ourselves.
        logging.getLogger("celpy").setLevel(logging.CRITICAL)
        from celpy.adapter import json_to_cel
        from celpy.celparser import CELParseError

        self._celpy = celpy
        self._parse_error = CELParseError
        self._json_to_cel = json_to_cel
        self._env = celpy.Environment()

    def compile(self, expression: str) -> Program:
        try:
            ast = self._env.compile(expression)
            functions: Any = _PY_FUNCTIONS
            return _PyProgram(self._env.program(ast, functions=functions))
        except self._parse_error as exc:
            position = None
            if getattr(exc, "line", None) is not None:
                position = f"line {exc.line}, column {exc.column}"
            message = str(exc.args[0]).splitlines()[0] if exc.args else "syntax error"
            raise CelCompileError(message, position) from None
        except Exception as exc:  # the checker raises plain errors for unknown functions
            raise CelCompileError(str(exc).splitlines()[0]) from None

    def prepare(self, constants: Mapping[str, Any]) -> Any:
        json_to_cel = self._json_to_cel
        return {k: json_to_cel(v) for k, v in constants.items()}

    def activation(self, data: Mapping[str, Any], constants: Any = None) -> Any:
        json_to_cel = self._json_to_cel
        converted = {k: json_to_cel(v) for k, v in data.items()}
        return {**constants, **converted} if constants else converted

    def extend(self, activation: Any, name: str, value: Any) -> Any:
        """`activation` with `name` bound to `value` too: only the new value is converted."""
        return {**activation, name: self._json_to_cel(value)}


def make_backend(name: str | None = None) -> Backend:
    """The named backend, else $TRAINGUARD_CEL, else the C++ runtime if installed, else cel-python."""
    name = name or os.environ.get("TRAINGUARD_CEL") or "auto"
    if name in ("auto", "cel-expr-python", "cpp"):
        try:
            return CppBackend()
        except ImportError:
            if name != "auto":
                raise
    if name in ("auto", "cel-python", "python"):
        return PyBackend()
    raise ValueError(f"unknown CEL backend {name!r} (cel-expr-python or cel-python)")
