"""A class data sharing archive of Spark's JVM, so that its JVMs start sooner, in less CPU.

A Spark JVM loads and verifies some ten thousand classes at every start: 4-5 s of CPU for a
local SparkContext that runs one small job, more with Spark SQL and Structured Streaming.
The test suite starts dozens of them (jobs in processes of their own, killed and
restarted), and a job's time to its first commit starts with one. The
JVM can map the classes of an earlier run from an archive instead (Java's dynamic class data
sharing): measured here, 40% less CPU and 1.5-3 s less wall time per start.

:func:`build` runs one small workload (an RDD job with Python workers, Spark SQL, a Python
data source read as a batch and as a stream, written by a Python stream writer) in a JVM
that writes the archive when it exits, once per Java runtime and Spark installation (the
archive's name is a digest of both, jar sizes and times included), into the user's cache
directory. It publishes it only whole.

Which JVMs map it: the tests' where ``KAFKA_DIRECT_JVM_ARCHIVE=on`` (``./run test`` builds
the archive and sets it); the ingest job's and the demo's local driver unless it is ``off``
(``./run ingest`` and ``./run demo`` build the archive first; ``python -m
kafka_direct.testing.jvm_archive`` builds it for an installed package). Measured on the
ingest job's Structured Streaming API: its first commit 2.5 s sooner (about 6 s instead of
8.5-9 s from its start on a quiet machine). :func:`jvm_options` gives the options that use
it, which :func:`kafka_direct.testing.spark.spark_context` applies to the driver JVMs it
starts with its local settings; no other JVM maps it. It is used only when it is the
user's own, not writable by others, and of the size it was published with; a JVM that
cannot use it (a changed class path, another Java) starts as it would without it,
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

__all__ = ["QUIET", "SWITCH", "archive_path", "build", "jvm_options", "main", "wanted"]

#: The environment variable that turns the archive on (``on``) or off (``off``); unset, each
#: caller's default holds (tests: off; the ingest job and the demo: on). ``./run test`` sets it.
SWITCH = "KAFKA_DIRECT_JVM_ARCHIVE"

#: The workload, a module of its own (it starts a SparkContext: it imports ``spark``, which
#: imports this module).
_WORKLOAD = "kafka_direct.testing.jvm_archive_workload"

#: The workload's version, part of the archive's name: a workload that loads more classes
#: makes a new archive where an older one lies (2: the Python stream writer's classes).
_WORKLOAD_VERSION = 2

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
                              str(jars), f"workload {_WORKLOAD_VERSION}", *stamps])
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


def wanted(default: bool = False) -> bool:
    """Whether the archive is to be used, as :data:`SWITCH` says (unset: ``default``).

    Raises:
        ConfigurationError: :data:`SWITCH` is neither ``on``, ``off`` nor empty.
    """
    value = os.environ.get(SWITCH, "").strip().lower()
    if not value:
        return default
    if value not in ("on", "off"):
        from kafka_direct.errors import ConfigurationError

        raise ConfigurationError(
            f"{SWITCH} must be 'on' or 'off' (or unset), got {value[:20]!r}: 'on' starts "
            "Spark's JVM from the archive of its classes when it is built, 'off' never",
            setting=SWITCH)
    return value == "on"


def jvm_options(default: bool = False) -> str:
    """JVM options that start from the archive; empty unless it is wanted and usable.

    Args:
        default: Whether to use it when :data:`SWITCH` is unset (the tests: no; the ingest
            job and the demo: yes).

    Raises:
        ConfigurationError: :data:`SWITCH` is neither ``on``, ``off`` nor empty.
    """
    if not wanted(default):
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


def main() -> int:
    """``python -m kafka_direct.testing.jvm_archive``: build the archive unless it is off.

    ``./run`` runs it before the tests, the ingest job and the demo. Says one line when it
    builds (about 20 s, once per Java and Spark installation), one when the switch is wrong.
    """
    from kafka_direct.errors import ConfigurationError

    try:
        if not wanted(default=True):
            return 0
    except ConfigurationError as error:
        print(f"kafka-direct: {error}", file=sys.stderr)
        return 2
    path = archive_path()
    if path is not None and not _usable(path):
        print("kafka-direct: building an archive of Spark's classes for quicker starts "
              "(once per Java and Spark installation, about 20 s)", file=sys.stderr)
    build()
    return 0


if __name__ == "__main__":
    sys.exit(main())
