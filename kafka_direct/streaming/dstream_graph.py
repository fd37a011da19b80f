"""DStreamGraph: the input and output streams of a context, and the jobs of each batch.

The graph also keys the streams' checkpointed state. A key is a stream's stable identity,
never its creation order, so a recovered application whose code changed gives each state
back to the stream it came from, or refuses (CheckpointError) when it cannot:

- a stream named with ``setCheckpointId(name)``: ``named:<name>``;
- an input stream with a :attr:`~kafka_direct.streaming.input_dstream.InputDStream.stableIdentity`
  (a Kafka direct stream: its strategy, topics / pattern / partitions, and group.id):
  ``input:<identity>``;
- another input stream (queue, constant): ``input:<class>#<n>``, ``n`` its position among
  the input streams of that class without an identity;
- a derived stream: its parents' keys joined by ``&``, then ``/<class>``, and ``#<n>`` for
  the n-th (n >= 1) stream with that same lineage.
"""

from __future__ import annotations

import logging
import re
import threading
from collections import Counter
from typing import TYPE_CHECKING, Any

from kafka_direct.errors import CheckpointError, ConfigurationError, StreamingStateError

if TYPE_CHECKING:
    from kafka_direct.streaming.dstream import DStream
    from kafka_direct.streaming.input_dstream import InputDStream
    from kafka_direct.streaming.job import Job

__all__ = ["DStreamGraph"]

logger = logging.getLogger(__name__)

#: Stream keys of checkpoint format 1: creation order and class.
_POSITIONAL_KEY = re.compile(r"^\d+:[A-Za-z_][A-Za-z0-9_]*$")
_NAME_HINT = ("give each stream a name of its own with stream.setCheckpointId(name) (or "
              "KafkaUtils.createDirectStream(..., checkpointId=name))")


def _holds_state(state: dict[str, Any]) -> bool:
    """Whether a stream's checkpoint data holds anything (most streams have none)."""
    return any(bool(value) for value in state.values())


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
        #: The batch time whose jobs are generated now, or were last (None before the first).
        self.generatingTime: int | None = None
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
        """At least one output operation, consistent streams, distinct checkpoint keys.

        Raises:
            ConfigurationError: No output operation, or a slide that is not a multiple of
                the batch interval.
            CheckpointError: With checkpointing on, two streams have the same identity.
        """
        if not self.outputStreams:
            raise ConfigurationError(
                "No output operations registered, so nothing to execute; add one such as "
                "foreachRDD or pprint before starting the context")
        if self._checkpointDirectory() is not None:
            self.checkpointKeys()
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
            if self.generatingTime is None or time > self.generatingTime:
                self.generatingTime = time
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

    def _checkpointDirectory(self) -> str | None:
        for stream in (*self.outputStreams, *self.inputStreams):
            return stream.ssc.checkpointDir
        return None

    def _error(self, message: str, **context: Any) -> CheckpointError:
        return CheckpointError(message, directory=self._checkpointDirectory() or "", **context)

    def checkpointKeys(self) -> dict[str, DStream]:
        """Every stream under the key its checkpointed state is stored and matched by.

        See the module's docstring for the keys. Named streams and input streams with a
        stable identity must have unique keys; the others are unique by construction.

        Raises:
            CheckpointError: Two streams have the same name, or two input streams the same
                identity (their states could not be told apart).
        """
        from kafka_direct.streaming.input_dstream import InputDStream

        with self._lock:
            keys: dict[int, str] = {}
            owners: dict[str, DStream] = {}
            seen: Counter[str] = Counter()
            for stream in self.allStreams():  # id order: parents before their children
                if stream.checkpointId is not None:
                    key = f"named:{stream.checkpointId}"
                elif isinstance(stream, InputDStream):
                    identity = stream.stableIdentity
                    if identity is not None:
                        key = f"input:{identity}"
                    else:
                        base = f"input:{type(stream).__name__}"
                        key = f"{base}#{seen[base]}"
                        seen[base] += 1
                else:
                    base = "&".join(keys[parent.id] for parent in stream.dependencies)
                    base = f"{base}/{type(stream).__name__}"
                    key = base if not seen[base] else f"{base}#{seen[base]}"
                    seen[base] += 1
                if key in owners:
                    what = "name" if key.startswith("named:") else "identity"
                    raise self._error(
                        f"two streams have the same {what} {key!r} ({owners[key]!r} and "
                        f"{stream!r}), so a checkpoint could not tell their states apart; "
                        f"{_NAME_HINT}", stream=key)
                owners[key] = stream
                keys[stream.id] = key
            return owners

    def checkpointState(self) -> dict[str, Any]:
        """The checkpoint data of every stream that holds some, by stable key (JSON-ready).

        Each value is ``{"class": <stream class>, "state": <the stream's data>}``. Streams
        whose data is empty are left out, so adding or removing them never matters.
        """
        with self._lock:
            states = {}
            for key, stream in self.checkpointKeys().items():
                state = stream.checkpointState()
                if _holds_state(state):
                    states[key] = {"class": type(stream).__name__, "state": state}
            return states

    def restoreCheckpointState(self, states: dict[str, Any],
                               formatVersion: int | None = None) -> None:
        """Give each rebuilt stream its checkpointed state back, matched by stable key.

        Every checkpointed state must find its stream: a state whose key no stream of the
        rebuilt graph has (a Kafka stream removed, or its topics / pattern / partitions or
        group.id changed without a name; a stateful stream whose lineage changed) is refused,
        since recovering without it would silently read its data again or lose it. The
        stream must also be of the class that wrote the state, and takes it only if it fits
        (a Kafka stream checks each restored range is of a partition it reads).

        A checkpoint of format 1 keyed states by creation order. It is read only when the
        rebuilt graph has exactly the streams it lists (same number, same classes, same
        creation order): that is, recovered by the application that wrote it.

        Args:
            states: :attr:`Checkpoint.streams`.
            formatVersion: The checkpoint's format; None tells it from the keys.

        Raises:
            CheckpointError: A state has no stream, or a stream of another class, or does
                not fit its stream; two streams have the same identity; or a format 1
                checkpoint does not match the graph.
        """
        with self._lock:
            if formatVersion is None:
                positional = any(_POSITIONAL_KEY.match(key) for key in states)
                formatVersion = 1 if positional else 2
            if formatVersion == 1:
                self._restorePositional(states)
                return
            streams = self.checkpointKeys()
            missing = sorted(key for key in states if key not in streams)
            if missing:
                raise self._error(
                    f"the checkpoint holds state of {len(missing)} stream(s) that the "
                    f"application no longer has: no stream of key {', '.join(missing)}. "
                    "A Kafka stream is known by its topics / pattern / partitions and "
                    "group.id unless named with setCheckpointId, a derived stream by the "
                    "operators between it and its inputs. Restore the stream (or name it as "
                    "before), or delete the checkpoint directory to start afresh from the "
                    "offsets committed to Kafka or to your offset store", stream=missing[0])
            for key, entry in states.items():
                stream = streams[key]
                written = entry.get("class") if isinstance(entry, dict) else None
                if written != type(stream).__name__:
                    raise self._error(
                        f"the checkpointed state of {key!r} was written by a {written}, but "
                        f"{stream!r} has that key now; give the streams their names of "
                        "before, or delete the checkpoint directory", stream=key)
                stream.restoreCheckpointState(dict(entry.get("state", {})))
                logger.info("Restored checkpointed state of %s to %r", key, stream)

    def _restorePositional(self, states: dict[str, Any]) -> None:
        streams = {f"{s.id}:{type(s).__name__}": s for s in self.allStreams()}
        if set(states) != set(streams):
            raise self._error(
                "this checkpoint was written by an earlier version of kafka-direct, which "
                "matched stream state by creation order, and the application's streams "
                f"changed since (the checkpoint has {sorted(states)}, the application "
                f"{sorted(streams)}): recover it with the code that wrote it and let it "
                "write one checkpoint (those are matched by identity, so later code changes "
                "are safe), or delete the checkpoint directory to start afresh from the "
                "offsets committed to Kafka or to your offset store")
        logger.warning("Recovering a checkpoint of the earlier format by creation order; "
                       "the next checkpoint matches streams by identity")
        for key, state in states.items():
            streams[key].restoreCheckpointState(state)
