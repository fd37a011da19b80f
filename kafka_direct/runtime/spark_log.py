"""Spark's own log kept off the terminal while a job runs, unless the job is verbose.

A task that fails on one of kafka-direct's errors makes Spark's JVM log the failure at
ERROR, once per attempt: the executor's report (a Java stack around the Python traceback
and the marker the error crosses to the driver with), the task set's, the streaming
engine's, the data source writer's. The job then ends with one short block naming the typed
error and the fix (:mod:`kafka_direct.app.stops`); those pages above it would bury it.
:func:`quiet_spark_log` turns Spark's JVM log off for the block of the run and gives the
levels back afterwards, so an application's own later work keeps Spark's reports. Best
effort: another logging backend than log4j 2 keeps its reports.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from typing import Any

__all__ = ["QUIETED_LOGGERS", "quiet_spark_log"]

logger = logging.getLogger(__name__)

#: The loggers turned off: the root (every Spark logger without a level of its own) and
#: the streaming engine's (a failed query's report), which an application may have set.
QUIETED_LOGGERS = ("", "org.apache.spark.sql.execution.streaming")


@contextlib.contextmanager
def quiet_spark_log(sc: Any, loggers: tuple[str, ...] = QUIETED_LOGGERS) -> Iterator[None]:
    """Turn Spark's JVM log off for the block; give each logger its level back afterwards.

    Args:
        sc: The SparkContext whose JVM logs.
        loggers: log4j logger names ("" is the root).
    """
    try:
        log4j = sc._jvm.org.apache.logging.log4j
        configurator = log4j.core.config.Configurator
        previous = [(name, log4j.LogManager.getLogger(name).getLevel()) for name in loggers]
        for name in loggers:
            configurator.setLevel(name, log4j.Level.OFF)
    except Exception:  # not log4j 2, or no JVM: Spark's reports stay
        logger.debug("could not quiet Spark's log", exc_info=True)
        yield
        return
    try:
        yield
    finally:
        for name, level in previous:
            try:
                configurator.setLevel(name, level)
            except Exception:  # the JVM is gone: nothing left to give back
                logger.debug("could not restore Spark's log level of %r", name,
                             exc_info=True)
