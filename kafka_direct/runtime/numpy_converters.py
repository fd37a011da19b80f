"""PySpark's NumPy argument converters, asked only once NumPy is imported.

PySpark registers two Py4J input converters for NumPy values (an array, a scalar) when
``pyspark.sql.types`` is imported. Py4J asks every converter about every argument of a
call into the JVM that is neither a string nor a Java object, and PySpark's answer begins
by importing ``pyspark.testing.utils`` to learn whether NumPy is installed; that module
imports pandas. So the driver's first such call (the SparkContext's ``SparkConf``) imports
pandas: 0.5-0.9 s of one core, measured, while the JVM waits for that call, on the path to
a job's first batch, in a driver that never uses pandas.

No NumPy value exists before NumPy is imported, so :func:`defer_numpy_converters` puts a
guard in front of each: while ``numpy`` is not in ``sys.modules`` no argument can be one of
its values and the guard says no without asking; once it is, PySpark's converter answers
and converts as before.
"""

from __future__ import annotations

import sys
import threading
from typing import Any

__all__ = ["NUMPY_CONVERTERS", "NumpyGuard", "defer_numpy_converters"]

#: The names of PySpark's converters that import ``pyspark.testing.utils`` when asked.
NUMPY_CONVERTERS = ("NumpyArrayConverter", "NumpyScalarConverter")

_lock = threading.Lock()


class NumpyGuard:
    """One of PySpark's NumPy converters, asked only once NumPy is imported.

    Args:
        converter: PySpark's converter (``can_convert`` and ``convert``).
    """

    __slots__ = ("converter",)

    def __init__(self, converter: Any) -> None:
        self.converter = converter

    def __repr__(self) -> str:
        return f"NumpyGuard({type(self.converter).__name__})"

    def can_convert(self, obj: Any) -> bool:
        """False while NumPy is not imported (no NumPy value exists); else PySpark's answer."""
        if "numpy" not in sys.modules:
            return False
        return bool(self.converter.can_convert(obj))

    def convert(self, obj: Any, gateway_client: Any) -> Any:
        """PySpark's conversion of a NumPy value."""
        return self.converter.convert(obj, gateway_client)


def defer_numpy_converters() -> int:
    """Guard PySpark's NumPy converters in Py4J's list (:class:`NumpyGuard`); idempotent.

    Imports ``pyspark.sql.types`` first, so that its converters are registered before
    they are guarded. A PySpark whose converters have other names is left as it is.

    Returns:
        How many converters were guarded by this call.
    """
    import pyspark.sql.types  # noqa: F401  (registers PySpark's converters)
    from py4j import protocol

    guarded = 0
    with _lock:
        converters: list[Any] = protocol.INPUT_CONVERTER
        for index, converter in enumerate(converters):
            if type(converter).__name__ in NUMPY_CONVERTERS and \
                    type(converter).__module__ == "pyspark.sql.types":
                converters[index] = NumpyGuard(converter)
                guarded += 1
    return guarded
