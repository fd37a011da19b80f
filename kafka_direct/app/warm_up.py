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
with its imports done).

What the JVM does once, at the query's first batch, :func:`warm_sql_engine_ahead` does in
another thread while the session is made, with no Python process: the SQL parser's first
parse (ANTLR's tables, 0.2-0.5 s on a loaded machine, which ``register``, ``load`` and
``selectExpr`` waited for), a projection compiled by Spark's code generator (Janino's
compiler loads and runs cold the first time: 0.3 s; its signed jar keeps it out of the
class archive), Arrow's allocator, and a job of the JVM alone (the scheduler's,
the executor's and the broadcast's first run: about 0.5 s); only where the machine has a
core to spare (:func:`has_idle_core`): beside a session made on a busy machine it slowed
the session as much as it saved later (docs/benchmarks.md).
"""

from __future__ import annotations

import importlib
import logging
import os
import threading
import time
from collections.abc import Iterator
from typing import Any

__all__ = ["WARM_UP_JOB", "has_idle_core", "look_up_data_sources_ahead", "warm_sql_engine",
           "warm_sql_engine_ahead", "warm_workers"]

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



#: The Spark SQL types of the ingest table's columns (topic, partition, offset, key, value):
#: the projection compiled ahead is of the same shape as the first batch's.
_WARM_TYPES = ("StringType$", "IntegerType$", "LongType$", "BinaryType$", "BinaryType$")

#: An expression of the job's selection, parsed ahead (the parser's tables are per JVM).
_WARM_EXPRESSION = "partition AS kafka_partition"

#: The warm-up job's description (Spark's UI lists it among the application's jobs).
WARM_UP_JOB = "kafka-direct: warm-up of the scheduler before the first batch"


def _scala_object(jvm: Any, name: str) -> Any:
    return getattr(getattr(jvm, name), "MODULE$")


def warm_sql_engine(sc: Any) -> list[tuple[str, float]]:
    """Do once, ahead, what a JVM does only at its first streaming batch; see the module.

    In order: the SQL parser's first parse (ANTLR builds its tables once per JVM), a
    projection of the ingest table's column types compiled (Spark's code generator loads
    its compiler, Janino, whose signed jar the class archive cannot hold), Arrow's
    allocator made (the Python data source's batches arrive as Arrow), and a job of the JVM
    alone with a task per slot (the scheduler's, the executor's and the broadcast's first
    run). No Python process is started and nothing is written.

    Never raises: what fails here the first batch meets again and reports.

    Args:
        sc: The job's SparkContext.

    Returns:
        Each step done, with the seconds from the start at its end.
    """
    started = time.perf_counter()
    done: list[tuple[str, float]] = []
    step = "the parser"
    try:
        jvm = sc._jvm
        parser = _scala_object(jvm, "org.apache.spark.sql.catalyst.parser.CatalystSqlParser$")
        parser.parseExpression(_WARM_EXPRESSION)
        done.append(("parser", time.perf_counter() - started))
        step = "the code generator"
        types = jvm.org.apache.spark.sql.types
        fields = sc._gateway.new_array(types.DataType, len(_WARM_TYPES))
        for index, name in enumerate(_WARM_TYPES):
            fields[index] = _scala_object(types, name)
        _scala_object(jvm, "org.apache.spark.sql.catalyst.expressions.UnsafeProjection$") \
            .create(fields)
        done.append(("codegen", time.perf_counter() - started))
        step = "Arrow"
        _scala_object(jvm, "org.apache.spark.sql.util.ArrowUtils$").rootAllocator()
        done.append(("arrow", time.perf_counter() - started))
        step = "the scheduler"
        slots = max(1, int(sc.defaultParallelism))
        items = jvm.java.util.ArrayList()
        for index in range(slots):
            items.add(index)
        # The description is this thread's (PySpark pins a JVM thread to each).
        described = sc.getLocalProperty("spark.job.description")
        sc.setLocalProperty("spark.job.description", WARM_UP_JOB)
        try:
            sc._jsc.parallelize(items, slots).count()
        finally:
            sc.setLocalProperty("spark.job.description", described)
        done.append(("job", time.perf_counter() - started))
    except Exception as error:  # the first batch does it, and reports what fails
        logger.info("warming Spark's SQL engine stopped at %s (%s)", step,
                    type(error).__name__)
        return done
    logger.info("Spark's SQL engine warmed in %.2f s (%s)", time.perf_counter() - started,
                ", ".join(f"{name} {at:.2f} s" for name, at in done))
    return done


def has_idle_core() -> bool:
    """Whether the machine had a core to spare over the last minute (load average < cores).

    A warm-up beside the session's making pays only with a core the session does not use.
    Measured on 2 cores, the job's own load included: at a load average of 3-4 during the
    runs it brought the first commit 0.7-1 s sooner, at 4.5 the session, slowed 0.6 s by
    it, lost more than the later phases gained. Unknown (no load average): yes.
    """
    try:
        load = os.getloadavg()[0]
    except OSError:
        return True
    return load < (os.cpu_count() or 1)


def warm_sql_engine_ahead(sc: Any) -> threading.Thread | None:
    """Run :func:`warm_sql_engine` in a thread, while the session is made; see the module.

    Only where the machine has a core to spare (:func:`has_idle_core`): on a busy one the
    first batch does that work itself, as before.

    Args:
        sc: The job's SparkContext.

    Returns:
        The started thread (a daemon: a job that stops early does not wait for it), or None
        when the machine is busy.
    """
    if not has_idle_core():
        logger.info("no core to spare: Spark's SQL engine is not warmed ahead")
        return None
    thread = threading.Thread(target=warm_sql_engine, args=(sc,),
                              name="kafka-direct-warm-sql", daemon=True)
    thread.start()
    return thread
