"""What the engine reports about batches: input, output operations, delays (Spark's BatchInfo).

The classes are typed records: ``info.schedulingDelay`` is milliseconds or None. PySpark's
listeners instead receive Spark's Java objects and call accessors (``batchInfo()``,
``batchTime().milliseconds()``, ``schedulingDelay()`` with -1 when unknown). For them, each
record is also callable: ``info()`` gives its view with the Java accessors
(:class:`JavaBatchInfo`, :class:`JavaOutputOperationInfo`, :class:`JavaStreamInputInfo`), so
``batchCompleted.batchInfo().numRecords()`` works as in PySpark while
``batchCompleted.batchInfo.numRecords`` stays the typed attribute.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

__all__ = [
    "BatchInfo",
    "JavaBatchInfo",
    "JavaOutputOperationInfo",
    "JavaStreamInputInfo",
    "OutputOperationInfo",
    "StreamInputInfo",
    "Time",
]


class Time(int):
    """A batch time in epoch milliseconds, with the accessor of Spark's ``Time``."""

    __slots__ = ()

    def milliseconds(self) -> int:
        """The time in epoch milliseconds."""
        return int(self)


def _long(value: int | None) -> int:
    """A Java ``long`` field of Spark's Java listener API: -1 for unknown."""
    return -1 if value is None else int(value)


@dataclass(frozen=True, slots=True)
class StreamInputInfo:
    """What one input stream brought into one batch.

    Attributes:
        inputStreamId: The input stream's id.
        numRecords: Records in the batch from this stream.
        metadata: Free-form facts; ``metadata["Description"]`` is shown to people.
    """

    inputStreamId: int
    numRecords: int
    metadata: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "metadata", MappingProxyType(dict(self.metadata)))

    @property
    def metadataDescription(self) -> str | None:
        """The human-readable description, if the stream gave one."""
        description = self.metadata.get("Description")
        return None if description is None else str(description)

    def __call__(self) -> JavaStreamInputInfo:
        """This record with the accessors of Spark's Java listener API."""
        return JavaStreamInputInfo(self)


@dataclass(frozen=True, slots=True)
class OutputOperationInfo:
    """One output operation of one batch. Times are epoch milliseconds or None.

    Attributes:
        batchTime: The batch.
        id: The output operation's index in the graph.
        name: Short name (``foreachRDD at app.py:12``).
        description: Where it was defined, longer.
        startTime: When it started running.
        endTime: When it ended.
        failureReason: The error's text if it failed.
    """

    batchTime: int
    id: int
    name: str
    description: str
    startTime: int | None = None
    endTime: int | None = None
    failureReason: str | None = None

    @property
    def duration(self) -> int | None:
        """Milliseconds it ran, once it ended."""
        if self.startTime is None or self.endTime is None:
            return None
        return self.endTime - self.startTime

    def __call__(self) -> JavaOutputOperationInfo:
        """This record with the accessors of Spark's Java listener API."""
        return JavaOutputOperationInfo(self)


@dataclass(frozen=True, slots=True)
class BatchInfo:
    """A batch: its input and its timing. Times are epoch milliseconds.

    Attributes:
        batchTime: The batch's time (a multiple of the batch interval).
        streamIdToInputInfo: Input per input stream id.
        submissionTime: When its jobs were submitted.
        processingStartTime: When its first output operation started.
        processingEndTime: When its last output operation ended.
        outputOperationInfos: Its output operations by id.
    """

    batchTime: int
    streamIdToInputInfo: Mapping[int, StreamInputInfo]
    submissionTime: int
    processingStartTime: int | None
    processingEndTime: int | None
    outputOperationInfos: Mapping[int, OutputOperationInfo] = field(default_factory=dict)

    @property
    def schedulingDelay(self) -> int | None:
        """Milliseconds from submission to the first output operation starting."""
        if self.processingStartTime is None:
            return None
        return self.processingStartTime - self.submissionTime

    @property
    def processingDelay(self) -> int | None:
        """Milliseconds the output operations took, first start to last end."""
        if self.processingStartTime is None or self.processingEndTime is None:
            return None
        return self.processingEndTime - self.processingStartTime

    @property
    def totalDelay(self) -> int | None:
        """Scheduling delay plus processing delay."""
        scheduling, processing = self.schedulingDelay, self.processingDelay
        if scheduling is None or processing is None:
            return None
        return scheduling + processing

    @property
    def numRecords(self) -> int:
        """Records of all input streams in the batch."""
        return sum(info.numRecords for info in self.streamIdToInputInfo.values())

    @property
    def failed(self) -> bool:
        """Whether an output operation failed."""
        return any(op.failureReason is not None for op in self.outputOperationInfos.values())

    def __call__(self) -> JavaBatchInfo:
        """This record with the accessors of Spark's Java listener API (as PySpark has it)."""
        return JavaBatchInfo(self)


class JavaStreamInputInfo:
    """A :class:`StreamInputInfo` as Spark's ``JavaStreamInputInfo``: accessors, no None.

    Args:
        info: The record shown.
    """

    __slots__ = ("_info",)

    def __init__(self, info: StreamInputInfo) -> None:
        self._info = info

    def inputStreamId(self) -> int:
        """The input stream's id."""
        return self._info.inputStreamId

    def numRecords(self) -> int:
        """Records in the batch from this stream."""
        return self._info.numRecords

    def metadata(self) -> Mapping[str, Any]:
        """Free-form facts of the stream about the batch."""
        return self._info.metadata

    def metadataDescription(self) -> str | None:
        """The human-readable description (Java's null, None, if the stream gave none)."""
        return self._info.metadataDescription

    def __repr__(self) -> str:
        return f"JavaStreamInputInfo({self._info!r})"


class JavaOutputOperationInfo:
    """An :class:`OutputOperationInfo` as Spark's ``JavaOutputOperationInfo``.

    Times not known yet are -1, as in Spark's Java API.

    Args:
        info: The record shown.
    """

    __slots__ = ("_info",)

    def __init__(self, info: OutputOperationInfo) -> None:
        self._info = info

    def batchTime(self) -> Time:
        """The batch's time."""
        return Time(self._info.batchTime)

    def id(self) -> int:
        """The output operation's index in the graph."""
        return self._info.id

    def name(self) -> str:
        """Short name."""
        return self._info.name

    def description(self) -> str:
        """Where it was defined, longer."""
        return self._info.description

    def startTime(self) -> int:
        """When it started (epoch ms), or -1."""
        return _long(self._info.startTime)

    def endTime(self) -> int:
        """When it ended (epoch ms), or -1."""
        return _long(self._info.endTime)

    def failureReason(self) -> str | None:
        """The error's text if it failed, else None."""
        return self._info.failureReason

    def __repr__(self) -> str:
        return f"JavaOutputOperationInfo({self._info!r})"


class JavaBatchInfo:
    """A :class:`BatchInfo` as Spark's ``JavaBatchInfo``: what PySpark's listeners get.

    Times and delays not known yet are -1, as in Spark's Java API.

    Args:
        info: The record shown.
    """

    __slots__ = ("_info",)

    def __init__(self, info: BatchInfo) -> None:
        self._info = info

    def batchTime(self) -> Time:
        """The batch's time."""
        return Time(self._info.batchTime)

    def streamIdToInputInfo(self) -> dict[int, JavaStreamInputInfo]:
        """Input per input stream id."""
        return {key: JavaStreamInputInfo(value)
                for key, value in self._info.streamIdToInputInfo.items()}

    def submissionTime(self) -> int:
        """When its jobs were submitted (epoch ms)."""
        return self._info.submissionTime

    def processingStartTime(self) -> int:
        """When its first output operation started (epoch ms), or -1."""
        return _long(self._info.processingStartTime)

    def processingEndTime(self) -> int:
        """When its last output operation ended (epoch ms), or -1."""
        return _long(self._info.processingEndTime)

    def schedulingDelay(self) -> int:
        """Milliseconds from submission to processing, or -1."""
        return _long(self._info.schedulingDelay)

    def processingDelay(self) -> int:
        """Milliseconds of processing, or -1."""
        return _long(self._info.processingDelay)

    def totalDelay(self) -> int:
        """Scheduling plus processing delay, or -1."""
        return _long(self._info.totalDelay)

    def numRecords(self) -> int:
        """Records of all input streams in the batch."""
        return self._info.numRecords

    def numOutputOp(self) -> int:
        """How many output operations the batch has."""
        return len(self._info.outputOperationInfos)

    def outputOperationInfos(self) -> dict[int, JavaOutputOperationInfo]:
        """Its output operations by id."""
        return {key: JavaOutputOperationInfo(value)
                for key, value in self._info.outputOperationInfos.items()}

    def __repr__(self) -> str:
        return f"JavaBatchInfo({self._info!r})"
