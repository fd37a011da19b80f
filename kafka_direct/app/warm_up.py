"""The ingest job's Python workers started before its first batch, ready to write.

A direct stream's first batch with records used to start everything its tasks need: Spark's
Python workers, the sink's imports (psycopg2, pyarrow, the native reader and the librdkafka
it loads) and each worker's PostgreSQL connection. That took 6-10 s on a busy machine, and
every record produced meanwhile waited for it: at 10,000 events/s a backlog of 100,000
records before the job was on time. :func:`warm_workers` runs one small Spark job before the
stream starts: a task per task slot imports what the sink's tasks import and opens the
worker's cached connection, which PySpark's reused workers keep for the batches.

The structured job makes a SparkSession first, a second or more of the JVM's work on one
core, before its query can start. :func:`look_up_data_sources_ahead` does in a thread
meanwhile what the session's first ``spark.dataSource.register`` would otherwise wait for:
Spark's one lookup of the Python data sources installed (a Python process, once per JVM),
and the driver's imports of the source and the sink. Its workers are not warmed as the
direct stream's: measured, a warm-up job beside the session's making slowed the session
more than it saved in the first batch (the fork server starts a worker in milliseconds
with its imports done). Nor is the JVM warmed ahead beside the session (the SQL parser's
first parse, a compile by Spark's code generator, a job of the JVM alone): measured on 2
cores with Janino in the class archive, the session took 0.9 s longer beside it and the
later phases gained 0.2 s (docs/benchmarks.md).
"""

from __future__ import annotations

import importlib
import logging
import os
import threading
import time
from collections.abc import Iterator
from typing import Any

__all__ = ["look_up_data_sources_ahead", "warm_workers"]

logger = logging.getLogger(__name__)


class _Warm:
    """The warm-up task: the sink's imports and the worker's connection (holds the DSN)."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn

    def __repr__(self) -> str:
        return "_Warm()"

    def __call__(self, index: int, items: Iterator[Any]) -> Iterator[tuple[int, int, bool]]:
        for _ in items:  # the input read to its end: PySpark reuses the worker
            pass
        import sinks.transactional_postgres_sink  # noqa: F401  (what the sink's tasks import)
        from kafka_direct.client.columnar import native_status
        from kafka_direct.postgres import copy_csv  # noqa: F401
        from kafka_direct.postgres.connection import Database, cached_connection
        from kafka_direct.rdd import arrow_reader  # noqa: F401

        native_status()  # loads the native reader and librdkafka once per worker
        try:
            cached_connection(Database(self.dsn))
            connected = True
        except Exception:  # the first batch reports a database that does not answer
            connected = False
        yield (index, os.getpid(), connected)


def warm_workers(sc: Any, dsn: str) -> list[tuple[int, int, bool]]:
    """Start a Python worker per task slot of ``sc``, with the sink's imports and connection.

    Never raises: a failure here (Spark's or the database's) is the first batch's to report.

    Args:
        sc: The job's SparkContext.
        dsn: The database the sink writes to (never logged).

    Returns:
        Per warm-up task: its index, its worker's process id, whether it connected.
    """
    started = time.perf_counter()
    slots = max(1, int(sc.defaultParallelism))
    try:
        warmed: list[tuple[int, int, bool]] = sc.parallelize(range(slots), slots) \
            .mapPartitionsWithIndex(_Warm(dsn)).collect()
    except Exception as error:
        logger.info("warming the Python workers failed (%s); the first batch starts them",
                    type(error).__name__)
        return []
    logger.info("%d Python workers warmed in %.2f s", len({pid for _, pid, _ in warmed}),
                time.perf_counter() - started)
    return warmed


#: What the structured job's driver imports to register the source and the sink.
_REGISTERED_MODULES = ("kafka_direct.sql.source.kafka_source",
                       "kafka_direct.sql.sink.postgres_sink")


def _look_up(sc: Any) -> None:
    started = time.perf_counter()
    try:
        from kafka_direct.sql.formats import SOURCE_FORMAT

        # Spark keeps the lookup's result for every session of the JVM.
        manager = sc._jvm.org.apache.spark.sql.execution.datasources.DataSourceManager()
        manager.dataSourceExists(SOURCE_FORMAT)
        for module in _REGISTERED_MODULES:
            importlib.import_module(module)
    except Exception as error:  # the registration looks them up itself, and says what failed
        logger.info("looking up Spark's Python data sources ahead failed (%s)",
                    type(error).__name__)
        return
    logger.info("Spark's Python data sources looked up, the driver's imports done, in "
                "%.2f s", time.perf_counter() - started)


def look_up_data_sources_ahead(sc: Any) -> threading.Thread:
    """Have Spark look up its Python data sources in a thread, while the session is made.

    Also imports the source's and the sink's modules, which the registration pickles.
    Never raises in the thread: what fails here, the registration meets again and reports.

    Args:
        sc: The job's SparkContext.

    Returns:
        The started thread (a daemon: a job that stops early does not wait for it).
    """
    thread = threading.Thread(target=_look_up, args=(sc,), name="kafka-direct-look-up",
                              daemon=True)
    thread.start()
    return thread
