"""Streaming listeners: typed events about the stream, delivered off the scheduler's threads.

:class:`StreamingListenerBus` queues events and hands them to listeners on its own thread,
so a slow listener never delays batches, and one that raises is logged and skipped without
affecting the others.

Events have typed attributes (``batchCompleted.batchInfo.schedulingDelay``) and, for
listeners written for PySpark, the accessors of Spark's Java events as well:
``batchCompleted.batchInfo()`` (a :class:`~kafka_direct.streaming.batch_info.JavaBatchInfo`),
``outputOperationCompleted.outputOperationInfo()``, ``streamingStarted.time()``.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from dataclasses import dataclass

from kafka_direct.streaming.batch_info import BatchInfo, OutputOperationInfo

__all__ = [
    "EventTime",
    "StreamingListener",
    "StreamingListenerBatchCompleted",
    "StreamingListenerBatchStarted",
    "StreamingListenerBatchSubmitted",
    "StreamingListenerBus",
    "StreamingListenerEvent",
    "StreamingListenerOutputOperationCompleted",
    "StreamingListenerOutputOperationStarted",
    "StreamingListenerStreamingStarted",
    "StreamingListenerStreamingStopped",
]

logger = logging.getLogger(__name__)


class EventTime(int):
    """An event's time in epoch milliseconds; calling it, as Spark's Java ``time()``, too."""

    __slots__ = ()

    def __call__(self) -> int:
        """The time in epoch milliseconds."""
        return int(self)


class StreamingListenerEvent:
    """Base of the events."""

    __slots__ = ()


@dataclass(frozen=True, slots=True)
class StreamingListenerStreamingStarted(StreamingListenerEvent):
    """The context started at ``time`` (epoch ms; ``time()`` gives it too)."""

    time: int

    def __post_init__(self) -> None:
        object.__setattr__(self, "time", EventTime(self.time))


@dataclass(frozen=True, slots=True)
class StreamingListenerStreamingStopped(StreamingListenerEvent):
    """The context stopped at ``time`` (epoch ms; ``time()`` gives it too)."""

    time: int

    def __post_init__(self) -> None:
        object.__setattr__(self, "time", EventTime(self.time))


@dataclass(frozen=True, slots=True)
class StreamingListenerBatchSubmitted(StreamingListenerEvent):
    """A batch's jobs were submitted."""

    batchInfo: BatchInfo


@dataclass(frozen=True, slots=True)
class StreamingListenerBatchStarted(StreamingListenerEvent):
    """A batch's first output operation started."""

    batchInfo: BatchInfo


@dataclass(frozen=True, slots=True)
class StreamingListenerBatchCompleted(StreamingListenerEvent):
    """A batch's output operations all ended (successfully or not)."""

    batchInfo: BatchInfo


@dataclass(frozen=True, slots=True)
class StreamingListenerOutputOperationStarted(StreamingListenerEvent):
    """An output operation started."""

    outputOperationInfo: OutputOperationInfo


@dataclass(frozen=True, slots=True)
class StreamingListenerOutputOperationCompleted(StreamingListenerEvent):
    """An output operation ended; ``failureReason`` is set if it failed."""

    outputOperationInfo: OutputOperationInfo


class StreamingListener:
    """Receives streaming events; override the methods of interest (all do nothing here)."""

    def onStreamingStarted(self, streamingStarted: StreamingListenerStreamingStarted) -> None:
        """The context started."""

    def onStreamingStopped(self, streamingStopped: StreamingListenerStreamingStopped) -> None:
        """The context stopped."""

    def onBatchSubmitted(self, batchSubmitted: StreamingListenerBatchSubmitted) -> None:
        """A batch was submitted."""

    def onBatchStarted(self, batchStarted: StreamingListenerBatchStarted) -> None:
        """A batch started processing."""

    def onBatchCompleted(self, batchCompleted: StreamingListenerBatchCompleted) -> None:
        """A batch completed."""

    def onOutputOperationStarted(
            self, outputOperationStarted: StreamingListenerOutputOperationStarted) -> None:
        """An output operation started."""

    def onOutputOperationCompleted(
            self, outputOperationCompleted: StreamingListenerOutputOperationCompleted) -> None:
        """An output operation completed."""


_DISPATCH = {
    StreamingListenerStreamingStarted: "onStreamingStarted",
    StreamingListenerStreamingStopped: "onStreamingStopped",
    StreamingListenerBatchSubmitted: "onBatchSubmitted",
    StreamingListenerBatchStarted: "onBatchStarted",
    StreamingListenerBatchCompleted: "onBatchCompleted",
    StreamingListenerOutputOperationStarted: "onOutputOperationStarted",
    StreamingListenerOutputOperationCompleted: "onOutputOperationCompleted",
}

_STOP = object()


class StreamingListenerBus:
    """Delivers events to listeners asynchronously, in the order they were posted."""

    def __init__(self) -> None:
        self._listeners: list[StreamingListener] = []
        self._lock = threading.Lock()
        self._queue: queue.Queue[object] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._busy = 0

    def addListener(self, listener: StreamingListener) -> None:
        """Deliver future events to ``listener`` too."""
        with self._lock:
            self._listeners.append(listener)

    def removeListener(self, listener: StreamingListener) -> None:
        """Stop delivering to ``listener``."""
        with self._lock:
            if listener in self._listeners:
                self._listeners.remove(listener)

    def start(self) -> None:
        """Start the delivery thread."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="StreamingListenerBus",
                                            daemon=True)
            self._thread.start()

    def post(self, event: StreamingListenerEvent) -> None:
        """Queue an event; never blocks."""
        with self._lock:
            self._busy += 1
        self._queue.put(event)

    def _run(self) -> None:
        while True:
            event = self._queue.get()
            if event is _STOP:
                return
            method = _DISPATCH.get(type(event))
            with self._lock:
                listeners = list(self._listeners)
            for listener in listeners:
                try:
                    if method is not None:
                        getattr(listener, method)(event)
                except Exception:
                    logger.exception("streaming listener %r failed on %s; it keeps getting "
                                     "events", listener, type(event).__name__)
            with self._lock:
                self._busy -= 1

    def waitUntilEmpty(self, timeout: float = 10.0) -> bool:
        """Wait until every posted event was delivered; False on timeout."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                if self._busy == 0:
                    return True
            time.sleep(0.005)
        return False

    def stop(self, timeout: float = 10.0) -> None:
        """Deliver what is queued, then stop the thread."""
        thread = self._thread
        if thread is None:
            return
        self._queue.put(_STOP)
        thread.join(timeout)
        self._thread = None
