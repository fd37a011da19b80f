"""The workload whose classes :mod:`kafka_direct.runtime.jvm_archive` archives.

``python -m kafka_direct.runtime.jvm_archive_workload PATH`` starts a local SparkContext whose
JVM writes the classes it loaded to ``PATH`` when it exits; runs an RDD job with Python
workers, Spark SQL, and a Python data source read as a batch and as a stream, the stream
written by a Python Arrow stream writer (as the ingest job's sink); then ends the JVM and
waits until it has written the archive.
"""

from __future__ import annotations

import sys
import tempfile
from typing import Any

from kafka_direct.runtime.jvm_archive import QUIET, die_with_builder
from kafka_direct.runtime.spark import QUICK_JVM_OPTIONS, _make_context

__all__ = ["main"]


def main(partial: str) -> None:
    """Start a JVM that writes its classes to ``partial`` at exit; load the usual ones."""
    die_with_builder()
    from pyspark.sql import SparkSession
    from pyspark.sql.datasource import (
        DataSource,
        DataSourceReader,
        DataSourceStreamArrowWriter,
        DataSourceStreamReader,
        InputPartition,
        WriterCommitMessage,
    )

    class WarmUpReader(DataSourceReader):
        def read(self, partition):  # type: ignore[no-untyped-def]
            yield (1,)

    class WarmUpStreamReader(DataSourceStreamReader):
        def initialOffset(self) -> dict[str, int]:
            return {"o": 0}

        def latestOffset(self, start: dict[str, int], limit: Any) -> dict[str, int]:
            return {"o": 1}

        def partitions(self, start: dict[str, int], end: dict[str, int]) -> list[InputPartition]:
            return [InputPartition(0)]

        def read(self, partition):  # type: ignore[no-untyped-def]
            yield (1,)

    class WarmUpStreamWriter(DataSourceStreamArrowWriter):
        def write(self, iterator):  # type: ignore[no-untyped-def]
            for _ in iterator:
                pass
            return WriterCommitMessage()

        def commit(self, messages, batchId):  # type: ignore[no-untyped-def]
            pass

        def abort(self, messages, batchId):  # type: ignore[no-untyped-def]
            pass

    class WarmUpSource(DataSource):
        @classmethod
        def name(cls) -> str:
            return "kafka-direct-warm-up"

        def schema(self) -> str:
            return "v long"

        def reader(self, schema):  # type: ignore[no-untyped-def]
            return WarmUpReader()

        def streamReader(self, schema):  # type: ignore[no-untyped-def]
            return WarmUpStreamReader()

        def streamWriter(self, schema, overwrite):  # type: ignore[no-untyped-def]
            return WarmUpStreamWriter()

    options = f"{QUICK_JVM_OPTIONS} -XX:ArchiveClassesAtExit={partial} {QUIET}"
    sc = _make_context("local[2]", "kafka-direct-jvm-archive",
                       {"spark.driver.extraJavaOptions": options})
    with tempfile.TemporaryDirectory(prefix="kafka-direct-jvm-archive-") as scratch:
        sc.parallelize(range(100), 2).map(lambda x: x + 1).count()
        spark = SparkSession(sc)
        spark.range(100).selectExpr("id % 3 AS k").groupBy("k").count().collect()
        spark.dataSource.register(WarmUpSource)
        spark.read.format(WarmUpSource.name()).load().collect()
        for sink in ("noop", WarmUpSource.name()):
            query = (spark.readStream.format(WarmUpSource.name()).load().writeStream
                     .format(sink).option("checkpointLocation", f"{scratch}/{sink}")
                     .trigger(availableNow=True).start())
            query.awaitTermination(120)
        sc.stop()
    jvm = sc._gateway.proc
    jvm.stdin.close()  # Spark's gateway exits at the end of its input: the archive is written
    if jvm.wait(timeout=120) != 0:  # killed or failed while writing: not an archive to use
        sys.exit(1)


if __name__ == "__main__":
    main(sys.argv[1])
