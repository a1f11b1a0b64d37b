"""The only module that imports a CEL library.

Two backends behind one small interface: Google's C++ runtime (`cel-expr-python`) and the pure
Python `cel-python` for platforms without its wheels. Both compile once and evaluate many times;
compile errors carry a position, evaluation errors are raised as CelEvalError.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, Protocol

# Every expression sees these variables; all are dynamic (JSON-like) values.
VARIABLES = ("object", "oldObject", "request", "workload", "oldWorkload", "params", "cluster", "variables")


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

    def compile(self, expression: str) -> Program: ...

    def activation(self, data: Mapping[str, Any]) -> Any:
        """Bindings for the variables, converted once and shared by every program of a request."""


# ---------------------------------------------------------------- cel-expr-python (C++ runtime)


class _CppProgram:
    __slots__ = ("_expr", "_error_type")

    def __init__(self, expr: Any, error_type: Any) -> None:
        self._expr = expr
        self._error_type = error_type

    def evaluate(self, activation: Any) -> Any:
        value = self._expr.eval(activation)
        if value.type() == self._error_type:
            raise CelEvalError(str(value.value()))
        return value.plain_value()


class CppBackend:
    name = "cel-expr-python"

    def __init__(self) -> None:
        from cel_expr_python import cel
        from cel_expr_python.ext import ext_strings

        self._cel = cel
        self._env = cel.NewEnv(
            variables={name: cel.Type.DYN for name in VARIABLES},
            extensions=[ext_strings.ExtStrings()],
        )

    def compile(self, expression: str) -> Program:
        try:
            expr = self._env.compile(expression)
        except RuntimeError as exc:
            raise _cpp_compile_error(str(exc)) from None
        return _CppProgram(expr, self._cel.Type.ERROR)

    def activation(self, data: Mapping[str, Any]) -> Any:
        return self._env.Activation(dict(data))


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
        import celpy

        try:
            result = self._program.evaluate(activation)
        except celpy.CELEvalError as exc:
            raise CelEvalError(str(exc.args[0] if exc.args else exc)) from None
        if isinstance(result, celpy.CELEvalError):
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

    def __init__(self) -> None:
        import logging

        import celpy

        # cel-python logs every evaluation error at ERROR level; we report them ourselves.
        logging.getLogger("celpy").setLevel(logging.CRITICAL)
        self._celpy = celpy
        self._env = celpy.Environment()

    def compile(self, expression: str) -> Program:
        try:
            ast = self._env.compile(expression)
            return _PyProgram(self._env.program(ast, functions=_PY_FUNCTIONS))
        except self._celpy.CELParseError as exc:
            position = None
            if getattr(exc, "line", None) is not None:
                position = f"line {exc.line}, column {exc.column}"
            message = str(exc.args[0]).splitlines()[0] if exc.args else "syntax error"
            raise CelCompileError(message, position) from None
        except Exception as exc:  # the checker raises plain errors for unknown functions
            raise CelCompileError(str(exc).splitlines()[0]) from None

    def activation(self, data: Mapping[str, Any]) -> Any:
        json_to_cel = self._celpy.json_to_cel
        return {k: json_to_cel(v) for k, v in data.items()}


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
