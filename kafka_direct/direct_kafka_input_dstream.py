"""DirectKafkaInputDStream: a stream of KafkaRDDs, one offset range per partition per batch.

Each batch, on the driver: ask Kafka for the end offsets of the stream's partitions (finding
new partitions and noticing rebalances), limit how far each partition may advance (rate
limits, backpressure), and build a KafkaRDD of the ranges ``[where the last batch ended, the
limited end)``. Ranges are contiguous across batches, so every offset is in exactly one batch.

The ranges of each batch are the stream's checkpoint data: a recovered driver regenerates
pending batches with exactly the same ranges. ``commitAsync`` commits to the consumer group
as soon as the batch's output operations finish (and on stop), not a batch later.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from typing_extensions import override

from kafka_direct.consumer_strategy import ConsumerStrategy
from kafka_direct.driver_consumer import DriverConsumer
from kafka_direct.errors import (
    ConfigurationError,
    KafkaDirectError,
    KafkaUnavailableError,
    PartitionsRevokedError,
)
from kafka_direct.kafka_rdd import KafkaRDD, ReadSettings
from kafka_direct.location_strategy import LocationStrategy, PreferBrokers
from kafka_direct.offset_range import CanCommitOffsets, OffsetRange
from kafka_direct.per_partition_config import DefaultPerPartitionConfig, PerPartitionConfig
from kafka_direct.rate_limit import clamp
from kafka_direct.streaming.input_dstream import InputDStream
from kafka_direct.streaming.rate_controller import (
    RateController,
    RateEstimator,
    backpressure_enabled,
)
from kafka_direct.topic_partition import TopicPartition

if TYPE_CHECKING:
    from kafka_direct.streaming.context import StreamingContext

__all__ = ["DirectKafkaInputDStream", "describe_ranges"]

logger = logging.getLogger(__name__)

CommitCallback = Callable[[dict[TopicPartition, int] | None, Exception | None], None]


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
    """

    def __init__(self, ssc: StreamingContext, locationStrategy: LocationStrategy,
                 consumerStrategy: ConsumerStrategy,
                 perPartitionConfig: PerPartitionConfig | None = None,
                 keyDeserializer: Callable[[bytes], Any] | None = None,
                 valueDeserializer: Callable[[bytes], Any] | None = None,
                 messageHandler: Callable[[Any], Any] | None = None, *,
                 driverConsumerFactory: Callable[[dict[str, Any]], DriverConsumer] | None = None
                 ) -> None:
        if not isinstance(locationStrategy, LocationStrategy):
            raise ConfigurationError("createDirectStream needs a LocationStrategy, e.g. "
                                     f"LocationStrategies.PreferConsistent(); got "
                                     f"{locationStrategy!r}")
        if not isinstance(consumerStrategy, ConsumerStrategy):
            raise ConfigurationError("createDirectStream needs a ConsumerStrategy, e.g. "
                                     "ConsumerStrategies.Subscribe([...], kafkaParams); got "
                                     f"{consumerStrategy!r}")
        super().__init__(ssc)
        conf = ssc._conf
        self.locationStrategy = locationStrategy
        self.consumerStrategy = consumerStrategy
        self.perPartitionConfig = perPartitionConfig or DefaultPerPartitionConfig(conf)
        self.settings = ReadSettings(
            params=consumerStrategy.executorParams(),
            pollTimeoutMs=int(ssc.conf("spark.streaming.kafka.consumer.poll.ms", "120000")),
            failOnDataLoss=ssc.conf("spark.streaming.kafka.failOnDataLoss", "true").lower()
            == "true",
            useConsumerCache=ssc.conf("spark.streaming.kafka.consumer.cache.enabled",
                                      "true").lower() == "true",
            keyDeserializer=keyDeserializer, valueDeserializer=valueDeserializer,
            messageHandler=messageHandler)
        self.maxRecordsPerBatch = int(ssc.conf("spark.streaming.kafka.maxRecordsPerBatch", "0"))
        self.maxRetries = int(ssc.conf("spark.streaming.kafka.maxRetries", "1"))
        self.retryBackoffMs = int(ssc.conf("spark.streaming.kafka.retryBackoffMs", "200"))
        self.requestTimeoutMs = int(ssc.conf("spark.streaming.kafka.driverTimeoutMs", "30000"))
        self.rebalanceWaitMs = int(ssc.conf("spark.streaming.kafka.rebalanceWaitMs", "10000"))
        self.initialRate = float(ssc.conf("spark.streaming.backpressure.initialRate", "0"))
        self._rateController: RateController | None = None
        if backpressure_enabled(conf):
            self._rateController = RateController(
                self.inputStreamId, RateEstimator.create(conf, ssc.batchDuration))
        self._driverFactory = driverConsumerFactory or (
            lambda params: DriverConsumer(params, self.requestTimeoutMs))
        self.driver: DriverConsumer | None = None
        self.currentOffsets: dict[TopicPartition, int] = {}
        #: End offsets seen by the latest batch (for lag), and offsets committed to Kafka.
        self.latestSeen: dict[TopicPartition, int] = {}
        self.committedOffsets: dict[TopicPartition, int] = {}
        self.batchRanges: dict[int, list[OffsetRange]] = {}
        self._commitQueue: deque[tuple[list[OffsetRange], CommitCallback | None]] = deque()
        self._commitLock = threading.Lock()
        self._startingOffsetsCallbacks: list[Callable[[dict[TopicPartition, int]], None]] = []

    @property
    @override
    def rateController(self) -> RateController | None:
        return self._rateController

    @property
    @override
    def name(self) -> str:
        return f"Kafka 0.10 direct stream [{self.inputStreamId}]"

    # -- start and stop -------------------------------------------------------------------

    def _retrying(self, what: str, action: Callable[[], Any]) -> Any:
        attempts = self.maxRetries + 1
        for attempt in range(1, attempts + 1):
            try:
                return action()
            except KafkaDirectError:
                raise
            except Exception as error:
                if attempt == attempts:
                    raise KafkaUnavailableError(
                        f"{what} failed {attempts} times, last with: {error}. Is Kafka at "
                        f"{self.consumerStrategy.kafkaParams.get('bootstrap.servers')} up? "
                        "spark.streaming.kafka.maxRetries sets how often to retry",
                        attempts=attempts) from error
                logger.warning("%s failed (attempt %d of %d), retrying in %d ms: %s", what,
                               attempt, attempts, self.retryBackoffMs, error)
                time.sleep(self.retryBackoffMs / 1000.0)
        raise AssertionError("unreachable")  # pragma: no cover

    @override
    def start(self) -> None:
        driver = self._retrying("connecting the driver consumer", lambda: self._connect())
        self.driver = driver
        partitions = self._retrying("listing the stream's partitions", self._streamPartitions)
        if self.batchRanges:  # recovered: go on where the checkpointed batches end
            latest = max(self.batchRanges)
            self.currentOffsets = {r.topicPartition(): r.untilOffset
                                   for r in self.batchRanges[latest]}
            missing = partitions - set(self.currentOffsets)
            self.currentOffsets.update(self._startingOffsets(missing, new=True))
        else:
            self.currentOffsets = self._startingOffsets(partitions, new=False)
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

    def _streamPartitions(self) -> set[TopicPartition]:
        driver = self._driver()
        partitions = self.consumerStrategy.topicPartitions(driver)
        if not self.consumerStrategy.usesGroupManagement:
            return partitions
        # A rebalance under way leaves the assignment empty or partial for a moment:
        # give it time to settle before calling a partition lost.
        wait = self.requestTimeoutMs / 1000.0 if self.driver is not None and not \
            self.currentOffsets else self.rebalanceWaitMs / 1000.0
        deadline = time.monotonic() + wait
        while (not partitions or not set(self.currentOffsets) <= partitions) and \
                time.monotonic() < deadline:
            time.sleep(0.05)
            partitions = self.consumerStrategy.topicPartitions(driver)
        if not partitions:
            logger.warning("group %s assigns no partition to %s", self.consumerStrategy.groupId,
                           self.name)
        return partitions

    def _driver(self) -> DriverConsumer:
        if self.driver is None:
            raise KafkaDirectError(f"{self.name} is not started")
        return self.driver

    def _startingOffsets(self, partitions: set[TopicPartition], new: bool
                         ) -> dict[TopicPartition, int]:
        if not partitions:
            return {}
        strategy, driver = self.consumerStrategy, self._driver()
        chosen = {tp: strategy.offsets[tp] for tp in partitions if tp in strategy.offsets}
        rest = partitions - set(chosen)
        if rest:
            chosen.update(self._retrying("reading committed offsets",
                                         lambda: driver.committed(rest)))
        rest = partitions - set(chosen)
        timestamps = {tp: ts for tp in rest if (ts := strategy.timestampFor(tp)) is not None}
        if timestamps:
            chosen.update(self._retrying("looking offsets up by time",
                                         lambda: driver.offsetsForTimes(timestamps)))
        rest = partitions - set(chosen)
        policy = strategy.newPartitionOffsets if new else strategy.resetPolicy
        if rest and policy == "none":
            raise ConfigurationError(
                f"no committed offset for {sorted(str(tp) for tp in rest)} in group "
                f"{strategy.groupId!r} and auto.offset.reset is none; give offsets= or set "
                "auto.offset.reset to earliest or latest")
        if rest:
            lookup = driver.earliestOffsets if policy == "earliest" else driver.latestOffsets
            chosen.update(self._retrying(f"reading {policy} offsets", lambda: lookup(rest)))
            for tp in sorted(rest):
                logger.info("%s partition %s starts at its %s offset %d", self.name, tp,
                            policy, chosen[tp])
        self._checkWithinLog(chosen)
        for callback in self._startingOffsetsCallbacks:
            callback(dict(chosen))
        return chosen

    def onStartingOffsets(self, callback: Callable[[dict[TopicPartition, int]], None]
                          ) -> None:
        """Call ``callback(offsets)`` whenever partitions get their starting offsets.

        That is at start (every partition) and when new partitions or matching topics
        appear, before a batch reads them: an offset store seeds them with it (see
        ``offsets.createDirectStreamFromStore``). An exception stops the stream.
        """
        self._startingOffsetsCallbacks.append(callback)

    def _checkWithinLog(self, offsets: dict[TopicPartition, int]) -> None:
        driver = self._driver()
        ends = self._retrying("reading end offsets", lambda: driver.latestOffsets(offsets))
        for tp, offset in offsets.items():
            if offset > ends.get(tp, offset):
                raise ConfigurationError(
                    f"start offset {offset} of {tp} is beyond its end offset {ends[tp]}; "
                    "start at or below the end", topic=tp.topic, partition=tp.partition)

    @override
    def stop(self) -> None:
        self.flushCommits()
        driver, self.driver = self.driver, None
        if driver is not None:
            driver.close()

    # -- batches ----------------------------------------------------------------------------

    def _latestOffsets(self) -> dict[TopicPartition, int]:
        driver = self._driver()
        partitions = self._retrying("listing the stream's partitions", self._streamPartitions)
        known = set(self.currentOffsets)
        lost = known - partitions
        if lost and self.consumerStrategy.usesGroupManagement:
            existing = driver.partitionsOf({tp.topic for tp in lost})
            taken = sorted(str(tp) for tp in lost
                           if tp.partition < existing.get(tp.topic, 0))
            if taken:
                raise PartitionsRevokedError(
                    f"partitions {taken} of {self.name} were taken away by a rebalance of "
                    f"consumer group {self.consumerStrategy.groupId!r}: another consumer (a "
                    "second stream?) joined the group. Each stream needs a group.id of its own",
                    group=self.consumerStrategy.groupId, partitions=taken)
        for tp in lost:
            logger.warning("%s no longer reads %s (its topic was deleted)", self.name, tp)
            del self.currentOffsets[tp]
        added = partitions - known
        if added:
            self.currentOffsets.update(self._startingOffsets(added, new=True))
        ends: dict[TopicPartition, int] = self._retrying(
            "reading end offsets", lambda: driver.latestOffsets(partitions))
        self.latestSeen = dict(ends)
        return ends

    def _estimatedRate(self) -> float | None:
        if self._rateController is None:
            return None
        latest = self._rateController.getLatestRate()
        rate = latest if latest > 0 else self.initialRate
        return rate if rate > 0 else None

    @override
    def compute(self, validTime: int) -> KafkaRDD:
        ranges = self.batchRanges.get(validTime)
        if ranges is None:
            latest = self._latestOffsets()
            for tp, end in latest.items():
                if end < self.currentOffsets[tp]:
                    logger.warning("%s: the end offset %d of %s is below where the stream "
                                   "stands (%d): the log was truncated", self.name, end, tp,
                                   self.currentOffsets[tp])
                    latest[tp] = self.currentOffsets[tp]
            ends = clamp(latest, self.currentOffsets, self.perPartitionConfig,
                         self.slideDuration / 1000.0, self._estimatedRate(),
                         self.maxRecordsPerBatch)
            ranges = [OffsetRange(tp.topic, tp.partition, self.currentOffsets[tp], ends[tp])
                      for tp in sorted(latest)]
            self.currentOffsets = {**self.currentOffsets, **ends}
            self.batchRanges[validTime] = ranges
        else:  # a batch regenerated after recovery: exactly the checkpointed ranges
            for r in ranges:
                current = self.currentOffsets.get(r.topicPartition(), r.untilOffset)
                self.currentOffsets[r.topicPartition()] = max(current, r.untilOffset)
        from kafka_direct.kafka_utils import KafkaUtils

        leaders = None
        if isinstance(self.locationStrategy, PreferBrokers):
            leaders = self._driver().leaders(r.topicPartition() for r in ranges)
        rdd = KafkaUtils._kafkaRDD(self.ssc.sparkContext, ranges, self.settings,
                                   self.locationStrategy, leaders)
        self.reportInfo(validTime, sum(r.count() for r in ranges),
                        {"offsets": [(r.topic, r.partition, r.fromOffset, r.untilOffset)
                                     for r in ranges],
                         "latestOffsets": [(tp.topic, tp.partition, end)
                                           for tp, end in sorted(self.latestSeen.items())],
                         "rateLimit": self.rateLimit(),
                         "Description": describe_ranges(ranges)})
        return rdd

    def rateLimit(self) -> dict[str, Any]:
        """The rate limits in force: the backpressure estimate and the per-partition maxima.

        Returns:
            ``{"estimatedRate": records/s or None, "maxRatePerPartition": {"t-p": records/s}
            (partitions with a limit only), "maxRecordsPerBatch": n or 0}``.
        """
        limits = {}
        for tp in sorted(self.currentOffsets):
            rate = self.perPartitionConfig.maxRatePerPartition(tp)
            if rate > 0:
                limits[str(tp)] = rate
        return {"estimatedRate": self._estimatedRate(), "maxRatePerPartition": limits,
                "maxRecordsPerBatch": self.maxRecordsPerBatch}

    @override
    def clearMetadata(self, time: int) -> None:
        super().clearMetadata(time)
        threshold = time - (self.rememberDuration or 0)
        for t in [t for t in self.batchRanges if t <= threshold]:
            del self.batchRanges[t]

    @override
    def checkpointState(self) -> dict[str, Any]:
        state = super().checkpointState()
        state["batches"] = {str(t): [[r.topic, r.partition, r.fromOffset, r.untilOffset]
                                     for r in ranges]
                            for t, ranges in sorted(self.batchRanges.items())}
        return state

    @override
    def restoreCheckpointState(self, state: dict[str, Any]) -> None:
        super().restoreCheckpointState(state)
        self.batchRanges = {int(t): [OffsetRange(str(a), int(b), int(c), int(d))
                                     for a, b, c, d in ranges]
                            for t, ranges in state.get("batches", {}).items()}

    # -- commits ----------------------------------------------------------------------------

    @override
    def commitAsync(self, offsetRanges: Sequence[OffsetRange],
                    callback: CommitCallback | None = None) -> None:
        ranges = list(offsetRanges)
        for r in ranges:
            if not isinstance(r, OffsetRange):
                raise ConfigurationError(f"commitAsync takes OffsetRange values, got {r!r}")
        with self._commitLock:
            self._commitQueue.append((ranges, callback))

    @override
    def onBatchCompleted(self, time: int) -> None:
        self.flushCommits()

    def flushCommits(self) -> None:
        """Commit every queued range now: per partition the largest ``untilOffset``."""
        with self._commitLock:
            queued = list(self._commitQueue)
            self._commitQueue.clear()
        if not queued:
            return
        offsets: dict[TopicPartition, int] = {}
        for ranges, _ in queued:
            for r in ranges:
                tp = r.topicPartition()
                offsets[tp] = max(offsets.get(tp, 0), r.untilOffset)
        error: Exception | None = None
        try:
            self._driver().commit(offsets)
            self.committedOffsets.update(offsets)
            logger.info("%s committed %s to group %s", self.name,
                        {str(tp): o for tp, o in sorted(offsets.items())},
                        self.consumerStrategy.groupId)
        except Exception as failure:
            error = failure
            logger.warning("%s could not commit offsets to group %s: %s", self.name,
                           self.consumerStrategy.groupId, failure)
        for _, callback in queued:
            if callback is not None:
                try:
                    callback(None if error else dict(offsets), error)
                except Exception:
                    logger.exception("commit callback failed")
