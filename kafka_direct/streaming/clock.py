"""Clocks: where the engine gets the time, so tests can drive it by hand.

Times are integer milliseconds since the epoch (Spark's ``Time``). :class:`ManualClock` only
moves when told to, which makes batch generation deterministic in tests; which clock a
StreamingContext uses is chosen by ``spark.streaming.clock``.
"""

from __future__ import annotations

import importlib
import threading
import time
from abc import ABC, abstractmethod
from typing import Any

from kafka_direct.errors import ConfigurationError

__all__ = ["Clock", "ManualClock", "SystemClock", "clock_from_conf"]


class Clock(ABC):
    """A source of time in milliseconds that can be waited on."""

    @abstractmethod
    def getTimeMillis(self) -> int:
        """The current time in milliseconds."""

    @abstractmethod
    def waitTillTime(self, targetTime: int, cancel: threading.Event | None = None) -> int:
        """Block until the time is at least ``targetTime`` or ``cancel`` is set.

        Returns:
            The time when the wait ended (below ``targetTime`` only if cancelled).
        """


class SystemClock(Clock):
    """The wall clock."""

    def getTimeMillis(self) -> int:
        """Milliseconds since the epoch."""
        return int(time.time() * 1000)

    def waitTillTime(self, targetTime: int, cancel: threading.Event | None = None) -> int:
        """Sleep until ``targetTime`` (in slices, so a cancel is seen within 100 ms)."""
        event = cancel or threading.Event()
        while True:
            now = self.getTimeMillis()
            if now >= targetTime or event.is_set():
                return now
            event.wait(min(0.1, (targetTime - now) / 1000.0))


class ManualClock(Clock):
    """A clock that moves only by :meth:`setTime` and :meth:`advance`.

    Args:
        time: The starting time in milliseconds.
    """

    def __init__(self, time: int = 0) -> None:
        self._time = int(time)
        self._changed = threading.Condition()

    def getTimeMillis(self) -> int:
        """The time last set."""
        with self._changed:
            return self._time

    def setTime(self, timeToSet: int) -> None:
        """Set the time and wake every waiter."""
        with self._changed:
            self._time = int(timeToSet)
            self._changed.notify_all()

    def advance(self, timeToAdd: int) -> None:
        """Move the time forward by ``timeToAdd`` milliseconds and wake every waiter."""
        with self._changed:
            self._time += int(timeToAdd)
            self._changed.notify_all()

    def waitTillTime(self, targetTime: int, cancel: threading.Event | None = None) -> int:
        """Block until the clock is set to ``targetTime`` or later, or ``cancel`` is set."""
        with self._changed:
            while self._time < targetTime and not (cancel is not None and cancel.is_set()):
                self._changed.wait(0.01)
            return self._time


_NAMES: dict[str, type[Clock]] = {
    "org.apache.spark.util.SystemClock": SystemClock,
    "org.apache.spark.util.ManualClock": ManualClock,
    "system": SystemClock,
    "manual": ManualClock,
}


def clock_from_conf(conf: Any) -> Clock:
    """The clock ``spark.streaming.clock`` names (default: the system clock).

    Accepts Spark's class names (``org.apache.spark.util.ManualClock``), ``system`` /
    ``manual``, or ``package.module.ClassName`` of a :class:`Clock` subclass.
    """
    name = str(conf.get("spark.streaming.clock", "system")) if conf is not None else "system"
    known = _NAMES.get(name)
    if known is not None:
        return known()
    module_name, _, class_name = name.rpartition(".")
    try:
        cls = getattr(importlib.import_module(module_name), class_name)
    except (ImportError, AttributeError, ValueError) as error:
        raise ConfigurationError(
            f"spark.streaming.clock = {name!r} names no clock; use 'system', 'manual' or the "
            "dotted path of a kafka_direct.streaming.clock.Clock subclass") from error
    if not (isinstance(cls, type) and issubclass(cls, Clock)):
        raise ConfigurationError(f"spark.streaming.clock = {name!r} is not a Clock subclass")
    clock: Clock = cls()
    return clock
