"""StopSignals: SIGTERM and SIGINT stop a streaming context gracefully, once.

Installed by ``StreamingContext.start()`` with ``spark.streaming.stopGracefullyOnShutdown``
(Spark's shutdown hook). The first signal starts a graceful stop on a thread of its own
and puts the previous handlers back, so a second signal acts as it would without us (a
stuck stop can still be interrupted). Python lets only the main thread change handlers: a
stop on another thread (after a failed batch, on a signal) leaves them to the next
``restore()`` on the main thread, and a signal arriving meanwhile goes to the previous
handler. A handler someone installed over ours since is theirs to keep.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

__all__ = ["StopSignals"]

logger = logging.getLogger(__name__)

_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class StopSignals:
    """The handlers of one context.

    Args:
        stopGracefully: Stops the context gracefully (called on a new thread).
        stopping: Whether a stop of the context began already.
    """

    def __init__(self, stopGracefully: Callable[[], None],
                 stopping: Callable[[], bool]) -> None:
        self._stopGracefully = stopGracefully
        self._stopping = stopping
        self._previous: dict[int, Any] = {}

    def install(self) -> None:
        """Install the handlers (on the main thread only; elsewhere a warning)."""
        if threading.current_thread() is not threading.main_thread():
            logger.warning("spark.streaming.stopGracefullyOnShutdown needs start() on the main "
                           "thread to catch signals; not installed")
            return
        for signum in _SIGNALS:
            self._previous[signum] = signal.signal(signum, self._handle)

    def restore(self) -> None:
        """Put the previous handlers back where ours still are; a no-op off the main thread."""
        if not self._previous or threading.current_thread() is not threading.main_thread():
            return
        for signum, handler in self._previous.items():
            if signal.getsignal(signum) == self._handle:
                signal.signal(signum, handler)
        self._previous.clear()

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        previous = self._previous.get(signum)
        self.restore()  # a second signal acts as it would without us
        if self._stopping():
            # Stopped (or stopping) off the main thread: the handlers had stayed installed.
            _delegate(previous, signum, frame)
            return
        logger.info("Invoking stop(stopGracefully=True) on signal %d", signum)
        threading.Thread(target=self._stopGracefully, name="streaming-graceful-stop").start()


def _delegate(handler: Any, signum: int, frame: FrameType | None) -> None:
    """Act on ``signum`` as ``handler`` (a previous signal disposition) would."""
    if callable(handler):
        handler(signum, frame)
    elif handler == signal.SIG_DFL:
        os.kill(os.getpid(), signum)  # the default disposition is in place again
