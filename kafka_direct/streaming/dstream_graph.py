"""DStreamGraph: the input and output streams of a context, and the jobs of each batch."""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING, Any

from kafka_direct.errors import ConfigurationError, StreamingStateError

if TYPE_CHECKING:
    from kafka_direct.streaming.dstream import DStream
    from kafka_direct.streaming.input_dstream import InputDStream
    from kafka_direct.streaming.job import Job

__all__ = ["DStreamGraph"]

logger = logging.getLogger(__name__)


class DStreamGraph:
    """Input and output streams, the zero time, and per-batch job generation.

    Args:
        batchDuration: The batch interval in milliseconds.
    """

    def __init__(self, batchDuration: int) -> None:
        self.batchDuration = batchDuration
        self.inputStreams: list[InputDStream] = []
        self.outputStreams: list[DStream] = []
        self.zeroTime: int | None = None
        self.startTime: int | None = None
        self.rememberDuration: int | None = None
        self._lock = threading.RLock()

    def addInputStream(self, stream: InputDStream) -> None:
        """Register an input stream."""
        with self._lock:
            stream.setGraph(self)
            self.inputStreams.append(stream)

    def addOutputStream(self, stream: DStream) -> None:
        """Register an output stream; it gets the next output operation id."""
        with self._lock:
            stream.setGraph(self)
            stream.outputOpId = len(self.outputStreams)  # type: ignore[attr-defined]
            self.outputStreams.append(stream)

    def remember(self, duration: int) -> None:
        """Keep every stream's RDDs at least ``duration`` ms (before the start)."""
        with self._lock:
            if self.zeroTime is not None:
                raise StreamingStateError("remember() must be called before the context starts")
            self.rememberDuration = duration

    def validate(self) -> None:
        """At least one output operation, and consistent streams."""
        if not self.outputStreams:
            raise ConfigurationError(
                "No output operations registered, so nothing to execute; add one such as "
                "foreachRDD or pprint before starting the context")
        for stream in self.outputStreams:
            if stream.slideDuration % self.batchDuration:
                raise ConfigurationError(
                    f"{stream!r} slides every {stream.slideDuration} ms, which is not a "
                    f"multiple of the batch interval {self.batchDuration} ms")

    def start(self, zeroTime: int, startTime: int | None = None) -> None:
        """Initialize every stream with the zero time, validate, and start the inputs.

        A recovered graph gets the zero time of the run its checkpoint came from, and the
        time it restarts at.
        """
        with self._lock:
            self.zeroTime = zeroTime
            self.startTime = zeroTime if startTime is None else startTime
            self._initialize(zeroTime)
            for stream in self.inputStreams:
                stream.start()

    def _initialize(self, zeroTime: int) -> None:
        for stream in self.outputStreams:
            stream.initialize(zeroTime)
        for stream in self.outputStreams:
            stream.remember(self.rememberDuration)
        for stream in self.outputStreams:
            stream.validateAtStart()

    def stop(self) -> None:
        """Stop the input streams."""
        for stream in self.inputStreams:
            try:
                stream.stop()
            except Exception:
                logger.exception("stopping %r failed", stream)

    def generateJobs(self, time: int) -> list[Job]:
        """The jobs of batch ``time``: one per output stream that has an RDD for it."""
        with self._lock:
            jobs = []
            for stream in self.outputStreams:
                job = stream.generateJob(time)
                if job is not None:
                    jobs.append(job)
            logger.debug("Generated %d jobs for time %d ms", len(jobs), time)
            return jobs

    def clearMetadata(self, time: int) -> None:
        """Forget old RDDs of every stream."""
        with self._lock:
            for stream in self.outputStreams:
                stream.clearMetadata(time)

    def updateCheckpointData(self, time: int) -> None:
        """Collect the streams' checkpoint data for batch ``time``."""
        with self._lock:
            for stream in self.outputStreams:
                stream.updateCheckpointData(time)

    def clearCheckpointData(self, time: int) -> None:
        """Drop checkpoint data no checkpoint needs any more."""
        with self._lock:
            for stream in self.outputStreams:
                stream.clearCheckpointData(time)

    def getMaxInputStreamRememberDuration(self) -> int:
        """The longest time an input stream keeps its RDDs (ms)."""
        return max((s.rememberDuration or 0 for s in self.inputStreams), default=0)

    def allStreams(self) -> list[DStream]:
        """Every stream reachable from the outputs, each once, in id order."""
        seen: dict[int, DStream] = {}
        pending: list[DStream] = [*self.outputStreams, *self.inputStreams]
        while pending:
            stream = pending.pop()
            if stream.id not in seen:
                seen[stream.id] = stream
                pending.extend(stream.dependencies)
        return [seen[i] for i in sorted(seen)]

    def checkpointState(self) -> dict[str, Any]:
        """Every stream's checkpoint data, keyed by stream id and class (JSON-ready)."""
        with self._lock:
            return {f"{s.id}:{type(s).__name__}": s.checkpointState()
                    for s in self.allStreams()}

    def restoreCheckpointState(self, states: dict[str, Any]) -> None:
        """Give each rebuilt stream its checkpoint data back (matched by id and class)."""
        with self._lock:
            streams = {f"{s.id}:{type(s).__name__}": s for s in self.allStreams()}
            for key, state in states.items():
                stream = streams.get(key)
                if stream is None:
                    logger.warning("checkpoint has data of stream %s, which the rebuilt graph "
                                   "does not have; ignored", key)
                    continue
                stream.restoreCheckpointState(state)
