"""The ingest job's Python workers started before its first batch, ready to write.

A direct stream's first batch with records used to start everything its tasks need: Spark's
Python workers, the sink's imports (psycopg2, pyarrow, the native reader and the librdkafka
it loads) and each worker's PostgreSQL connection. That took 6-10 s on a busy machine, and
every record produced meanwhile waited for it: at 10,000 events/s a backlog of 100,000
records before the job was on time. :func:`warm_workers` runs one small Spark job before the
stream starts: a task per task slot imports what the sink's tasks import and opens the
worker's cached connection, which PySpark's reused workers keep for the batches.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterator
from typing import Any

__all__ = ["warm_workers"]

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
