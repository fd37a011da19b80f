"""The options of the ``kafka-direct`` source: Spark's ``kafka`` source options, checked once.

Switching from Spark's source is ``format("kafka")`` -> ``format("kafka-direct")``: the same
option names (case-insensitive, as Spark's), the same defaults and the same checks, each
failing with a :class:`~kafka_direct.errors.ConfigurationError` that names the option and
the fix. The differences:

* ``kafka.*`` are librdkafka properties (``kafka.bootstrap.servers``, ``kafka.security.protocol``,
  ``kafka.sasl.username`` ...), checked by librdkafka itself without connecting. Java-only
  settings fail with what to write instead. ``kafka.enable.auto.commit`` is forced off with
  one warning. ``kafka.isolation.level`` defaults to librdkafka's ``read_committed``.
* ``subscribePattern`` is a Python regular expression matched against the whole topic name
  (``re.fullmatch``), as the direct stream's ``SubscribePattern``.
* ``commitOffsetsToGroup`` (default false): after each batch, commit its end offsets to
  ``kafka.group.id`` so monitoring tools show the query's lag. Only for them: the query
  resumes from its checkpoint, never from the group.
* ``maxOffsetsPerPartitionPerTrigger`` (not in Spark): a cap of that many offsets times the
  partitions the source sees at each trigger (counted again at every trigger, so
  partitions that appear raise it), shared by lag as ``maxOffsetsPerTrigger``; with
  ``maxOffsetsPerTrigger`` too, the smaller cap wins. A rate per partition:
  records per second per partition x trigger interval.
* ``maxOffsetsFirstTrigger`` (not in Spark): a cap on the first batch each run of the query
  plans (after a restart too), shared by lag as ``maxOffsetsPerTrigger``; the smaller cap
  wins, and later batches have only the others. The first batch pays for the query's start
  (Spark's planning processes, the first tasks of its workers): a small one commits its
  rows sooner. Its end is in the offset log before it runs, as every batch's, so a replay
  reads the same offsets.

Every option with its default is in the source's table in docs/configuration.md, which
tests/architecture/test_docs.py keeps in step with :data:`KNOWN_OPTIONS`. ``startingTimestamp`` >
``startingOffsetsByTimestamp`` > ``startingOffsets`` in priority (the same for the ending
ones), as Spark.

kafka-direct's own: ``reader`` (``c`` | ``python``): which executor reader builds the record
batches, the native columnar one or the Python one; unset, the environment variable
``KAFKA_DIRECT_IMPL`` decides, else the native one whenever it loads. ``pauseFile`` (an
absolute path on the driver's file system, not a directory): while a file is there, a
trigger admits no new offsets. The running batch completes, and the triggers after it find
nothing (under ``Trigger.AvailableNow`` the query then ends); remove the file and the next
trigger reads on. A graceful stop creates it, waits for the running batch, then stops the
query, which then has no batch to interrupt.
"""

from __future__ import annotations

import difflib
import logging
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kafka_direct.client.params import force_param
from kafka_direct.conf_values import parse_bool, parse_int
from kafka_direct.errors import ConfigurationError
from kafka_direct.rdd.kafka_schema import all_columns, schema_columns, select_columns
from kafka_direct.sql.kafka_options import KAFKA_PREFIX, kafka_params, reader_option
from kafka_direct.sql.range_rows import EMIT_MODES, is_range_schema
from kafka_direct.sql.source.offsets import (
    parse_assign,
    parse_offsets_option,
    parse_timestamps_option,
)
from kafka_direct.topic_partition import TopicPartition

__all__ = [
    "DEFAULT_MAX_RANGES_PER_TASK",
    "DEFAULT_MIN_OFFSETS_PER_TASK",
    "KNOWN_OPTIONS",
    "OffsetSpec",
    "SourceOptions",
    "Subscription",
    "parse_duration_ms",
    "parse_source_options",
]

logger = logging.getLogger(__name__)

#: ``minOffsetsPerTask``'s default: a task reads at least this many offsets (unless the batch
#: has fewer), so that Spark's cost per task of a Python data source, about 10 ms, is a few
#: percent of a task's time (:func:`kafka_direct.sql.source.planning.pack_ranges`).
DEFAULT_MIN_OFFSETS_PER_TASK = 100_000
#: ``maxRangesPerTask``'s default: the most ranges (partitions) one task reads, in one fetch
#: session when they are small (:func:`kafka_direct.rdd.arrow_reader.in_session`).
DEFAULT_MAX_RANGES_PER_TASK = 1000
#: Options of other parts of kafka-direct that a source may be given (the offset link).
_OTHER_PREFIXES = ("offsetstore.",)
#: Every option the source reads, ``kafka.*`` aside, in Spark's spelling (for messages).
_SPELLING = {name.lower(): name for name in (
    "startingOffsets", "endingOffsets", "startingTimestamp", "endingTimestamp",
    "startingOffsetsByTimestamp", "endingOffsetsByTimestamp",
    "startingOffsetsByTimestampStrategy", "failOnDataLoss", "kafkaConsumer.pollTimeoutMs",
    "fetchOffset.numRetries", "fetchOffset.retryIntervalMs", "maxOffsetsPerTrigger",
    "minOffsetsPerTrigger", "maxTriggerDelay", "minPartitions", "maxRecordsPerPartition",
    "minOffsetsPerTask", "maxRangesPerTask",
    "groupIdPrefix", "includeHeaders", "commitOffsetsToGroup", "subscribePattern", "assign",
    "subscribe", "maxOffsetsPerPartitionPerTrigger", "maxOffsetsFirstTrigger", "reader",
    "columns", "pauseFile", "emit")}
#: The same, lower case, as Spark hands them over.
KNOWN_OPTIONS = frozenset(_SPELLING)

_DURATION = re.compile(r"(\d+)\s*(us|ms|s|m|min|h|d)?")
_DURATION_MS = {"us": 0.001, "ms": 1, None: 1, "s": 1000, "m": 60_000, "min": 60_000,
                "h": 3_600_000, "d": 86_400_000}


def parse_duration_ms(option: str, raw: str) -> int:
    """A duration as Spark writes them, in whole milliseconds.

    ``15m``, ``30s``, ``500ms``, ``1h``, ``2d``; a bare number is milliseconds.

    Raises:
        ConfigurationError: Anything else (a fraction, a negative, an unknown unit).
    """
    found = _DURATION.fullmatch(str(raw).strip().lower())
    if found is None:
        raise ConfigurationError(
            f"option {_SPELLING.get(option, option)!r} must be a duration such as 15m, 30s, "
            f"500ms, 1h or 2d (a bare number is milliseconds), got {raw!r}")
    return int(int(found.group(1)) * _DURATION_MS[found.group(2)])


@dataclass(frozen=True, slots=True)
class Subscription:
    """Which partitions the source reads.

    Attributes:
        kind: ``assign``, ``subscribe`` or ``subscribePattern``.
        topics: The subscribed topics (``subscribe``), sorted.
        pattern: The regular expression (``subscribePattern``), matched with ``fullmatch``.
        partitions: The assigned partitions (``assign``), sorted.
    """

    kind: str
    topics: tuple[str, ...] = ()
    pattern: str = ""
    partitions: tuple[TopicPartition, ...] = ()

    def __post_init__(self) -> None:
        if self.kind not in ("assign", "subscribe", "subscribePattern"):
            raise ConfigurationError(
                f"a subscription is assign, subscribe or subscribePattern, got {self.kind!r}")
        if self.kind == "subscribePattern":
            try:
                re.compile(self.pattern)
            except re.error as error:
                raise ConfigurationError(
                    f"option 'subscribePattern': {self.pattern!r} is not a valid Python "
                    f"regular expression: {error}") from None

    def matches(self, topic: str) -> bool:
        """Whether the source reads ``topic`` (for assign: whether it names a partition)."""
        if self.kind == "subscribe":
            return topic in self.topics
        if self.kind == "subscribePattern":
            return re.fullmatch(self.pattern, topic) is not None
        return any(tp.topic == topic for tp in self.partitions)

    def covers(self, tp: TopicPartition) -> bool:
        """Whether ``tp`` belongs to what the source reads."""
        if self.kind == "assign":
            return tp in self.partitions
        return self.matches(tp.topic)

    def __str__(self) -> str:
        if self.kind == "subscribe":
            return f"subscribe={','.join(self.topics)}"
        if self.kind == "subscribePattern":
            return f"subscribePattern={self.pattern}"
        return f"assign={','.join(str(tp) for tp in self.partitions)}"


@dataclass(frozen=True, slots=True)
class OffsetSpec:
    """Where reading starts (or, for a batch query, ends), as an option said.

    Attributes:
        option: The option it came from (Spark's spelling), for messages.
        kind: ``earliest``, ``latest``, ``offsets`` (per partition, with -2 / -1),
            ``timestamps`` (epoch ms per partition) or ``timestamp`` (one for all).
        offsets: The per-partition offsets or timestamps of ``offsets`` / ``timestamps``.
        timestamp: The epoch ms of ``timestamp``.
        topics: Topic-level offsets of ``offsets`` (-2 earliest, -1 latest): every
            partition of the topic that ``offsets`` does not name.
    """

    option: str
    kind: str
    offsets: Mapping[TopicPartition, int] = field(default_factory=dict)
    timestamp: int | None = None
    topics: Mapping[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.kind not in ("earliest", "latest", "offsets", "timestamps", "timestamp"):
            raise ConfigurationError(f"{self.option}: unknown kind of offsets {self.kind!r}")


@dataclass(frozen=True, slots=True)
class SourceOptions:
    """The source's options, checked. Build with :func:`parse_source_options`.

    Attributes:
        kafkaParams: librdkafka properties (the ``kafka.`` options, prefix removed) with
            ``group.id`` set; never shown unredacted.
        subscription: What to read.
        starting: Where a new query (or a batch query) starts.
        ending: Where a batch query ends (None for streams).
        timestampStrategy: ``error`` or ``latest``: a starting timestamp no record reaches.
        maxOffsetsPerTrigger: Most offsets per micro-batch, or None.
        maxOffsetsPerPartitionPerTrigger: Most offsets per micro-batch per partition seen
            at its trigger, or None.
        minOffsetsPerTrigger: Fewest offsets for a micro-batch to run, or None.
        maxOffsetsFirstTrigger: Most offsets of the first micro-batch a run plans, or None.
        maxTriggerDelayMs: Longest a micro-batch waits for ``minOffsetsPerTrigger``.
        failOnDataLoss: Fail on lost offsets (else warn and go on from the log start).
        includeHeaders: Whether rows have the ``headers`` column.
        groupId: The consumer group (``kafka.group.id``, or ``groupIdPrefix``).
        groupGiven: Whether the user set ``kafka.group.id``.
        minPartitions: Split ranges so a batch has at least this many tasks, or None.
        maxRecordsPerPartition: Split ranges longer than this, or None.
        minOffsetsPerTask: Pack consecutive small ranges into tasks of at least this many
            offsets (ours; see :func:`kafka_direct.sql.source.planning.pack_ranges`); 0:
            one task per range, as Spark's source.
        maxRangesPerTask: The most ranges packed into one task (ours; a task of several
            small ranges reads them with one consumer in one fetch session).
        pollTimeoutMs: Longest a task waits without progress.
        numRetries: Retries of a driver-side Kafka question.
        retryIntervalMs: Pause between those retries.
        commitOffsetsToGroup: Commit each batch's end to ``kafka.group.id`` (monitoring).
        pauseFile: While a file is at this path, triggers admit no new offsets; None: never.
        reader: The executors' reader, ``c`` or ``python``; None: ``KAFKA_DIRECT_IMPL``, else
            the native one when it loads.
        columns: The only columns read (the ``columns`` option, or a ``.schema()`` of some
            Kafka columns), the others never built; None: all of them.
        emit: ``records`` (Spark's Kafka rows), or ``offsetRanges``: one row per planned
            range, whose records a reading sink reads itself
            (:mod:`kafka_direct.sql.range_rows`).
    """

    kafkaParams: dict[str, Any]
    subscription: Subscription
    starting: OffsetSpec
    ending: OffsetSpec | None = None
    timestampStrategy: str = "error"
    maxOffsetsPerTrigger: int | None = None
    minOffsetsPerTrigger: int | None = None
    maxOffsetsPerPartitionPerTrigger: int | None = None
    maxOffsetsFirstTrigger: int | None = None
    maxTriggerDelayMs: int = 15 * 60_000
    failOnDataLoss: bool = True
    includeHeaders: bool = False
    groupId: str = "spark-kafka-source"
    groupGiven: bool = False
    minPartitions: int | None = None
    maxRecordsPerPartition: int | None = None
    minOffsetsPerTask: int = DEFAULT_MIN_OFFSETS_PER_TASK
    maxRangesPerTask: int = DEFAULT_MAX_RANGES_PER_TASK
    pollTimeoutMs: int = 120_000
    numRetries: int = 3
    retryIntervalMs: int = 1000
    commitOffsetsToGroup: bool = False
    pauseFile: str | None = None
    reader: str | None = None
    columns: tuple[str, ...] | None = None
    emit: str = "records"

    def __post_init__(self) -> None:
        if self.emit not in EMIT_MODES:
            raise ConfigurationError(f"option 'emit' must be one of {list(EMIT_MODES)}, got "
                                     f"{self.emit!r}")

    @property
    def emitsRanges(self) -> bool:
        """Whether the source's rows are its batches' offset ranges, not their records."""
        return self.emit == "offsetRanges"

    def __repr__(self) -> str:
        from kafka_direct.redaction import redact_params

        return (f"SourceOptions({self.subscription}, kafkaParams="
                f"{redact_params(self.kafkaParams)!r}, starting={self.starting.kind}, "
                f"ending={self.ending.kind if self.ending else None}, "
                f"maxOffsetsPerTrigger={self.maxOffsetsPerTrigger}, "
                f"minOffsetsPerTrigger={self.minOffsetsPerTrigger}, "
                f"maxOffsetsPerPartitionPerTrigger={self.maxOffsetsPerPartitionPerTrigger}, "
                f"failOnDataLoss={self.failOnDataLoss}, groupId={self.groupId!r})")


def _lowered(options: Mapping[str, Any]) -> dict[str, str]:
    lowered: dict[str, str] = {}
    for key, value in options.items():
        if not isinstance(key, str):
            raise ConfigurationError(f"source option names must be strings, got {key!r}")
        lowered[key.lower()] = value if isinstance(value, str) else str(value)
    return lowered


def _subscription(opts: Mapping[str, str]) -> Subscription:
    given = [name for name in ("assign", "subscribe", "subscribepattern") if name in opts]
    if not given:
        raise ConfigurationError(
            "one of the options 'subscribe', 'subscribePattern' or 'assign' must be given: "
            "e.g. .option('subscribe', 'topicA,topicB')")
    if len(given) > 1:
        raise ConfigurationError(
            f"only one of the options 'subscribe', 'subscribePattern' and 'assign' may be "
            f"given, got {', '.join(_SPELLING[g] for g in given)}; keep one")
    kind = given[0]
    value = opts[kind]
    if kind == "subscribe":
        topics = tuple(sorted({t.strip() for t in value.split(",") if t.strip()}))
        if not topics:
            raise ConfigurationError(
                f"option 'subscribe' names no topic ({value!r}); give a comma-separated list "
                "of topic names, e.g. 'topicA,topicB'")
        return Subscription("subscribe", topics=topics)
    if kind == "subscribepattern":
        if not value.strip():
            raise ConfigurationError(
                f"option 'subscribePattern' is empty ({value!r}); give a regular expression "
                "matching whole topic names, e.g. 'events-.*'")
        return Subscription("subscribePattern", pattern=value.strip())
    return Subscription("assign", partitions=parse_assign(value))


def _positive(opts: Mapping[str, str], name: str) -> int | None:
    if name not in opts:
        return None
    return parse_int(f"option {_SPELLING[name]!r}", opts[name], 1)


def _timestamp(opts: Mapping[str, str], name: str) -> int:
    return parse_int(f"option {_SPELLING[name]!r} (epoch milliseconds)", opts[name], 0)


def _offset_spec(opts: Mapping[str, str], which: str, default: str, streaming: bool
                 ) -> OffsetSpec:
    """``starting`` or ``ending`` offsets: timestamp > by-timestamp > offsets, as Spark."""
    single, by_ts, plain = (f"{which}timestamp", f"{which}offsetsbytimestamp",
                            f"{which}offsets")
    if single in opts:
        return OffsetSpec(_SPELLING[single], "timestamp", timestamp=_timestamp(opts, single))
    if by_ts in opts:
        return OffsetSpec(_SPELLING[by_ts], "timestamps",
                          offsets=parse_timestamps_option(_SPELLING[by_ts], opts[by_ts]))
    option = _SPELLING[plain]
    raw = opts.get(plain, default).strip()
    lowered = raw.lower()
    batch_start = which == "starting" and not streaming
    batch_end = which == "ending"
    if lowered in ("earliest", "latest"):
        if batch_start and lowered == "latest":
            raise ConfigurationError(
                "option 'startingOffsets' can't be latest for batch queries (nothing would be "
                "read); use earliest, JSON offsets or a starting timestamp")
        if batch_end and lowered == "earliest":
            raise ConfigurationError(
                "option 'endingOffsets' can't be earliest for batch queries (nothing would be "
                "read); use latest or JSON offsets")
        return OffsetSpec(option, lowered)
    if not raw.startswith("{"):
        raise ConfigurationError(
            f"option {option!r} must be earliest, latest or JSON offsets such as "
            f'{{"topicA": {{"0": 23, "1": -1}}}}, got {raw!r}')
    offsets, topics = parse_offsets_option(option, raw, allow_earliest=not batch_end,
                                           allow_latest=not batch_start)
    return OffsetSpec(option, "offsets", offsets=offsets, topics=topics)


def _warn_unknown(opts: Mapping[str, str]) -> None:
    for key in sorted(opts):
        if key.startswith((KAFKA_PREFIX, *_OTHER_PREFIXES)) or key in KNOWN_OPTIONS:
            continue
        close = difflib.get_close_matches(key, KNOWN_OPTIONS, n=1)
        hint = f" (did you mean {_SPELLING.get(close[0], close[0])!r}?)" if close else ""
        logger.warning("the kafka-direct source ignores the unknown option %r%s", key, hint)


def _columns(opts: Mapping[str, str], headers: bool, schema: Any) -> tuple[str, ...] | None:
    """The ``columns`` option and the schema read with, which must agree."""
    named = (select_columns(opts["columns"], headers, "option 'columns'")
             if "columns" in opts else None)
    given = None if schema is None else schema_columns(schema, headers)
    if named is not None and schema is not None and named != (given or all_columns(headers)):
        raise ConfigurationError(
            f"option 'columns' ({','.join(named)}) and the schema given "
            f"({schema.simpleString()}) disagree: give one of them")
    return given if schema is not None else named


def parse_source_options(options: Mapping[str, Any], *, streaming: bool | None,
                         check_client: bool = True, schema: Any = None) -> SourceOptions:
    """Check the source's options as Spark's ``kafka`` source does, and read them.

    Args:
        options: The options as given (names in any case).
        streaming: ``readStream`` (True) or ``read`` (False): decides defaults and checks.
            None when not known yet (the schema is asked before the reader): every check
            but those of starting and ending offsets, which are then left at their
            streaming defaults.
        check_client: Let librdkafka check the ``kafka.*`` properties (a few ms, no network).
        schema: The schema Spark reads with (a user's ``.schema()``, or the source's own).

    Raises:
        ConfigurationError: A missing, conflicting or malformed option; the message names
            the option and the fix.
    """
    opts = _lowered(options)
    subscription = _subscription(opts)
    params = kafka_params(opts, check_client)
    force_param(params, "enable.auto.commit", False,
                "the source's offsets live in the query's checkpoint; commits to the group "
                "only follow with commitOffsetsToGroup=true", "source")
    ending: OffsetSpec | None = None
    if streaming is None:
        starting = OffsetSpec("startingOffsets", "latest")
    elif streaming:
        for name in ("endingoffsets", "endingoffsetsbytimestamp", "endingtimestamp"):
            if name in opts:
                raise ConfigurationError(
                    f"option {_SPELLING[name]!r} is not valid in streaming queries: remove "
                    "it; to stop at the offsets of the query's start, use "
                    ".trigger(availableNow=True)")
        starting = _offset_spec(opts, "starting", "latest", streaming)
    else:
        starting = _offset_spec(opts, "starting", "earliest", streaming)
        ending = _offset_spec(opts, "ending", "latest", streaming)
    strategy = opts.get("startingoffsetsbytimestampstrategy", "error").strip().lower()
    if strategy not in ("error", "latest"):
        raise ConfigurationError(
            f"option 'startingOffsetsByTimestampStrategy' must be error or latest, got "
            f"{opts['startingoffsetsbytimestampstrategy']!r}")
    maximum = _positive(opts, "maxoffsetspertrigger")
    minimum = _positive(opts, "minoffsetspertrigger")
    if maximum is not None and minimum is not None and minimum > maximum:
        raise ConfigurationError(
            f"option 'minOffsetsPerTrigger' ({minimum}) is higher than 'maxOffsetsPerTrigger' "
            f"({maximum}): no batch could satisfy both; lower the minimum or raise the maximum")
    delay_ms = parse_duration_ms("maxtriggerdelay", opts.get("maxtriggerdelay", "15m"))
    group_given = bool(params.get("group.id"))
    default_prefix = "spark-kafka-relation" if streaming is False else "spark-kafka-source"
    prefix = opts.get("groupidprefix", default_prefix).strip()
    if not prefix:
        raise ConfigurationError("option 'groupIdPrefix' is empty; remove it or give a name")
    group = str(params["group.id"]) if group_given else prefix
    params["group.id"] = group
    commit = parse_bool("option 'commitOffsetsToGroup'", opts.get("commitoffsetstogroup",
                                                                   "false"))
    if commit and not group_given:
        raise ConfigurationError(
            "option 'commitOffsetsToGroup' needs 'kafka.group.id': the consumer group whose "
            "committed offsets monitoring tools read")
    _warn_unknown(opts)
    headers = parse_bool("option 'includeHeaders'", opts.get("includeheaders", "false"))
    emit = _emit(opts, streaming, headers, schema)
    return SourceOptions(
        kafkaParams=params,
        subscription=subscription,
        starting=starting,
        ending=ending,
        timestampStrategy=strategy,
        maxOffsetsPerTrigger=maximum,
        minOffsetsPerTrigger=minimum,
        maxOffsetsPerPartitionPerTrigger=_positive(opts, "maxoffsetsperpartitionpertrigger"),
        maxOffsetsFirstTrigger=_positive(opts, "maxoffsetsfirsttrigger"),
        maxTriggerDelayMs=delay_ms,
        failOnDataLoss=parse_bool("option 'failOnDataLoss'",
                                  opts.get("failondataloss", "true")),
        includeHeaders=headers,
        columns=None if emit == "offsetRanges" else _columns(opts, headers, schema),
        reader=reader_option(opts),
        groupId=group,
        groupGiven=group_given,
        minPartitions=_positive(opts, "minpartitions"),
        maxRecordsPerPartition=_positive(opts, "maxrecordsperpartition"),
        minOffsetsPerTask=parse_int("option 'minOffsetsPerTask'",
                                    opts.get("minoffsetspertask",
                                             str(DEFAULT_MIN_OFFSETS_PER_TASK)), 0),
        maxRangesPerTask=parse_int("option 'maxRangesPerTask'",
                                   opts.get("maxrangespertask",
                                            str(DEFAULT_MAX_RANGES_PER_TASK)), 1),
        pollTimeoutMs=parse_int("option 'kafkaConsumer.pollTimeoutMs'",
                                opts.get("kafkaconsumer.polltimeoutms", "120000"), 1),
        numRetries=parse_int("option 'fetchOffset.numRetries'",
                             opts.get("fetchoffset.numretries", "3"), 0),
        retryIntervalMs=parse_int("option 'fetchOffset.retryIntervalMs'",
                                  opts.get("fetchoffset.retryintervalms", "1000"), 0),
        commitOffsetsToGroup=commit,
        pauseFile=_pause_file(opts, streaming),
        emit=emit,
    )


def _emit(opts: Mapping[str, str], streaming: bool | None, headers: bool, schema: Any) -> str:
    """Option ``emit``: ``records`` (the default) or ``offsetRanges``, which reads no record."""
    given = opts.get("emit", "records").strip()
    emit = {mode.lower(): mode for mode in EMIT_MODES}.get(given.lower())
    if emit is None:
        raise ConfigurationError(f"option 'emit' must be records or offsetRanges, got "
                                 f"{given!r}")
    if emit == "records":
        return emit
    if streaming is False:
        raise ConfigurationError(
            "option 'emit=offsetRanges' is for streaming queries, whose sink reads each "
            "batch's ranges (the kafka-direct-postgres sink with kafka.* options); a batch "
            "read emits records: remove it")
    if "columns" in opts or headers:
        raise ConfigurationError(
            "option 'emit=offsetRanges' emits no record columns, so 'columns' and "
            "'includeHeaders' do not apply: the sink that reads the ranges chooses the "
            "record columns (its option recordColumns); remove them")
    if schema is not None and not is_range_schema(
            [(f.name, f.dataType) for f in getattr(schema, "fields", [])]):
        raise ConfigurationError(
            f"option 'emit=offsetRanges' emits the columns topic, partition, fromOffset and "
            f"untilOffset; the schema given ({schema.simpleString()}) differs: drop .schema()")
    return emit


def _pause_file(opts: Mapping[str, str], streaming: bool | None) -> str | None:
    if "pausefile" not in opts:
        return None
    if streaming is False:
        raise ConfigurationError("option 'pauseFile' pauses a streaming query's triggers; a "
                                 "batch read has none: remove it")
    path = opts["pausefile"].strip()
    if not path:
        raise ConfigurationError("option 'pauseFile' is empty; remove it or give the path of "
                                 "a file whose presence pauses the source")
    if not os.path.isabs(path):
        # Spark's planner process runs in a directory of Spark's choosing, not the caller's.
        raise ConfigurationError(f"option 'pauseFile' must be an absolute path, got {path!r}: "
                                 "the source looks for it from Spark's planner process")
    if os.path.isdir(path):
        raise ConfigurationError(f"option 'pauseFile' names a directory ({path!r}): give the "
                                 "path of a file, whose presence pauses the source")
    return path
