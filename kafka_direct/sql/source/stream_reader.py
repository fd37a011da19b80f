"""The ``kafka-direct`` stream reader: Structured Streaming's Source contract over Kafka.

Offsets are ``{"topic": {"partition": next offset}}`` in one stable key order
(:mod:`kafka_direct.sql.source.offsets`); the engine writes each batch's end into its offset
log before the batch runs and replays a batch from that log after a failure, so everything
below is a function of the offsets it is given:

* :meth:`~KafkaDirectStreamReader.initialOffset` (a new query only): the offset store's
  committed offsets when the query is linked to one (``offsetStore.name``) and the store has
  offsets (partitions it lacks are new: read from offset 0); otherwise
  ``startingTimestamp`` / ``startingOffsetsByTimestamp`` / ``startingOffsets``.
* :meth:`~KafkaDirectStreamReader.latestOffset` (admission control): the end of the next
  batch: at most ``maxOffsetsPerTrigger`` offsets (and ``maxOffsetsPerPartitionPerTrigger``
  times the partitions seen at this trigger; the run's first batch also at most
  ``maxOffsetsFirstTrigger``) shared by lag, no batch until
  ``minOffsetsPerTrigger`` offsets or ``maxTriggerDelay``; under ``Trigger.AvailableNow``
  never beyond the offsets seen when the query started (a target partition that disappears
  or whose log ends below the target since is data loss). Partitions that appeared start at
  offset 0; a log that went back below the position, or a topic the cluster says no longer
  exists, is data loss (with ``failOnDataLoss=false``: a warning, and a deleted topic's
  partitions leave the offsets, so a re-created topic is read from offset 0).
* :meth:`~KafkaDirectStreamReader.partitions`: a range per topic-partition with records in
  the batch, split for ``minPartitions`` / ``maxRecordsPerPartition``, small ranges grouped
  into input partitions (``minOffsetsPerTask``, ``maxRangesPerTask``) by a pure function of
  the ranges and the options (:mod:`kafka_direct.sql.source.planning`).
* :meth:`~KafkaDirectStreamReader.read` (executors): the input partition's records as Arrow
  batches, in the order of its ranges, read by KafkaRDD's gap-safe reader; many small
  ranges with one consumer in one fetch session.
* :meth:`~KafkaDirectStreamReader.commit`: only informs. With ``commitOffsetsToGroup`` the
  offsets of completed batches go to ``kafka.group.id`` for monitoring tools.

The driver-side methods run in one long-lived Python process; ``read`` runs in executors on
a copy of the reader without its driver state (consumer, link, clocks).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)

from kafka_direct.client.params import executor_params
from kafka_direct.errors import KafkaDirectError, KafkaUnavailableError
from kafka_direct.heap import freeze_at_start, thaw_at_stop
from kafka_direct.offset_range import OffsetRange, Offsets
from kafka_direct.offsets_json import SourceOffsets, offsets_from_json, offsets_to_json
from kafka_direct.rdd.arrow_reader import PartitionReadSettings, driver_impl, read_task
from kafka_direct.rdd.kafka_rdd import ReadSettings
from kafka_direct.sql.link.source_side import SourceLink, bind_plan, catch_up, covered
from kafka_direct.sql.range_rows import range_batch
from kafka_direct.sql.source.admission import NEW_PARTITION_START, TriggerDelay, admit, start_of
from kafka_direct.sql.source.data_loss import DataLossChecks
from kafka_direct.sql.source.metadata import EndsAsked, SourceMetadata
from kafka_direct.sql.source.options import SourceOptions, parse_source_options
from kafka_direct.sql.source.parsed_offsets import ParsedOffsets
from kafka_direct.sql.source.planning import KafkaInputPartition, plan_tasks
from kafka_direct.task_errors import carried
from kafka_direct.topic_partition import TopicPartition

__all__ = ["KafkaDirectStreamReader", "plan_offsets", "read_settings"]

logger = logging.getLogger(__name__)

#: The ReadMaxRows of a per-partition cap alone: Spark's Long.MaxValue, no bound itself.
_NO_BOUND = 2**63 - 1

#: Attributes that exist only on the driver: never shipped to executors. (The link goes:
#: read tasks bind their batch's plan with it.)
_DRIVER_ONLY = ("_metadata", "_checks", "_delay", "_target", "_latest", "_latestJson",
                "_groupCommitted", "_storeChecked", "_lost", "_parsed", "_paused")


def plan_offsets(start: Offsets, end: Offsets) -> tuple[SourceOffsets, SourceOffsets]:
    """A batch's plan as an offset store records it: where each partition starts and ends.

    Every partition of the end has its start (a new one: offset 0). A partition whose end
    went back below its start (a truncated log, ``failOnDataLoss=false``) reads nothing
    and is left out: the store keeps the offset it had.
    """
    until = {tp: offset for tp, offset in end.items() if offset >= start_of(start, tp)}
    return (offsets_to_json({tp: start_of(start, tp) for tp in until}),
            offsets_to_json(until))


def read_settings(options: SourceOptions) -> PartitionReadSettings:
    """How the source's tasks read, from its options (executor parameters forced safe)."""
    return PartitionReadSettings(
        ReadSettings(executor_params(options.kafkaParams), pollTimeoutMs=options.pollTimeoutMs,
                     failOnDataLoss=options.failOnDataLoss),
        includeHeaders=options.includeHeaders,
        columns=options.columns,
        impl=options.reader or driver_impl())


class KafkaDirectStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Reads Kafka for a streaming query (``spark.readStream.format("kafka-direct")``).

    Args:
        options: The source's options, checked (see :meth:`create`).
        link: Where a linked sink keeps the query's committed offsets, or None.
        metadata: Asks Kafka on the driver (created on first use when None).
        clockMs: Milliseconds on a monotonic clock, for ``maxTriggerDelay`` (injectable).
        parallelism: Spark's default parallelism where the source was registered, or None
            (see :func:`~kafka_direct.sql.source.planning.default_parallelism`).
    """

    def __init__(self, options: SourceOptions, link: SourceLink | None = None,
                 metadata: SourceMetadata | None = None, clockMs: Any = None,
                 parallelism: int | None = None) -> None:
        self.options = options
        self.parallelism = parallelism
        self.settings = read_settings(options)
        self._link = link
        self._metadata = metadata
        #: The positions checked against the logs (see :attr:`checks`).
        self._checks: DataLossChecks | None = None
        self._delay = (TriggerDelay(options.minOffsetsPerTrigger, options.maxTriggerDelayMs,
                                    clockMs)
                       if options.minOffsetsPerTrigger is not None else None)
        #: Trigger.AvailableNow: the latest offsets when the query started.
        self._target: Offsets | None = None
        #: The latest offsets seen by the last latestOffset call (for the query's progress).
        self._latest: Offsets | None = None
        #: Their JSON, when the batch's end was written as it (see reportLatestOffset).
        self._latestJson: SourceOffsets | None = None
        #: What was last committed to the group (commitOffsetsToGroup).
        self._groupCommitted: Offsets | None = None
        #: Where this query started, when this run started it (initialOffset): nothing to
        #: commit to the group before a batch read from there.
        self._initial: Offsets | None = None
        #: Whether this run compared its checkpoint with the offset store yet.
        self._storeChecked = False
        #: Whether this run planned a batch that reads (maxOffsetsFirstTrigger caps the first).
        self._planned = False
        #: Partitions this run saw lost with their topic (failOnDataLoss=false): read from
        #: offset 0 once back, away from the store's old offset.
        self._lost: set[TopicPartition] = set()
        #: The offsets JSON of recent batches, read once (see :attr:`codec`).
        self._parsed: ParsedOffsets | None = None
        #: Whether the last trigger found the pause file (its start and end are logged).
        self._paused = False

    @classmethod
    def create(cls, rawOptions: Mapping[str, Any], schema: Any = None,
               parallelism: int | None = None) -> KafkaDirectStreamReader:
        """The reader for a query's options: checked, and linked to an offset store if asked.

        Raises:
            ConfigurationError: An option is wrong (it is named, with the fix).
        """
        options = parse_source_options(rawOptions, streaming=True, schema=schema)
        return cls(options, SourceLink.from_options(rawOptions), parallelism=parallelism)

    def __getstate__(self) -> dict[str, Any]:
        # Executors get what read() needs: the consumer, the link's DSN and the clocks
        # stay on the driver.
        state = dict(self.__dict__)
        for name in _DRIVER_ONLY:
            state[name] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    @property
    def metadata(self) -> SourceMetadata:
        """The driver's questions to Kafka (its consumer is created on first use)."""
        if self._metadata is None:
            self._metadata = SourceMetadata(self.options)
        return self._metadata

    @property
    def checks(self) -> DataLossChecks:
        """The query's positions checked against the logs, asked through :attr:`metadata`."""
        if self._checks is None:
            self._checks = DataLossChecks(self.metadata)
        return self._checks

    @property
    def codec(self) -> ParsedOffsets:
        """Reads and writes the engine's offsets JSON; what a trigger gets back is read once."""
        if self._parsed is None:
            self._parsed = ParsedOffsets()
        return self._parsed

    # -- the Source contract ----------------------------------------------------------------

    def initialOffset(self) -> SourceOffsets:
        """Where a new query starts: the offset store's offsets, else the starting options."""
        with carried():
            metadata = self.metadata
            metadata.check_assigned()
            partitions = metadata.partitions()
            committed = self._link.committed() if self._link is not None else None
            if committed:
                offsets = self._from_store(committed, partitions)
            else:
                offsets = metadata.resolve(self.options.starting, partitions)
            logger.info("kafka-direct source (%s) starts at %s", self.options.subscription,
                        offsets_to_json(offsets))
            self._initial = dict(offsets)
            return offsets_to_json(offsets)

    def _from_store(self, committed: SourceOffsets, partitions: set[TopicPartition]
                    ) -> dict[TopicPartition, int]:
        """The store's offsets, checked against the logs: the query's position.

        Once the store has offsets, ``startingOffsets`` no longer applies: a partition the
        store lacks (added while the query was down, or a topic new to the subscription) is
        new to the query and is left out, so :meth:`latestOffset` reads it from offset 0
        with the new-partition data-loss check, as a query resumed from its checkpoint does.
        """
        metadata = self.metadata
        stored = {tp: offset for tp, offset in offsets_from_json(
            committed, "the offset store's committed offsets").items()
            if self.options.subscription.covers(tp)}
        offsets = dict(stored)
        present = set(stored) & partitions
        checked = self.checks.behind(stored, metadata.latest(present))
        for tp in present:
            if checked[tp] < stored[tp]:  # the log lost what the store says was read
                offsets[tp] = checked[tp]
        new = sorted(partitions - set(stored))
        if new:
            logger.info("kafka-direct source (%s): %s not in offset store; read from offset "
                        "%d as new partitions", self.options.subscription,
                        ", ".join(str(tp) for tp in new), NEW_PARTITION_START)
        return offsets

    def getDefaultReadLimit(self) -> ReadLimit:
        """The options' limit: max rows, else min rows, else everything available.

        ``maxOffsetsPerTrigger`` is ReadMaxRows, ``minOffsetsPerTrigger`` ReadMinRows. Both
        together are applied by :meth:`latestOffset` from the options (the Python API has
        no composite limit), as are ``maxOffsetsPerPartitionPerTrigger`` and
        ``maxOffsetsFirstTrigger``: alone, each is a ReadMaxRows without a bound of its
        own, so that ``latestOffset`` applies it (ReadAllAvailable means Trigger.Once,
        which reads everything).

        Spark asks this once at every start, in the source's own driver process: the
        moment to take the offset store's lock (a second query on the same store then
        fails at once, and a restart whose first batch reads nothing still holds it).
        Not in the constructor: Spark also builds readers in reused worker processes.
        """
        if self._link is not None:
            with carried():
                self._link.hold()
        if self.options.maxOffsetsPerTrigger is not None:
            return ReadMaxRows(self.options.maxOffsetsPerTrigger)
        if self.options.minOffsetsPerTrigger is not None:
            return ReadMinRows(self.options.minOffsetsPerTrigger)
        if (self.options.maxOffsetsPerPartitionPerTrigger is not None
                or self.options.maxOffsetsFirstTrigger is not None):
            return ReadMaxRows(_NO_BOUND)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        """Trigger.AvailableNow: fix the target at the latest offsets of now."""
        with carried():
            metadata = self.metadata
            # Before any offset request: a missing assigned partition is the user's mistake,
            # not a broker that does not answer.
            metadata.check_assigned()
            self._target = metadata.latest(metadata.partitions())
            logger.info("kafka-direct source: Trigger.AvailableNow reads up to %s",
                        offsets_to_json(self._target))

    def _latest_now(self, start: Offsets) -> tuple[Offsets, set[TopicPartition]]:
        """Where each partition ends now, and the partitions lost with their topic.

        Every trigger lists the topics: a topic deleted is data loss even when it is
        created again before the next trigger (which offsets alone could not tell once the
        new log grows past the position). Under ``Trigger.AvailableNow`` the target is
        checked against the logs of now as well.

        Raises:
            DataLossError: Lost partitions or records, with ``failOnDataLoss``.
        """
        metadata = self.metadata
        known = start if self._target is None else {**self._target, **start}
        topics = {tp.topic for tp in known}
        # The ends of the partitions the last trigger asked, asked while the topics are
        # listed; taken only if the listing shows exactly those partitions. Waited for
        # whatever happens: no question runs past the trigger.
        ahead = metadata.ask_ahead() if self._target is None else None
        try:
            return self._latest_listed(start, known, topics, ahead)
        except BaseException:
            metadata.settle(ahead)
            raise

    def _latest_listed(self, start: Offsets, known: Offsets, topics: set[str],
                       ahead: EndsAsked | None) -> tuple[Offsets, set[TopicPartition]]:
        """:meth:`_latest_now` from the topic listing on (``ahead``: the ends asked beside)."""
        metadata, checks = self.metadata, self.checks
        listing = metadata.listing(topics)
        present = metadata.present(listing)
        lost = checks.lost(known, listing)
        kept = {tp: offset for tp, offset in start.items() if tp not in lost} if lost else start
        checks.note_gaps(kept, present, lost)
        if self._target is not None:
            target = {tp: offset for tp, offset in self._target.items() if tp not in lost}
            # Kept checked: a shrunk log is reported once, and later triggers plan up to
            # what exists.
            self._target = checks.check_target(kept, target, present)
            latest = dict(self._target)
        else:
            try:
                latest = metadata.trigger_latest(present, ahead)
            except KafkaUnavailableError:
                # A listing can lag a topic's deletion: its partitions are then unknown to
                # every offsets question. A listing of now tells a deletion (data loss) from
                # an outage (raised as it was).
                relisted = metadata.listing(topics)
                gone = checks.lost(known, relisted)
                if not gone:
                    raise
                lost |= gone
                kept = {tp: offset for tp, offset in kept.items() if tp not in gone}
                present = metadata.present(relisted)
                latest = metadata.trigger_latest(present)
        latest = checks.behind(kept, latest)
        checks.check_new(kept, latest)
        return latest, lost

    def _pause_file_present(self) -> bool:
        """Whether the ``pauseFile`` is there now; its coming and going are logged once."""
        path = self.options.pauseFile
        paused = path is not None and os.path.isfile(path)
        if paused != self._paused:
            self._paused = paused
            logger.info("kafka-direct source: %s (pauseFile %s)",
                        "paused: no trigger admits new offsets" if paused else "resumed", path)
        return paused

    def latestOffset(self, start: SourceOffsets, limit: ReadLimit) -> SourceOffsets:
        """The end of the next batch from ``start``, within ``limit``.

        ``ReadAllAvailable`` (e.g. ``Trigger.Once``) reads everything; any other limit is
        the source's own (``maxOffsetsPerTrigger``, ``maxOffsetsPerPartitionPerTrigger``,
        ``minOffsetsPerTrigger`` with ``maxTriggerDelay``, and for the first batch of this
        run that reads anything ``maxOffsetsFirstTrigger``). Returns ``start`` itself when
        the batch should not run yet.
        """
        # Spark's planner process lives as long as the query: what it holds by now is out
        # of the full collections that would land in a trigger's planning.
        freeze_at_start()
        paused = self._pause_file_present()
        with carried():
            offsets = self.codec.read(start, "the batch's start offset")
            if paused:
                # Paused (a graceful stop waits for its running batch): no new offsets, so
                # no batch that a stop could interrupt; under AvailableNow the query ends.
                # The engine commits a batch's end only as the next one begins: the run's
                # last batch reaches the group here (not before the store's check, which
                # may move the start on).
                if offsets != self._initial and (self._link is None or self._storeChecked):
                    self._commit_group(offsets)
                return start
            if self._link is not None and not self._storeChecked:
                # Once per run, before its first new batch: every batch of the checkpoint
                # completed, so the store is where this query left it, unless another
                # run moved it since.
                self._storeChecked = True
                caught = catch_up(offsets, self._link.stored_on_held_session(),
                                  self.options.subscription)
                if caught is not None:
                    logger.warning(
                        "kafka-direct source: the checkpoint (at %s) is behind offset store "
                        "%r (at %s): the next batch ends at the store's offsets and writes "
                        "nothing (their rows are committed)", offsets_to_json(offsets),
                        self._link.store, offsets_to_json(caught))
                    self._latest, self._latestJson = caught, None
                    return offsets_to_json(caught)
            # The engine asks from a start only once every batch up to it completed. A new
            # query's start is not committed: nothing was read, and on a fresh cluster the
            # group's first commit creates Kafka's offsets topic (seconds, measured), which
            # the first batch would wait for; its end is committed as any batch's.
            if offsets != self._initial:
                self._commit_group(offsets)
            latest, lost = self._latest_now(offsets)
            self._lost.update(lost)
            # Lost partitions leave the offsets (failOnDataLoss=false): the batch's end,
            # written to the offset log, no longer has them, so a re-created topic's
            # partitions are new ones, read from offset 0, and a replay plans the same.
            begin = ({tp: offset for tp, offset in offsets.items() if tp not in lost}
                     if lost else offsets)
            self._latest, self._latestJson = {**begin, **latest}, None
            if isinstance(limit, ReadAllAvailable):
                end = admit(begin, latest)
            else:
                # Never wait with lost partitions: the drop must reach the offset log
                # before the topic can come back.
                if self._delay is not None and self._target is None and not lost and \
                        self._delay.waits(begin, latest):
                    return offsets_to_json(begin)
                maxRows = (limit.max_rows if isinstance(limit, ReadMaxRows)
                           else self.options.maxOffsetsPerTrigger)
                first = self.options.maxOffsetsFirstTrigger
                if first is not None and not self._planned:
                    maxRows = first if maxRows is None else min(maxRows, first)
                end = admit(begin, latest, maxRows,
                            self.options.maxOffsetsPerPartitionPerTrigger)
            if end != offsets:
                self._planned = True
                if self._delay is not None:
                    self._delay.batch_ran()
            written = self.codec.written(end)
            # Everything admitted (the usual trigger): the end's JSON is the latest's too (a
            # copy kept: the engine's value is its own to change).
            self._latestJson = (None if end != self._latest else
                                {topic: dict(parts) for topic, parts in written.items()})
            return written

    def reportLatestOffset(self) -> SourceOffsets | None:
        """The latest offsets seen by the last :meth:`latestOffset` (None before it).

        Spark asks right after :meth:`latestOffset`, for the query's progress: the JSON
        written for the batch's end answers when the end is the latest (a copy: the
        caller's value may change).
        """
        if self._latest is None:
            return None
        if self._latestJson is None:
            self._latestJson = offsets_to_json(self._latest)
        return {topic: dict(parts) for topic, parts in self._latestJson.items()}

    def partitions(self, start: SourceOffsets, end: SourceOffsets) -> Sequence[InputPartition]:
        """The tasks of ``(start, end]``, small ranges packed together.

        A range per topic-partition with offsets in it (split for ``minPartitions`` /
        ``maxRecordsPerPartition``), small ones packed together (``minOffsetsPerTask``).
        A linked offset store records the plan first, before any task runs.
        """
        with carried():
            begin = self.codec.read(start, "the batch's start offset")
            finish = self.codec.read(end, "the batch's end offset")
            ranges, tasks = plan_tasks(begin, finish, self.options, self.parallelism)
            if self._link is None:
                return [KafkaInputPartition(task) for task in tasks]
            stored = self._link.stored_on_held_session()
            resets = self._resets(ranges, begin, stored)
            if ranges and not resets and covered(ranges, begin, stored):
                # Another run committed these offsets, rows included (this query's
                # checkpoint is behind the store): nothing to read, nothing to write again.
                logger.warning("kafka-direct source: offset store %r has committed %s "
                               "already (this query's checkpoint is behind the store): the "
                               "batch reads nothing", self._link.store, offsets_to_json(finish))
                # Its plan reads nothing either (it ends where it starts, at the store), so
                # the sink writes the batch's other rows (another source's, in a union) as
                # any others; one empty task binds it, so the store follows this query.
                planId = self._link.record_plan(*plan_offsets(finish, finish))
                first = ranges[0]
                return [KafkaInputPartition((OffsetRange(first.topic, first.partition,
                                                         first.untilOffset, first.untilOffset),),
                                            planId)]
            planId = self._link.record_plan(*plan_offsets(begin, finish), resets)
            if not ranges and finish:
                # A batch that reads nothing (a new query's first batch when the store has
                # everything already): one empty task binds its plan all the same, so the
                # store follows this query and the sink does not take the batch for one of
                # an unlinked source.
                tp = min(finish, key=lambda tp: (tp.topic, tp.partition))
                return [KafkaInputPartition((OffsetRange(tp.topic, tp.partition, finish[tp],
                                                         finish[tp]),), planId)]
            return [KafkaInputPartition(task, planId) for task in tasks]

    def _resets(self, ranges: Sequence[Any], start: Offsets, stored: SourceOffsets | None
                ) -> SourceOffsets | None:
        """Partitions read from where data loss moved them, away from the stored offset.

        With ``failOnDataLoss=false`` a log that shrank below the query's position (a
        re-created topic, a truncation) is read from its new start, a log that lost
        records after the position from its log start, and a partition of a topic this
        run saw deleted, once it is back, from offset 0 (its new log may have outgrown the
        old position); the store still has the old offset. Such a start is marked for the
        sink (which refuses any other start that does not chain). A start that differs
        from the store while the log holds the stored offset is no data loss: it is left
        for the sink to refuse with its cause.
        """
        if not stored or self.options.failOnDataLoss:
            return None
        moved = {TopicPartition(r.topic, r.partition): r.fromOffset for r in ranges
                 if str(r.partition) in stored.get(r.topic, {})
                 and stored[r.topic][str(r.partition)] != r.fromOffset}
        # Ranges of one partition follow each other: its first range holds its start.
        firsts: dict[TopicPartition, int] = {}
        for r in ranges:
            tp = TopicPartition(r.topic, r.partition)
            if tp in moved:
                firsts[tp] = min(firsts.get(tp, r.fromOffset), r.fromOffset)
        if not firsts:
            return None
        metadata = self.metadata
        earliest, latest = metadata.earliest(firsts), metadata.latest(firsts)
        resets: SourceOffsets = {}
        for tp, first in sorted(firsts.items()):
            was = stored[tp.topic][str(tp.partition)]
            shrank = was > latest.get(tp, was) and first < was
            lost = was < earliest.get(tp, was) and first == earliest[tp]
            recreated = tp in self._lost and tp not in start and first == NEW_PARTITION_START
            if shrank or lost or recreated:
                logger.warning("kafka-direct source: %s is read from %d, not from offset "
                               "store %r's %d (data loss, failOnDataLoss=false)", tp, first,
                               self._link.store if self._link else "", was)
                resets.setdefault(tp.topic, {})[str(tp.partition)] = first
        return resets or None

    def read(self, partition: InputPartition) -> Iterator[Any]:
        """The partition's records as ``pyarrow.RecordBatch``es (on an executor).

        With ``emit=offsetRanges``, its offset ranges instead, one row each, in order
        (empty ones too: a task that only binds its batch's plan hands on its empty range),
        for a sink that reads them. With an offset store, the task first binds the
        batch's plan to its query and batch (the sink applies the plan its batch read).
        """
        if not isinstance(partition, KafkaInputPartition):
            return iter(())
        if partition.planId is not None and self._link is not None:
            with carried():
                bind_plan(self._link, partition.planId)
        if self.options.emitsRanges:
            return iter((range_batch(partition.offsetRanges),))
        return read_task(partition.offsetRanges, self.settings)

    def commit(self, end: SourceOffsets) -> None:
        """The engine finished the batches up to ``end``: nothing to do for correctness.

        With ``commitOffsetsToGroup`` the offsets are committed to ``kafka.group.id`` for
        monitoring tools (here, and from :meth:`latestOffset`'s start: the engine calls
        ``commit`` as the next batch begins, so a run's last batch would be missed).
        Without it the offsets are not even read.
        """
        if not self.options.commitOffsetsToGroup:
            return
        try:
            offsets = self.codec.read(end, "the committed end offset")
        except KafkaDirectError as error:
            logger.warning("kafka-direct source: cannot read the committed offset %r: %s",
                           end, error)
            return
        self._commit_group(offsets)

    def _commit_group(self, offsets: Offsets) -> None:
        """Commit ``offsets`` to the group if asked and new; a failure only warns."""
        if not self.options.commitOffsetsToGroup or offsets == self._groupCommitted:
            return
        try:
            self.metadata.commit(offsets)
            self._groupCommitted = dict(offsets)
        except Exception as error:
            logger.warning("kafka-direct source: committing %s to group %s for monitoring "
                           "failed (the query goes on; it never resumes from the group): %s",
                           offsets_to_json(offsets), self.options.groupId, error)

    def stop(self) -> None:
        """Close the driver's consumer and let go of the offset store."""
        try:
            if self._metadata is not None:
                self._metadata.close()
        finally:
            thaw_at_stop()
            if self._link is not None:
                self._link.release()
