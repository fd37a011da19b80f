"""DirectKafkaBatches: how the direct stream makes each batch, one offset range per partition.

Each batch, on the driver: ask Kafka for the end offsets of the stream's partitions (finding
new partitions and noticing rebalances), limit how far each partition may advance (rate
limits, backpressure), and build a KafkaRDD of the ranges ``[where the last batch ended, the
limited end)``. Ranges are contiguous across batches, so every offset is in exactly one batch.

A partition's position, once known, is kept: a partition missing from one metadata answer
goes on where it stood when it comes back (the start offsets given to the strategy are for a
partition's first start only). A log whose end fell below the position was truncated or
re-created: that is data loss, reported (``DataLossError``), or with
``spark.streaming.kafka.failOnDataLoss=false`` a warning and a restart at the log's start.

A batch regenerated after recovery reads exactly its checkpointed ranges. The batch's RDD is
built over the stream's kept JVM parent where its partitions allow (see
:mod:`~kafka_direct.rdd.kept_parent`); with many partitions its ranges are made in a planner
thread while the JVM reads them. Each batch reports its input info (records, offsets, rate
limits, Spark's description).

The stream's lifecycle (start, stop, checkpoints, commits) is
:class:`~kafka_direct.dstream.direct_kafka_input_dstream.DirectKafkaInputDStream`'s, which
gives this class its parts (the driver consumer, the strategies and settings, partition
discovery, starting offsets, retries) and takes each batch's ranges for its commit queue
(:meth:`DirectKafkaBatches._batchMade`).
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from typing_extensions import override

from kafka_direct.client.driver_consumer import DriverConsumer
from kafka_direct.client.log_positions import check_positions
from kafka_direct.client.retry import Retrier
from kafka_direct.dstream.partition_discovery import PartitionDiscovery
from kafka_direct.dstream.partition_layout import PartitionLayout
from kafka_direct.dstream.per_partition_config import PerPartitionConfig, has_no_maximum
from kafka_direct.dstream.rate_limit import clamp
from kafka_direct.dstream.starting_offsets import StartingOffsets
from kafka_direct.dstream.stream_settings import MIN_OFFSETS_PER_TASK_CONF, StreamSettings
from kafka_direct.offset_range import OffsetRange
from kafka_direct.rdd.kafka_rdd import KafkaRDD, ReadSettings, kafka_rdd, kafka_rdd_beside
from kafka_direct.rdd.kept_parent import KeptGroups, KeptParent, pack_offsets
from kafka_direct.rdd.location_strategy import LocationStrategy, PreferBrokers
from kafka_direct.rdd.range_groups import group_ranges, pack_counts
from kafka_direct.streaming.input_dstream import InputDStream
from kafka_direct.topic_partition import TopicPartition, partition_order

if TYPE_CHECKING:
    from kafka_direct.streaming.context import StreamingContext

__all__ = ["DirectKafkaBatches", "describe_ranges"]

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


class DirectKafkaBatches(InputDStream):
    """The direct stream's batches: their ranges, rate limits, RDDs and input info.

    The base of :class:`~kafka_direct.dstream.direct_kafka_input_dstream.DirectKafkaInputDStream`,
    which sets the parts declared below once this class's ``__init__`` has run, and gives
    :meth:`_driver` and :meth:`_batchMade`.

    Attributes:
        currentOffsets: Where each partition's next batch starts.
        latestSeen: End offsets seen by the latest batch (for lag).
        batchRanges: The ranges of each batch still remembered (the checkpoint's data).
    """

    # The stream's parts this class reads (DirectKafkaInputDStream sets them).
    locationStrategy: LocationStrategy
    perPartitionConfig: PerPartitionConfig
    streamSettings: StreamSettings
    settings: ReadSettings
    _retrying: Retrier
    _discovery: PartitionDiscovery
    _starts: StartingOffsets

    def __init__(self, ssc: StreamingContext) -> None:
        super().__init__(ssc)
        self.currentOffsets: dict[TopicPartition, int] = {}
        self.latestSeen: dict[TopicPartition, int] = {}
        self.batchRanges: dict[int, list[OffsetRange]] = {}
        self._layout = PartitionLayout()
        # The thread that makes a batch's ranges while the JVM reads them (see compute).
        self._plannerThread: ThreadPoolExecutor | None = None
        # The JVM parent of the batches' RDDs, kept while their partitions stay the same.
        self._keptParent = KeptParent()
        # A grouped stream's parents, one per number of groups (see compute).
        self._keptGroups = KeptGroups()

    def _driver(self) -> DriverConsumer:
        """The started stream's driver consumer."""
        raise NotImplementedError

    def _batchMade(self, validTime: int, ranges: list[OffsetRange],
                   partitions: list[TopicPartition]) -> None:
        """Batch ``validTime`` reads ``ranges`` (of ``partitions``, in that order).

        Called once a batch, before :meth:`compute` returns; in the planner thread where
        the ranges are made there.
        """
        raise NotImplementedError

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
        controller = self.rateController
        if controller is None:
            return None
        latest = controller.getLatestRate()
        rate = latest if latest > 0 else self.streamSettings.initialRate
        return rate if rate > 0 else None

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
    def compute(self, validTime: int) -> KafkaRDD:
        ranges = self._recovered(validTime)
        if ranges is not None:
            partitions = [r.topicPartition() for r in ranges]
            self._batchMade(validTime, ranges, partitions)
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
            self._batchMade(validTime, made, partitions)
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
