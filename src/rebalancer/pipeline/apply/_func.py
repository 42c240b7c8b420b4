"""What `func` is, as applyInPandas sees it: its form (a frame, or an iterator of frames, with the
key first or not), refused at the call where applyInPandas refuses it; its name, which Spark's
worker logs under; and the reasons behind a failure that Spark's traceback of a task leaves out."""

from __future__ import annotations

import functools
import inspect
import types
import warnings
from collections.abc import Callable
from typing import Any, NamedTuple, TypeVar

F = TypeVar("F", bound=Callable[..., Any])


class FuncForm(NamedTuple):
    """How `func` is called: func(data) or func(key, data); data one key's rows as a frame, or an
    iterator of frames of at most `spark.sql.execution.arrow.maxRecordsPerBatch` rows each (then
    func returns an iterator of frames)."""

    takes_key: bool
    iterator: bool


def shown(function: Any) -> str:
    """`function` as an error names it: its qualified name and signature where it has them."""
    name = getattr(function, "__qualname__", None) or repr(function)
    try:
        return f"{name}{inspect.signature(function)}"
    except (TypeError, ValueError):
        return str(name)


def _first_line(exc: BaseException) -> str:
    return next((line.strip() for line in str(exc).splitlines() if line.strip()), type(exc).__name__)


def func_form(func: Any, field: str = "func") -> FuncForm:
    """applyInPandas' decision and checks, by pyspark's own functions: the iterator form when
    func's type hints say `Iterator[pd.DataFrame] -> Iterator[pd.DataFrame]` (hints that cannot
    be read give applyInPandas' warning and the frame form), and INVALID_PANDAS_UDF, as a
    ValueError naming func (as `field`), when it does not take one argument (data) or two (key, data).

    A bound method's `self` is not passed, so it is not counted when deciding whether func takes
    the key (applyInPandas counts it, and then fails calling a method of one argument).
    """
    from pyspark.errors import PySparkException
    from pyspark.sql.pandas.functions import _validate_vectorized_udf  # type: ignore[attr-defined]  # private
    from pyspark.sql.pandas.typehints import infer_group_pandas_eval_type_from_func
    from pyspark.util import PythonEvalType

    if not callable(func):
        raise ValueError(f"{field} must be callable, got {func!r}")
    eval_type = None
    try:
        eval_type = infer_group_pandas_eval_type_from_func(func)
    except Exception as exc:  # what applyInPandas does with hints it cannot read
        warnings.warn(f"Cannot infer the eval type from type hints: {exc}", UserWarning, stacklevel=3)
    if eval_type is None:
        eval_type = PythonEvalType.SQL_GROUPED_MAP_PANDAS_UDF
    try:
        _validate_vectorized_udf(func, eval_type, "pandas")
    except (PySparkException, TypeError) as exc:  # INVALID_PANDAS_UDF; TypeError: no signature to read
        raise ValueError(f"{field} {shown(func)}: {_first_line(exc)}") from None
    try:
        parameters = inspect.signature(func).parameters.values()
        positional = sum(1 for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD))
    except (TypeError, ValueError):
        positional = len(inspect.getfullargspec(func).args)
    return FuncForm(takes_key=positional == 2, iterator=eval_type == PythonEvalType.SQL_GROUPED_MAP_PANDAS_ITER_UDF)


def check_one_argument(function: Any, field: str, what: str) -> None:
    """ValueError naming `field` when `function` cannot be called with one positional argument
    (a callable whose signature Python cannot read is let through)."""
    if not callable(function):
        raise ValueError(f"{field} must be callable, got {function!r}")
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):
        return
    try:
        signature.bind(None)
    except TypeError:
        raise ValueError(f"{field} {shown(function)} must take one argument ({what})") from None


def code_name(function: Any) -> str:
    """The name Spark's worker gives the frame it calls `function` in (`co_name` of the code that
    runs first): a function's own name, a method's, `__call__` for a callable object, through
    `functools.partial`."""
    target = function
    while isinstance(target, functools.partial):
        target = target.func
    target = getattr(target, "__func__", target)
    code = getattr(target, "__code__", None)
    if code is None:
        call = inspect.getattr_static(type(target), "__call__", None)
        code = getattr(getattr(call, "__func__", call), "__code__", None)
    return str(code.co_name) if code is not None else str(getattr(function, "__name__", type(function).__name__))


def renamed(function: F, name: str) -> F:
    """`function` with its code named `name`: Spark's worker names a log record's context (and a
    print's) after the outermost frame it calls, which is balanced_apply's task function, not the
    user's function that applyInPandas would have called there."""
    if not isinstance(function, types.FunctionType) or function.__code__.co_name == name:
        return function
    copy = types.FunctionType(
        function.__code__.replace(co_name=name),
        function.__globals__,
        function.__name__,
        function.__defaults__,
        function.__closure__,
    )
    copy.__qualname__ = function.__qualname__
    copy.__kwdefaults__ = function.__kwdefaults__
    return copy  # type: ignore[return-value]


def reasons(exc: BaseException) -> str:
    """`Type: message` of `exc` and of each exception it was raised from: Spark's traceback of a
    task drops `__cause__`, and with it pyarrow's own reason for a value it cannot convert."""
    parts = [f"{type(exc).__name__}: {exc}"]
    seen = {id(exc)}
    cause = exc.__cause__ or (None if exc.__suppress_context__ else exc.__context__)
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        parts.append(f"(from {type(cause).__name__}: {cause})")
        cause = cause.__cause__ or (None if cause.__suppress_context__ else cause.__context__)
    return " ".join(parts)


def noted(exc: BaseException, note: str) -> BaseException:
    """`exc` with `note` added once: re-raised, it keeps the user's own type and traceback (file,
    line and function) in Spark's error, which shows a traceback but not a `__cause__`."""
    if note not in getattr(exc, "__notes__", ()):
        exc.add_note(note)
    return exc
