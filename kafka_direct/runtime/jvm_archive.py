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
kafka_direct.runtime.jvm_archive`` builds it for an installed package). Measured on the
ingest job's Structured Streaming API on a quiet machine: its first commit 6.7-7.0 s from
its start instead of 8.8-9.2 s. :func:`jvm_options` gives the options that use
it, which :func:`kafka_direct.runtime.spark.spark_context` applies to the driver JVMs it
starts with its local settings; no other JVM maps it. It is used only when it is the
user's own, not writable by others, and unchanged since it was published (its size, inode
and change time: :func:`_stamp`); a JVM that
cannot use it (a changed class path, another Java) starts as it would without it,
silently.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from kafka_direct.runtime.spark_home import (
    cache_directory,
    close_cache,
    closed,
    script_safe,
    spark_home,
)

__all__ = ["QUIET", "SWITCH", "archive_path", "build", "die_with_builder",
           "jvm_options", "main", "wanted"]

#: The environment variable that turns the archive on (``on``) or off (``off``); unset, each
#: caller's default holds (tests: off; the ingest job and the demo: on). ``./run test`` sets it.
SWITCH = "KAFKA_DIRECT_JVM_ARCHIVE"

#: The workload, a module of its own (it starts a SparkContext: it imports ``spark``, which
#: imports this module).
_WORKLOAD = "kafka_direct.runtime.jvm_archive_workload"

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

    Its name is ``spark-<version>-<place>-<digest>.jsa``: ``place`` a digest of the Java and
    the jars' folder (one installation), ``digest`` of everything it was built from.

    None when there is no Java, no PySpark or no cache directory, when the cache directory
    is not an absolute path (as the XDG rules say), or when the path has characters that
    JVM options cannot carry (Spark's launcher splits them at spaces; Java's option takes
    a ``:`` for the boundary between two archives).
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
        home = spark_home("local")  # the JVMs that map the archive are local drivers
        jars = (home if home is not None else Path(pyspark.__file__).parent) / "jars"
        # A changed jar (its size or time) is another installation: another archive.
        stamps = [f"{entry.name} {entry.stat().st_size} {entry.stat().st_mtime_ns}"
                  for entry in sorted(jars.glob("*.jar"))] if jars.is_dir() else []
        # One installation and workload (two checkouts of different workloads sharing one
        # Spark keep an archive each instead of replacing each other's at every build).
        place = "\n".join([str(java), str(jars), f"workload {_WORKLOAD_VERSION}"])
        identity = "\n".join([place, str(java.stat().st_mtime_ns), pyspark.__version__,
                              *stamps])
        cache = cache_directory()
    except (OSError, RuntimeError):  # RuntimeError: no home directory
        return None
    if not cache.is_absolute():
        return None
    digest = hashlib.sha256(identity.encode()).hexdigest()[:16]
    where = hashlib.sha256(place.encode()).hexdigest()[:8]
    path = cache / f"spark-{pyspark.__version__}-{where}-{digest}.jsa"
    return path if script_safe(path) and ":" not in str(path) else None


def _size_file(path: Path) -> Path:
    return path.with_name(path.name + ".size")


def _stamp(info: os.stat_result) -> str:
    """An archive's stamp: its size, inode and change time, as its size file records them.

    Any write to the file, a change of its mode or another file put in its place changes
    one of them (a change time cannot be set back), so a stamp that still matches is the
    archive as it was published. The JVM's own check of the archive's checksums
    (``-XX:+VerifySharedSpaces``, off by default) read the whole archive at every start:
    0.2-0.4 s of a JVM's start (``java -version`` with the archive 0.56-0.79 s against
    0.36-0.39 s, load 4), and 0.13 s of CPU.
    """
    return f"{info.st_size} {info.st_ino} {info.st_ctime_ns}"


def _usable(path: Path) -> bool:
    """Whether ``path`` is the archive as published: ours, closed to others, unchanged.

    The folder, the archive and its size file are checked, none of them a link: whoever
    may write to one of them may swap the archive. A JVM that maps a cut or damaged
    archive crashes; one that maps someone else's runs their classes.
    """
    try:
        if not (closed(path.parent, directory=True) and closed(path)
                and closed(_size_file(path))):
            return False
        info = path.lstat()
        return info.st_size > 0 and _size_file(path).read_text() == _stamp(info)
    except (OSError, ValueError):
        return False


def wanted(default: bool = False, environ: Mapping[str, str] | None = None) -> bool:
    """Whether the archive is to be used, as :data:`SWITCH` says (unset: ``default``).

    Args:
        default: The answer when :data:`SWITCH` is unset or empty.
        environ: The environment (None: this process's).

    Raises:
        ConfigurationError: :data:`SWITCH` is neither ``on``, ``off`` nor empty (any case,
            spaces around it ignored).
    """
    given = (os.environ if environ is None else environ).get(SWITCH, "")
    value = given.strip().lower()
    if not value:
        return default
    if value not in ("on", "off"):
        from kafka_direct.errors import ConfigurationError

        raise ConfigurationError(
            f"{SWITCH} must be 'on' or 'off' (or unset), got {given.strip()[:20]!r}: 'on' "
            "starts Spark's JVM from the archive of its classes when it is built, 'off' "
            "never", setting=SWITCH)
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
    """Remove our older archives of the same installation, and those of earlier naming.

    Other installations' archives (another checkout's, another Spark home's) stay, and so
    do files being written (a concurrent build's partial archive or size file).
    """
    where = path.name.split("-")[2]
    for other in path.parent.glob("spark-*.jsa*"):
        parts = other.name.split("-")
        ours = len(parts) == 3 or (len(parts) == 4 and parts[2] == where)
        if ours and other.name.endswith((".jsa", ".jsa.size")) \
                and other.name not in (path.name, _size_file(path).name) \
                and other.lstat().st_uid == os.getuid():
            other.unlink(missing_ok=True)


def _publish_size(path: Path, stamp: str) -> None:
    """Write the archive's size file (its :func:`_stamp`) whole, never through a link."""
    handle, partial = tempfile.mkstemp(prefix=_size_file(path).name + ".", dir=path.parent)
    try:
        with os.fdopen(handle, "w") as out:
            out.write(stamp)
        os.chmod(partial, 0o444)
        os.replace(partial, _size_file(path))  # a rename replaces a link, never follows it
    finally:
        Path(partial).unlink(missing_ok=True)


#: A partial build older than this is left over by a builder that was killed: removed.
_STALE_SECONDS = 900.0


def build(timeout: float = 300.0) -> Path | None:
    """Build the archive unless it is there; returns its path (None: it could not be built).

    Runs the workload in a process group of its own (ended whole when it fails, times out
    or this process is interrupted; it dies with this process) and publishes the archive
    only when its JVM ended normally after writing it: a rename, then its stamp recorded,
    so a JVM never maps half an archive. Only into a cache directory of our own that others
    cannot write to; one build at a time per directory (the others wait, then find it).
    The workload writes into a private folder of its own, removed afterwards whatever
    happened: a JVM still exiting finds it gone and writes nothing. Says nothing either way.
    """
    path = archive_path()
    if path is None:
        return None
    if _usable(path):
        return path
    try:
        close_cache(path.parent)  # made, or closed to others' writes (a umask of 002)
        if not closed(path.parent, directory=True):
            return None  # others could swap what we build for theirs
        with _one_build_at_a_time(path.parent):
            if _usable(path):  # built by the build this one waited for
                return path
            _remove_stale(path.parent)
            return _build_into(path, timeout)
    except OSError:  # no cache directory, a full disk...: the JVMs start as usual
        return None


@contextlib.contextmanager
def _one_build_at_a_time(folder: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``folder`` (released when the process ends, however)."""
    handle = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield
    finally:
        os.close(handle)


def _remove_stale(folder: Path) -> None:
    """Remove our partial builds that a killed builder left (older than any build runs)."""
    now = time.time()
    for entry in folder.glob("spark-*.partial"):
        info = entry.lstat()
        if info.st_uid == os.getuid() and now - info.st_mtime > _STALE_SECONDS:
            if stat.S_ISDIR(info.st_mode):
                shutil.rmtree(entry, ignore_errors=True)
            else:
                entry.unlink(missing_ok=True)


#: The environment variable that names the builder's pid to its workload.
_BUILDER = "KAFKA_DIRECT_ARCHIVE_BUILDER"


def die_with_builder() -> None:
    """Called first by the workload: it is killed when its builder dies, even by SIGKILL.

    Its JVM then sees its input close and ends (into a folder the builder removed, or that
    the next build removes as stale). Ends this process at once when the builder is gone
    already.
    """
    import ctypes

    builder = os.environ.get(_BUILDER)
    if builder is None:
        return
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    if str(os.getppid()) != builder:  # it died before the line above
        os._exit(1)


def _end_group(worker: subprocess.Popen[bytes], seconds: float = 10.0) -> None:
    """Kill the workload's process group (its JVM and Python workers) and wait for it."""
    with contextlib.suppress(OSError):
        os.killpg(worker.pid, signal.SIGKILL)
    worker.wait()
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            os.killpg(worker.pid, 0)
        except OSError:
            return  # the whole group is gone
        time.sleep(0.05)


def _build_into(path: Path, timeout: float) -> Path | None:
    scratch = Path(tempfile.mkdtemp(prefix=path.name + ".", suffix=".partial",
                                    dir=path.parent))
    try:
        partial = scratch / "archive.jsa"
        work = scratch / "work"  # the workload's and Spark's scratch files
        work.mkdir()
        environment = {**os.environ, "TMPDIR": str(work), "SPARK_LOCAL_DIRS": str(work),
                       _BUILDER: str(os.getpid())}
        worker = subprocess.Popen([sys.executable, "-m", _WORKLOAD, str(partial)],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                  env=environment, start_new_session=True)
        try:
            code = worker.wait(timeout)
        except BaseException as stopped:  # timeout, Ctrl-C, SIGTERM: the workload ends too
            _end_group(worker)
            if isinstance(stopped, subprocess.TimeoutExpired):
                return None
            raise
        _end_group(worker)  # a failed workload's JVM may still be exiting
        if code != 0 or not partial.is_file() or not partial.stat().st_size:
            return None
        partial.chmod(0o444)
        # The archive first, then its stamp (a rename changes the file's change time):
        # in between, it is not used.
        os.replace(partial, path)
        _publish_size(path, _stamp(path.lstat()))
        _remove_others(path)
        return path
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _interrupted(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def main() -> int:
    """``python -m kafka_direct.runtime.jvm_archive``: build the archive unless it is off.

    ``./run`` runs it before the tests, the ingest job and the demo. It prints ``on`` or
    ``off`` (what :data:`SWITCH` decides, unset: on) on its output, for ``./run`` to pass on
    to the tests; on its error output one line when it builds (about 20 s, once per Java
    and Spark installation), one when the cache directory is not ours to build in, one
    when the switch is wrong (exit code 2). Interrupted (Ctrl-C, SIGTERM, SIGHUP), it ends
    its workload, leaves nothing behind and exits with 130.
    """
    from kafka_direct.errors import ConfigurationError

    try:
        on = wanted(default=True)
    except ConfigurationError as error:
        print(f"kafka-direct: {error}", file=sys.stderr)
        return 2
    print("on" if on else "off", flush=True)
    if not on:
        return 0
    path = archive_path()
    if path is None or _usable(path):
        return 0
    folder = path.parent
    if folder.exists() and not closed(folder, directory=True):
        print(f"kafka-direct: no archive of Spark's classes: {folder} is a link, not yours, "
              "or others may write to it; Spark's JVMs start without one", file=sys.stderr)
        return 0
    print("kafka-direct: building an archive of Spark's classes for quicker starts "
          "(once per Java and Spark installation, about 20 s)", file=sys.stderr)
    for stop in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(stop, _interrupted)
    try:
        build()
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
