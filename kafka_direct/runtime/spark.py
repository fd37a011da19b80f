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
from collections.abc import Callable, Iterator, Mapping
from typing import IO, Any

from kafka_direct.rdd.spark_support import ensure_pyspark_python
from kafka_direct.runtime import driver_launch, early_launch
from kafka_direct.runtime.driver_launch import DriverCommand, direct_command
from kafka_direct.runtime.numpy_converters import defer_numpy_converters
from kafka_direct.runtime.spark_home import (
    compiled_spark_home,
    only_this_interpreter,
    spark_home,
    using_spark_home,
)
from kafka_direct.runtime.spark_stop import end_jvm, stop_context, stop_gateway
from kafka_direct.runtime.warm_daemon import check_ahead, daemon_module

__all__ = ["ENVIRONMENT_NOTES", "LOOPBACK_CONF", "QUICK_JVM_OPTIONS", "SPARK_TEST_CONF",
           "STARTUP_NOISE", "driver_java_options", "end_jvm", "launch_ahead", "spark_context",
           "warm_daemon_for"]

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


def _launch_relayed(launch: Callable[[dict[str, Any]], Any]) -> Any:
    """Spark's JVM in a session of its own, its error output relayed (see the caller).

    ``launch`` takes the ``Popen`` arguments of the JVM's process. The relay reads a pipe
    of its own from before the launch: a JVM that writes much before it answers never
    blocks, and one that dies at start has its last words shown before PySpark's error.
    """
    read, write = os.pipe()
    relay = threading.Thread(target=_relay_stderr, args=(os.fdopen(read, "rb"),),
                             name="spark-jvm-stderr", daemon=True)
    relay.start()
    try:
        return launch({"start_new_session": True, "stderr": write})
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


def _context_conf(master: str, app_name: str, conf: Mapping[str, str] | None,
                  test_conf: bool, loopback: bool, defaults: Mapping[str, str] | None,
                  archive: bool, imported: threading.Event | None = None) -> Any:
    """The settings of a context (see :func:`spark_context`); the environment set already.

    ``imported`` is set once PySpark is imported (an early launch's caller waits for it).
    """
    if test_conf:  # the warm daemon's check runs while PySpark is imported
        check_ahead()
    from pyspark import SparkConf, SparkContext

    if imported is not None:
        imported.set()

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
    # Under spark-submit, what its command line or spark-defaults.conf set wins over the
    # quick settings and the caller's (a job's parallelism, the loopback driver).
    given = {key for key, _ in spark_conf.getAll()} if submitted else set()
    for key, value in {**chosen, **(LOOPBACK_CONF if loopback else {}), **(conf or {})}.items():
        if key not in given:
            spark_conf.set(key, value)
    for key, value in (defaults or {}).items():
        spark_conf.setIfMissing(key, value)
    if test_conf and not submitted and "spark.driver.extraJavaOptions" not in (conf or {}):
        spark_conf.set("spark.driver.extraJavaOptions", driver_java_options(archive))
    module = warm_daemon_for(master, spark_conf) if test_conf else None
    if module is not None:
        # Workers forked with their imports done (kafka_direct/runtime/warm_daemon.py).
        spark_conf.set("spark.python.daemon.module", module)
    return spark_conf


def _prepare_environment(test_conf: bool, loopback: bool | None) -> bool:
    """Set what a context's JVM and Python processes read from the environment; ``loopback``."""
    ensure_pyspark_python()
    loopback = test_conf if loopback is None else loopback
    if loopback:
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    return loopback


@contextlib.contextmanager
def _environment(values: Mapping[str, str]) -> Iterator[None]:
    """``values`` in this process's environment for the block; as they were afterwards."""
    saved = {key: os.environ.get(key) for key in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _fork_server_for(spark_conf: Any) -> Any:
    """A started :class:`~.fork_server.ForkServer` where it applies (see there), else None."""
    from kafka_direct.runtime import fork_server

    if not fork_server.wanted() or not only_this_interpreter(
            spark_conf.get("spark.master"), dict(spark_conf.getAll())):
        return None
    # Spark's workers get PySpark's hash seed (SparkContext.environment): a fork has the
    # server's, so the server runs with it.
    environ = {**os.environ, "PYTHONHASHSEED": os.environ.get("PYTHONHASHSEED", "0")}
    try:
        return fork_server.ForkServer(sys.executable, environ)
    except OSError:
        logger.info("no fork server: Spark starts its Python processes", exc_info=True)
        return None


def _driver_command(spark_conf: Any) -> DriverCommand | None:
    """The driver JVM's command built here, or None: PySpark's own launch (see there).

    The one place that decides; its reason is logged at DEBUG.
    """
    pairs = spark_conf.getAll()
    conf = dict(pairs)
    home = None if os.environ.get("SPARK_HOME") else compiled_spark_home(
        spark_conf.get("spark.master"), conf)
    built = direct_command(pairs, home, os.environ)
    if isinstance(built, str):
        logger.debug("the driver JVM starts through spark-submit: %s", built)
        return None
    logger.debug("the driver JVM starts with its command built here (no launcher JVM)")
    return built


def _launch(spark_conf: Any, own_session: bool, fork_server: bool = False
            ) -> tuple[Any, Any]:
    """A new driver JVM's gateway for ``spark_conf`` and its fork server (or None).

    The JVM starts in the Spark home :func:`spark_home` gives; with ``fork_server`` (where
    it applies) its Python processes fork from a :class:`~.fork_server.ForkServer`. Where
    :func:`_driver_command` builds its command, the JVM starts from it directly
    (:mod:`~.driver_launch`), else through PySpark's ``spark-submit``.
    """
    from pyspark.java_gateway import launch_gateway

    server = _fork_server_for(spark_conf) if fork_server else None
    try:
        command = _driver_command(spark_conf)

        def launch(popen_kwargs: dict[str, Any] | None) -> Any:
            if command is not None:
                return driver_launch.launch_gateway(command, popen_kwargs)
            pyspark_launch: Any = launch_gateway  # untyped in PySpark
            return pyspark_launch(spark_conf, popen_kwargs=popen_kwargs)

        # A new JVM starts in the Spark home whose Python processes import PySpark compiled
        # (a command built here names it already).
        home = contextlib.nullcontext() if command is not None else using_spark_home(
            spark_conf.get("spark.master"), dict(spark_conf.getAll()))
        with home, _environment(server.environment() if server is not None else {}):
            if own_session:
                # A session of its own: a terminal's Ctrl-C (sent to the foreground process
                # group) reaches the driver, which stops gracefully, and not Spark's JVM and
                # Python workers, which would die mid-batch. The JVM still exits with the
                # driver (it watches the driver's pipe). Its error output (Spark's workers'
                # too) is relayed without the start-up notes no user caused.
                return _launch_relayed(launch), server
            return launch(None), server
    except BaseException:
        if server is not None:
            server.stop()
        raise


def _launches_jvm(own_session: bool) -> bool:
    """Whether a context made now launches a JVM (:func:`_make_context`'s choice).

    None under spark-submit (its JVM runs) or while a context runs; an earlier context's
    JVM serves a later one, except where the later one wants a session of its own.
    """
    if "PYSPARK_GATEWAY_PORT" in os.environ:
        return False
    context = sys.modules.get("pyspark.core.context")
    if context is None:  # PySpark not imported yet: no context was ever made here
        return True
    made: Any = context.SparkContext
    if made._active_spark_context is not None:
        return False
    return own_session or made._gateway is None


#: The fork servers of the running contexts (by the context's id).
_servers: dict[int, Any] = {}


def _context_key(master: str, app_name: str, conf: Mapping[str, str] | None, test_conf: bool,
                 loopback: bool | None, defaults: Mapping[str, str] | None, own_session: bool,
                 archive: bool, fork_server: bool) -> tuple[Any, ...]:
    return (master, app_name, tuple(sorted((conf or {}).items())), test_conf, loopback,
            tuple(sorted((defaults or {}).items())), own_session, archive, fork_server)


@contextlib.contextmanager
def launch_ahead(master: str = "local[2,2]", app_name: str = "kafka-direct-test",
                 conf: Mapping[str, str] | None = None, test_conf: bool = True,
                 loopback: bool | None = None, defaults: Mapping[str, str] | None = None,
                 own_session: bool = False, archive: bool = False,
                 fork_server: bool = False) -> Iterator[None]:
    """Launch the driver JVM of a :func:`spark_context` now, in a thread, for the block.

    A JVM takes seconds to start; the caller meanwhile checks its services, starts embedded
    ones or prepares its tables. The :func:`spark_context` entered in the block with the same
    arguments uses this JVM (what the launch raised, it raises); a JVM no context took is
    stopped once launched (the block's end does not wait for it). The block begins once the
    launch's thread has imported PySpark (see :mod:`~.early_launch`). Nothing is launched
    where a context runs already or under spark-submit (its JVM runs), nor while another
    launch is pending.

    Args: as :func:`spark_context`'s.
    """

    def launch_now() -> early_launch.EarlyLaunch | None:
        if not _launches_jvm(own_session):
            return None
        key = _context_key(master, app_name, conf, test_conf, loopback, defaults,
                           own_session, archive, fork_server)
        chosen = _prepare_environment(test_conf, loopback)

        def start(imported: threading.Event) -> tuple[Any, Any, Any]:
            spark_conf = _context_conf(master, app_name, conf, test_conf, chosen, defaults,
                                       archive, imported)
            return (spark_conf, *_launch(spark_conf, own_session, fork_server and test_conf))

        return early_launch.EarlyLaunch(key, start, stop_gateway, own_session)

    with early_launch.ahead(launch_now):
        yield


def _make_context(master: str, app_name: str, conf: Mapping[str, str] | None,
                  test_conf: bool = True, loopback: bool | None = None,
                  defaults: Mapping[str, str] | None = None, own_session: bool = False,
                  archive: bool = False, fork_server: bool = False) -> Any:
    from pyspark import SparkContext

    # Before the context's first call into the JVM: else it imports pandas (see there).
    defer_numpy_converters()
    early = early_launch.take(_context_key(master, app_name, conf, test_conf, loopback,
                                           defaults, own_session, archive, fork_server),
                              _launches_jvm)
    if early is not None:
        spark_conf, gateway, server = early.take()
    else:
        chosen = _prepare_environment(test_conf, loopback)
        spark_conf = _context_conf(master, app_name, conf, test_conf, chosen, defaults,
                                   archive)
        gateway = server = None
        if _launches_jvm(own_session):
            gateway, server = _launch(spark_conf, own_session, fork_server and test_conf)
    if gateway is not None:
        try:
            # The context's own Python processes (sc.pythonExec) start as its JVM's do.
            with _environment({"PYSPARK_PYTHON": server.launcher} if server is not None
                              else {}):
                sc = SparkContext(conf=spark_conf, gateway=gateway)
        except BaseException:
            stop_gateway(gateway, server)
            raise
        if server is not None:
            _servers[id(sc)] = server
    else:
        # A context runs already, or spark-submit's JVM does: PySpark connects to it.
        sc = SparkContext.getOrCreate(spark_conf)
    sc.setLogLevel("ERROR")
    return sc


def _stop_context(sc: Any) -> None:
    """Stop ``sc``, then its fork server (if any): :func:`~.spark_stop.stop_context`."""
    stop_context(sc, _servers.pop(id(sc), None))


@contextlib.contextmanager
def spark_context(master: str = "local[2,2]", app_name: str = "kafka-direct-test",
                  conf: Mapping[str, str] | None = None, test_conf: bool = True,
                  loopback: bool | None = None, defaults: Mapping[str, str] | None = None,
                  own_session: bool = False, archive: bool = False,
                  fork_server: bool = False) -> Iterator[Any]:
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
        fork_server: With ``test_conf``: Spark's Python processes fork from a server that
            has their imports done (:mod:`~.fork_server`), where it applies (the ingest
            job's).

    Raises:
        ConfigurationError: ``KAFKA_DIRECT_JVM_ARCHIVE`` is neither ``on``, ``off`` nor empty.
    """
    sc = _make_context(master, app_name, conf, test_conf, loopback, defaults, own_session,
                       archive, fork_server)
    try:
        yield sc
    finally:
        _stop_context(sc)
