"""RecurringTimer: calls back at every multiple of a period, on the injected clock."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from kafka_direct.streaming.clock import Clock

__all__ = ["RecurringTimer"]

logger = logging.getLogger(__name__)


class RecurringTimer:
    """Runs ``callback(time)`` at ``startTime``, ``startTime + period``, ... on a daemon thread.

    Args:
        clock: Where the time comes from.
        period: Milliseconds between calls.
        callback: Called with each time; a long callback delays (never skips) the next.
        name: Names the thread (``RecurringTimer - <name>``) and the log lines.
    """

    def __init__(self, clock: Clock, period: int, callback: Callable[[int], None],
                 name: str) -> None:
        self.clock = clock
        self.period = int(period)
        self.callback = callback
        self.name = name
        self._thread: threading.Thread | None = None
        self._cancel = threading.Event()
        self._stopped = False
        self.nextTime = -1
        self.prevTime = -1

    def getStartTime(self) -> int:
        """The first multiple of the period after the current time."""
        return (self.clock.getTimeMillis() // self.period + 1) * self.period

    def getRestartTime(self, originalStartTime: int) -> int:
        """The first time after now that is ``originalStartTime`` plus a multiple of the period.

        Used on recovery so batch times stay aligned with those before the restart.
        """
        gap = self.clock.getTimeMillis() - originalStartTime
        return (gap // self.period + 1) * self.period + originalStartTime

    def start(self, startTime: int | None = None) -> int:
        """Start calling back from ``startTime`` (default :meth:`getStartTime`); returns it."""
        self.nextTime = self.getStartTime() if startTime is None else int(startTime)
        self._thread = threading.Thread(target=self._loop, name=f"RecurringTimer - {self.name}",
                                        daemon=True)
        self._thread.start()
        logger.info("Started timer for %s at time %d", self.name, self.nextTime)
        return self.nextTime

    def _loop(self) -> None:
        while not self._stopped:
            reached = self.clock.waitTillTime(self.nextTime, self._cancel)
            if self._stopped or reached < self.nextTime:
                break
            logger.debug("Callback for %s called at time %d", self.name, self.nextTime)
            self.callback(self.nextTime)
            self.prevTime = self.nextTime
            self.nextTime += self.period

    def stop(self) -> int:
        """Stop; a callback under way finishes first. Returns the last time called back."""
        self._stopped = True
        self._cancel.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join()
        logger.info("Stopped timer for %s after time %d", self.name, self.prevTime)
        return self.prevTime
