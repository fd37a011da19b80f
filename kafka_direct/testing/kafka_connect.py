"""Kafka Connect's standalone worker for tests and benchmarks, started by the code itself.

:class:`KafkaConnect` runs ``org.apache.kafka.connect.cli.ConnectStandalone`` as a child
JVM (the parent-death signal: a killed test run leaves no worker behind) from the jars
:func:`~kafka_direct.testing.jvm_peers.kafka_connect_jars` resolves, with connector plugins
(e.g. :func:`~kafka_direct.testing.jvm_peers.debezium_jdbc_sink`) linked into a
``plugin.path`` folder of its own. Its REST listener is on 127.0.0.1 with a free port.

Connectors are given as dicts of their settings (``name`` among them). Each is written as a
properties file only its owner may read and passed on the worker's command line (its
secrets, such as a sink's database password, in a private file of their own that the
worker reads through Kafka's ``FileConfigProvider``: its REST API, which any local user
can ask, shows a reference, never the password), so a restarted worker runs them again; one added
while the worker runs is also created over REST. A standalone worker keeps source offsets
in its offsets file, kept across restarts in its data folder; a sink's offsets are its
consumer group's, committed to Kafka every ``offset.flush.interval.ms``.

:meth:`KafkaConnect.wait_running` waits until a connector and its tasks run; a connector or
task that failed is raised as :class:`~kafka_direct.errors.ServiceError` with the end of its
stack trace, every password of the connectors' settings hidden.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kafka_direct.errors import ServiceError
from kafka_direct.redaction import REDACTED, is_secret_key, redact_text
from kafka_direct.testing.jvm_peers import kafka_connect_jars
from kafka_direct.testing.kafka_storage import JVM_OPTIONS, java
from kafka_direct.testing.process import LocalService, ServiceProcess, free_port, log_tail

__all__ = ["ConnectorStatus", "KafkaConnect", "TaskStatus"]

logger = logging.getLogger(__name__)

_SERVICE = "kafka-connect"

_LOG4J = """\
status = error
appender.out.type = Console
appender.out.name = out
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = WARN
rootLogger.appenderRef.out.ref = out
logger.cli.name = org.apache.kafka.connect.cli
logger.cli.level = INFO
logger.worker.name = org.apache.kafka.connect.runtime.Worker
logger.worker.level = INFO
logger.task.name = org.apache.kafka.connect.runtime.WorkerTask
logger.task.level = INFO
"""


@dataclass(frozen=True, slots=True)
class TaskStatus:
    """One task of a connector, as the worker's REST API reports it.

    Attributes:
        task: The task's number.
        state: ``RUNNING``, ``FAILED``, ``PAUSED``, ``UNASSIGNED``...
        trace: The stack trace of a failed task (passwords hidden), else ''.
    """

    task: int
    state: str
    trace: str = ""


@dataclass(frozen=True, slots=True)
class ConnectorStatus:
    """A connector and its tasks, as the worker's REST API reports them.

    Attributes:
        name: The connector's name.
        state: The connector's own state (``RUNNING``, ``FAILED``...).
        tasks: Its tasks.
        trace: The stack trace of a failed connector (passwords hidden), else ''.
    """

    name: str
    state: str
    tasks: tuple[TaskStatus, ...]
    trace: str = ""

    @property
    def running(self) -> bool:
        """Whether the connector and at least one task run, and no task is not running."""
        return (self.state == "RUNNING" and bool(self.tasks)
                and all(task.state == "RUNNING" for task in self.tasks))

    @property
    def failed(self) -> bool:
        """Whether the connector or one of its tasks failed."""
        return self.state == "FAILED" or any(task.state == "FAILED" for task in self.tasks)


def _escape(text: str, *, key: bool) -> str:
    """``text`` escaped for a Java properties file (non-ASCII as unicode escapes)."""
    out: list[str] = []
    for index, char in enumerate(text):
        if char == "\\":
            out.append("\\\\")
        elif char == "\n":
            out.append("\\n")
        elif char == "\r":
            out.append("\\r")
        elif char == "\t":
            out.append("\\t")
        elif char in "=:#!" or (char == " " and (key or index == 0)):
            out.append("\\" + char)
        elif ord(char) > 0x7E or ord(char) < 0x20:
            units = char.encode("utf-16-be")
            out.extend(f"\\u{units[i]:02x}{units[i + 1]:02x}" for i in range(0, len(units), 2))
        else:
            out.append(char)
    return "".join(out)


def _properties(settings: Mapping[str, str]) -> str:
    return "".join(f"{_escape(key, key=True)}={_escape(value, key=False)}\n"
                   for key, value in settings.items())


def _write_private(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` readable by its owner only (created so, never widened)."""
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with open(fd, "w", encoding="latin-1", errors="strict") as file:
        file.write(text)


class KafkaConnect(LocalService):
    """A Kafka Connect standalone worker on 127.0.0.1.

    Args:
        bootstrap_servers: The Kafka cluster it reads and writes.
        plugins: Folders of connector plugins (each a folder of one plugin's jars), linked
            into the worker's ``plugin.path``.
        connectors: The connectors' settings, each with its ``name``.
        data_dir: Its folder (settings, offsets file, log); default a new temporary one,
            removed by :meth:`close`.
        config: Worker settings over the defaults (``consumer.max.poll.records``...).
        key_converter: The worker's key converter (JSON with schemas by default).
        value_converter: The worker's value converter (JSON with schemas by default).
        offset_flush_interval_ms: How often offsets are committed (a sink's consumer
            offsets included).
        heap_mb: The JVM's maximum heap.
        jvm_options: JVM options (default: the tests' quick-start ones).
        port: The REST port (default: a free one, kept across restarts).
        startup_timeout: Seconds to wait for the worker and its connectors.
    """

    restartable = True

    def __init__(self, bootstrap_servers: str, *, plugins: Iterable[Path] = (),
                 connectors: Iterable[Mapping[str, str]] = (),
                 data_dir: str | Path | None = None, config: Mapping[str, str] | None = None,
                 key_converter: str = "org.apache.kafka.connect.json.JsonConverter",
                 value_converter: str = "org.apache.kafka.connect.json.JsonConverter",
                 offset_flush_interval_ms: int = 10_000, heap_mb: int = 512,
                 jvm_options: Sequence[str] = JVM_OPTIONS, port: int | None = None,
                 startup_timeout: float = 120.0) -> None:
        self.bootstrap_servers = bootstrap_servers
        self._own_dir = data_dir is None
        self.data_dir = Path(data_dir or tempfile.mkdtemp(prefix="kafka-direct-connect-"))
        self._root = self.data_dir
        self.port = port or free_port()
        self.rest_url = f"http://127.0.0.1:{self.port}"
        self.heap_mb = heap_mb
        self.jvm_options = tuple(jvm_options)
        self.startup_timeout = startup_timeout
        self._plugins = [Path(plugin) for plugin in plugins]
        self._connectors: dict[str, dict[str, str]] = {}
        self._secrets: set[str] = set()
        self._log_offset = 0
        self.settings: dict[str, str] = {
            "bootstrap.servers": bootstrap_servers,
            "key.converter": key_converter,
            "value.converter": value_converter,
            "key.converter.schemas.enable": "true",
            "value.converter.schemas.enable": "true",
            "offset.storage.file.filename": str(self.data_dir / "connect.offsets"),
            "offset.flush.interval.ms": str(offset_flush_interval_ms),
            "connector.client.config.override.policy": "All",
            "plugin.path": str(self.data_dir / "plugins"),
            # Every plugin here ships its ServiceLoader manifests: no scan of its jars.
            "plugin.discovery": "service_load",
            # Connectors' secrets are read from private files when a task starts: the REST
            # API (open to every local user) shows the placeholder, never the password.
            "config.providers": "file",
            "config.providers.file.class":
                "org.apache.kafka.common.config.provider.FileConfigProvider",
            "listeners": f"http://127.0.0.1:{self.port}",
            "rest.advertised.host.name": "127.0.0.1",
        }
        self.settings.update(config or {})
        for connector in connectors:
            self._remember(connector)

    @property
    def log_path(self) -> Path:
        """The worker's log file."""
        return self.data_dir / "connect.log"

    def _remember(self, connector: Mapping[str, str]) -> str:
        settings = {str(key): str(value) for key, value in connector.items()}
        name = settings.get("name", "")
        if not name or "/" in name or name.startswith("."):
            raise ServiceError("a connector needs a plain name (no '/', not hidden)",
                               service=_SERVICE, log_tail="")
        self._connectors[name] = settings
        self._secrets.update(value for key, value in settings.items()
                             if is_secret_key(key) and len(value) >= 3)
        return name

    def _connector_file(self, name: str) -> Path:
        return self.data_dir / "connectors" / f"{name}.properties"

    def _published(self, name: str) -> dict[str, str]:
        """The connector's settings as the worker gets them.

        Each secret becomes a reference to a private file (written here), which the worker
        resolves when a task starts.
        """
        settings = dict(self._connectors[name])
        secrets = {key: value for key, value in settings.items() if is_secret_key(key)}
        if not secrets:
            return settings
        path = self.data_dir / "connectors" / f"{name}.secrets"
        _write_private(path, _properties(secrets))
        for key in secrets:
            settings[key] = f"${{file:{path}:{key}}}"
        return settings

    def _prepare(self) -> list[str]:
        """Write the worker's files; its command line."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        plugins = self.data_dir / "plugins"
        shutil.rmtree(plugins, ignore_errors=True)
        plugins.mkdir()
        for index, plugin in enumerate(self._plugins):
            (plugins / f"{index:02d}-{plugin.name}").symlink_to(plugin.resolve(),
                                                               target_is_directory=True)
        (self.data_dir / "connectors").mkdir(mode=0o700, exist_ok=True)
        _write_private(self.data_dir / "worker.properties", _properties(self.settings))
        for name in self._connectors:
            _write_private(self._connector_file(name), _properties(self._published(name)))
        (self.data_dir / "log4j2.properties").write_text(_LOG4J)
        return [java(), f"-Xmx{self.heap_mb}m", "-Xms64m", *self.jvm_options,
                f"-Dlog4j2.configurationFile={self.data_dir / 'log4j2.properties'}",
                "-cp", f"{kafka_connect_jars()}/*",
                "org.apache.kafka.connect.cli.ConnectStandalone",
                str(self.data_dir / "worker.properties"),
                *(str(self._connector_file(name)) for name in self._connectors)]

    def start(self) -> KafkaConnect:
        """Start the worker and wait until its REST API lists every connector."""
        if self.alive():
            return self
        argv = self._prepare()
        self._log_offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        self._process = ServiceProcess("Kafka Connect", argv, self.log_path)
        self._process.start()
        wanted = set(self._connectors)
        try:
            self._process.wait_ready(lambda: wanted <= set(self._get("/connectors")),
                                     self.startup_timeout)
        except ServiceError as error:
            self._process = None  # wait_ready stopped it
            tail = self._redact(str(getattr(error, "log_tail", "")))
            raise ServiceError(f"{self._redact(str(error))}", service=_SERVICE,
                               log_tail=tail) from None
        logger.info("Kafka Connect at %s with %d connector(s)", self.rest_url, len(wanted))
        return self

    def kill(self) -> None:
        """SIGKILL the worker (a crash): offsets not yet committed are not."""
        if self._process is not None:
            self._process.kill()
            self._process = None

    def __enter__(self) -> KafkaConnect:
        try:
            return self.start()
        except BaseException:
            self.close()
            raise

    def add_connector(self, connector: Mapping[str, str]) -> str:
        """Add (or reconfigure) a connector: kept for restarts, created now if running.

        Returns:
            Its name.
        """
        name = self._remember(connector)
        if self.alive():
            published = self._published(name)
            config = {key: value for key, value in published.items() if key != "name"}
            self._request("PUT", f"/connectors/{urllib.parse.quote(name, safe='')}/config",
                          config)
            _write_private(self._connector_file(name), _properties(published))
        return name

    def connector_status(self, name: str) -> ConnectorStatus:
        """The connector's and its tasks' states.

        Raises:
            ServiceError: The worker does not answer, or the connector or a task failed
                (its stack trace's end in the message, passwords hidden).
        """
        answer = self._get(f"/connectors/{urllib.parse.quote(name, safe='')}/status")
        connector = answer.get("connector", {})
        status = ConnectorStatus(
            name=name, state=str(connector.get("state", "")),
            trace=self._redact(str(connector.get("trace", ""))),
            tasks=tuple(TaskStatus(int(task.get("id", -1)), str(task.get("state", "")),
                                   self._redact(str(task.get("trace", ""))))
                        for task in answer.get("tasks", [])))
        if status.failed:
            traces = [status.trace] + [task.trace for task in status.tasks if task.trace]
            tail = "\n".join("\n".join(trace.splitlines()[-25:]) for trace in traces if trace)
            raise ServiceError(f"connector {name} failed:\n{tail}", service=_SERVICE,
                               log_tail=tail)
        return status

    def wait_running(self, name: str, timeout: float = 60.0) -> ConnectorStatus:
        """Wait until the connector and its tasks run.

        Raises:
            ServiceError: It or a task failed, the worker died, or ``timeout`` passed.
        """
        deadline = time.monotonic() + timeout
        last: ConnectorStatus | None = None
        while True:
            if not self.alive():
                raise ServiceError(f"Kafka Connect died while {name} started:\n"
                                   f"{self.log_tail()}", service=_SERVICE,
                                   log_tail=self.log_tail())
            try:
                last = self.connector_status(name)
            except ServiceError as error:
                if "failed:" in str(error):
                    raise
            if last is not None and last.running:
                return last
            if time.monotonic() >= deadline:
                state = last.state if last is not None else "unknown"
                raise ServiceError(f"connector {name} was not running within {timeout:.0f} s "
                                   f"(state {state})", service=_SERVICE,
                                   log_tail=self.log_tail())
            time.sleep(0.2)

    def log_tail(self, lines: int = 40) -> str:
        """The end of the worker's log, passwords hidden."""
        return self._redact(log_tail(self.log_path, lines))

    def _redact(self, text: str) -> str:
        shown = redact_text(text)
        for secret in sorted(self._secrets, key=len, reverse=True):
            shown = shown.replace(secret, REDACTED)
        return shown

    def _get(self, path: str) -> Any:
        return self._request("GET", path)

    def _request(self, method: str, path: str, body: Mapping[str, str] | None = None) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(
            self.rest_url + path, data=data, method=method,
            headers={"Content-Type": "application/json", "Accept": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                payload = response.read()
        except urllib.error.HTTPError as error:
            message = self._redact(error.read().decode(errors="replace")[:2000])
            raise ServiceError(f"Kafka Connect answered {method} {path} with {error.code}: "
                               f"{message}", service=_SERVICE, log_tail="") from None
        except OSError as error:
            raise ServiceError(f"Kafka Connect at {self.rest_url} did not answer {method} "
                               f"{path}: {error}", service=_SERVICE, log_tail="") from None
        return json.loads(payload) if payload else None

    def describe(self) -> dict[str, Any]:
        """Where it runs and which connectors it has (for a test's failure message)."""
        return {"rest": self.rest_url, "pid": self.pid, "connectors": sorted(self._connectors)}
