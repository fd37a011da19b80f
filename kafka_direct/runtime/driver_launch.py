"""The local driver JVM started with the command Spark's launcher would build, without it.

PySpark starts its driver JVM through ``bin/spark-submit``: a shell script that runs
``spark-class``, which runs a first JVM (Spark's launcher, ``org.apache.spark.launcher.Main``)
only to print the driver's command line, which the script then runs. Measured on a quiet
machine, that launcher JVM took 0.18-0.26 s of wall time and 0.16 s of CPU at every start,
the scripts 0.05-0.1 s more.

For the case kafka-direct fully controls, :func:`direct_command` builds that command
itself and :func:`launch_gateway` runs it and connects as PySpark does: a ``local`` master,
the compiled Spark home (:mod:`~kafka_direct.runtime.spark_home`) with no ``conf`` folder
(no ``spark-defaults.conf``, ``spark-env.sh`` or ``java-opts``), a Spark whose launcher's
rules are known here (4.2 and 4.3), and none of the environment variables or settings the
launcher or its scripts read that this module does not (:data:`READ_ENVIRONMENT`,
:data:`READ_SETTINGS`). Anything else, and ``KAFKA_DIRECT_JVM_COMMAND=off``, leaves the
launch to PySpark, exactly as before; the reason is logged at DEBUG.

The command is, as the launcher builds it for ``pyspark-shell`` in client mode: the Java of
``JAVA_HOME`` (else the runtime of ``java`` on the ``PATH``), the class path (the conf
folder, SLF4J's API jar, the jars folder), ``-Xmx`` of ``spark.driver.memory`` (``1g``),
``spark.driver.extraJavaOptions``, Spark's Java module options, the Derby option, then
``org.apache.spark.deploy.SparkSubmit`` with each setting as ``--conf`` and
``pyspark-shell``. The environment is the caller's with what the scripts export
(``PYTHONHASHSEED=0``, ``SPARK_ENV_LOADED``, ``SPARK_CONF_DIR``, ``SPARK_SCALA_VERSION``).
``tests/runtime/test_driver_launch.py`` compares both with what Spark's own scripts and
launcher run for the same settings.

The JVM then runs not ``SparkSubmit`` but the class it would run, PySpark's gateway
(``org.apache.spark.api.python.PythonGatewayServer``), with what ``SparkSubmit`` would have
set (:func:`gateway_argv`): each setting as a system property, and those it adds for a
``pyspark-shell`` in client mode (``spark.app.name``, ``spark.submit.deployMode``,
``spark.submit.pyFiles``, ``spark.app.submitTime``, ``spark.ui.showConsoleProgress``,
``SPARK_SUBMIT``), where not given. For a local master and the settings handled
here ``SparkSubmit`` does nothing else but load its own classes (its arguments' parser,
Ivy for packages, Hadoop's configuration): 0.2-0.4 s of the JVM's CPU to its gateway, in
paired launches (docs/benchmarks.md). The one thing it leaves different: the thread that
starts the gateway has the application class loader as its context class loader, not
``SparkSubmit``'s empty child of it (no jars are added at start here: ``spark.jars`` keeps
Spark's launch).
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import signal
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from subprocess import PIPE, Popen
from typing import Any

__all__ = ["GATEWAY_CLASS", "READ_ENVIRONMENT", "READ_SETTINGS", "SWITCH", "DriverCommand",
           "direct_command", "gateway_argv", "launch_gateway"]

logger = logging.getLogger(__name__)

#: The environment variable that turns the direct launch off (``off``, ``0``, ``false``, ``no``).
SWITCH = "KAFKA_DIRECT_JVM_COMMAND"

_OFF = ("off", "0", "false", "no")

#: Environment variables that Spark's scripts or launcher read to build the driver's command
#: (or that change what they do) and that :func:`direct_command` does not follow: any of
#: them set leaves the launch to PySpark.
READ_ENVIRONMENT = (
    "SPARK_SUBMIT_OPTS", "SPARK_DIST_CLASSPATH", "SPARK_CLASSPATH", "HADOOP_CONF_DIR",
    "YARN_CONF_DIR", "SPARK_CONF_DIR", "SPARK_ENV_LOADED", "SPARK_PREPEND_CLASSES",
    "SPARK_TESTING", "SPARK_SQL_TESTING", "SPARK_DRIVER_MEMORY", "SPARK_MEM",
    "SPARK_PRINT_LAUNCH_COMMAND", "SPARK_REMOTE", "SPARK_API_MODE",
    "SPARK_CONNECT_MODE_ENABLED", "SPARK_CONNECT_BEELINE", "SPARK_SCALA_SHELL",
    "SPARK_DAEMON_JAVA_OPTS", "SPARK_DAEMON_MEMORY", "PYSPARK_SUBMIT_ARGS", "MASTER")

#: Settings the launcher reads (or that load classes at start), or that ``SparkSubmit``
#: changes before the gateway starts (paths it resolves or fetches, a Kerberos login), and
#: :func:`direct_command` does not follow; compared without regard to case (the launcher
#: does so for some).
READ_SETTINGS = (
    "spark.driver.extraClassPath", "spark.driver.defaultExtraClassPath",
    "spark.driver.defaultJavaOptions", "spark.driver.extraLibraryPath",
    "spark.submit.deployMode", "spark.api.mode", "spark.remote", "spark.r.shell.command",
    "spark.jars", "spark.jars.packages", "spark.jars.repositories", "spark.jars.ivy",
    "spark.jars.ivySettings", "spark.jars.excludes", "spark.submit.pyFiles", "spark.files",
    "spark.archives", "spark.kerberos.keytab", "spark.kerberos.principal",
    "spark.yarn.keytab", "spark.yarn.principal")

#: The class ``SparkSubmit`` runs for ``pyspark-shell``: PySpark's gateway.
GATEWAY_CLASS = "org.apache.spark.api.python.PythonGatewayServer"

_SUBMIT_CLASS = "org.apache.spark.deploy.SparkSubmit"

#: The Java module options of Spark's launcher (``JavaModuleOptions``) and the option it adds
#: after them, by Spark's version (major.minor): those whose launcher was compared here.
_SPARK_OPTIONS: dict[str, tuple[str, ...]] = {
    version: (
        "-XX:+IgnoreUnrecognizedVMOptions",
        "--add-modules=jdk.incubator.vector",
        "--add-opens=java.base/java.lang=ALL-UNNAMED",
        "--add-opens=java.base/java.lang.invoke=ALL-UNNAMED",
        "--add-opens=java.base/java.lang.reflect=ALL-UNNAMED",
        "--add-opens=java.base/java.io=ALL-UNNAMED",
        "--add-opens=java.base/java.net=ALL-UNNAMED",
        "--add-opens=java.base/java.nio=ALL-UNNAMED",
        "--add-opens=java.base/java.util=ALL-UNNAMED",
        "--add-opens=java.base/java.util.concurrent=ALL-UNNAMED",
        "--add-opens=java.base/java.util.concurrent.atomic=ALL-UNNAMED",
        "--add-opens=java.base/jdk.internal.ref=ALL-UNNAMED",
        "--add-opens=java.base/sun.nio.ch=ALL-UNNAMED",
        "--add-opens=java.base/sun.nio.cs=ALL-UNNAMED",
        "--add-opens=java.base/sun.security.action=ALL-UNNAMED",
        "--add-opens=java.base/sun.util.calendar=ALL-UNNAMED",
        "--add-opens=java.security.jgss/sun.security.krb5=ALL-UNNAMED",
        "-Dio.netty.tryReflectionSetAccessible=true",
        "-Dio.netty.allocator.type=pooled",
        "-Dio.netty.handler.ssl.defaultEndpointVerificationAlgorithm=NONE",
        "--sun-misc-unsafe-memory-access=allow",
        "--enable-native-access=ALL-UNNAMED",
        "-Dderby.connection.requireAuthentication=false",
    ) for version in ("4.2", "4.3")}

#: The Scala version Spark's ``load-spark-env.sh`` exports (Spark 4 is built for 2.13 only).
_SCALA_VERSION = "2.13"

_LAUNCHER_JAR = re.compile(r"spark-launcher_2\.13-(\d+\.\d+)\.\d+\.jar")

#: ``spark.driver.memory`` as a JVM's ``-Xmx`` takes it; anything else goes to the launcher.
_MEMORY = re.compile(r"[0-9]+[kKmMgGtT]?")

#: The classes PySpark's ``launch_gateway`` imports into the gateway's JVM view.
_JAVA_IMPORTS = (
    "org.apache.spark.SparkConf", "org.apache.spark.api.java.*",
    "org.apache.spark.api.python.*", "org.apache.spark.ml.python.*",
    "org.apache.spark.mllib.api.python.*", "org.apache.spark.resource.*",
    "org.apache.spark.sql.Encoders", "org.apache.spark.sql.OnSuccessCall",
    "org.apache.spark.sql.functions", "org.apache.spark.sql.classic.*",
    "org.apache.spark.sql.api.python.*", "org.apache.spark.sql.hive.*", "scala.Tuple2")

#: How often the launch looks for the gateway's connection file (PySpark: every 0.1 s).
_POLL_SECONDS = 0.01


@dataclass(frozen=True, slots=True)
class DriverCommand:
    """A driver JVM's command line and what its environment gets beside the caller's.

    Attributes:
        argv: The command line: the ``java`` binary first.
        environment: Variables Spark's scripts would export, over the caller's environment.
    """

    argv: tuple[str, ...]
    environment: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.argv or not all(isinstance(arg, str) for arg in self.argv):
            raise ValueError("a driver command needs its program and arguments as text")


def _java(environ: Mapping[str, str]) -> str | None:
    """The ``java`` Spark's launcher names: ``$JAVA_HOME/bin/java``, else its own runtime's."""
    home = environ.get("JAVA_HOME")
    if home:
        # Joined as the launcher joins it (no normalising), checked as spark-class would run it.
        java = f"{home}/bin/java"
        return java if os.access(java, os.X_OK) else None
    found = shutil.which("java", path=environ.get("PATH"))
    if found is None:
        return None
    # The launcher (run as ``java`` from the PATH) names its own runtime: java.home, the
    # folder above the resolved binary's ``bin``. Only where the PATH's ``java`` resolves
    # to a runtime's own binary: a version manager's shim (a script, or a link to another
    # program) runs some runtime that only Spark's scripts, running the shim, find.
    binary = Path(found).resolve()
    runtime = binary.parent.parent
    if binary.name != "java" or binary.parent.name != "bin" \
            or not (runtime / "lib" / "modules").is_file() \
            or not os.access(binary, os.X_OK):
        return None
    return str(runtime / "bin" / "java")


def _spark_version(jars: Path) -> str | None:
    versions = {match.group(1) for name in os.listdir(jars)
                if (match := _LAUNCHER_JAR.fullmatch(name))}
    return versions.pop() if len(versions) == 1 else None


def _java_options(options: str) -> list[str] | None:
    """``options`` split as the launcher splits them, or None where that is not sure here.

    The launcher's parser handles quotes and backslashes; options with neither (nor
    anything but ASCII) split at whitespace the same way.
    """
    if not options.isascii() or any(c in options for c in "'\"\\"):
        return None
    return options.split()


def direct_command(pairs: Sequence[tuple[str, str]], home: Path | None,
                   environ: Mapping[str, str]) -> DriverCommand | str:
    """The driver JVM's command for ``pairs`` in ``home``, or why PySpark's launch is kept.

    Args:
        pairs: The context's settings (``SparkConf.getAll()``).
        home: The compiled Spark home the JVM starts in (None: it does not apply).
        environ: The environment the launch would run with, before ``SPARK_HOME`` is set
            to ``home``.

    Returns:
        The command, or the reason (a sentence) why Spark's own launch is used instead.
    """
    if os.name != "posix":
        return "not a POSIX system"
    if environ.get(SWITCH, "").strip().lower() in _OFF:
        return f"{SWITCH} turns it off"
    if environ.get("SPARK_HOME"):
        return "SPARK_HOME is set"
    if home is None:
        return "the compiled Spark home does not apply"
    for name in READ_ENVIRONMENT:
        if environ.get(name):
            return f"{name} is set"
    conf = dict(pairs)
    if len(conf) != len(pairs):
        return "a setting is given twice"
    master = conf.get("spark.master", "")
    if not (master == "local" or master.startswith("local[")):
        return f"the master is not local: {master!r}"
    read = {key.lower() for key in READ_SETTINGS}
    for key in conf:
        if key.lower() in read:
            return f"{key} is set"
    if any("\r" in text or "\0" in text for pair in pairs for text in pair):
        return "a setting holds a carriage return"  # which spark-class drops
    memory = conf.get("spark.driver.memory", "1g")
    if not _MEMORY.fullmatch(memory):
        return f"spark.driver.memory is not a plain size: {memory!r}"
    options = conf.get("spark.driver.extraJavaOptions", "")
    extra = _java_options(options)
    if extra is None:
        return "spark.driver.extraJavaOptions holds quotes, backslashes or non-ASCII"
    if "Xmx" in options:
        return "spark.driver.extraJavaOptions sets -Xmx"  # the launcher's error
    if (home / "conf").exists() or os.path.lexists(home / "conf"):
        return "the Spark home has a conf folder"
    jars = home / "jars"
    try:
        version = _spark_version(jars)
        slf4j = sorted(name for name in os.listdir(jars) if name.startswith("slf4j-api-"))
    except OSError:
        return "the Spark home's jars cannot be listed"
    spark_options = _SPARK_OPTIONS.get(version or "")
    if spark_options is None:
        return f"Spark's launcher rules of version {version} are not known here"
    if len(slf4j) != 1:
        return "the jars folder has no single slf4j-api jar"
    java = _java(environ)
    if java is None:
        return "no java to run"
    classpath = ":".join([f"{home}/conf", f"{jars}/{slf4j[0]}", f"{jars}/*"])
    argv = [java, "-cp", classpath, f"-Xmx{memory}", *extra, *spark_options, _SUBMIT_CLASS]
    for key, value in pairs:
        argv += ["--conf", f"{key}={value}"]
    argv.append("pyspark-shell")
    environment = {"SPARK_HOME": str(home), "PYTHONHASHSEED": "0", "SPARK_ENV_LOADED": "1",
                   "SPARK_CONF_DIR": f"{home}/conf", "SPARK_SCALA_VERSION": _SCALA_VERSION}
    return DriverCommand(tuple(argv), environment)


def gateway_argv(argv: Sequence[str], submitTimeMs: int) -> tuple[str, ...]:
    """:func:`direct_command`'s command, running PySpark's gateway without ``SparkSubmit``.

    The JVM's options stay as they are; each ``--conf`` setting becomes the system property
    ``SparkSubmit`` would set, with those it adds for a local ``pyspark-shell`` in client
    mode; then :data:`GATEWAY_CLASS`.

    Args:
        argv: A command :func:`direct_command` built.
        submitTimeMs: ``spark.app.submitTime`` (milliseconds since the epoch), unless set.

    Raises:
        ValueError: ``argv`` is not such a command.
    """
    if _SUBMIT_CLASS not in argv or argv[-1] != "pyspark-shell":
        raise ValueError("not a command for SparkSubmit's pyspark-shell")
    start = argv.index(_SUBMIT_CLASS)
    given = argv[start + 1:-1]
    if len(given) % 2 or any(flag != "--conf" for flag in given[::2]):
        raise ValueError("SparkSubmit's arguments are not --conf settings only")
    settings = dict(setting.split("=", 1) for setting in given[1::2])
    settings.setdefault("spark.app.name", "pyspark-shell")  # the primary resource's name
    settings.setdefault("spark.submit.deployMode", "client")
    settings.setdefault("spark.submit.pyFiles", "")
    settings.setdefault("spark.app.submitTime", str(submitTimeMs))
    settings.setdefault("spark.ui.showConsoleProgress", "true")  # as for any shell
    return (*argv[:start], *(f"-D{key}={value}" for key, value in settings.items()),
            "-DSPARK_SUBMIT=true", GATEWAY_CLASS)


def _ignore_interrupts() -> None:
    # As PySpark's launch: a terminal's Ctrl-C does not reach the JVM.
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def launch_gateway(command: DriverCommand, popen_kwargs: Mapping[str, Any] | None = None
                   ) -> Any:
    """Run ``command``'s JVM and connect to its gateway, as PySpark's ``launch_gateway``.

    The JVM gets a pipe for its input (it exits when the pipe closes: with this process),
    ignores SIGINT, and writes its gateway's port and secret into a file of a private
    temporary folder named by ``_PYSPARK_DRIVER_CONN_INFO_PATH``; the secret goes from
    that file to the gateway's client only.

    Args:
        command: What :func:`direct_command` built.
        popen_kwargs: More arguments of ``subprocess.Popen`` (``stderr``,
            ``start_new_session``).

    Returns:
        PySpark's gateway (py4j's ``ClientServer`` or ``JavaGateway``), its JVM's process
        as ``proc``.

    Raises:
        PySparkRuntimeError: The JVM exited before it wrote its connection file
            (``JAVA_GATEWAY_EXITED``), as from PySpark's launch.
    """
    from pyspark import serializers as untyped
    from pyspark.errors import PySparkRuntimeError

    pyspark_serializers: Any = untyped  # untyped in PySpark

    folder = tempfile.mkdtemp()
    process: Popen[bytes] | None = None
    try:
        descriptor, info_file = tempfile.mkstemp(dir=folder)
        os.close(descriptor)
        os.unlink(info_file)
        env = {**os.environ, **command.environment, "SPARK_CONNECT_MODE": "0",
               "_PYSPARK_DRIVER_CONN_INFO_PATH": info_file}
        started = time.monotonic()
        argv = gateway_argv(command.argv, int(time.time() * 1000))
        process = Popen(list(argv), **{**(popen_kwargs or {}), "stdin": PIPE, "env": env,
                                       "preexec_fn": _ignore_interrupts})
        # The JVM writes the file whole under another name and renames it.
        while process.poll() is None and not os.path.isfile(info_file):
            time.sleep(_POLL_SECONDS)
        if not os.path.isfile(info_file):
            raise PySparkRuntimeError(errorClass="JAVA_GATEWAY_EXITED", messageParameters={})
        with open(info_file, "rb") as info:
            port = pyspark_serializers.read_int(info)
            secret = pyspark_serializers.UTF8Deserializer().loads(info)
        logger.debug("driver JVM %d answered in %.2f s", process.pid,
                     time.monotonic() - started)
        return _connect(process, port, secret)
    except BaseException:
        if process is not None and process.poll() is None:
            process.kill()  # a JVM nobody will use
            process.wait()
        raise
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _connect(process: Popen[bytes], port: int, secret: str) -> Any:
    """PySpark's gateway to the JVM of ``process`` (as in its ``launch_gateway``)."""
    from py4j.clientserver import ClientServer, JavaParameters, PythonParameters
    from py4j.java_gateway import GatewayParameters, JavaGateway, java_import

    gateway: Any
    if os.environ.get("PYSPARK_PIN_THREAD", "true").lower() == "true":
        gateway = ClientServer(
            java_parameters=JavaParameters(port=port, auth_token=secret, auto_convert=True),
            python_parameters=PythonParameters(port=0, eager_load=False))
    else:
        gateway = JavaGateway(gateway_parameters=GatewayParameters(
            port=port, auth_token=secret, auto_convert=True))
    gateway.proc = process
    for name in _JAVA_IMPORTS:
        java_import(gateway.jvm, name)
    return gateway

