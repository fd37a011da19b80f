"""Carry kafka-direct errors from executor tasks to the driver with their type.

PySpark reports a failed task to the driver as a ``Py4JJavaError`` whose text holds the
Python traceback; the exception's class and attributes are lost. So a task wraps its work in
:func:`carry_errors`: a :class:`~kafka_direct.errors.KafkaDirectError` is written into the
failure message between markers, as data: its class name, message and scalar context in JSON.
On the driver, :func:`rethrow` finds the last such payload in a failure and raises an error of
that class (chained to the Spark failure, so the whole story stays visible).

Never a pickle: failure texts quote record data (``int(value)``, ``json.loads``, a user's
``f"bad record {value}"``), so anyone who can produce to a topic can put a payload there.
Decoding one builds at most an error of a class of our own tree, with text and numbers in it.
:func:`typed_errors` does the rethrowing around any block of driver code, and every
KafkaRDD (and each RDD derived from one) does it around its actions.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import functools
import inspect
import json
import re
from collections.abc import Callable, Iterator
from typing import Any, TypeGuard, TypeVar

from kafka_direct import errors
from kafka_direct.errors import KafkaDirectError

__all__ = [
    "MAX_USER_MESSAGE",
    "CarriedTaskError",
    "carried",
    "carried_error",
    "carry_errors",
    "decode_error",
    "encode_error",
    "rethrow",
    "typed_errors",
    "typed_rdd_class",
    "user_failure",
]

_PAYLOAD = re.compile(r"\[kafka-direct-error:([A-Za-z0-9+/=]+)\]")

T = TypeVar("T")


#: How much of a user function's error message a typed error keeps.
MAX_USER_MESSAGE = 500


def user_failure(error: BaseException) -> tuple[str, str]:
    """What a typed error keeps of a user function's exception: its type's name, its message.

    The message is shortened to :data:`MAX_USER_MESSAGE` characters: it may quote a
    record, and it travels to the driver in a task's failure text.
    """
    text = str(error)
    if len(text) > MAX_USER_MESSAGE:
        text = text[:MAX_USER_MESSAGE] + "..."
    return type(error).__qualname__, text


class CarriedTaskError(RuntimeError):
    """What a task raises in place of a KafkaDirectError: its text carries the error as data."""


#: A payload larger than this is not ours (ours are a message and a few numbers).
_MAX_PAYLOAD = 64 * 1024
_Scalar = str | int | float | bool | None
# Attributes an exception has of its own: a payload must not overwrite them.
_RESERVED = frozenset({"message", "context", "args", "with_traceback", "add_note", "__notes__"})


def _scalar(value: Any) -> bool:
    return value is None or isinstance(value, str | int | float | bool)


def _as_data(value: Any) -> Any:
    """A context value as JSON data: scalars and lists of scalars as they are, else text."""
    if _scalar(value):
        return value
    if isinstance(value, list | tuple) and all(_scalar(v) for v in value):
        return list(value)
    return str(value)


def _error_classes() -> dict[str, type[KafkaDirectError]]:
    """Our error tree by class name: the only classes a payload may name."""
    found: dict[str, type[KafkaDirectError]] = {}
    pending: list[type[KafkaDirectError]] = [KafkaDirectError]
    while pending:
        cls = pending.pop()
        if cls.__module__ == errors.__name__:
            found[cls.__name__] = cls
        pending.extend(cls.__subclasses__())
    return found


def encode_error(error: KafkaDirectError) -> str:
    """The error's message followed by its class, message and context as data between markers.

    Context values that are not scalars (or lists of scalars) travel as their text.
    """
    data = {"type": type(error).__name__, "message": error.message,
            "context": {key: _as_data(value) for key, value in error.context.items()}}
    payload = base64.b64encode(json.dumps(data).encode("utf-8")).decode("ascii")
    return f"{type(error).__name__}: {error} [kafka-direct-error:{payload}]"


def _valid_context(context: Any, cls: type[KafkaDirectError]) -> TypeGuard[dict[str, Any]]:
    if not isinstance(context, dict):
        return False
    for key, value in context.items():
        if not key.isidentifier() or key.startswith("_") or key in _RESERVED \
                or callable(getattr(cls, key, None)):
            return False
        if not (_scalar(value) or (isinstance(value, list) and all(map(_scalar, value)))):
            return False
    return True


def _decode_payload(payload: str) -> KafkaDirectError | None:
    if len(payload) > _MAX_PAYLOAD:
        return None
    try:
        data = json.loads(base64.b64decode(payload, validate=True).decode("utf-8"))
    except (binascii.Error, UnicodeDecodeError, ValueError, RecursionError):
        # RecursionError: a forged payload nested deeper than the parser goes.
        return None
    if not isinstance(data, dict):
        return None
    cls = _error_classes().get(data.get("type"))  # type: ignore[arg-type]
    message, context = data.get("message"), data.get("context")
    if cls is None or not isinstance(message, str):
        return None
    if not _valid_context(context, cls):
        return None
    error: KafkaDirectError = cls.__new__(cls)
    # Attributes the class promises but the payload lacks read as None, never raise.
    promised = {name: None for klass in reversed(cls.__mro__)
                for name in getattr(klass, "__annotations__", {})
                if name.isidentifier() and not name.startswith("_")}
    KafkaDirectError.__init__(error, message, **{**promised, **context})
    return error


def decode_error(text: str) -> KafkaDirectError | None:
    """The last error encoded in ``text`` by :func:`encode_error`, or None.

    A payload that does not name a class of our error tree, or carries anything but text,
    numbers and lists of them, is ignored: nothing in ``text`` is ever executed.
    """
    for payload in reversed(_PAYLOAD.findall(text)):
        error = _decode_payload(payload)
        if error is not None:
            return error
    return None


@contextlib.contextmanager
def carried() -> Iterator[None]:
    """Our errors leave the block as :class:`CarriedTaskError`: their type kept as data.

    The one wrapper of code Spark runs (tasks, a data source's driver-side methods): Spark
    shows only an error's text, and :func:`carried_error` rebuilds the original from it.
    The chain is cut (``from None``): our message and context are redacted, while a
    driver library's error below them (psycopg2, librdkafka) may quote a password, and
    PySpark's traceback, which Spark shows, prints the whole chain.
    """
    try:
        yield
    except KafkaDirectError as error:
        raise CarriedTaskError(encode_error(error)) from None


def carry_errors(records: Iterator[T]) -> Iterator[T]:
    """Yield from ``records``; a KafkaDirectError becomes a :class:`CarriedTaskError`."""
    with carried():
        yield from records


def _failure_text(error: BaseException) -> str:
    parts = [str(error)]
    java = getattr(error, "java_exception", None)
    if java is not None:
        with contextlib.suppress(Exception):
            parts.append(str(java.toString()))
    return "\n".join(parts)


def carried_error(error: BaseException) -> KafkaDirectError | None:
    """The KafkaDirectError ``error`` is or carries (from a Spark failure), else None."""
    if isinstance(error, KafkaDirectError):
        return error
    return decode_error(_failure_text(error))


def rethrow(error: BaseException) -> None:
    """Raise the KafkaDirectError carried by a Spark failure, if it carries one."""
    if isinstance(error, KafkaDirectError):
        return
    original = carried_error(error)
    if original is not None:
        raise original from error


@contextlib.contextmanager
def typed_errors() -> Iterator[None]:
    """Turn Spark failures that carry a KafkaDirectError back into that error.

    Example:
        >>> with typed_errors():  # doctest: +SKIP
        ...     rdd.map(parse).collect()
    """
    try:
        yield
    except KafkaDirectError:
        raise
    except Exception as error:
        rethrow(error)
        raise


def _wrap(method: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(method)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with typed_errors():
            result = method(*args, **kwargs)
        return _retag(result)

    return wrapper


_typed_classes: dict[type, type] = {}


def _retag(result: Any) -> Any:
    from pyspark import RDD

    if isinstance(result, RDD) and not getattr(type(result), "_kafka_direct_typed", False):
        result.__class__ = typed_rdd_class(type(result))
    return result


def typed_rdd_class(base: type[T]) -> type[T]:
    """A subclass of the RDD class ``base`` whose public methods raise typed errors.

    Every public method rethrows carried KafkaDirectErrors, and every RDD it returns gets the
    same treatment, so ``kafka_rdd.map(f).filter(g).count()`` fails with the original type.
    """
    cached = _typed_classes.get(base)
    if cached is not None:
        return cached
    namespace: dict[str, Any] = {"_kafka_direct_typed": True, "__module__": base.__module__}
    for name, member in inspect.getmembers(base, inspect.isfunction):
        if not name.startswith("_"):
            namespace[name] = _wrap(member)
    typed = type(base.__name__, (base,), namespace)
    _typed_classes[base] = typed
    return typed
