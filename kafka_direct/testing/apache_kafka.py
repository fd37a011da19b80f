"""Apache Kafka's own broker (KRaft) for tests, demos and benchmarks, started by the code itself.

:class:`ApacheKafka` runs one node (broker and controller in one JVM) or a cluster of them on
127.0.0.1 with free ports, from the jars :func:`~kafka_direct.testing.kafka_jars.kafka_jars`
resolves and caches. Each node is a plain JVM process (``kafka.Kafka``) started with the
parent-death signal, so a killed test run leaves none behind. The JVM is sized for tests
(a small heap, the serial collector, the first JIT tier): a node starts in a few seconds and
a suite can afford several.

Storage is formatted by :mod:`kafka_direct.testing.kafka_storage`, without a JVM per node.

The cluster (``brokers=3``) has replication factor 3, ``min.insync.replicas=2`` and unclean
leader election off, as production clusters do; its fault helpers act on the real processes:
:meth:`ApacheKafka.kill_broker` (SIGKILL), :meth:`~ApacheKafka.restart_broker`,
:meth:`~ApacheKafka.pause_broker` (SIGSTOP past the session and request timeouts),
:meth:`~ApacheKafka.elect_preferred_leaders` (a leader move through the Admin API).
"""

from __future__ import annotations

import logging
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from kafka_direct.errors import ServiceError
from kafka_direct.testing.kafka import KafkaService
from kafka_direct.testing.kafka_jars import kafka_jars
from kafka_direct.testing.kafka_storage import JVM_OPTIONS, format_log_dir, java, random_id
from kafka_direct.testing.process import LocalService, ServiceProcess, free_port, log_tail

__all__ = ["ApacheKafka", "KafkaNode"]

logger = logging.getLogger(__name__)

_STARTED = b"Kafka Server started"

_LOG4J = """\
status = error
appender.out.type = Console
appender.out.name = out
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = WARN
rootLogger.appenderRef.out.ref = out
logger.server.name = kafka.server.KafkaRaftServer
logger.server.level = INFO
logger.cleaner.name = kafka.log.LogCleaner
logger.cleaner.level = INFO
"""


class KafkaNode(LocalService):
    """One Kafka node (broker and controller) as a JVM process.

    Args:
        node_id: Its ``node.id``.
        port: Its client listener's port.
        controller_port: Its controller listener's port.
        directory: Its folder (log directory, settings, log file).
        settings: Its ``server.properties``.
        jars: The folder of Kafka's jars.
        heap_mb: Its maximum heap.
        startup_timeout: Seconds to wait for it to start.
    """

    def __init__(self, node_id: int, port: int, controller_port: int, directory: Path,
                 settings: Mapping[str, str], jars: Path, heap_mb: int,
                 startup_timeout: float) -> None:
        self.node_id = node_id
        self.port = port
        self.controller_port = controller_port
        self.directory = directory
        self._root = directory
        self.settings = dict(settings)
        self.jars = jars
        self.heap_mb = heap_mb
        self.startup_timeout = startup_timeout
        self._log_offset = 0

    @property
    def address(self) -> str:
        """``127.0.0.1:<port>`` of its client listener."""
        return f"127.0.0.1:{self.port}"

    def launch(self, cluster_id: str) -> None:
        """Start the process (formatting its storage the first time); :meth:`await_started`."""
        if self.alive():
            return
        format_log_dir(self.directory / "data", self.jars, cluster_id, self.node_id)
        settings = dict(self.settings, **{"log.dirs": str(self.directory / "data")})
        (self.directory / "server.properties").write_text(
            "".join(f"{key}={value}\n" for key, value in settings.items()))
        (self.directory / "log4j2.properties").write_text(_LOG4J)
        argv = [java(), f"-Xmx{self.heap_mb}m", "-Xms64m", *JVM_OPTIONS,
                f"-Dlog4j2.configurationFile={self.directory / 'log4j2.properties'}",
                f"-Dkafka.logs.dir={self.directory}", "-cp", f"{self.jars}/*", "kafka.Kafka",
                str(self.directory / "server.properties")]
        self._process = ServiceProcess(f"Apache Kafka node {self.node_id}", argv,
                                       self.directory / "broker.log")
        log = self._process.log_path
        self._log_offset = log.stat().st_size if log.exists() else 0  # a restart appends
        self._process.start()

    def await_started(self) -> None:
        """Wait until the node says it started (the broker unfenced); ServiceError if not."""
        if self._process is None:
            raise ServiceError(f"Apache Kafka node {self.node_id} was not started",
                               service="kafka", log_tail="")
        log = self._process.log_path
        self._process.wait_ready(lambda: _STARTED in log.read_bytes()[self._log_offset:],
                                 self.startup_timeout)

    def start(self) -> KafkaNode:
        """Not used alone: a node starts through its :class:`ApacheKafka` (its cluster id)."""
        raise ServiceError("start a node through ApacheKafka.restart_broker",
                           service="kafka", log_tail="")

    def kill(self) -> None:
        """SIGKILL: a crash, its data on disk as the kernel has it."""
        if self._process is not None:
            self._process.kill()
            self._process = None

    def log_tail(self, lines: int = 40) -> str:
        """The end of its log."""
        return log_tail(self.directory / "broker.log", lines)


class ApacheKafka(KafkaService):
    """Apache Kafka (KRaft) on 127.0.0.1: one node by default, or a cluster.

    Args:
        brokers: Nodes, each a broker and a controller (1, or 3 for fault tests).
        version: The Kafka release (default: ``KAFKA_DIRECT_KAFKA_VERSION`` or the pinned one).
        data_dir: Where the nodes keep their data (default: a new temporary folder, removed
            by :meth:`close`).
        port: The first node's client port (default: a free one, kept across restarts).
        config: Broker settings over the defaults for tests (``{"log.retention.check
            .interval.ms": "500"}``...).
        heap_mb: Each node's maximum heap.
        startup_timeout: Seconds to wait for each node.
    """

    restartable = True
    #: Where clients that authenticate connect: SASL_PLAINTEXT, OAUTHBEARER with Kafka's
    #: unsecured tokens (an unsigned JWT with ``sub``, ``iat`` and ``exp``).
    sasl_bootstrap_servers: str

    def __init__(self, brokers: int = 1, *, version: str | None = None,
                 data_dir: str | Path | None = None, port: int | None = None,
                 config: Mapping[str, str] | None = None, heap_mb: int = 384,
                 startup_timeout: float = 120.0) -> None:
        if brokers < 1:
            raise ServiceError(f"ApacheKafka needs at least one broker, got {brokers}",
                               service="kafka", log_tail="")
        self.brokers = brokers
        self.version = version
        self._own_dir = data_dir is None
        self.data_dir = Path(data_dir or tempfile.mkdtemp(prefix="kafka-direct-kafka-"))
        self.replication_factor = min(brokers, 3)
        self._config = dict(config or {})
        self._heap_mb = heap_mb
        self._startup_timeout = startup_timeout
        self._cluster_id = random_id()
        # Distinct ports: two free_port() answers may name the same free port.
        taken = {port} if port else set()
        picked: list[int] = []
        while len(picked) < 3 * brokers - (1 if port else 0):
            candidate = free_port()
            if candidate not in taken:
                taken.add(candidate)
                picked.append(candidate)
        ports = ([port] if port else [picked.pop()]) + [picked.pop() for _ in range(brokers - 1)]
        self._ports = ports
        self._controller_ports = [picked.pop() for _ in range(brokers)]
        self._sasl_ports = [picked.pop() for _ in range(brokers)]
        self.bootstrap_servers = ",".join(f"127.0.0.1:{p}" for p in ports)
        self.sasl_bootstrap_servers = ",".join(f"127.0.0.1:{p}" for p in self._sasl_ports)
        self.nodes: list[KafkaNode] = []

    @property
    def port(self) -> int:
        """The first node's client port."""
        return self._ports[0]

    def settings(self, node_id: int) -> dict[str, str]:
        """``server.properties`` of node ``node_id`` (1-based)."""
        replicas = str(self.replication_factor)
        in_sync = str(min(2, self.replication_factor))
        voters = ",".join(f"{index + 1}@127.0.0.1:{port}"
                          for index, port in enumerate(self._controller_ports))
        port = self._ports[node_id - 1]
        clients = (f"PLAINTEXT://127.0.0.1:{port},"
                   f"SASL_PLAINTEXT://127.0.0.1:{self._sasl_ports[node_id - 1]}")
        settings = {
            "process.roles": "broker,controller",
            "node.id": str(node_id),
            "controller.quorum.voters": voters,
            "listeners": f"{clients},CONTROLLER://127.0.0.1:{self._controller_ports[node_id - 1]}",
            "advertised.listeners": clients,
            "controller.listener.names": "CONTROLLER",
            "listener.security.protocol.map": ("PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,"
                                               "CONTROLLER:PLAINTEXT"),
            "inter.broker.listener.name": "PLAINTEXT",
            # A second listener for clients that authenticate: OAUTHBEARER with Kafka's
            # unsecured tokens (an unsigned JWT naming its subject), as in Kafka's own tests.
            "sasl.enabled.mechanisms": "OAUTHBEARER",
            "listener.name.sasl_plaintext.oauthbearer.sasl.jaas.config": (
                "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;"),
            "default.replication.factor": replicas,
            "min.insync.replicas": in_sync,
            "offsets.topic.replication.factor": replicas,
            "transaction.state.log.replication.factor": replicas,
            "transaction.state.log.min.isr": in_sync,
            "share.coordinator.state.topic.replication.factor": replicas,
            "share.coordinator.state.topic.min.isr": in_sync,
            "unclean.leader.election.enable": "false",
            # Fewer internal partitions than production's 50: a suite's first group or
            # transaction does not wait for 50 partitions to be created.
            "offsets.topic.num.partitions": "4",
            "transaction.state.log.num.partitions": "4",
            "group.initial.rebalance.delay.ms": "0",
            # A node killed and started again registers anew only once the controller has
            # given up its old session: seconds, not production's 9.
            "broker.session.timeout.ms": "4000",
            "broker.heartbeat.interval.ms": "500",
            # Retention and the log cleaner act within a test's time, not minutes later.
            "log.retention.check.interval.ms": "1000",
            "log.cleaner.backoff.ms": "500",
            "log.initial.task.delay.ms": "0",
            "num.network.threads": "2",
            "num.io.threads": "4",
            "background.threads": "4",
            "num.recovery.threads.per.data.dir": "1",
        }
        settings.update(self._config)
        return settings

    def _make_nodes(self) -> None:
        if self.nodes:
            return
        jars = kafka_jars(self.version)
        for node_id in range(1, self.brokers + 1):
            directory = self.data_dir / f"node-{node_id}"
            directory.mkdir(parents=True, exist_ok=True)
            self.nodes.append(KafkaNode(
                node_id, self._ports[node_id - 1], self._controller_ports[node_id - 1],
                directory, self.settings(node_id), jars, self._heap_mb,
                self._startup_timeout))

    def start(self) -> ApacheKafka:
        """Start every node that is not running and wait until all brokers answer."""
        self._make_nodes()
        starting = [node for node in self.nodes if not node.alive()]
        for node in starting:
            node.launch(self._cluster_id)
        try:
            for node in starting:
                node.await_started()
            self._await_brokers(len(self.nodes))
        except BaseException:
            self.stop()
            raise
        logger.info("Apache Kafka (%d node(s)) at %s", len(self.nodes), self.bootstrap_servers)
        return self

    def _await_brokers(self, count: int, timeout: float | None = None) -> None:
        from confluent_kafka.admin import AdminClient

        from kafka_direct.testing.process import wait_for

        admin = AdminClient(self.params())
        if not wait_for(lambda: len(admin.list_topics(timeout=5).brokers) >= count,
                        timeout or self._startup_timeout, 0.2):
            tails = "\n".join(node.log_tail(10) for node in self.nodes)
            raise ServiceError(f"Apache Kafka at {self.bootstrap_servers} did not show "
                               f"{count} broker(s)", service="kafka", log_tail=tails)

    def stop(self) -> None:
        """Stop every node gracefully (controlled shutdown); the data stays."""
        self.forget_clients()
        # Followers first, the first node (usually the controller quorum's leader) last,
        # all signalled before any is waited for: a node waits on its peers while stopping.
        for node in reversed(self.nodes):
            if node.alive():
                node.resume()  # a paused node cannot shut down: it would be killed
                node.send_signal(signal.SIGTERM)
        for node in reversed(self.nodes):
            node.stop()

    def close(self) -> None:
        """End the nodes and remove the data folder if this object made it.

        A folder this object made goes with its data: the nodes are killed, not stopped
        gracefully. A controlled shutdown closes every partition's log, which took past its
        15 s limit with a test session's hundreds of topics, for data about to be removed.
        A folder of the caller's keeps its data: the nodes stop gracefully (:meth:`stop`).
        """
        if not self._own_dir:
            self.stop()
            return
        self.kill()
        shutil.rmtree(self.data_dir, ignore_errors=True)

    def __enter__(self) -> ApacheKafka:
        try:
            return self.start()
        except BaseException:
            self.close()  # __exit__ does not run when __enter__ raises
            raise

    def __exit__(self, *exc: object) -> None:
        self.close()

    def restart(self) -> None:
        """Stop every node gracefully and start them again, with their data."""
        self.stop()
        self.start()

    def kill(self) -> None:
        """SIGKILL every node (a crash of the whole cluster)."""
        self.forget_clients()
        for node in self.nodes:
            node.kill()

    def pause(self, timeout: float = 10.0) -> None:
        """SIGSTOP every node; returns once all their threads have stopped."""
        for node in self.nodes:
            node.pause(timeout)

    def resume(self) -> None:
        """SIGCONT every node."""
        for node in self.nodes:
            node.resume()

    def node(self, node_id: int) -> KafkaNode:
        """Node ``node_id`` (1-based, as its ``node.id``)."""
        self._make_nodes()
        if not 1 <= node_id <= len(self.nodes):
            raise ServiceError(f"no Apache Kafka node {node_id}: the cluster has "
                               f"{len(self.nodes)}", service="kafka", log_tail="")
        return self.nodes[node_id - 1]

    def kill_broker(self, node_id: int) -> None:
        """SIGKILL one node."""
        self.node(node_id).kill()

    def restart_broker(self, node_id: int, *, graceful: bool = True) -> None:
        """Start one node again (stopped first, gracefully or by SIGKILL, if it runs)."""
        node = self.node(node_id)
        if node.alive():
            node.stop() if graceful else node.kill()
        node.launch(self._cluster_id)
        node.await_started()

    def pause_broker(self, node_id: int) -> None:
        """SIGSTOP one node: its connections stay open, nothing answers."""
        self.node(node_id).pause()

    def resume_broker(self, node_id: int) -> None:
        """SIGCONT one node."""
        self.node(node_id).resume()

    def leaders(self, topic: str) -> dict[int, int]:
        """{partition: node id of its leader} (-1 where none), as metadata says now."""
        from confluent_kafka.admin import AdminClient

        described = AdminClient(self.params()).list_topics(topic, timeout=10).topics[topic]
        return {p: meta.leader for p, meta in described.partitions.items()}

    def in_sync(self, topic: str) -> dict[int, list[int]]:
        """{partition: its in-sync replicas} as metadata says now."""
        from confluent_kafka.admin import AdminClient

        described = AdminClient(self.params()).list_topics(topic, timeout=10).topics[topic]
        return {p: list(meta.isrs) for p, meta in described.partitions.items()}

    def elect_preferred_leaders(self, topic: str, partitions: Iterable[int],
                                timeout: float = 60.0) -> None:
        """Move leadership back to each partition's preferred replica (the Admin API).

        A preferred replica that is not in sync yet (a node just started again, catching
        up) cannot lead: the election is asked again until it can, or ``timeout`` passes.

        Raises:
            ServiceError: An election failed for another reason, or did not happen in time.
        """
        from confluent_kafka import ElectionType, TopicPartition
        from confluent_kafka.admin import AdminClient

        admin = AdminClient(self.params())
        pending = [TopicPartition(topic, p) for p in partitions]
        deadline = time.monotonic() + timeout
        while pending:
            future = admin.elect_leaders(ElectionType.PREFERRED, pending)
            waiting = []
            for tp, error in future.result(30).items():
                # ELECTION_NOT_NEEDED: it already leads.
                if error is None or "ELECTION_NOT_NEEDED" in str(error):
                    continue
                if "PREFERRED_LEADER_NOT_AVAILABLE" not in str(error) or (
                        time.monotonic() > deadline):
                    raise ServiceError(f"electing the preferred leader of {tp.topic} "
                                       f"[{tp.partition}] failed: {error}", service="kafka",
                                       log_tail="")
                waiting.append(TopicPartition(tp.topic, tp.partition))
            pending = waiting
            if pending:
                time.sleep(0.5)

    def run_tool(self, main_class: str, *args: str,
                 timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
        """Run one of Kafka's command-line tools (``kafka-tools``) from the same jars.

        Args:
            main_class: Its class, e.g.
                ``org.apache.kafka.tools.consumer.group.ConsumerGroupCommand``.
            args: Its arguments (``--bootstrap-server`` is the caller's to give).
            timeout: Seconds it may take.
        """
        self._make_nodes()
        jars = self.nodes[0].jars
        (self.data_dir / "tools-log4j2.properties").write_text(
            _LOG4J.replace("rootLogger.level = WARN", "rootLogger.level = ERROR"))
        argv = [java(), "-Xmx256m", *JVM_OPTIONS,
                f"-Dlog4j2.configurationFile={self.data_dir / 'tools-log4j2.properties'}",
                "-cp", f"{jars}/*", main_class, *args]
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                              check=False)

    def describe(self) -> dict[str, Any]:
        """Where it runs and what each node is doing (for a test's failure message)."""
        return {"bootstrap": self.bootstrap_servers,
                "nodes": {node.node_id: node.pid for node in self.nodes}}
