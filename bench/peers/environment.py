"""The benchmark's own Python: PySpark of the Spark release whose Kafka connectors exist.

Spark's JVM connectors must match the Spark they run in, and Maven Central publishes them for
some releases only (``kafka_direct.testing.jvm_peers.SPARK_KAFKA_RELEASES``). When the
project's PySpark is newer than the newest of those, the benchmark makes a virtual
environment of its own in the user's cache holding that PySpark (and matplotlib for the
plot), layered over the project's environment (a ``.pth`` file puts the project's
site-packages after its own, so kafka-direct and its dependencies are the project's), and
runs every contender, ours included, there.
"""

from __future__ import annotations

import os
import site
import subprocess
import sys
import sysconfig
from pathlib import Path

from kafka_direct.runtime.spark_home import cache_directory, close_cache, closed
from kafka_direct.testing.jvm_peers import SPARK_KAFKA_RELEASES

REEXEC_ENV = "KAFKA_DIRECT_BENCH_PEER_ENV"


def installed_pyspark() -> str:
    import pyspark

    return str(pyspark.__version__)


def peer_spark_version() -> str:
    """The Spark release the peers run on: PySpark's own if served, else the newest served."""
    mine = installed_pyspark()
    return mine if mine in SPARK_KAFKA_RELEASES else SPARK_KAFKA_RELEASES[-1]


def peer_python(version: str) -> Path:
    """The interpreter of the environment with PySpark ``version`` (made the first time)."""
    cache = cache_directory()
    close_cache(cache)
    if not closed(cache, directory=True):
        raise SystemExit(f"the cache directory {cache} is not yours, is a link, or others may "
                         f"write to it: the benchmark's environment is not made or run there. "
                         f"Close it (chmod go-w) or set XDG_CACHE_HOME to a folder of your own")
    venv = cache / f"bench-pyspark-{version}"
    python = venv / "bin" / "python"
    if venv.exists() and not closed(venv, directory=True):
        raise SystemExit(f"{venv} is not yours, is a link, or others may write to it: remove "
                         f"it and run the benchmark again")
    ready = venv / ".ready"
    if not ready.is_file():
        print(f"bench: making an environment with PySpark {version} for the JVM peers "
              f"(once; about 450 MB)", file=sys.stderr, flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", f"pyspark=={version}",
                        "matplotlib"], check=True)
        ready.write_text(version)
    # The project's packages after the environment's own (re-written each time: the
    # project's environment may have moved).
    theirs = subprocess.run([str(python), "-c", "import site; print(site.getsitepackages()[0])"],
                            check=True, capture_output=True, text=True).stdout.strip()
    ours = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"],
            *site.getsitepackages()}
    Path(theirs, "zz-kafka-direct-project.pth").write_text(
        "\n".join(sorted(path for path in ours if Path(path).is_dir())) + "\n")
    return python


def reexec_in_peer_environment(root: Path) -> str:
    """Run this script again in the peers' environment unless it already runs there.

    Returns the Spark release in use (when it returns at all).
    """
    version = peer_spark_version()
    if installed_pyspark() == version:
        return version
    if os.environ.get(REEXEC_ENV):
        raise SystemExit(f"the benchmark's environment runs PySpark {installed_pyspark()}, "
                         f"not {version}")
    python = peer_python(version)
    environment = {**os.environ, REEXEC_ENV: "1", "PYTHONPATH": os.pathsep.join(
        [str(root), *filter(None, [os.environ.get("PYTHONPATH")])])}
    print(f"bench: PySpark {installed_pyspark()} has no Kafka connectors on Maven Central; "
          f"every contender runs on PySpark {version}", file=sys.stderr, flush=True)
    os.execve(str(python), [str(python), *sys.argv], environment)
    raise AssertionError("unreachable")  # pragma: no cover - execve does not return
