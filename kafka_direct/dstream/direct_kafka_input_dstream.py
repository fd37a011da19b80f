"""DirectKafkaInputDStream: a stream of KafkaRDDs, one offset range per partition per batch.

How each batch is made (its ranges from the end offsets, the rate limits, its RDD, its input
info) is :class:`~kafka_direct.dstream.direct_kafka_batches.DirectKafkaBatches`', this
class's base; this class is the stream's lifecycle around it: construction (every setting
checked), start (where each partition starts), stop, checkpoints and commits.

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
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from typing_extensions import override

from kafka_direct.client.driver_consumer import STREAM_ASKERS, DriverConsumer
from kafka_direct.client.params import check_with_librdkafka
from kafka_direct.client.retry import Retrier
from kafka_direct.dstream.commit_queue import CommitCallback, StreamCommits
from kafka_direct.dstream.consumer_strategy import ConsumerStrategy
from kafka_direct.dstream.direct_kafka_batches import DirectKafkaBatches, describe_ranges
from kafka_direct.dstream.partition_discovery import PartitionDiscovery, WaitClock
from kafka_direct.dstream.per_partition_config import DefaultPerPartitionConfig, PerPartitionConfig
from kafka_direct.dstream.starting_offsets import StartingOffsets, StartingOffsetsCallback
from kafka_direct.dstream.stream_settings import StreamSettings
from kafka_direct.errors import CheckpointError, ConfigurationError, KafkaDirectError
from kafka_direct.offset_range import CanCommitOffsets, OffsetRange
from kafka_direct.rdd.kafka_rdd import ReadSettings
from kafka_direct.rdd.location_strategy import LocationStrategy
from kafka_direct.streaming.input_dstream import InputDStream
from kafka_direct.streaming.job_scheduler import BATCH_TIME_PROPERTY
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


class DirectKafkaInputDStream(DirectKafkaBatches, CanCommitOffsets):
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

    @override
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

    # -- batches: their times, and their ranges handed to the commit queue -----------------

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
    def _batchMade(self, validTime: int, ranges: list[OffsetRange],
                   partitions: list[TopicPartition]) -> None:
        self._commits.queue.addBatch(validTime, ranges, self._hasJobs(validTime), partitions)

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
