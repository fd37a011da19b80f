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

__all__ = ["QUIET", "SWITCH", "archive_path", "build", "jvm_options"]

#: The environment variable that turns the archive off (``off``).
SWITCH = "KAFKA_DIRECT_JVM_ARCHIVE"

#: The workload, a module of its own (it starts a SparkContext: it imports ``spark``, which
#: imports this module).
_WORKLOAD = "kafka_direct.testing.jvm_archive_workload"

#: JVM options: the JVM says nothing about the archive: not when it maps it, nor when it cannot.
QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"


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
    return f"-XX:SharedArchiveFile={path} {QUIET}"


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
        done = subprocess.run([sys.executable, "-m", _WORKLOAD, partial],
                              capture_output=True, text=True, timeout=timeout, check=False)
        if done.returncode == 0 and Path(partial).is_file() and Path(partial).stat().st_size:
            os.replace(partial, path)
            return path
        return None
    except subprocess.TimeoutExpired:
        return None
    finally:
        Path(partial).unlink(missing_ok=True)


if __name__ == "__main__":
    build()
