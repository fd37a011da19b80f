"""Input streams: where batches come from (queues of RDDs, a constant RDD, Kafka).

An input stream has no parents; it gets an ``inputStreamId``, registers with the graph,
produces one RDD per batch interval, reports what it brought in to the InputInfoTracker, and
may have a RateController (backpressure) that the scheduler subscribes to batch updates.
"""

from __future__ import annotations

import collections
import logging
from typing import TYPE_CHECKING, Any

from typing_extensions import override

from kafka_direct.errors import ConfigurationError
from kafka_direct.streaming.batch_info import StreamInputInfo
from kafka_direct.streaming.dstream import DStream

if TYPE_CHECKING:
    from kafka_direct.streaming.context import StreamingContext
    from kafka_direct.streaming.rate_controller import RateController

__all__ = ["ConstantInputDStream", "InputDStream", "QueueInputDStream"]

logger = logging.getLogger(__name__)


class InputDStream(DStream):
    """Base of input streams: one RDD per batch interval, from outside the graph.

    Subclasses implement :meth:`compute`, and :meth:`start` / :meth:`stop` if they hold
    resources. Input streams whose per-batch state can be written as JSON (the Kafka stream:
    its offset ranges) override :meth:`checkpointState` and :meth:`restoreCheckpointState`
    so a recovered driver regenerates pending batches identically.
    """

    #: Whether the stream's batches can be recreated from a checkpoint.
    supportsCheckpointing = True

    def __init__(self, ssc: StreamingContext) -> None:
        super().__init__(ssc)
        self.inputStreamId = ssc._newInputStreamId()
        self.lastValidTime: int | None = None
        ssc.graph.addInputStream(self)

    @override
    @property
    def dependencies(self) -> list[DStream]:
        return []

    @override
    @property
    def slideDuration(self) -> int:
        return self.ssc.graph.batchDuration

    @property
    def rateController(self) -> RateController | None:
        """The stream's backpressure controller, if it has one."""
        return None

    @property
    def name(self) -> str:
        """Name for people."""
        return f"{type(self).__name__} {self.inputStreamId}"

    @property
    def stableIdentity(self) -> str | None:
        """What the stream reads, as text that is the same in every run of the application.

        A checkpoint matches the stream's state by it (unless the stream was given a name
        with :meth:`setCheckpointId`), so it must tell apart any two streams of one
        application that read different data, and must not depend on creation order. None
        (the default: queue and constant streams, which have no replayable source) matches
        the stream by its position among the input streams of its class that have none.
        """
        return None

    def isTimeValid(self, time: int) -> bool:
        """Whether the stream makes a batch for ``time``: any time on its slide grid.

        As Spark's ``InputDStream.isTimeValid``, a time before the latest one the stream
        computed is valid too (only logged): after a recovery, the first output operation
        computes the input's batch for the recovered time, and a stateful or windowed stream
        then asks for the earlier (restored) batches it needs. :attr:`lastValidTime` is the
        latest time asked for, never lowered; a stream that must not make a batch for an
        earlier time (the Kafka stream, for a time it never read) overrides this.
        """
        if not super().isTimeValid(time):
            return False
        if self.lastValidTime is not None and time < self.lastValidTime:
            logger.warning("%s: isTimeValid called with %d ms whereas the last valid time is "
                           "%d ms", self.name, time, self.lastValidTime)
        else:
            self.lastValidTime = time
        return True

    def isPastBatch(self, time: int) -> bool:
        """Whether batch ``time`` is before the batch whose jobs the graph generates now.

        Batches are generated in time order (a recovery first regenerates the batches its
        checkpoint left pending), so the jobs of such a batch were generated already, or it
        completed before the driver restarted: a job of its own can no longer read what
        this stream computes for it now (a later batch's window or state does).
        """
        generating = self.ssc.graph.generatingTime
        return generating is not None and time < generating

    def reportInfo(self, time: int, numRecords: int, metadata: dict[str, Any] | None = None
                   ) -> None:
        """Tell the InputInfoTracker what this stream brought into batch ``time``."""
        self.ssc.scheduler.inputInfoTracker.reportInfo(
            time, StreamInputInfo(self.inputStreamId, numRecords, metadata or {}))

    def onBatchCompleted(self, time: int) -> None:
        """Called once every output operation of batch ``time`` succeeded (on a job thread).

        The Kafka stream commits queued offsets here, so the last batch's commit is not
        deferred to a batch that may never come.
        """

    def start(self) -> None:
        """Called when the context starts."""

    def stop(self) -> None:
        """Called when the context stops."""


class QueueInputDStream(InputDStream):
    """Batches taken from a queue of RDDs: one per batch, or all queued ones at once.

    The queue is a ``collections.deque`` that can be appended to while the stream runs; a
    queued list becomes an RDD when its batch comes.
    Its RDDs are data of this driver process, so the stream cannot be checkpointed.
    """

    supportsCheckpointing = False

    def __init__(self, ssc: StreamingContext, queue: collections.deque[Any], oneAtATime: bool,
                 defaultRDD: Any = None) -> None:
        super().__init__(ssc)
        self.queue = queue
        self.oneAtATime = oneAtATime
        self.defaultRDD = defaultRDD

    def validateAtStart(self) -> None:
        """Reject checkpointing: the queued RDDs cannot be recreated after a restart."""
        if self.ssc.checkpointDir is not None:
            raise ConfigurationError(
                "queueStream doesn't support checkpointing: its RDDs exist only in this "
                "driver; remove StreamingContext.checkpoint() or use a replayable input")
        super().validateAtStart()

    @override
    def compute(self, validTime: int) -> Any:
        taken: list[Any] = []
        if self.queue:
            if self.oneAtATime:
                taken.append(self.queue.popleft())
            else:
                while self.queue:
                    taken.append(self.queue.popleft())
        taken = [self._as_rdd(item) for item in taken]
        if taken:
            rdd = taken[0] if len(taken) == 1 else self.ssc.sparkContext.union(taken)
        elif self.defaultRDD is not None:
            rdd = self.defaultRDD
        else:
            rdd = self.ssc.sparkContext.emptyRDD()
        return rdd


    def _as_rdd(self, item: Any) -> Any:
        from pyspark import RDD

        return item if isinstance(item, RDD) else self.ssc.sparkContext.parallelize(list(item))


class ConstantInputDStream(InputDStream):
    """The same RDD every batch (for tests and demos)."""

    def __init__(self, ssc: StreamingContext, rdd: Any) -> None:
        if rdd is None:
            raise ConfigurationError("constantStream needs an RDD, got None")
        super().__init__(ssc)
        self.rdd = rdd

    @override
    def compute(self, validTime: int) -> Any:
        return self.rdd
