"""DStream: a stream of RDDs, one per batch, and the contract every stream fulfils.

A DStream has ``dependencies`` (the streams it is computed from), a ``slideDuration`` (how
often it makes an RDD) and ``compute(time)`` (the RDD for a batch time, or None). The graph
initializes every stream with the *zero time* (one batch interval before the first batch), so
a stream's valid times are ``zeroTime + k * slideDuration`` for k >= 1.

RDDs computed for a time are kept in ``generatedRDDs`` for ``rememberDuration`` (enough for
the windows reading them), then unpersisted and forgotten by ``clearMetadata``. Streams whose
state must survive a driver failure (``mustCheckpoint``) checkpoint their RDDs every
``checkpointDuration``; their checkpoint data is the RDD checkpoint files, by batch time.

All times are epoch milliseconds; the public operators take seconds.
"""

from __future__ import annotations

import logging
import os
import threading
import traceback
from typing import TYPE_CHECKING, Any

from kafka_direct.errors import ConfigurationError, StreamingStateError
from kafka_direct.streaming.operators import DStreamOperators
from kafka_direct.streaming.windowed_operators import WindowedOperators

if TYPE_CHECKING:
    from kafka_direct.streaming.context import StreamingContext
    from kafka_direct.streaming.dstream_graph import DStreamGraph
    from kafka_direct.streaming.job import Job

__all__ = ["DStream", "user_callsite"]

logger = logging.getLogger(__name__)

#: Default checkpoint interval floor for streams that must checkpoint (Spark's 10 s).
_MIN_CHECKPOINT_MS = 10_000


_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


def user_callsite() -> str:
    """``file:line`` of the innermost caller outside kafka-direct, to name streams for people."""
    for frame in reversed(traceback.extract_stack()[:-1]):
        if not os.path.abspath(frame.filename).startswith(_PACKAGE_DIR):
            return f"{os.path.basename(frame.filename)}:{frame.lineno}"
    return "unknown"


class DStream(DStreamOperators, WindowedOperators):
    """A discretized stream: a sequence of RDDs, one per batch time.

    Subclasses implement :attr:`dependencies`, :attr:`slideDuration` (ms) and
    :meth:`compute`.

    Args:
        ssc: The StreamingContext the stream belongs to.
    """

    #: Whether the stream's RDDs must be checkpointed (its state spans batches).
    mustCheckpoint = False

    def __init__(self, ssc: StreamingContext) -> None:
        if ssc.state != "INITIALIZED":
            raise StreamingStateError(
                "Adding new inputs, transformations, and output operations after "
                f"starting a context is not supported (the context is {ssc.state})")
        self.ssc = ssc
        self.id = ssc._newDStreamId()
        self.generatedRDDs: dict[int, Any] = {}
        self.zeroTime: int | None = None
        self.rememberDuration: int | None = None
        self.storageLevel: Any = None
        self.checkpointDuration: int | None = None
        self.checkpointFiles: dict[int, str] = {}
        self.restoredCheckpointFiles: dict[int, str] = {}
        self.graph: DStreamGraph | None = None
        self.creationSite = user_callsite()
        self.checkpointId: str | None = None
        self._lock = threading.RLock()

    # -- the contract -------------------------------------------------------------------

    @property
    def dependencies(self) -> list[DStream]:
        """The streams this one is computed from."""
        raise NotImplementedError

    @property
    def slideDuration(self) -> int:
        """Milliseconds between this stream's RDDs."""
        raise NotImplementedError

    def compute(self, validTime: int) -> Any:
        """The RDD for ``validTime`` (a valid time of this stream), or None."""
        raise NotImplementedError

    @property
    def parentRememberDuration(self) -> int | None:
        """How long parents must keep their RDDs for this stream (windows need more)."""
        return self.rememberDuration

    def context(self) -> StreamingContext:
        """The StreamingContext of the stream."""
        return self.ssc

    # -- lifecycle ----------------------------------------------------------------------

    @property
    def isInitialized(self) -> bool:
        """Whether the graph has given the stream its zero time."""
        return self.zeroTime is not None

    def initialize(self, zeroTime: int) -> None:
        """Set the zero time, default checkpoint and remember durations; then the parents'."""
        if self.zeroTime is not None and self.zeroTime != zeroTime:
            raise StreamingStateError(
                f"ZeroTime is already initialized to {self.zeroTime}, cannot initialize it "
                f"again to {zeroTime}")
        self.zeroTime = zeroTime
        slide = self.slideDuration
        if self.mustCheckpoint and self.checkpointDuration is None:
            self.checkpointDuration = slide * max(1, -(-_MIN_CHECKPOINT_MS // slide))
            logger.info("Checkpoint interval automatically set to %d ms", self.checkpointDuration)
        minimum = slide
        if self.checkpointDuration is not None:
            minimum = max(minimum, 2 * self.checkpointDuration)
        if self.rememberDuration is None or self.rememberDuration < minimum:
            self.rememberDuration = minimum
        for parent in self.dependencies:
            parent.initialize(zeroTime)

    def setGraph(self, graph: DStreamGraph) -> None:
        """Attach the stream and its parents to the graph."""
        if self.graph is not None and self.graph is not graph:
            raise StreamingStateError(f"DStream {self} already belongs to another graph")
        self.graph = graph
        for parent in self.dependencies:
            parent.setGraph(graph)

    def remember(self, duration: int | None) -> None:
        """Keep RDDs at least ``duration`` ms; parents keep what this stream needs of them."""
        if duration is not None and (self.rememberDuration is None
                                     or duration > self.rememberDuration):
            self.rememberDuration = duration
        for parent in self.dependencies:
            parent.remember(self.parentRememberDuration)

    def validateAtStart(self) -> None:
        """Check settings that can only be judged once the graph is complete.

        As Spark's ``DStream.validateAtStart``: a stream that checkpoints its RDDs (a stateful
        one, or one given :meth:`checkpoint`) needs the SparkContext's checkpoint directory,
        set by ``StreamingContext.checkpoint(directory)`` (which also checkpoints metadata,
        for recovery) or by ``SparkContext.setCheckpointDir(directory)`` alone.

        Raises:
            ConfigurationError: The stream checkpoints RDDs and no checkpoint directory is
                set, or its checkpoint interval is not a multiple of its slide duration.
        """
        if self.checkpointDuration is not None and not self.ssc._hasRDDCheckpointDir():
            raise ConfigurationError(
                f"{type(self).__name__} (created at {self.creationSite}) checkpoints its RDDs"
                f"{' (it keeps state across batches)' if self.mustCheckpoint else ''}: the "
                "checkpoint directory has not been set; set it with "
                "StreamingContext.checkpoint(directory) or SparkContext.setCheckpointDir("
                "directory)")
        if self.checkpointDuration is not None and self.checkpointDuration % self.slideDuration:
            raise ConfigurationError(
                f"The checkpoint interval for {type(self).__name__} has been set to "
                f"{self.checkpointDuration} ms which not a multiple of its slide time "
                f"({self.slideDuration} ms). Please set it to a multiple of {self.slideDuration}"
                " ms.")
        for parent in self.dependencies:
            parent.validateAtStart()

    # -- RDDs per batch -----------------------------------------------------------------

    def isTimeValid(self, time: int) -> bool:
        """Whether ``time`` is after the zero time and on this stream's slide grid."""
        if self.zeroTime is None:
            raise StreamingStateError(f"{type(self).__name__} has not been initialized")
        return time > self.zeroTime and (time - self.zeroTime) % self.slideDuration == 0

    def getOrCompute(self, time: int) -> Any:
        """The RDD for ``time``: remembered, or computed (and persisted, checkpointed) now."""
        with self._lock:
            if time in self.generatedRDDs:
                return self.generatedRDDs[time]
            if time in self.restoredCheckpointFiles:
                rdd = self.ssc._restoreCheckpointedRDD(self.restoredCheckpointFiles.pop(time))
                self.generatedRDDs[time] = rdd
                return rdd
            if not self.isTimeValid(time):
                return None
            rdd = self.compute(time)
            if rdd is None:
                return None
            if self.storageLevel is not None:
                rdd.persist(self.storageLevel)
            if (self.checkpointDuration is not None and self.zeroTime is not None
                    and (time - self.zeroTime) % self.checkpointDuration == 0):
                rdd.checkpoint()
            self.generatedRDDs[time] = rdd
            return rdd

    def slice_ms(self, fromTime: int, toTime: int) -> list[Any]:
        """The RDDs of the valid times in ``[fromTime, toTime]``, both ends floored to them."""
        if self.zeroTime is None:
            raise StreamingStateError(f"{type(self).__name__} has not been initialized")
        slide, zero = self.slideDuration, self.zeroTime

        def floor(time: int) -> int:
            return zero + ((time - zero) // slide) * slide

        rdds = []
        for time in range(floor(fromTime), floor(toTime) + 1, slide):
            rdd = self.getOrCompute(time)
            if rdd is not None:
                rdds.append(rdd)
        return rdds

    def generateJob(self, time: int) -> Job | None:
        """The job an output stream runs for ``time`` (only output streams make jobs)."""
        return None

    def clearMetadata(self, time: int) -> None:
        """Forget (and unpersist) RDDs older than the remember duration; then the parents'."""
        unpersist = str(self.ssc.conf("spark.streaming.unpersist", "true")).lower() == "true"
        with self._lock:
            threshold = time - (self.rememberDuration or 0)
            old = {t: rdd for t, rdd in self.generatedRDDs.items() if t <= threshold}
            for t in old:
                del self.generatedRDDs[t]
        if unpersist:
            for rdd in old.values():
                rdd.unpersist()
        if old:
            logger.debug("Cleared %d RDDs of %s at time %d", len(old), type(self).__name__,
                         time)
        for parent in self.dependencies:
            parent.clearMetadata(time)

    # -- checkpoint data ----------------------------------------------------------------

    def updateCheckpointData(self, currentTime: int) -> None:
        """Record the checkpoint files of this stream's checkpointed RDDs."""
        with self._lock:
            for time, rdd in self.generatedRDDs.items():
                if rdd.isCheckpointed():
                    path = rdd.getCheckpointFile()
                    if path:
                        self.checkpointFiles[time] = str(path)
        for parent in self.dependencies:
            parent.updateCheckpointData(currentTime)

    def clearCheckpointData(self, time: int) -> None:
        """Forget checkpoint files older than the remembered RDDs (a newer file covers them)."""
        with self._lock:
            if self.generatedRDDs:
                oldest = min(self.generatedRDDs)
                for t in [t for t in self.checkpointFiles if t < oldest]:
                    self.ssc._deleteCheckpointFile(self.checkpointFiles.pop(t))
        for parent in self.dependencies:
            parent.clearCheckpointData(time)

    def checkpointState(self) -> dict[str, Any]:
        """What this stream needs after a restart, as JSON-ready data."""
        with self._lock:
            return {"rdds": {str(t): f for t, f in sorted(self.checkpointFiles.items())}}

    def restoreCheckpointState(self, state: dict[str, Any]) -> None:
        """Take back :meth:`checkpointState` (RDDs are restored lazily, when asked for)."""
        files = {int(t): str(f) for t, f in state.get("rdds", {}).items()}
        self.checkpointFiles = dict(files)
        self.restoredCheckpointFiles = dict(files)

    def setCheckpointId(self, checkpointId: str) -> DStream:
        """Name the stream for checkpoints: its state is matched to it by this name.

        Without a name, a checkpoint matches an input stream's state by what the stream
        reads (a Kafka stream: its topics, pattern or partitions and its group.id), and a
        derived stream's state by its lineage (the operators between it and its inputs). A
        name keeps the match through changes of those, e.g. a topic added to a Kafka stream
        (whose restored offset ranges must still be of partitions it reads). Names are unique
        per application.

        Args:
            checkpointId: A non-empty name, stable across runs of the application.

        Returns:
            This stream, for chaining.

        Raises:
            ConfigurationError: ``checkpointId`` is not a non-empty string.
            StreamingStateError: The context has started already.
        """
        if not isinstance(checkpointId, str) or not checkpointId.strip():
            raise ConfigurationError(
                f"checkpointId must be a non-empty string, got {checkpointId!r}")
        if self.ssc.state != "INITIALIZED":
            raise StreamingStateError(
                "setCheckpointId must be called before the context starts (it is "
                f"{self.ssc.state})")
        self.checkpointId = checkpointId
        return self

    # -- registration -------------------------------------------------------------------

    def register(self) -> DStream:
        """Make this stream an output stream of the graph."""
        self.ssc.graph.addOutputStream(self)
        return self

    def __repr__(self) -> str:
        return f"{type(self).__name__}[{self.id}] at {self.creationSite}"
