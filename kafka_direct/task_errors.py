"""Carry kafka-direct errors from executor tasks to the driver with their type.

PySpark reports a failed task to the driver as a ``Py4JJavaError`` whose text holds the
Python traceback; the exception's class and attributes are lost. So a task wraps its work in
:func:`carry_errors`: a :class:`~kafka_direct.errors.KafkaDirectError` is pickled into the
failure message between markers. On the driver, :func:`rethrow` finds the last such payload
in a failure and raises the original error (chained to the Spark failure, so the whole story
stays visible). :func:`typed_errors` does that around any block of driver code, and every
KafkaRDD (and each RDD derived from one) does it around its actions.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import inspect
import pickle
import re
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from kafka_direct.errors import KafkaDirectError

__all__ = [
    "CarriedTaskError",
    "carried_error",
    "carry_errors",
    "decode_error",
    "encode_error",
    "rethrow",
    "typed_errors",
    "typed_rdd_class",
]

_PAYLOAD = re.compile(r"\[kafka-direct-error:([A-Za-z0-9+/=]+)\]")

T = TypeVar("T")


class CarriedTaskError(RuntimeError):
    """What a task raises in place of a KafkaDirectError: its text carries the pickled error."""


def encode_error(error: KafkaDirectError) -> str:
    """The error's message followed by its pickled form between markers."""
    payload = base64.b64encode(pickle.dumps(error)).decode("ascii")
    return f"{type(error).__name__}: {error} [kafka-direct-error:{payload}]"


def decode_error(text: str) -> KafkaDirectError | None:
    """The last error encoded in ``text`` by :func:`encode_error`, or None."""
    matches = _PAYLOAD.findall(text)
    for payload in reversed(matches):
        try:
            error = pickle.loads(base64.b64decode(payload))
        except Exception:
            continue
        if isinstance(error, KafkaDirectError):
            return error
    return None


def carry_errors(records: Iterator[T]) -> Iterator[T]:
    """Yield from ``records``; a KafkaDirectError becomes a :class:`CarriedTaskError`."""
    try:
        yield from records
    except KafkaDirectError as error:
        raise CarriedTaskError(encode_error(error)) from error


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
