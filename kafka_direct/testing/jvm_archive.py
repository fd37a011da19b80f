"""A class data sharing archive of Spark's JVM, so that test and demo JVMs start in less CPU.

A Spark JVM loads and verifies some ten thousand classes at every start: 4-5 s of CPU for a
local SparkContext that runs one small job, more with Spark SQL and Structured Streaming. A
test suite starts dozens of them (jobs in processes of their own, killed and restarted). The
JVM can map the classes of an earlier run from an archive instead (Java's dynamic class data
sharing): measured here, 40% less CPU and 1.5-3 s less wall time per start.

:func:`build` runs one small workload (an RDD job with Python workers, Spark SQL, a Python
data source read as a batch and as a stream) in a JVM that writes the archive when it exits,
once per Java runtime and Spark installation (the archive's name is a digest of both), into
the user's cache directory. :func:`jvm_options` gives the options that use it, or nothing
while there is none; :func:`kafka_direct.testing.spark.spark_context` applies them to the
driver of the JVMs it starts with its test settings. A JVM that cannot use the archive (a
changed class path, another Java) starts as it would without it, silently.

``KAFKA_DIRECT_JVM_ARCHIVE=off`` turns it off; ``python -m kafka_direct.testing.jvm_archive``
builds it (``./run test`` does, before the tests).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

__all__ = ["SWITCH", "archive_path", "build", "jvm_options"]

#: The environment variable that turns the archive off (``off``).
SWITCH = "KAFKA_DIRECT_JVM_ARCHIVE"

_MODULE = "kafka_direct.testing.jvm_archive"  # run as a script too: not __name__

#: The JVM says nothing about the archive: not when it maps it, nor when it cannot.
_QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"


def _java() -> Path | None:
    # As Spark's launcher finds it: JAVA_HOME first, then PATH.
    home = os.environ.get("JAVA_HOME")
    found = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    return Path(found).resolve() if found and Path(found).exists() else None


def archive_path() -> Path | None:
    """Where the archive of this Java runtime and Spark installation is (or would be).

    None when it is turned off, or when there is no Java or no PySpark.
    """
    if os.environ.get(SWITCH, "").lower() == "off":
        return None
    java = _java()
    try:
        import pyspark
    except ImportError:
        return None
    if java is None:
        return None
    jars = Path(pyspark.__file__).parent / "jars"
    names = sorted(entry.name for entry in jars.glob("*.jar")) if jars.is_dir() else []
    identity = "\n".join([str(java), str(java.stat().st_mtime_ns), pyspark.__version__,
                          str(jars), *names])
    digest = hashlib.sha256(identity.encode()).hexdigest()[:16]
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "kafka-direct" / f"spark-{pyspark.__version__}-{digest}.jsa"


def jvm_options() -> str:
    """JVM options that start from the archive; empty while there is none."""
    path = archive_path()
    if path is None or not path.is_file():
        return ""
    return f"-XX:SharedArchiveFile={path} {_QUIET}"


def build(timeout: float = 300.0) -> Path | None:
    """Build the archive unless it exists; returns its path (None: off, or it failed).

    Runs the workload in a process of its own and publishes the archive only once its JVM
    has written all of it (a rename), so a JVM never maps half an archive.
    """
    path = archive_path()
    if path is None or path.is_file():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, partial = tempfile.mkstemp(prefix=path.name + ".", suffix=".partial",
                                       dir=path.parent)
    os.close(handle)
    os.unlink(partial)  # the JVM writes it at exit
    try:
        done = subprocess.run([sys.executable, "-m", _MODULE, "--workload", partial],
                              capture_output=True, text=True, timeout=timeout, check=False)
        if done.returncode == 0 and Path(partial).is_file() and Path(partial).stat().st_size:
            os.replace(partial, path)
            return path
        return None
    except subprocess.TimeoutExpired:
        return None
    finally:
        Path(partial).unlink(missing_ok=True)


def _workload(partial: str) -> None:
    """Start a JVM that writes its classes to ``partial`` at exit; load the usual ones."""
    from pyspark.sql import SparkSession
    from pyspark.sql.datasource import (
        DataSource,
        DataSourceReader,
        DataSourceStreamReader,
        InputPartition,
    )

    from kafka_direct.testing.spark import SPARK_TEST_CONF, _make_context

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

    options = (f"{SPARK_TEST_CONF['spark.driver.extraJavaOptions']} "
               f"-XX:ArchiveClassesAtExit={partial} {_QUIET}")
    sc = _make_context("local[2]", "kafka-direct-jvm-archive",
                       {"spark.driver.extraJavaOptions": options})
    with tempfile.TemporaryDirectory(prefix="kafka-direct-jvm-archive-") as scratch:
        sc.parallelize(range(100), 2).map(lambda x: x + 1).count()
        spark = SparkSession(sc)
        spark.range(100).selectExpr("id % 3 AS k").groupBy("k").count().collect()
        spark.dataSource.register(WarmUpSource)
        spark.read.format(WarmUpSource.name()).load().collect()
        query = (spark.readStream.format(WarmUpSource.name()).load().writeStream
                 .format("noop").option("checkpointLocation", scratch)
                 .trigger(availableNow=True).start())
        query.awaitTermination(120)
        sc.stop()
    jvm = sc._gateway.proc
    jvm.stdin.close()  # Spark's gateway exits at the end of its input: the archive is written
    jvm.wait(timeout=120)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--workload"]:
        _workload(sys.argv[2])
    else:
        build()
