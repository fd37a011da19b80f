"""The worker daemon: PySpark's, with its workers' imports done and frozen before it forks.

Spark runs it as ``python -m kafka_direct.runtime.worker_daemon <worker module>`` where
:mod:`kafka_direct.runtime.warm_daemon` names it (``spark.python.daemon.module``); why and
where is said there. Nothing imports this module.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import sys

__all__ = ["PRELOAD", "main"]

#: What forked workers import, in this order (the worker's own module comes first).
PRELOAD = ("pyspark.worker", "pyarrow", "pandas", "pyspark.sql.pandas.serializers",
           "pyspark.sql.conversion", "kafka_direct.rdd.kafka_rdd", "kafka_direct.rdd.dataframe",
           "kafka_direct.sql.source",
           "kafka_direct.sql.sink")


def main() -> None:
    """Import :data:`PRELOAD`, then run PySpark's daemon (its worker module in ``argv[1]``)."""
    names = [*sys.argv[1:2], *PRELOAD]
    for name in names:
        with contextlib.suppress(Exception):  # the worker imports it again and reports
            importlib.import_module(name)
    import pyspark.daemon

    from kafka_direct.rdd.worker_exit import quiet_idle_exit_in

    # A reused worker that Spark closes idle leaves without a traceback, as under
    # PySpark's own daemon (installed there when a task imports kafka_direct).
    quiet_idle_exit_in(pyspark.daemon)

    # PySpark's daemon has a reused worker collect garbage after every task, which walks
    # every object the worker holds: 70-100 ms a task with these modules loaded. Frozen here,
    # what every worker inherits is left out of those walks (and its pages stay shared).
    gc.freeze()

    pyspark.daemon.manager()


if __name__ == "__main__":
    main()
