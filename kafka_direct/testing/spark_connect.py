"""A local Spark Connect server, started as a process of its own, for tests and demos.

PySpark ships the server (``spark-connect_*.jar`` and ``bin/spark-submit``); the client side
needs ``pip install "kafka-direct[connect]"``. The server is a separate JVM with its own
Python workers, which start this interpreter, so kafka-direct's classes registered by a
client load there. It listens on 127.0.0.1 only.
"""

from __future__ import annotations

import os
import socket
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kafka_direct.errors import ConfigurationError, ServiceError
from kafka_direct.runtime.spark import SPARK_TEST_CONF, driver_java_options
from kafka_direct.runtime.spark_home import only_this_interpreter, spark_home
from kafka_direct.runtime.warm_daemon import daemon_module
from kafka_direct.testing.process import LocalService, ServiceProcess, free_port

__all__ = ["SparkConnectServer"]

_SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
_READY = b"Spark Connect server started at"


def _spark_submit(master: str, conf: Mapping[str, str]) -> Path:
    try:
        import pyspark
    except ImportError as missing:  # pragma: no cover - pyspark is a dependency
        raise ConfigurationError("a Spark Connect server needs PySpark") from missing
    # Where its Python processes import PySpark compiled (kafka_direct.runtime.spark_home).
    home = spark_home(master, conf) or Path(pyspark.__file__).parent
    submit = home / "bin" / "spark-submit"
    if not submit.exists() or not any(home.glob("jars/spark-connect_*.jar")):
        raise ConfigurationError(
            f"this PySpark ({pyspark.__version__}) does not ship a Spark Connect server; "
            f"install PySpark 4.2 or newer")
    return submit


class SparkConnectServer(LocalService):
    """``spark-submit`` running Spark's Connect server on a free port of 127.0.0.1.

    Args:
        master: The server's Spark master.
        conf: Extra Spark settings for the server (over quick, quiet test settings).
        work_dir: Where the log goes (default: a new temporary directory).
        startup_timeout: Seconds to wait for the server to listen.

    Use as a context manager, or :meth:`start` then :meth:`close`; :attr:`url` is what
    ``SparkSession.builder.remote(...)`` takes.
    """

    def __init__(self, master: str = "local[2,2]", conf: Mapping[str, str] | None = None,
                 work_dir: str | Path | None = None, startup_timeout: float = 120.0) -> None:
        self.master = master
        self.conf = {key: value for key, value in SPARK_TEST_CONF.items()
                     if not key.startswith("spark.driver.extraJava")}
        if "spark.python.daemon.module" not in (conf or {}) \
                and not (conf or {}).get("spark.submit.pyFiles") \
                and only_this_interpreter(master, {**self.conf, **(conf or {})}):
            module = daemon_module()  # workers forked with their imports done
            if module is not None:
                self.conf["spark.python.daemon.module"] = module
        self.conf.update(conf or {})
        self._own_dir = work_dir is None
        self._root = Path(work_dir or tempfile.mkdtemp(prefix="kafka-direct-connect-"))
        self.port = free_port()
        self.startup_timeout = startup_timeout

    @property
    def url(self) -> str:
        """The ``sc://`` address of the server."""
        return f"sc://127.0.0.1:{self.port}"

    def _argv(self) -> list[str]:
        argv = [str(_spark_submit(self.master, self.conf)), "--class", _SERVER_CLASS,
                "--master", self.master,
                "--name", "kafka-direct Spark Connect server",
                "--driver-java-options", driver_java_options(),
                "--conf", f"spark.connect.grpc.binding.port={self.port}",
                "--conf", "spark.connect.grpc.binding.address=127.0.0.1"]
        for key, value in self.conf.items():
            argv += ["--conf", f"{key}={value}"]
        return [*argv, "spark-internal"]

    def start(self) -> SparkConnectServer:
        """Start the server and wait until it listens."""
        if self._process is not None and self._process.alive():
            return self
        env = dict(os.environ)
        env.setdefault("PYSPARK_PYTHON", sys.executable)
        env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        env["SPARK_HOME"] = str(_spark_submit(self.master, self.conf).parent.parent)
        # The server's SparkContext must not find this process's gateway.
        for key in ("PYSPARK_GATEWAY_PORT", "PYSPARK_GATEWAY_SECRET"):
            env.pop(key, None)
        self._process = ServiceProcess("Spark Connect server", self._argv(),
                                       self._root / "connect-server.log", env=env)
        log = self._process.log_path
        offset = log.stat().st_size if log.exists() else 0
        self._process.start()

        def ready() -> bool:
            if _READY not in log.read_bytes()[offset:]:
                return False
            with socket.create_connection(("127.0.0.1", self.port), timeout=2):
                return True

        self._process.wait_ready(ready, self.startup_timeout)
        return self

    def session(self) -> Any:
        """A Spark Connect client session on this server."""
        if self._process is None or not self._process.alive():
            raise ServiceError("the Spark Connect server is not running; start() it first",
                               service="spark-connect", log_tail="")
        # Connect's own builder: pyspark.sql's refuses a remote session in a process that
        # also runs a classic one (as a test session does).
        from pyspark.sql.connect.session import SparkSession

        return SparkSession.builder.remote(self.url).create()

    def __enter__(self) -> SparkConnectServer:
        return self.start()

    def __repr__(self) -> str:
        return f"SparkConnectServer({self.url!r}, master={self.master!r})"
