"""SparkContexts for the jobs, the demo and the tests: quick to start, quiet, kafka-direct ready.

``local[N,F]`` runs tasks in the driver's JVM with ``F`` attempts per task (local mode
ignores ``spark.task.maxFailures``); ``local-cluster[E,C,M]`` starts ``E`` separate executor
processes, the way to prove that code really runs distributed on one machine.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import sys
import threading
from collections.abc import Iterator, Mapping
from typing import IO, Any

from kafka_direct.rdd.spark_support import ensure_pyspark_python
from kafka_direct.runtime.spark_home import only_this_interpreter, spark_home, using_spark_home
from kafka_direct.runtime.warm_daemon import daemon_module

__all__ = ["ENVIRONMENT_NOTES", "LOOPBACK_CONF", "QUICK_JVM_OPTIONS", "SPARK_TEST_CONF",
           "STARTUP_NOISE", "driver_java_options", "spark_context", "warm_daemon_for"]

logger = logging.getLogger(__name__)

#: The driver on 127.0.0.1: for services that listen there only (the embedded ones).
LOOPBACK_CONF: dict[str, str] = {
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
}

#: JVM options of test JVMs: quick to start (serial GC, the first JIT tier only).
QUICK_JVM_OPTIONS = "-XX:+UseSerialGC -XX:TieredStopAtLevel=1"

#: Settings that make small jobs fast and logs quiet (the driver on 127.0.0.1 included).
SPARK_TEST_CONF: dict[str, str] = {
    "spark.python.unix.domain.socket.enabled": "true",
    "spark.locality.wait": "0",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.driver.extraJavaOptions": QUICK_JVM_OPTIONS,
    "spark.executor.extraJavaOptions": QUICK_JVM_OPTIONS,
    "spark.sql.shuffle.partitions": "4",
    "spark.default.parallelism": "4",
    **LOOPBACK_CONF,
}


#: Lines Spark's JVM prints at every start that no user caused: the JVM's note on the
#: incubator module Spark's launcher always adds, log4j's default-profile notes, Hadoop's
#: missing native library. Kept off an application's terminal (:func:`_relay_stderr`).
STARTUP_NOISE = re.compile(
    r"WARNING: Using incubator modules: [\w.,]+"
    r"|Using Spark's default log4j profile: \S+"
    r"|Setting default log level to \"\w+\"\."
    r"|To adjust logging level use sc\.setLogLevel\(newLevel\)\. For SparkR, use "
    r"setLogLevel\(newLevel\)\."
    r"|\S+ \S+ WARN NativeCodeLoader: Unable to load native-hadoop library .*")


#: Notes Spark's JVM prints at start about the machine (its name resolving to a loopback
#: address): shown only when this module logs at INFO (an application's ``--verbose``).
ENVIRONMENT_NOTES = re.compile(
    r"\S+ \S+ WARN Utils: Your hostname, .* resolves to a loopback address: .*"
    r"|\S+ \S+ WARN Utils: Set SPARK_LOCAL_IP if you need to bind to another address")


def _relay_stderr(stream: IO[bytes], out: Any = None) -> None:
    """Copy the JVM's error output to ``out`` line by line, less :data:`STARTUP_NOISE`.

    :data:`ENVIRONMENT_NOTES` are left out too unless this module logs at INFO.

    ``out`` None: ``sys.stderr`` as it is at each line. Drains until the JVM (and every
    process that inherited the pipe) closes it, whatever happens to ``out``: a JVM writing
    into a full pipe would stop.
    """
    try:
        for line in iter(stream.readline, b""):
            text = line.decode("utf-8", "replace").rstrip("\r\n")
            if STARTUP_NOISE.fullmatch(text) or (ENVIRONMENT_NOTES.fullmatch(text) and not
                                                 logger.isEnabledFor(logging.INFO)):
                continue
            target = sys.stderr if out is None else out
            try:
                buffer = getattr(target, "buffer", None)
                if buffer is not None:
                    buffer.write(line)
                else:  # a replaced sys.stderr (text only)
                    target.write(line.decode("utf-8", "replace"))
                target.flush()
            except Exception:  # our stderr is gone or broken: keep draining
                pass
    finally:
        stream.close()


def _launch_relayed(spark_conf: Any) -> Any:
    """Spark's JVM in a session of its own, its error output relayed (see the caller).

    The relay reads a pipe of its own from before the launch: a JVM that writes much before
    it answers never blocks, and one that dies at start has its last words shown before
    PySpark's error.
    """
    from pyspark.java_gateway import launch_gateway

    read, write = os.pipe()
    relay = threading.Thread(target=_relay_stderr, args=(os.fdopen(read, "rb"),),
                             name="spark-jvm-stderr", daemon=True)
    relay.start()
    try:
        launch: Any = launch_gateway  # untyped in PySpark
        return launch(spark_conf, popen_kwargs={"start_new_session": True, "stderr": write})
    except BaseException:
        os.close(write)
        write = -1
        relay.join(timeout=5)  # the dead JVM's output first
        raise
    finally:
        if write >= 0:
            os.close(write)  # the JVM holds its own copy


def driver_java_options(archive: bool = False) -> str:
    """A local driver JVM's options: :data:`QUICK_JVM_OPTIONS`, and the class archive's.

    Args:
        archive: Map the archive of Spark's classes (:mod:`~.jvm_archive`) when it is built,
            unless ``KAFKA_DIRECT_JVM_ARCHIVE=off``; False: only where it is ``on``.

    Raises:
        ConfigurationError: ``KAFKA_DIRECT_JVM_ARCHIVE`` is neither ``on``, ``off`` nor empty.
    """
    from kafka_direct.runtime.jvm_archive import jvm_options

    return f"{QUICK_JVM_OPTIONS} {jvm_options(default=archive)}".strip()


def _file_defaults(master: str, spark_conf: Any) -> dict[str, str]:
    """The settings of the ``spark-defaults.conf`` a JVM started now would read.

    ``SPARK_CONF_DIR``, else the ``conf`` folder of the Spark home it starts in; a
    Java properties file (key and value apart by whitespace, ``=`` or ``:``).
    """
    folder = os.environ.get("SPARK_CONF_DIR")
    if not folder:
        home = spark_home(master, dict(spark_conf.getAll()))
        if home is None:
            return {}
        folder = str(home / "conf")
    found: dict[str, str] = {}
    try:
        with open(os.path.join(folder, "spark-defaults.conf"), encoding="utf-8") as lines:
            for line in lines:
                line = line.strip()
                if not line or line[0] in "#!":
                    continue
                parts = re.split(r"(\s*[=:]\s*|\s+)", line, maxsplit=1)
                found[parts[0]] = parts[2].strip() if len(parts) == 3 else ""
    except (OSError, ValueError):
        return {}
    return found


def warm_daemon_for(master: str, spark_conf: Any) -> str | None:
    """The warm daemon's module for a context of ``master`` and ``spark_conf``, or None.

    None where the settings name a daemon already (the caller's, a default, spark-submit's,
    ``spark-defaults.conf``'s), ship Python files that a preloaded module could shadow, or
    let Spark start another interpreter; else
    :func:`~kafka_direct.runtime.warm_daemon.daemon_module`.
    """
    files = _file_defaults(master, spark_conf)
    for key in ("spark.python.daemon.module", "spark.submit.pyFiles"):
        if spark_conf.get(key, "") or files.get(key, ""):
            return None
    if not only_this_interpreter(master, dict(spark_conf.getAll())):
        return None
    return daemon_module()


def _make_context(master: str, app_name: str, conf: Mapping[str, str] | None,
                  test_conf: bool = True, loopback: bool | None = None,
                  defaults: Mapping[str, str] | None = None, own_session: bool = False,
                  archive: bool = False) -> Any:
    ensure_pyspark_python()
    loopback = test_conf if loopback is None else loopback
    if loopback:
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark import SparkConf, SparkContext

    if "PYSPARK_GATEWAY_PORT" in os.environ:
        # Under spark-submit its JVM runs already: connected first, SparkConf() holds
        # spark-submit's settings, so that ``defaults`` and the warm daemon give way to them.
        SparkContext._ensure_initialized()
    spark_conf = SparkConf().setMaster(master).setAppName(app_name)
    # Under spark-submit the driver JVM runs already: its options are spark-submit's, and
    # the settings must say so (Spark's UI and event log show them).
    submitted = "PYSPARK_GATEWAY_PORT" in os.environ
    chosen = {key: value for key, value in (SPARK_TEST_CONF if test_conf else {}).items()
              if key not in LOOPBACK_CONF
              and not (submitted and key == "spark.driver.extraJavaOptions")}
    for key, value in {**chosen, **(LOOPBACK_CONF if loopback else {}), **(conf or {})}.items():
        spark_conf.set(key, value)
    for key, value in (defaults or {}).items():
        spark_conf.setIfMissing(key, value)
    if test_conf and not submitted and "spark.driver.extraJavaOptions" not in (conf or {}):
        spark_conf.set("spark.driver.extraJavaOptions", driver_java_options(archive))
    module = warm_daemon_for(master, spark_conf) if test_conf else None
    if module is not None:
        # Workers forked with their imports done (kafka_direct/runtime/warm_daemon.py).
        spark_conf.set("spark.python.daemon.module", module)
    # A new JVM starts in the Spark home whose Python processes import PySpark compiled.
    with using_spark_home(master, dict(spark_conf.getAll())):
        sc = _start(spark_conf, own_session)
    sc.setLogLevel("ERROR")
    return sc


def _start(spark_conf: Any, own_session: bool) -> Any:
    from pyspark import SparkContext

    if own_session and SparkContext._active_spark_context is None \
            and "PYSPARK_GATEWAY_PORT" not in os.environ:
        # A session of its own: a terminal's Ctrl-C (sent to the foreground process group)
        # reaches the driver, which stops gracefully, and not Spark's JVM and Python
        # workers, which would die mid-batch. The JVM still exits with the driver (it
        # watches the driver's pipe). Its error output (Spark's workers' too) is relayed
        # without the start-up notes no user caused.
        return SparkContext(conf=spark_conf, gateway=_launch_relayed(spark_conf))
    return SparkContext.getOrCreate(spark_conf)


@contextlib.contextmanager
def spark_context(master: str = "local[2,2]", app_name: str = "kafka-direct-test",
                  conf: Mapping[str, str] | None = None, test_conf: bool = True,
                  loopback: bool | None = None, defaults: Mapping[str, str] | None = None,
                  own_session: bool = False, archive: bool = False) -> Iterator[Any]:
    """A SparkContext for the block; stopped afterwards.

    Args:
        master: Spark master; the default runs 2 task slots with 2 attempts per task.
        app_name: Application name.
        conf: Extra Spark settings, over :data:`SPARK_TEST_CONF`.
        test_conf: Apply :data:`SPARK_TEST_CONF` (quick JVMs, quiet logs). False for a real
            cluster: Spark's defaults and spark-submit's settings stay in force.
        loopback: Bind the driver to 127.0.0.1 (:data:`LOOPBACK_CONF`); None: as
            ``test_conf``. Only right when every executor runs on this machine.
        defaults: Settings applied only where neither ``conf`` nor spark-submit set them.
        own_session: Start Spark's JVM in a session of its own, out of reach of signals
            sent to the caller's process group (for applications that stop gracefully on
            Ctrl-C), its error output relayed without :data:`STARTUP_NOISE`; ignored under
            spark-submit or when a context exists.
        archive: With ``test_conf``: start the driver JVM from the archive of Spark's
            classes when it is built (:mod:`~.jvm_archive`), unless
            ``KAFKA_DIRECT_JVM_ARCHIVE=off`` (the ingest job's; the tests' only where it is
            ``on``).

    Raises:
        ConfigurationError: ``KAFKA_DIRECT_JVM_ARCHIVE`` is neither ``on``, ``off`` nor empty.
    """
    sc = _make_context(master, app_name, conf, test_conf, loopback, defaults, own_session,
                       archive)
    try:
        yield sc
    finally:
        sc.stop()
