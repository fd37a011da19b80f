"""PySpark's worker daemon with its workers' imports done once, before it forks.

Spark forks every Python worker from a daemon (``pyspark.daemon``), and each forked worker
then imports what its task needs: PySpark's worker, pyarrow, pandas (PySpark's Arrow paths
import it), this package. Measured on the structured source and sink tests: about half a
CPU-second a worker, for workers that often run one short task. This daemon imports them
first, so that forked workers start with them loaded (copy-on-write), freezes them out of the
garbage collector's walks (PySpark has a reused worker collect garbage after every task, a
walk over everything it holds: 70-100 ms a task with these modules), then runs PySpark's own
daemon loop unchanged.

PySpark imports the worker module only after the fork, because a library that starts threads
when imported would leave a forked child with locks held by threads it does not have. The
libraries preloaded here start only threads that are made for forking: pyarrow's jemalloc
background thread and numpy's OpenBLAS pool both stop or reset themselves around a fork
(their own at-fork handlers). Nothing else is preloaded, and a module that fails to import
is left to the worker, as before.

:func:`kafka_direct.testing.spark_context` names this daemon (``spark.python.daemon.module``)
only where every Python process Spark starts is this interpreter and finds this package at
start (:func:`daemon_module`); ``KAFKA_DIRECT_WARM_DAEMON=off`` (or ``0``, ``false``, ``no``)
keeps PySpark's own.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import importlib
import os
import subprocess
import sys

__all__ = ["DAEMON_MODULE", "PRELOAD", "SWITCH", "daemon_module", "main"]

#: The environment variable that keeps PySpark's own daemon.
SWITCH = "KAFKA_DIRECT_WARM_DAEMON"

#: This module's name, as ``spark.python.daemon.module`` takes it.
DAEMON_MODULE = "kafka_direct.testing.warm_daemon"

#: What forked workers import, in this order (the worker's own module comes first).
PRELOAD = ("pyspark.worker", "pyarrow", "pandas", "pyspark.sql.pandas.serializers",
           "pyspark.sql.conversion", "kafka_direct.rdd.kafka_rdd", "kafka_direct.sql.source",
           "kafka_direct.sql.sink")


@functools.cache
def _importable_at_start(executable: str, cwd: str) -> bool:
    # A new process of the interpreter, as Spark starts the daemon: this package on its path
    # at start, not only on this process's (a path added at run time).
    try:
        done = subprocess.run([executable, "-c", f"import {DAEMON_MODULE}"], cwd=cwd,
                              capture_output=True, timeout=60, check=False)
    except (OSError, subprocess.SubprocessError):
        return False
    return done.returncode == 0


def daemon_module() -> str | None:
    """:data:`DAEMON_MODULE` when a new process of this interpreter can import it, else None.

    None as well when :data:`SWITCH` is ``off``, ``0``, ``false`` or ``no``.
    """
    if os.environ.get(SWITCH, "").strip().lower() in ("off", "0", "false", "no"):
        return None
    return DAEMON_MODULE if _importable_at_start(sys.executable, os.getcwd()) else None


def main() -> None:
    """Import :data:`PRELOAD`, then run PySpark's daemon (its worker module in ``argv[1]``)."""
    names = [*sys.argv[1:2], *PRELOAD]
    for name in names:
        with contextlib.suppress(Exception):  # the worker imports it again and reports
            importlib.import_module(name)
    from pyspark.daemon import manager

    # PySpark's daemon has a reused worker collect garbage after every task, which walks
    # every object the worker holds: 70-100 ms a task with these modules loaded. Frozen here,
    # what every worker inherits is left out of those walks (and its pages stay shared).
    gc.freeze()

    manager()


if __name__ == "__main__":
    main()
