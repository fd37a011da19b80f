"""What the engine reports about batches: input, output operations, delays (Spark's BatchInfo)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

__all__ = ["BatchInfo", "OutputOperationInfo", "StreamInputInfo"]


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
