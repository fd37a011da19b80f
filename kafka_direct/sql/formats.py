"""Names Spark and this package agree on: formats, local properties, the PySpark it needs.

* The format names of the source and the sink, for ``format(...)``.
* The local properties Spark sets on every task of a streaming micro-batch (and on the
  thread that runs a ``foreachBatch`` function): the sink stages and commits under them,
  and a source linked to an offset store binds its batch's plan to them.
* :func:`check_structured_support`: whether this PySpark and pyarrow can run the source and
  the sink (every entry point asks, so an old PySpark fails with what to do).
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import importlib.util
import sys

from kafka_direct.errors import ConfigurationError

__all__ = [
    "BATCH_ID_PROPERTY",
    "MINIMUM_PYSPARK",
    "POSTGRES_SINK_FORMAT",
    "QUERY_ID_PROPERTY",
    "RUN_ID_PROPERTY",
    "SOURCE_FORMAT",
    "check_structured_support",
]

#: The format name of the Kafka source, for ``spark.readStream.format(...)``.
SOURCE_FORMAT = "kafka-direct"
#: The format name of the exactly-once PostgreSQL sink, for ``df.writeStream.format(...)``.
POSTGRES_SINK_FORMAT = "kafka-direct-postgres"
#: Python stream readers with admission control (latestOffset(start, limit)) came in 4.2.
MINIMUM_PYSPARK = (4, 2)

#: The running query's id (stable across restarts from one checkpoint).
QUERY_ID_PROPERTY = "sql.streaming.queryId"
#: The running micro-batch's id.
BATCH_ID_PROPERTY = "streaming.sql.batchId"
#: The run id on the thread that runs a micro-batch's foreachBatch function: new at every
#: start of the query.
RUN_ID_PROPERTY = "spark.jobGroup.id"


def _version_tuple(version: str) -> tuple[int, ...]:
    parts = []
    for piece in version.split(".")[:3]:
        digits = "".join(ch for ch in piece if ch.isdigit())
        parts.append(int(digits) if digits else 0)
    return tuple(parts)


def check_structured_support(version: str | None = None) -> None:
    """Raise a clear error unless this PySpark and pyarrow can run the source and sink.

    Args:
        version: PySpark's version (default: the installed one); for tests.

    Raises:
        ConfigurationError: PySpark is older than 4.2, or pyarrow is missing.
    """
    if version is None:
        version = _pyspark_version()
    if _version_tuple(version) < MINIMUM_PYSPARK:
        raise ConfigurationError(
            f"the Structured Streaming source and sink need PySpark 4.2 or newer (Python "
            f"stream readers with admission control); this is PySpark {version}. Upgrade "
            f"with pip install 'pyspark>=4.2', or use the direct stream "
            f"(KafkaUtils.createDirectStream), which supports PySpark 3.5 and newer")
    # Found, not imported: a command checks this before it starts anything, and pyarrow
    # takes a third of a second to import (what needs it imports it).
    if "pyarrow" not in sys.modules and importlib.util.find_spec("pyarrow") is None:
        raise ConfigurationError(
            "the Structured Streaming source and sink need pyarrow: pip install "
            "'kafka-direct[structured]'")


def _pyspark_version() -> str:
    """The installed PySpark's version: its package's metadata, else its module's."""
    if "pyspark" not in sys.modules:
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            # Without importing PySpark (a third of a second), for a pip-installed one.
            return importlib.metadata.version("pyspark")
    import pyspark

    return str(pyspark.__version__)
