"""A class data sharing archive of Spark's JVM, so that test JVMs start in less CPU.

A Spark JVM loads and verifies some ten thousand classes at every start: 4-5 s of CPU for a
local SparkContext that runs one small job, more with Spark SQL and Structured Streaming. A
test suite starts dozens of them (jobs in processes of their own, killed and restarted). The
JVM can map the classes of an earlier run from an archive instead (Java's dynamic class data
sharing): measured here, 40% less CPU and 1.5-3 s less wall time per start.

:func:`build` runs one small workload (an RDD job with Python workers, Spark SQL, a Python
data source read as a batch and as a stream) in a JVM that writes the archive when it exits,
once per Java runtime and Spark installation (the archive's name is a digest of both, jar
sizes and times included), into the user's cache directory. It publishes it only whole.

Opt-in: only where ``KAFKA_DIRECT_JVM_ARCHIVE=on`` (``./run test`` builds the archive and
sets it for the tests) does :func:`jvm_options` give the options that use it, which
:func:`kafka_direct.testing.spark.spark_context` applies to the driver of the JVMs it starts
with its test settings. Elsewhere (a user's ingest job) no JVM maps it. It is used only when
it is the user's own, not writable by others, and of the size it was published with; a JVM
that cannot use it (a changed class path, another Java) starts as it would without it,
silently.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from kafka_direct.testing.spark_home import cache_directory, script_safe, spark_home

__all__ = ["QUIET", "SWITCH", "archive_path", "build", "jvm_options"]

#: The environment variable that turns the archive on (``on``); ``./run test`` sets it.
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

    None when there is no Java, no PySpark or no cache directory, or when the path has
    characters that JVM options cannot carry (Spark's launcher splits them at spaces).
    """
    try:
        import pyspark
    except ImportError:
        return None
    try:
        java = _java()
        if java is None:
            return None
        # The jars as the JVM's class path names them: under the Spark home it starts in.
        home = spark_home("local")  # the tests' JVMs, which alone map the archive, are local
        jars = (home if home is not None else Path(pyspark.__file__).parent) / "jars"
        # A changed jar (its size or time) is another installation: another archive.
        stamps = [f"{entry.name} {entry.stat().st_size} {entry.stat().st_mtime_ns}"
                  for entry in sorted(jars.glob("*.jar"))] if jars.is_dir() else []
        identity = "\n".join([str(java), str(java.stat().st_mtime_ns), pyspark.__version__,
                              str(jars), *stamps])
        cache = cache_directory()
    except (OSError, RuntimeError):  # RuntimeError: no home directory
        return None
    digest = hashlib.sha256(identity.encode()).hexdigest()[:16]
    path = cache / f"spark-{pyspark.__version__}-{digest}.jsa"
    return path if script_safe(path) else None


def _size_file(path: Path) -> Path:
    return path.with_name(path.name + ".size")


def _usable(path: Path) -> bool:
    """Whether ``path`` is the archive as published: ours, not writable by others, whole.

    A JVM that maps a cut archive crashes; one that maps someone else's runs their classes.
    """
    try:
        info = path.stat()
        recorded = int(_size_file(path).read_text())
    except (OSError, ValueError):
        return False
    return (info.st_uid == os.getuid() and not info.st_mode & 0o022
            and info.st_size == recorded > 0)


def jvm_options() -> str:
    """JVM options that start from the archive; empty unless it is on and usable.

    On only where ``KAFKA_DIRECT_JVM_ARCHIVE=on`` (``./run test`` sets it for the tests).
    """
    if os.environ.get(SWITCH, "").lower() != "on":
        return ""
    path = archive_path()
    if path is None or not _usable(path):
        return ""
    return f"-XX:SharedArchiveFile={path} {QUIET}"


def _remove_others(path: Path) -> None:
    """Remove the archives of earlier Java or Spark installations (ours only)."""
    for other in path.parent.glob("spark-*.jsa*"):
        if other.name not in (path.name, _size_file(path).name) \
                and other.stat().st_uid == os.getuid():
            other.unlink(missing_ok=True)


def build(timeout: float = 300.0) -> Path | None:
    """Build the archive unless it is there; returns its path (None: it could not be built).

    Runs the workload in a process group of its own (ended whole on timeout) and publishes
    the archive only when its JVM ended normally after writing it: its size recorded, then
    a rename, so a JVM never maps half an archive. Says nothing either way.
    """
    path = archive_path()
    if path is None:
        return None
    if _usable(path):
        return path
    partial: str | None = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handle, partial = tempfile.mkstemp(prefix=path.name + ".", suffix=".partial",
                                           dir=path.parent)
        os.close(handle)
        os.unlink(partial)  # the JVM writes it at exit
        worker = subprocess.Popen([sys.executable, "-m", _WORKLOAD, partial],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                  start_new_session=True)
        try:
            code = worker.wait(timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(OSError):
                os.killpg(worker.pid, signal.SIGKILL)  # its JVM and Python workers too
            worker.wait()
            return None
        written = Path(partial)
        if code != 0 or not written.is_file() or not written.stat().st_size:
            return None
        written.chmod(0o444)
        _size_file(path).write_text(str(written.stat().st_size))
        os.replace(partial, path)
        _remove_others(path)
        return path
    except OSError:  # no cache directory, a full disk...: the JVMs start as usual
        return None
    finally:
        if partial is not None:
            Path(partial).unlink(missing_ok=True)


if __name__ == "__main__":
    build()
