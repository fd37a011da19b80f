"""Apache Kafka's KRaft storage, formatted as ``kafka-storage format`` does, and its JVM.

A node's log directory needs a ``meta.properties`` (cluster id, node id, directory id) and the
bootstrap snapshot of the metadata log (the release's metadata features, the same for every
node, since the quorum is static: ``controller.quorum.voters``, no node's identity in it). The
snapshot is made once per release by Kafka's own ``StorageTool`` and cached in a folder of the
user's own closed to others; ``meta.properties`` is written here: no JVM per node formatted.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import hashlib
import os
import shutil
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

from kafka_direct.errors import ServiceError
from kafka_direct.runtime.spark_home import cache_directory, close_cache, closed

__all__ = ["JVM_OPTIONS", "bootstrap_snapshot", "format_log_dir", "java", "random_id"]

_CHECKPOINT = "00000000000000000000-0000000000.checkpoint"

#: JVM options for Kafka in tests: quick to start, small, and it dies on running out of heap.
JVM_OPTIONS = ("-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-XX:+ExitOnOutOfMemoryError",
               "-Djava.awt.headless=true", "-Dsun.net.inetaddr.ttl=5")


def java() -> str:
    """The ``java`` that runs Kafka: ``JAVA_HOME``'s, else the one on PATH."""
    home = os.environ.get("JAVA_HOME")
    java = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    if not java or not os.access(java, os.X_OK):
        raise ServiceError("Apache Kafka needs Java 17 or newer: no java on PATH or in "
                           "JAVA_HOME", service="kafka", log_tail="")
    return java


def random_id() -> str:
    """A Kafka ``Uuid`` in its base64 form (never one of the reserved low values)."""
    raw = bytearray(uuid.uuid4().bytes)
    raw[0] |= 0x40
    return base64.urlsafe_b64encode(bytes(raw)).rstrip(b"=").decode()


@functools.cache
def bootstrap_snapshot(jars: Path) -> bytes:
    """The bootstrap snapshot ``kafka-storage format`` writes for this release (cached)."""
    digest = hashlib.sha256(str(jars.resolve()).encode()).hexdigest()[:16]
    versions = [*sorted(p.name for p in jars.glob("kafka-server-*.jar")), digest]
    name = hashlib.sha256("/".join(versions).encode()).hexdigest()[:24]
    cache = cache_directory() / "apache-kafka-bootstrap"
    cached = cache / f"{name}.checkpoint"
    # Trusted only in a folder of the user's own that nobody else may write to (the
    # snapshot is the first thing every node reads), as the jars' cache is.
    usable = cache.is_absolute()
    with contextlib.suppress(OSError):
        if usable and closed(cache.parent, directory=True) and closed(
                cache, directory=True) and closed(cached):
            return cached.read_bytes()
    with tempfile.TemporaryDirectory(prefix="kafka-direct-format-") as work:
        properties = Path(work) / "format.properties"
        properties.write_text(
            "process.roles=broker,controller\nnode.id=1\n"
            "controller.quorum.voters=1@127.0.0.1:9093\ncontroller.listener.names=CONTROLLER\n"
            "listeners=PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093\n"
            f"log.dirs={work}/data\n")
        argv = [java(), *JVM_OPTIONS, "-cp", f"{jars}/*", "kafka.tools.StorageTool",
                "format", "--cluster-id", random_id(), "--config", str(properties)]
        done = subprocess.run(argv, capture_output=True, timeout=120, check=False)
        snapshot = Path(work) / "data" / "__cluster_metadata-0" / _CHECKPOINT
        if done.returncode != 0 or not snapshot.is_file():
            output = (done.stdout + done.stderr).decode(errors="replace")[-2000:]
            raise ServiceError(f"formatting Apache Kafka's storage failed (exit code "
                               f"{done.returncode}):\n{output}", service="kafka",
                               log_tail=output)
        data = snapshot.read_bytes()
    if usable:
        with contextlib.suppress(OSError):
            close_cache(cache.parent)
            cache.mkdir(mode=0o755, exist_ok=True)
            if closed(cache.parent, directory=True) and closed(cache, directory=True):
                partial = cache / f".{name}.{os.getpid()}.{time.monotonic_ns()}"
                fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW,
                             0o644)
                with open(fd, "wb") as out:
                    out.write(data)
                partial.rename(cached)
    return data


def format_log_dir(data: Path, jars: Path, cluster_id: str, node_id: int) -> None:
    """Format a node's log directory, unless it already is (a restart keeps its data)."""
    if (data / "meta.properties").exists():
        return
    metadata = data / "__cluster_metadata-0"
    metadata.mkdir(parents=True, exist_ok=True)
    (metadata / _CHECKPOINT).write_bytes(bootstrap_snapshot(jars))
    (data / "meta.properties").write_text(
        f"version=1\ncluster.id={cluster_id}\nnode.id={node_id}\n"
        f"directory.id={random_id()}\n")
