"""``local-cluster`` SparkContexts: separate executor processes on one machine, for tests.

The way to prove that code really runs distributed: ``local-cluster[E,C,M]`` starts ``E``
executor processes, slowly, so the context is handed over only when all have registered.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import Any

from kafka_direct.errors import ServiceError
from kafka_direct.rdd.spark_support import live_executors
from kafka_direct.runtime.spark import spark_context
from kafka_direct.testing.process import wait_for

__all__ = ["local_cluster_context", "wait_for_executors"]


def wait_for_executors(sc: Any, count: int, timeout: float = 60.0) -> None:
    """Wait until ``count`` executors have registered (local-cluster starts them slowly)."""
    if not wait_for(lambda: len(live_executors(sc)) >= count, timeout, interval=0.2):
        raise ServiceError(f"{count} Spark executors did not register within {timeout:.0f} s",
                           service="spark", log_tail="")


@contextlib.contextmanager
def local_cluster_context(executors: int = 2, cores: int = 1, memory_mb: int = 1024,
                          conf: Mapping[str, str] | None = None) -> Iterator[Any]:
    """A ``local-cluster`` SparkContext with separate executor processes, all registered."""
    with spark_context(f"local-cluster[{executors},{cores},{memory_mb}]",
                       "kafka-direct-cluster-test", conf) as sc:
        wait_for_executors(sc, executors)
        yield sc
