"""DirectKafkaInputDStream: a stream of KafkaRDDs, one offset range per partition per batch.

Each batch, on the driver: ask Kafka for the end offsets of the stream's partitions (finding
new partitions and noticing rebalances), limit how far each partition may advance (rate
limits, backpressure), and build a KafkaRDD of the ranges ``[where the last batch ended, the
limited end)``. Ranges are contiguous across batches, so every offset is in exactly one batch.

A partition's position, once known, is kept: a partition missing from one metadata answer
goes on where it stood when it comes back (the start offsets given to the strategy are for a
partition's first start only). A log whose end fell below the position was truncated or
re-created: that is data loss, reported (``DataLossError``), or with
``spark.streaming.kafka.failOnDataLoss=false`` a warning and a restart at the log's start.

The ranges of each batch are the stream's checkpoint data: a recovered driver regenerates
pending batches with exactly the same ranges. ``commitAsync`` ties the ranges to their batch
and commits them once that batch and every batch before it succeeded (see
:mod:`kafka_direct.dstream.commit_queue`), and on stop; never for a failed batch.

The stream composes one concept per module: :mod:`~kafka_direct.dstream.stream_settings`
(its Spark settings, checked at construction), :mod:`~kafka_direct.dstream.partition_discovery`
(which partitions, and how long to wait for them),
:mod:`~kafka_direct.dstream.starting_offsets` (where new partitions start),
:mod:`~kafka_direct.dstream.partition_layout` (the batch's partitions in order, kept),
:mod:`~kafka_direct.client.log_positions` (data loss), :mod:`~kafka_direct.dstream.rate_limit`
and :mod:`~kafka_direct.client.retry`.
"""

from __future__ import annotations

import logging
import operator
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from typing_extensions import override

from kafka_direct.client.driver_consumer import STREAM_ASKERS, DriverConsumer
from kafka_direct.client.log_positions import check_positions
from kafka_direct.client.params import check_with_librdkafka
from kafka_direct.client.retry import Retrier
from kafka_direct.dstream.commit_queue import CommitCallback, StreamCommits
from kafka_direct.dstream.consumer_strategy import ConsumerStrategy
from kafka_direct.dstream.partition_discovery import PartitionDiscovery, WaitClock
from kafka_direct.dstream.partition_layout import PartitionLayout
from kafka_direct.dstream.per_partition_config import (
    DefaultPerPartitionConfig,
    PerPartitionConfig,
    has_no_maximum,
)
from kafka_direct.dstream.rate_limit import clamp
from kafka_direct.dstream.starting_offsets import StartingOffsets, StartingOffsetsCallback
from kafka_direct.dstream.stream_settings import MIN_OFFSETS_PER_TASK_CONF, StreamSettings
from kafka_direct.errors import CheckpointError, ConfigurationError, KafkaDirectError
from kafka_direct.offset_range import CanCommitOffsets, OffsetRange
from kafka_direct.rdd.kafka_rdd import KafkaRDD, ReadSettings, kafka_rdd, kafka_rdd_beside
from kafka_direct.rdd.kept_parent import KeptGroups, KeptParent, pack_offsets
from kafka_direct.rdd.location_strategy import LocationStrategy, PreferBrokers
from kafka_direct.rdd.range_groups import group_ranges, pack_counts
from kafka_direct.streaming.input_dstream import InputDStream
from kafka_direct.streaming.job_scheduler import BATCH_TIME_PROPERTY
from kafka_direct.streaming.rate_controller import (
    RateController,
    RateEstimator,
    backpressure_enabled,
)
from kafka_direct.topic_partition import TopicPartition, partition_order

if TYPE_CHECKING:
    from kafka_direct.streaming.context import StreamingContext

__all__ = ["DirectKafkaInputDStream", "describe_ranges"]

logger = logging.getLogger(__name__)

#: A range's fields, each read in C over a batch's ranges.
_FIELDS = tuple(map(operator.attrgetter, ("topic", "partition", "fromOffset", "untilOffset")))

#: Ranges from which a batch's ranges are made in the planner thread beside the JVM's
#: reading of them (see ``compute``): below, that work is shorter than a thread's hand-over.
_PLANNED_BESIDE = 100

# Sort keys in the batch's hot path: a key of plain tuples sorts a thousand partitions
# about four times faster than TopicPartition's own comparisons.
_order = partition_order


def describe_ranges(ranges: Sequence[OffsetRange]) -> str:
    r"""Spark's input description: ``topic: t\\tpartition: p\\toffsets: a to b`` per range."""
    return "\n".join(f"topic: {r.topic}\tpartition: {r.partition}\toffsets: {r.fromOffset} to "
                     f"{r.untilOffset}" for r in ranges)


class DirectKafkaInputDStream(InputDStream, CanCommitOffsets):
    """A direct Kafka stream; build it with ``KafkaUtils.createDirectStream``.

    Args:
        ssc: The StreamingContext.
        locationStrategy: Where executors read each partition.
        consumerStrategy: Which partitions, and where they start.
        perPartitionConfig: Rate limits per partition (default: from Spark settings).
        keyDeserializer: Applied to key bytes on executors.
        valueDeserializer: Applied to value bytes on executors.
        messageHandler: Maps each ConsumerRecord to the RDD element.
        driverConsumerFactory: Builds the DriverConsumer from driver parameters (tests).
        waitClock: The clock partition listing waits on (tests; the real one by default).

    Raises:
        ConfigurationError: A strategy of the wrong type, a Spark setting out of range (see
            :class:`~kafka_direct.dstream.stream_settings.StreamSettings`), a deserializer or
            handler that is not callable, or (with the real driver consumer) a Kafka
            parameter librdkafka refuses.
    """

    def __init__(self, ssc: StreamingContext, locationStrategy: LocationStrategy,
                 consumerStrategy: ConsumerStrategy,
                 perPartitionConfig: PerPartitionConfig | None = None,
                 keyDeserializer: Callable[[bytes], Any] | None = None,
                 valueDeserializer: Callable[[bytes], Any] | None = None,
                 messageHandler: Callable[[Any], Any] | None = None, *,
                 driverConsumerFactory: Callable[[dict[str, Any]], DriverConsumer] | None = None,
                 waitClock: WaitClock | None = None) -> None:
        if not isinstance(locationStrategy, LocationStrategy):
            raise ConfigurationError("createDirectStream needs a LocationStrategy, e.g. "
                                     f"LocationStrategies.PreferConsistent(); got "
                                     f"{locationStrategy!r}")
        if not isinstance(consumerStrategy, ConsumerStrategy):
            raise ConfigurationError("createDirectStream needs a ConsumerStrategy, e.g. "
                                     "ConsumerStrategies.Subscribe([...], kafkaParams); got "
                                     f"{consumerStrategy!r}")
        if perPartitionConfig is not None and \
                not isinstance(perPartitionConfig, PerPartitionConfig):
            raise ConfigurationError("perPartitionConfig must be a PerPartitionConfig (e.g. "
                                     "DefaultPerPartitionConfig(conf, maxRates=...)); got "
                                     f"{perPartitionConfig!r}")
        # Every setting is checked before the stream registers with the context: a bad one
        # fails here, not in the first batch.
        streamSettings = StreamSettings.fromConf(ssc.conf)
        settings = ReadSettings(
            params=consumerStrategy.executorParams(),
            pollTimeoutMs=streamSettings.pollTimeoutMs,
            failOnDataLoss=streamSettings.failOnDataLoss,
            useConsumerCache=streamSettings.useConsumerCache,
            keyDeserializer=keyDeserializer, valueDeserializer=valueDeserializer,
            messageHandler=messageHandler)
        if driverConsumerFactory is None:
            # librdkafka checks every property name and value now (offline, a few ms): a
            # refused one would otherwise fail the start, looking like Kafka being down.
            check_with_librdkafka(consumerStrategy.driverParams())
        perPartitionConfig = perPartitionConfig or DefaultPerPartitionConfig(ssc._conf)
        super().__init__(ssc)
        self.locationStrategy = locationStrategy
        self.consumerStrategy = consumerStrategy
        self.perPartitionConfig = perPartitionConfig
        self.streamSettings = streamSettings
        self.settings = settings
        self._rateController: RateController | None = None
        if backpressure_enabled(ssc._conf):
            self._rateController = RateController(
                self.inputStreamId, RateEstimator.create(ssc._conf, ssc.batchDuration))
        self._driverFactory = driverConsumerFactory or (
            lambda params: DriverConsumer(params, streamSettings.requestTimeoutMs,
                                          askers=STREAM_ASKERS))
        self._retrying = Retrier(streamSettings.maxRetries, streamSettings.retryBackoffMs,
                                 str(consumerStrategy.kafkaParams.get("bootstrap.servers")))
        self._discovery = PartitionDiscovery(self.name, consumerStrategy,
                                             streamSettings.requestTimeoutMs,
                                             streamSettings.rebalanceWaitMs, waitClock)
        self._starts = StartingOffsets(self.name, consumerStrategy, self._retrying,
                                       streamSettings.failOnDataLoss)
        self.driver: DriverConsumer | None = None
        self.currentOffsets: dict[TopicPartition, int] = {}
        #: End offsets seen by the latest batch (for lag).
        self.latestSeen: dict[TopicPartition, int] = {}
        self.batchRanges: dict[int, list[OffsetRange]] = {}
        self._layout = PartitionLayout()
        # The thread that makes a batch's ranges while the JVM reads them (see compute).
        self._plannerThread: ThreadPoolExecutor | None = None
        # The JVM parent of the batches' RDDs, kept while their partitions stay the same.
        self._keptParent = KeptParent()
        # A grouped stream's parents, one per number of groups (see compute).
        self._keptGroups = KeptGroups()
        self._commits = StreamCommits(self.name, consumerStrategy.groupId, self._driver)
        #: Offsets committed to the group by this stream, per partition.
        self.committedOffsets = self._commits.committedOffsets

    @property
    @override
    def rateController(self) -> RateController | None:
        return self._rateController

    @property
    @override
    def name(self) -> str:
        return f"Kafka 0.10 direct stream [{self.inputStreamId}]"

    @property
    def maxRecordsPerBatch(self) -> int:
        """``spark.streaming.kafka.maxRecordsPerBatch``: most records a batch reads; 0 = any."""
        return self.streamSettings.maxRecordsPerBatch

    # -- start and stop -------------------------------------------------------------------

    @override
    def start(self) -> None:
        driver = self._retrying("connecting the driver consumer", self._connect)
        self.driver = driver
        partitions = self._retrying("listing the stream's partitions",
                                    lambda: self._discovery.list(driver, set(), starting=True))
        if self.batchRanges:  # recovered: go on where the checkpointed batches end
            # The latest batch that read each partition: a partition absent from the last
            # batch keeps its position.
            self.currentOffsets = {r.topicPartition(): r.untilOffset
                                   for _, ranges in sorted(self.batchRanges.items())
                                   for r in ranges}
            missing = partitions - set(self.currentOffsets)
            self.currentOffsets.update(self._starts.choose(driver, missing, new=True))
        else:
            self.currentOffsets = self._starts.choose(driver, partitions, new=False)
        logger.info("%s starts at %s", self.name,
                    {str(tp): o for tp, o in sorted(self.currentOffsets.items())})

    def _connect(self) -> DriverConsumer:
        driver = self._driverFactory(self.consumerStrategy.driverParams())
        try:
            self.consumerStrategy.onStart(driver)
        except BaseException:
            driver.close()
            raise
        return driver

    def _driver(self) -> DriverConsumer:
        if self.driver is None:
            raise KafkaDirectError(f"{self.name} is not started")
        return self.driver

    def onStartingOffsets(self, callback: StartingOffsetsCallback) -> None:
        """Call ``callback(offsets)`` whenever partitions get their starting offsets.

        That is at start (every partition) and when new partitions or matching topics
        appear, before a batch reads them: an offset store seeds them with it (see
        ``offsets.createDirectStreamFromStore``). An exception stops the stream.
        """
        self._starts.callbacks.append(callback)

    @override
    def stop(self) -> None:
        """Commit what successful batches queued (SPARK-20050), drop the rest, then close.

        The engine calls this last, once no batch runs any more: a batch that did not
        succeed by now never will, so its queued commits are dropped (logged, and their
        callbacks get an error). A ``commitAsync`` after this fails its callback.
        """
        self._commits.close()
        planner, self._plannerThread = self._plannerThread, None
        if planner is not None:
            planner.shutdown(wait=True)
        self._keptParent.forget()
        self._keptGroups.forget()
        driver, self.driver = self.driver, None
        if driver is not None:
            driver.close()

    # -- batches ----------------------------------------------------------------------------

    def _latestOffsets(self) -> dict[TopicPartition, int]:
        """End offsets of the partitions the stream reads now (known positions are kept)."""
        driver = self._driver()
        partitions: set[TopicPartition] = self._retrying(
            "listing the stream's partitions",
            lambda: self._discovery.list(driver, set(self.currentOffsets), starting=False))
        added = self._discovery.reconcile(driver, partitions, self.currentOffsets)
        if added:
            self.currentOffsets.update(self._starts.choose(driver, added, new=True))
        ends: dict[TopicPartition, int] = self._retrying(
            "reading end offsets", lambda: driver.latestOffsets(partitions))
        self.latestSeen = dict(ends)
        return ends

    def _estimatedRate(self) -> float | None:
        if self._rateController is None:
            return None
        latest = self._rateController.getLatestRate()
        rate = latest if latest > 0 else self.streamSettings.initialRate
        return rate if rate > 0 else None

    def _nextRanges(self, validTime: int) -> list[OffsetRange]:
        """The ranges of batch ``validTime``: checkpointed ones, or the next ones from Kafka."""
        return self._plan(validTime)[0]

    def _plan(self, validTime: int) -> tuple[list[OffsetRange], list[TopicPartition]]:
        """The ranges of batch ``validTime``, and their partitions in the same order."""
        ranges = self._recovered(validTime)
        if ranges is not None:
            return ranges, [r.topicPartition() for r in ranges]
        froms, untils, ends = self._nextOffsets()
        return self._rangesOf(validTime, froms, untils, ends), self._layout.partitions

    def _recovered(self, validTime: int) -> list[OffsetRange] | None:
        """Batch ``validTime``'s checkpointed ranges, the positions moved past them; or None."""
        ranges = self.batchRanges.get(validTime)
        if ranges is not None:  # a batch regenerated after recovery: exactly those ranges
            for r in ranges:
                tp = r.topicPartition()
                current = self.currentOffsets.get(tp, r.untilOffset)
                self.currentOffsets[tp] = max(current, r.untilOffset)
        return ranges

    def _nextOffsets(self) -> tuple[list[int], list[int], dict[TopicPartition, int]]:
        """The next batch's from and until offsets in layout order, and its ends.

        The stream's position moves here only where a log lost what it held (see
        :func:`~kafka_direct.client.log_positions.check_positions`), as before any batch;
        :meth:`_rangesOf` moves it past the batch once the ranges are made.
        """
        positions, layout = self.currentOffsets, self._layout
        latest = self._latestOffsets()
        # Values in the layout's (topic, partition) order, looked up once a partition.
        latestOffsets = layout.arrange(latest)
        froms = layout.pick(positions)
        if any(map(operator.lt, latestOffsets, froms)):  # held back, or data lost
            latest = check_positions(self.name, latest, positions, self._driver(),
                                     self.streamSettings.failOnDataLoss, self._retrying)
            froms = layout.pick(positions)
        ends = clamp(latest, positions, self.perPartitionConfig, self.slideDuration / 1000.0,
                     self._estimatedRate(), self.streamSettings.maxRecordsPerBatch)
        return froms, layout.arrange(ends), ends

    def _rangesOf(self, validTime: int, froms: list[int], untils: list[int],
                  ends: dict[TopicPartition, int]) -> list[OffsetRange]:
        """Batch ``validTime``'s ranges (checked), kept, and the stream's position past them."""
        layout = self._layout
        ranges = OffsetRange.many(layout.topics, layout.numbers, froms, untils)
        # In the layout's order, so that the next batch reads the positions in order.
        self.currentOffsets = layout.merge(self.currentOffsets, ends)
        self.batchRanges[validTime] = ranges
        return ranges

    @override
    def isTimeValid(self, time: int) -> bool:
        """Whether the stream makes a batch for ``time``; never new ranges for a past time.

        A time before the latest batch the stream read (in this run, or restored from the
        checkpoint) is valid only if the stream holds that batch's ranges: a restored batch,
        which a recovered stateful or windowed stream reads again. The stream's position is
        past any other earlier time, so new ranges for it would be out of order (and take
        records from the batches to come); such a time has no records of its own, they are
        in the later batches.
        """
        latest = max(self.batchRanges, default=self.lastValidTime)
        if self.lastValidTime is not None and latest is not None:
            latest = max(latest, self.lastValidTime)
        if latest is not None and time < latest and time not in self.batchRanges:
            if super(InputDStream, self).isTimeValid(time):  # on the slide grid: say why not
                logger.warning(
                    "%s: no batch for %d ms: it is before the latest batch read (%d ms) and "
                    "its offset ranges are not known (its records are in later batches)",
                    self.name, time, latest)
            return False
        return super().isTimeValid(time)

    def _hasJobs(self, time: int) -> bool:
        """Whether a job of batch ``time`` itself reads this stream's batch ``time``.

        Only output operations that read this stream count: another stream's per-batch
        output gives batch ``time`` jobs, but none of them reads this stream, whose batch
        is then computed later by a window job (and would otherwise never "succeed": its
        own batch's completion went by before it was computed, holding back every commit
        after it). A batch without a job of its own passes with the next batch of the
        stream that succeeds (the window job that read it), see
        :class:`~kafka_direct.dstream.commit_queue.BatchCommitQueue`.
        """
        if self.isPastBatch(time):
            # Computed for a later batch (a window, or a recovered state reading a batch
            # that completed before the restart): it passes with that batch.
            return False
        outputs = [out for out in self.ssc.graph.outputStreams if self._readBy(out)]
        if not self.ssc.graph.outputStreams:  # no graph (a stream driven by hand): its own
            return True
        return any(out.zeroTime is None or (time - out.zeroTime) % out.slideDuration == 0
                   for out in outputs)

    def _readBy(self, out: Any) -> bool:
        """Whether this stream is among the dependencies of stream ``out`` (or is it)."""
        pending, seen = [out], set()
        while pending:
            stream = pending.pop()
            if stream is self:
                return True
            if id(stream) not in seen:
                seen.add(id(stream))
                pending.extend(stream.dependencies)
        return False

    @override
    def compute(self, validTime: int) -> KafkaRDD:
        ranges = self._recovered(validTime)
        if ranges is not None:
            partitions = [r.topicPartition() for r in ranges]
            self._commits.queue.addBatch(validTime, ranges, self._hasJobs(validTime),
                                         partitions)
            # Not regrouped: it may have run grouped before, with the cores registered
            # then; a range a task, each is written or passed over alone by a sink. Over
            # the kept parent of its partitions (a stream's recovered batches mostly read
            # the same ones, in the same order, as the batches after them).
            sc, leaders = self.ssc.sparkContext, self._leaders(partitions)
            offsets = pack_offsets([r.fromOffset for r in ranges],
                                   [r.untilOffset for r in ranges])
            if offsets is not None and ranges:
                recovered: list[OffsetRange] = ranges
                rdd = self._keptParent.kafka_rdd(
                    sc, partitions, offsets, self.settings,
                    KeptParent.locations(sc, partitions, self.locationStrategy, leaders),
                    lambda: recovered)
            else:
                rdd = kafka_rdd(sc, ranges, self.settings, self.locationStrategy, leaders)
            self.reportInfo(validTime, *self._inputInfo(ranges, partitions))
            return rdd
        froms, untils, ends = self._nextOffsets()
        layout = self._layout
        partitions = layout.partitions

        def rest() -> tuple[list[OffsetRange], tuple[int, dict[str, Any]]]:
            made = self._rangesOf(validTime, froms, untils, ends)
            self._commits.queue.addBatch(validTime, made, self._hasJobs(validTime), partitions)
            return made, self._inputInfo(made, partitions, (froms, untils))

        offsets = pack_offsets(froms, untils)
        sizes = self._groupSizes(froms, untils)
        if sizes is not None and all(size == 1 for size in sizes):
            sizes = None  # a task per range: the ungrouped RDD
        if offsets is not None and partitions and (
                sizes is None or self._keptGroups.places(partitions) is not None):
            # The batch's RDD over one of the stream's kept JVM parents, its offsets (and,
            # grouped, its groups' ranges) in its own function: no call to the JVM while
            # the parent is kept (ungrouped: the same partitions, in order, at the same
            # locations; grouped: as many groups, at the same locations). A new parent is
            # made while the planner thread makes the ranges, as below.
            sc, packed, grouped = self.ssc.sparkContext, offsets, sizes
            locations = KeptParent.locations(sc, partitions, self.locationStrategy,
                                             self._leaders(partitions))
            holds = (self._keptParent.holds(partitions, locations) if grouped is None
                     else self._keptGroups.holds(grouped, locations))

            def over(ranges: Callable[[], list[OffsetRange]]) -> KafkaRDD:
                if grouped is None:
                    return self._keptParent.kafka_rdd(sc, partitions, packed, self.settings,
                                                      locations, ranges)
                return self._keptGroups.kafka_rdd(sc, partitions, packed, grouped,
                                                  self.settings, locations, ranges)

            if holds or len(partitions) < _PLANNED_BESIDE:
                planned, info = rest()
                rdd = over(lambda: planned)
            else:
                made = self._planner().submit(rest)
                rdd = over(lambda: made.result()[0])
                info = made.result()[1]
        elif len(partitions) < _PLANNED_BESIDE:
            ranges, info = rest()
            rdd = kafka_rdd(self.ssc.sparkContext, ranges, self.settings,
                            self.locationStrategy, self._leaders(partitions),
                            self._groups(ranges))
        else:
            # The ranges, the commit queue and the input info are made in the stream's
            # planner thread while this one waits for the JVM to read the ranges' RDD
            # (Python's lock is free while it waits): the batch's planning waits for the
            # longer of the two, not for both. Both end before the batch's RDD is returned;
            # the ranges are made (and the position moved) whatever the JVM answers, as
            # when they are made first, and their error, if any, is the batch's. Grouped,
            # the groups follow from the offsets alone, by the rule that groups ranges.
            leaders = self._leaders(partitions)
            made = self._planner().submit(rest)
            rdd = kafka_rdd_beside(
                self.ssc.sparkContext,
                list(zip(layout.topics, layout.numbers, froms, untils, strict=True)),
                partitions, self.settings, self.locationStrategy, leaders,
                lambda: made.result()[0], sizes)
            info = made.result()[1]
        self.reportInfo(validTime, *info)
        return rdd

    def _leaders(self, partitions: list[TopicPartition]) -> dict[TopicPartition, str] | None:
        if isinstance(self.locationStrategy, PreferBrokers):
            return self._driver().leaders(partitions)
        return None

    def _planner(self) -> ThreadPoolExecutor:
        if self._plannerThread is None:
            self._plannerThread = ThreadPoolExecutor(
                1, thread_name_prefix=f"kafka-direct-planner-{self.inputStreamId}")
        return self._plannerThread

    def _grouping(self) -> bool:
        """Whether batches may group ranges (``spark.streaming.kafka.minOffsetsPerTask`` > 1)."""
        return self.streamSettings.minOffsetsPerTask > 1

    def _groups(self, ranges: list[OffsetRange]) -> list[tuple[OffsetRange, ...]] | None:
        """The batch's ranges grouped into Spark tasks, or None (one task per range).

        Only with ``spark.streaming.kafka.minOffsetsPerTask`` above 1; at least Spark's
        default parallelism of tasks stays, so the cores stay busy.
        """
        settings = self.streamSettings
        if not self._grouping() or len(ranges) < 2:
            return None
        return group_ranges(ranges, settings.minOffsetsPerTask,
                            self.ssc.sparkContext.defaultParallelism,
                            settings.maxRangesPerTask, MIN_OFFSETS_PER_TASK_CONF)

    def _groupSizes(self, froms: list[int], untils: list[int]) -> list[int] | None:
        """How many of the batch's ranges each Spark task reads, from their offsets; or None.

        The groups of :meth:`_groups` (the layout's partitions are unique, as grouping
        needs), found before the ranges are made.
        """
        settings = self.streamSettings
        if not self._grouping() or len(froms) < 2:
            return None
        return pack_counts(list(map(operator.sub, untils, froms)), settings.minOffsetsPerTask,
                           self.ssc.sparkContext.defaultParallelism, None,
                           settings.maxRangesPerTask)

    def _inputInfo(self, ranges: list[OffsetRange], partitions: list[TopicPartition],
                   offsets: tuple[list[int], list[int]] | None = None
                   ) -> tuple[int, dict[str, Any]]:
        """The batch's record count and metadata for its input info (read in C loops).

        ``offsets``: the ranges' from and until offsets when the ranges are the layout's
        (not read from the ranges again).
        """
        layout = self._layout
        if offsets is not None and partitions is layout.partitions:
            topics, numbers = layout.topics, layout.numbers
            froms, untils = offsets
        else:
            topics, numbers, froms, untils = (list(map(_get, ranges)) for _get in _FIELDS)
        description = (layout.describe(froms, untils) if partitions is layout.partitions
                       else describe_ranges(ranges))  # a recovered batch's own ranges
        return sum(untils) - sum(froms), {
            "offsets": list(zip(topics, numbers, froms, untils, strict=True)),
            "latestOffsets": layout.latest(self.latestSeen),
            "rateLimit": self.rateLimit(), "Description": description}

    def rateLimit(self) -> dict[str, Any]:
        """The rate limits in force: the backpressure estimate and the per-partition maxima.

        Returns:
            ``{"estimatedRate": records/s or None, "maxRatePerPartition": {"t-p": records/s}
            (partitions with a limit only), "maxRecordsPerBatch": n or 0}``.
        """
        limits = {}
        partitions = [] if has_no_maximum(self.perPartitionConfig) else self.currentOffsets
        for tp in sorted(partitions, key=_order):
            rate = self.perPartitionConfig.maxRatePerPartition(tp)
            if rate > 0:
                limits[str(tp)] = rate
        return {"estimatedRate": self._estimatedRate(), "maxRatePerPartition": limits,
                        "maxRecordsPerBatch": self.streamSettings.maxRecordsPerBatch}

    @override
    def clearMetadata(self, time: int) -> None:
        super().clearMetadata(time)
        threshold = time - (self.rememberDuration or 0)
        for t in [t for t in self.batchRanges if t <= threshold]:
            del self.batchRanges[t]
        self._commits.queue.forget(threshold)

    @override
    def checkpointState(self) -> dict[str, Any]:
        state = super().checkpointState()
        state["batches"] = {str(t): [[r.topic, r.partition, r.fromOffset, r.untilOffset]
                                     for r in ranges]
                            for t, ranges in sorted(self.batchRanges.items())}
        return state

    @override
    def restoreCheckpointState(self, state: dict[str, Any]) -> None:
        """Take back the checkpointed batches' ranges, once each is known to be the stream's.

        Raises:
            CheckpointError: A range is of a partition the stream does not read (not of
                its topics, not matching its pattern, not in its assignment).
        """
        batches = {int(t): [OffsetRange(str(a), int(b), int(c), int(d))
                            for a, b, c, d in ranges]
                   for t, ranges in state.get("batches", {}).items()}
        foreign = sorted({r.topicPartition() for ranges in batches.values() for r in ranges
                          if not self.consumerStrategy.canRead(r.topicPartition())})
        if foreign:
            # Regenerating those batches would send another stream's records through this
            # stream's output operations.
            raise CheckpointError(
                f"the checkpoint gives {self.name} (checkpoint id "
                f"{self.checkpointId or self.stableIdentity!r}) offset ranges of "
                f"{', '.join(map(str, foreign))}, which it does not read "
                f"({self.consumerStrategy!r}); recover with the stream reading what it read "
                "when the checkpoint was written, or delete the checkpoint directory to start "
                "afresh from the offsets committed to Kafka or to your offset store",
                directory=self.ssc.checkpointDir or "", stream=self.name,
                partitions=[str(tp) for tp in foreign])
        super().restoreCheckpointState(state)
        self.batchRanges = batches

    @property
    @override
    def stableIdentity(self) -> str:
        """``kafka <strategy identity>``: its topics / pattern / partitions and group.id."""
        return f"kafka {self.consumerStrategy.checkpointIdentity}"

    # -- commits ----------------------------------------------------------------------------

    @override
    def commitAsync(self, offsetRanges: Sequence[OffsetRange],
                    callback: CommitCallback | None = None) -> None:
        """Queue ranges to commit once their batch, and every batch before it, succeeded.

        The batch is the one whose output operation calls (the job thread says which);
        called from another thread, the latest pending batch that read all of the ranges.
        Ranges of no pending batch (already committed, or never read) are not committed:
        the callback gets a ``ConfigurationError``. Per partition the offset committed is
        the largest ``untilOffset`` given in the batch, capped at what the successful
        batches read; partitions the stream does not read are left out. After the stream
        stopped, the callback gets a ``StreamingStateError``.

        Args:
            offsetRanges: Ranges whose records were processed.
            callback: Called once, with the committed offsets or with the error: the
                commit failed, the batch did not succeed, or the stream had stopped.
        """
        ranges = list(offsetRanges)
        for r in ranges:
            if not isinstance(r, OffsetRange):
                raise ConfigurationError(f"commitAsync takes OffsetRange values, got {r!r}")
        self._commits.commitAsync(ranges, callback, self._threadBatchTime())

    def _threadBatchTime(self) -> int | None:
        try:
            value = self.ssc.sparkContext.getLocalProperty(BATCH_TIME_PROPERTY)
            return int(value) if value is not None else None
        except Exception:  # no job thread (or no SparkContext any more): match by ranges
            return None

    @override
    def onBatchCompleted(self, time: int) -> None:
        """Batch ``time`` succeeded: commit what the successful batches now allow."""
        self._commits.batchSucceeded(time)

    def flushCommits(self) -> None:
        """Commit what successful batches queued and was not committed yet."""
        self._commits.flush()
