"""A Spark home whose Python processes import PySpark compiled, not from its zip.

Spark puts ``$SPARK_HOME/python/lib/pyspark.zip`` first on the path of every Python process
it starts: the daemon, each worker it does not fork from the daemon, and each process of a
Python data source (its lookup, creation, read planning, write, and one per streaming source
and sink of every query). Python neither writes nor reads bytecode for what it imports from
that zip, so each of those processes compiles PySpark again. Measured here: 1.3 CPU-s to
import a streaming source's runner from the zip, 0.45 s from the installed package. A
Structured Streaming query starts several such processes, so this is most of what its
Python side costs.

A PySpark installed with pip is its own Spark home, and its zip holds the same modules as
the package. For such an installation :func:`compiled_spark_home` gives a directory that is
that Spark home less the zip: links to its ``bin``, its jars one by one and the rest, and to
py4j's zip. Spark's Python processes then find PySpark in the interpreter's own packages,
whose bytecode Python keeps. A signed jar is there as a copy less its signature, so that the
JVM's class archive (:mod:`~kafka_direct.runtime.jvm_archive`) can hold its classes
(:func:`_signed`). :func:`spark_home` gives it where it applies, else the Spark home as it is:

- ``SPARK_HOME`` is set: that Spark, as the user chose it;
- ``KAFKA_DIRECT_COMPILED_PYSPARK=off`` (or ``0``, ``false``, ``no``): PySpark's own home;
- a master other than ``local`` or ``local-cluster``: PySpark's own home (a cluster's
  executors have their own, and Spark on YARN ships ``pyspark.zip`` from this one);
- Spark's Python processes may run another interpreter (``PYSPARK_PYTHON``,
  ``PYSPARK_DRIVER_PYTHON``, ``spark.pyspark.python``, ``spark.pyspark.driver.python``),
  or this one finds PySpark only on a path added at run time, which a new process does not
  have: PySpark's own home;
- the directory cannot be made (no cache directory, a path with spaces or quotes, which
  Spark's scripts do not all carry), or one there is not the user's own and unwritable by
  others, or its links are not the expected ones: PySpark's own home.

The directory lives in the user's cache (``kafka-direct/pyspark-home-<version>-<digest>``,
one per PySpark installation and layout) and holds a ``work`` directory of its own (where
``local-cluster`` executors keep their output).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import site
import stat
import sys
import tempfile
import zipfile
from collections.abc import Iterator, Mapping
from pathlib import Path

__all__ = ["SWITCH", "cache_directory", "close_cache", "closed", "compiled_spark_home",
           "only_this_interpreter", "pyspark_home", "script_safe", "spark_home",
           "using_spark_home"]

#: The environment variable that turns the compiled home off (``off``, ``0``, ``false``, ``no``).
SWITCH = "KAFKA_DIRECT_COMPILED_PYSPARK"

_OFF = ("off", "0", "false", "no")

#: Settings that name the interpreter Spark's Python processes run.
_PYTHON_ENV = ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON")
_PYTHON_CONF = ("spark.pyspark.python", "spark.pyspark.driver.python")

#: What Spark's scripts and JVMs read in a Spark home, linked when PySpark ships it (the
#: jars one by one: see :func:`_signed`).
_LINKED = ("bin", "sbin", "conf", "data", "examples", "licenses", "RELEASE")

#: The files of a jar's signature (``META-INF/*.SF`` and its block).
_SIGNATURE = (".SF", ".RSA", ".DSA", ".EC")


def cache_directory() -> Path:
    """kafka-direct's directory in the user's cache (``XDG_CACHE_HOME``, else ``~/.cache``).

    Raises:
        RuntimeError: There is no home directory.
    """
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "kafka-direct"


def script_safe(path: Path) -> bool:
    """Whether Spark's scripts and JVM options carry ``path`` (no spaces, no quotes)."""
    return not any(c.isspace() or c in "'\"\\" for c in str(path))


def pyspark_home() -> Path | None:
    """The Spark home of the PySpark this interpreter imports (None: no PySpark)."""
    try:
        import pyspark
    except ImportError:
        return None
    return Path(pyspark.__file__).resolve().parent


def _same_interpreter(python: str) -> bool:
    # Not resolved through links: a virtual environment's python links to its base
    # interpreter, which does not have the environment's packages.
    found = shutil.which(python) or python
    return os.path.abspath(found) == os.path.abspath(sys.executable)


def _only_this_interpreter(conf: Mapping[str, str]) -> bool:
    named = [os.environ.get(key) for key in _PYTHON_ENV] + [conf.get(key) for key in _PYTHON_CONF]
    return all(_same_interpreter(python) for python in named if python)


def _found_at_start(home: Path) -> bool:
    """Whether a new process of this interpreter finds PySpark where this one did."""
    try:
        places = [*site.getsitepackages(), site.getusersitepackages(),
                  *os.environ.get("PYTHONPATH", "").split(os.pathsep)]
        return home.parent in {Path(place).resolve() for place in places if place}
    except (OSError, AttributeError):  # AttributeError: a site module without them
        return False


def _local(master: str) -> bool:
    return master == "local" or master.startswith(("local[", "local-cluster["))


def only_this_interpreter(master: str, conf: Mapping[str, str] | None = None) -> bool:
    """Whether every Python process a Spark of ``master`` and ``conf`` starts runs this one.

    A ``local`` or ``local-cluster`` master, and every interpreter setting
    (``PYSPARK_PYTHON``, ``PYSPARK_DRIVER_PYTHON``, ``spark.pyspark.python``,
    ``spark.pyspark.driver.python``) unset or naming the running interpreter.
    """
    return _local(master) and _only_this_interpreter(conf or {})


def _wanted_links(home: Path) -> dict[str, Path]:
    links = {name: home / name for name in _LINKED if (home / name).exists()}
    folder = home / "jars"
    if folder.is_dir():  # names sorted as text: a few hundred jars, at every start
        for name in sorted(os.listdir(folder)):
            if name.endswith(".jar"):
                links[f"jars/{name}"] = folder / name
    for py4j in sorted((home / "python" / "lib").glob("py4j-*.zip")):
        links[f"python/lib/{py4j.name}"] = py4j
    return links


def _is_signature(name: str) -> bool:
    folder, _, file = name.rpartition("/")
    return folder.upper() == "META-INF" and file.upper().endswith(_SIGNATURE)


def _signed(jar: Path) -> bool:
    """Whether ``jar`` is signed: the JVM's class archive then holds none of its classes.

    Java's class data sharing leaves out every class of a signed jar, so each JVM loads,
    verifies and checks the digests of those classes again. PySpark ships Janino, Spark's
    code generator, signed: 370 classes that each SQL JVM loads at its first query
    (0.2-0.3 s of its first compile, measured), which the home holds unsigned instead.
    """
    try:
        with zipfile.ZipFile(jar) as archive:
            return any(_is_signature(name) for name in archive.namelist())
    except (OSError, zipfile.BadZipFile):
        return False


def _unsigned_copy(jar: Path, copy: Path) -> None:
    """Write ``jar`` less its signature files to ``copy`` (readable by all, written once)."""
    with zipfile.ZipFile(jar) as source, zipfile.ZipFile(copy, "w") as target:
        for entry in source.infolist():
            if not _is_signature(entry.filename):
                target.writestr(entry, source.read(entry), compress_type=entry.compress_type)
    copy.chmod(0o444)


def closed(path: Path, directory: bool = False) -> bool:
    """Whether ``path`` is ours, not a link, not writable by others: nobody else may swap it.

    Args:
        path: The file or directory.
        directory: It must be a directory (else a regular file).

    Raises:
        OSError: ``path`` cannot be looked at (missing...).
    """
    info = path.lstat()
    kind = stat.S_ISDIR(info.st_mode) if directory else stat.S_ISREG(info.st_mode)
    return kind and info.st_uid == os.getuid() and not info.st_mode & 0o022


def _is_valid(path: Path, links: dict[str, Path]) -> bool:
    """Whether ``path`` is a home as :func:`_make` makes it: ours, closed to others."""
    try:
        # The cache directory too: whoever may write there may swap the home for another.
        for directory in (path.parent, path, path / "python", path / "python" / "lib"):
            if not closed(directory, directory=True):
                return False
        if not closed(path / "jars", directory=True):
            return False
        jars = {name: target for name, target in links.items() if name.startswith("jars/")}
        for name, target in links.items():
            if name not in jars and os.readlink(path / name) != str(target):
                return False
        # The jars folder as made: a link per jar, or a copy of ours (a signed jar's).
        found = 0
        with os.scandir(path / "jars") as entries:
            for entry in entries:
                wanted = jars.get(f"jars/{entry.name}")
                if wanted is None:
                    return False
                if entry.is_symlink():
                    if os.readlink(entry.path) != str(wanted):
                        return False
                elif not closed(Path(entry.path)):
                    return False
                found += 1
        return found == len(jars) and not (path / "python" / "lib" / "pyspark.zip").exists()
    except OSError:
        return False


def close_cache(directory: Path) -> None:
    """Make the cache directory, or close ours to others' writes (a umask of 002 opens it)."""
    directory.mkdir(parents=True, exist_ok=True, mode=0o755)
    info = directory.lstat()
    if info.st_uid == os.getuid() and info.st_mode & 0o022 and not directory.is_symlink():
        directory.chmod(info.st_mode & 0o755)


def _make(path: Path, links: dict[str, Path]) -> Path | None:
    partial = Path(tempfile.mkdtemp(prefix=path.name + ".", dir=path.parent))
    try:
        (partial / "python").mkdir(mode=0o755)
        (partial / "python" / "lib").mkdir(mode=0o755)
        (partial / "jars").mkdir(mode=0o755)
        (partial / "work").mkdir(mode=0o700)
        for name, target in links.items():
            if name.startswith("jars/") and _signed(target):
                _unsigned_copy(target, partial / name)
            else:
                (partial / name).symlink_to(target)
        partial.chmod(0o755)
        try:
            partial.rename(path)
        except OSError:  # another process made it first
            shutil.rmtree(partial, ignore_errors=True)
        return path if _is_valid(path, links) else None
    except OSError:
        shutil.rmtree(partial, ignore_errors=True)
        raise


def _jar_stamps(links: Mapping[str, Path]) -> list[str]:
    stamps = []
    for name, target in links.items():  # in the order of their names
        if name.startswith("jars/"):
            info = os.stat(target)
            stamps.append(f"{name} {info.st_size} {info.st_mtime_ns}")
    return stamps


def compiled_spark_home(master: str, conf: Mapping[str, str] | None = None) -> Path | None:
    """PySpark's Spark home less its zip (made on first use); None where it does not apply.

    Args:
        master: The Spark master of the JVM to start.
        conf: Its Spark settings (for the interpreters they name).
    """
    if os.environ.get(SWITCH, "").strip().lower() in _OFF \
            or not only_this_interpreter(master, conf):
        return None
    home = pyspark_home()
    if home is None or not (home / "python" / "lib" / "pyspark.zip").is_file() \
            or not (home / "jars").is_dir() or not (home / "bin" / "spark-submit").is_file() \
            or not _found_at_start(home):
        return None
    try:
        import pyspark

        cache = cache_directory()
        if not cache.is_absolute():
            return None  # as the XDG rules say: a relative one is not a cache directory
        links = _wanted_links(home)
        # Another layout (a file added to PySpark's home) is another directory; so is a
        # jar changed in place (its unsigned copy would be stale).
        identity = "\n".join([str(home), *sorted(links), *_jar_stamps(links)])
        digest = hashlib.sha256(identity.encode()).hexdigest()[:16]
        path = cache / f"pyspark-home-{pyspark.__version__}-{digest}"
        if not script_safe(path):
            return None  # Spark's scripts and class paths do not all carry such paths
        close_cache(path.parent)
        if _is_valid(path, links):
            return path
        if os.path.lexists(path):  # not ours, or not as made: left alone
            return None
        return _make(path, links)
    except (OSError, RuntimeError):  # RuntimeError: no home directory
        return None


def spark_home(master: str, conf: Mapping[str, str] | None = None) -> Path | None:
    """The Spark home a JVM started now with ``master`` and ``conf`` uses.

    ``SPARK_HOME`` when set, else the compiled home, else PySpark's own (None: no PySpark).
    """
    chosen = os.environ.get("SPARK_HOME")
    if chosen:
        return Path(chosen)
    return compiled_spark_home(master, conf) or pyspark_home()


@contextlib.contextmanager
def using_spark_home(master: str, conf: Mapping[str, str] | None = None) -> Iterator[None]:
    """``SPARK_HOME`` set to the compiled home for the block, when it applies.

    For a JVM that PySpark launches in the block (it reads ``SPARK_HOME`` from the
    environment); the JVM and what it starts keep it. Left as it was afterwards. Nothing
    under spark-submit, whose JVM runs already.
    """
    if "SPARK_HOME" in os.environ or "PYSPARK_GATEWAY_PORT" in os.environ:
        yield
        return
    home = compiled_spark_home(master, conf)
    if home is None:
        yield
        return
    os.environ["SPARK_HOME"] = str(home)
    try:
        yield
    finally:
        if os.environ.get("SPARK_HOME") == str(home):
            del os.environ["SPARK_HOME"]
