"""What the ingest job is told, checked when it is made, and what a run reports.

:class:`IngestOptions` is what both jobs (:mod:`~kafka_direct.app.ingest_job` on the
direct stream, :mod:`~kafka_direct.app.structured_ingest` on Structured Streaming) read and
write, with :func:`check_master` and :func:`parse_starting_offsets`; :class:`IngestResult`
is what a run did. The ``ingest`` sub-command's options, which become these, are
:mod:`~kafka_direct.app.ingest_arguments`.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kafka_direct.errors import ConfigurationError
from kafka_direct.offsets_json import offsets_from_json
from kafka_direct.streaming.durations import to_ms
from kafka_direct.topic_partition import TopicPartition

__all__ = ["APIS", "APP_NAME", "SINKS", "TASK_ATTEMPTS", "IngestOptions", "IngestResult",
           "check_master", "local_parallelism", "parse_starting_offsets",
           "spark_context_arguments"]

#: Attempts per task: a plain local master gets ``local[N, TASK_ATTEMPTS]`` (local mode
#: ignores spark.task.maxFailures), a cluster master spark.task.maxFailures unless set.
TASK_ATTEMPTS = 4

#: The ingest job's application name (Spark's UI and logs show it).
APP_NAME = "kafka-direct-ingest"


def spark_context_arguments(options: IngestOptions, ownSession: bool) -> dict[str, Any]:
    """The arguments of the job's :func:`~kafka_direct.runtime.spark.spark_context` (both APIs).

    Its Python processes fork from a server with their imports done where that applies
    (:mod:`kafka_direct.runtime.fork_server`). One place for them: the command launches the
    JVM ahead with the same arguments (:func:`~kafka_direct.runtime.spark.launch_ahead`),
    which only a context asking with equal ones takes.

    Args:
        options: The job's options (master, loopback).
        ownSession: The JVM in a session of its own (an application stopping on Ctrl-C).
    """
    local = options.master.startswith("local")
    loopback = local if options.loopbackDriver is None else options.loopbackDriver
    defaults = {} if local else {"spark.task.maxFailures": str(TASK_ATTEMPTS)}
    parallelism = local_parallelism(options.master) if options.api == "structured" else None
    # The structured job's parallelism replaces the quick-start settings' (forced).
    conf = {} if parallelism is None else {"spark.default.parallelism": parallelism}
    return {"master": options.master, "app_name": APP_NAME, "conf": conf, "test_conf": local,
            "loopback": loopback, "defaults": defaults, "own_session": ownSession,
            "archive": True, "fork_server": True}


_LOCAL_THREADS = re.compile(r"local(?:\[(?P<threads>\*|\d+)(?:,\d+)?\])?")


def local_parallelism(master: str) -> str | None:
    """A local master's threads (``local[N]``: N; ``local[*]``: the cores), else None.

    The structured job's ``spark.default.parallelism``: its source keeps at least that many
    tasks a batch; more tasks than threads run in waves (see ``job_settings``).
    """
    local = _LOCAL_THREADS.fullmatch(master.strip())
    if local is None:
        return None
    threads = local.group("threads")
    return str(os.cpu_count() or 1 if threads == "*" else int(threads or 1))


#: How the job writes: rows and offsets in one transaction, or upserts then offsets.
SINKS = ("transactional", "idempotent")
#: How the job reads and writes: the direct stream, or a Structured Streaming query.
APIS = ("dstream", "structured")

#: Spark's master URLs: local, local[N], local[*], local[N,F], local-cluster[N,C,M],
#: spark://host:port[,host:port], yarn, k8s://..., mesos://...
_MASTER = re.compile(
    r"local(?:\[(?:\*|[1-9]\d*)(?:,[1-9]\d*)?\])?"
    r"|local-cluster\[[1-9]\d*,[1-9]\d*,[1-9]\d*\]"
    r"|spark://[^\s/,:]+:\d+(?:,[^\s/,:]+:\d+)*"
    r"|yarn|k8s://\S+|mesos://\S+")


def check_master(master: str, name: str = "the Spark master") -> None:
    """Raise ConfigurationError unless ``master`` is a Spark master URL of a known form."""
    if not _MASTER.fullmatch(master):
        raise ConfigurationError(
            f"{name} must be local, local[N], local[*], local[N,F], "
            f"local-cluster[N,C,M], spark://HOST:PORT, yarn, k8s://... or mesos://... "
            f"(N, F >= 1), got {master!r}")


def parse_starting_offsets(text: str) -> tuple[str, dict[TopicPartition, int]]:
    """``earliest``, ``latest`` or JSON ``{"topic": {"0": 42}}`` -> (policy, offsets).

    JSON offsets are next offsets to read for the partitions they name, read by the one
    offsets-JSON codec (:func:`~kafka_direct.offsets_json.offsets_from_json`: partitions
    as the source spells them, offsets from 0 to 2**63-1); other partitions start at their
    earliest offset. :class:`IngestOptions` parses its option once (``starting``).

    Raises:
        ConfigurationError: Anything else.
    """
    if text in ("earliest", "latest"):
        return text, {}
    try:
        document = json.loads(text)
    except (ValueError, RecursionError) as error:
        raise ConfigurationError(
            f"starting offsets must be earliest, latest or JSON like "
            f"'{{\"events\": {{\"0\": 42}}}}', got {text[:200]!r} ({error})") from None
    return "earliest", offsets_from_json(document, "starting offsets")


@dataclass(frozen=True, slots=True)
class IngestOptions:
    """What the ingest job reads and writes.

    Attributes:
        topics: Topics to subscribe to (or ``pattern``).
        pattern: A regular expression of topic names (instead of ``topics``).
        group: Consumer group the offsets are stored under.
        table: Target table (created when missing), or a template holding ``{topic}``: a
            table per topic (:class:`~kafka_direct.app.typed.routing.TableRoute`).
        schema: Schema of the table and of the offsets table ``kafka_offsets``.
        batchInterval: Seconds per batch.
        maxRatePerPartition: Records per second per partition (0: no limit).
        backpressure: PID backpressure on.
        sink: ``transactional`` or ``idempotent``.
        startingOffsets: Where partitions without stored offsets start: ``earliest``,
            ``latest`` or JSON ``{"topic": {"partition": offset}}``.
        stopAfterIdleBatches: Stop after this many batches in a row read nothing (0: run
            until stopped).
        master: Spark master. A local one (``local...``) runs with the quick-start settings
            of :mod:`kafka_direct.runtime.spark`; any other gets Spark's own defaults and
            spark-submit's settings, with ``spark.task.maxFailures`` = :data:`TASK_ATTEMPTS`
            unless set there.
        loopbackDriver: Bind the Spark driver to 127.0.0.1 (right when embedded services
            listen there only); None: when the master is local.
        statementTimeoutMs: ``statement_timeout`` of the writing transactions.
        uiPort: Serve the streaming statistics page and metrics on 127.0.0.1 at this
            port (0: a free one); None: no page.
        api: ``dstream`` (the direct stream) or ``structured`` (a Structured Streaming
            query through the kafka-direct source and sink).
        firstBatchRecords: With the ``structured`` api: the most records its first batch
            of a run reads (0: capped as every other batch); None: the job's default,
            :data:`~kafka_direct.app.structured_ingest.FIRST_BATCH_RECORDS`.
        availableNow: With the ``structured`` api: run as ``Trigger.AvailableNow``, the
            batches one after another (each capped as the rate says) up to the log ends of
            the query's start, then end; no idle count (``stopAfterIdleBatches`` 0).
        starting: ``startingOffsets`` as :func:`parse_starting_offsets` reads it, parsed
            once when the options are made.
    """

    topics: tuple[str, ...] = ()
    pattern: str | None = None
    group: str = "kafka-direct-ingest"
    table: str = "kafka_events"
    schema: str = "public"
    batchInterval: float = 2.0
    maxRatePerPartition: int = 0
    backpressure: bool = False
    sink: str = "transactional"
    startingOffsets: str = "earliest"
    stopAfterIdleBatches: int = 0
    master: str = "local[2]"
    statementTimeoutMs: int | None = 60_000
    uiPort: int | None = None
    loopbackDriver: bool | None = None
    api: str = "dstream"
    firstBatchRecords: int | None = None
    availableNow: bool = False
    #: ``startingOffsets`` parsed, once: (policy for partitions it does not name, offsets).
    starting: tuple[str, Mapping[TopicPartition, int]] = field(
        init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.api not in APIS:
            raise ConfigurationError(f"api must be one of {APIS}, got {self.api!r}")
        if bool(self.topics) == bool(self.pattern):
            raise ConfigurationError("give topics or a pattern (one of them)")
        if self.sink not in SINKS:
            raise ConfigurationError(f"sink must be one of {SINKS}, got {self.sink!r}")
        if not (math.isfinite(self.batchInterval) and self.batchInterval > 0):
            raise ConfigurationError(f"the batch interval must be > 0 s, got "
                                     f"{self.batchInterval}")
        to_ms(self.batchInterval, "the batch interval")  # whole milliseconds, >= 1 ms
        check_master(self.master)
        if self.firstBatchRecords is not None and self.firstBatchRecords < 0:
            raise ConfigurationError(f"firstBatchRecords must be >= 0, got "
                                     f"{self.firstBatchRecords}")
        for name in ("maxRatePerPartition", "stopAfterIdleBatches"):
            if getattr(self, name) < 0:
                raise ConfigurationError(f"{name} must be >= 0, got {getattr(self, name)}")
        if self.availableNow and self.api != "structured":
            raise ConfigurationError("availableNow is a Structured Streaming trigger: give "
                                     "api='structured' or drop it")
        if self.availableNow and self.stopAfterIdleBatches:
            raise ConfigurationError("availableNow ends the query at the log ends of its "
                                     "start: stopAfterIdleBatches must be 0")
        if self.uiPort is not None and not 0 <= self.uiPort <= 65535:
            raise ConfigurationError(f"the statistics page's port must be 0 (any free port) "
                                     f"to 65535, got {self.uiPort}")
        if not self.group or not self.table or not self.schema:
            raise ConfigurationError("group, table and schema must be non-empty names")
        from kafka_direct.app.typed.routing import TableRoute

        route = TableRoute(self.table)  # a template: two --topics onto one table refused
        route.tables(self.topics)
        if route.perTopic and self.sink != "transactional":
            raise ConfigurationError(f"--table {self.table!r} (a table per topic) is written "
                                     "with the offsets in one transaction per batch: drop "
                                     f"--sink {self.sink} (transactional is the default)")
        object.__setattr__(self, "starting", parse_starting_offsets(self.startingOffsets))
        _, explicit = self.starting
        pattern = re.compile(self.pattern) if self.pattern else None
        unread = sorted({tp.topic for tp in explicit
                         if (tp.topic not in self.topics if pattern is None
                             else not pattern.fullmatch(tp.topic))})
        if unread:
            raise ConfigurationError(
                f"starting offsets name topics the job does not read: {unread} (it reads "
                + (f"the pattern {self.pattern!r})" if pattern is not None
                   else f"{list(self.topics)})"))


@dataclass(slots=True)
class IngestResult:
    """What a run did.

    Attributes:
        batches: Batches completed.
        records: Records read.
        rowsWritten: Rows written (transactional) or upserted as new (idempotent).
        rangesSkipped: Ranges found applied already (a re-run after a crash).
        offsets: The stored next offsets of the group when the run ended.
        batchesNotRun: Batches queued behind the running one when a stop was asked for:
            neither read nor written (nor their offsets stored); the next run reads them.
    """

    batches: int = 0
    records: int = 0
    rowsWritten: int = 0
    rangesSkipped: int = 0
    batchesNotRun: int = 0
    offsets: dict[TopicPartition, int] = field(default_factory=dict)
