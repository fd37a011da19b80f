"""Backpressure: a rate estimate per input stream, updated after every batch.

:class:`PIDRateEstimator` computes, exactly as Spark does, a new ingestion rate (records per
second) from the last batch's records, processing delay and scheduling delay. A
:class:`RateController` listens for completed batches of its stream, runs the estimator on a
thread of its own (never on the listener bus), and publishes each new rate.
"""

from __future__ import annotations

import logging
import threading
from abc import ABC, abstractmethod
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from kafka_direct.errors import ConfigurationError
from kafka_direct.streaming.listener import StreamingListener, StreamingListenerBatchCompleted

__all__ = ["PIDRateEstimator", "RateController", "RateEstimator", "backpressure_enabled"]

logger = logging.getLogger(__name__)


def backpressure_enabled(conf: Any) -> bool:
    """``spark.streaming.backpressure.enabled`` (default false)."""
    return str(conf.get("spark.streaming.backpressure.enabled", "false")).lower() == "true"


class RateEstimator(ABC):
    """Estimates the rate an input stream should ingest at."""

    @abstractmethod
    def compute(self, time: int, elements: int, processingDelay: int,
                schedulingDelay: int) -> float | None:
        """A new rate in records per second, or None to keep the current one.

        Args:
            time: The batch's processing end time (ms).
            elements: Records the batch held.
            processingDelay: Milliseconds the batch took.
            schedulingDelay: Milliseconds the batch waited before starting.
        """

    @staticmethod
    def create(conf: Any, batchInterval: int) -> RateEstimator:
        """The estimator ``spark.streaming.backpressure.rateEstimator`` names (only ``pid``)."""
        name = str(conf.get("spark.streaming.backpressure.rateEstimator", "pid"))
        if name != "pid":
            raise ConfigurationError(
                f"Unknown rate estimator: {name}; spark.streaming.backpressure.rateEstimator "
                "accepts only 'pid'")

        def setting(key: str, default: float) -> float:
            raw = conf.get(key, str(default))
            try:
                return float(raw)
            except ValueError as error:
                raise ConfigurationError(f"{key} must be a number, got {raw!r}") from error

        # Whole names, so that the settings can be found in the source (docs/configuration.md).
        return PIDRateEstimator(
            batchInterval, setting("spark.streaming.backpressure.pid.proportional", 1.0),
            setting("spark.streaming.backpressure.pid.integral", 0.2),
            setting("spark.streaming.backpressure.pid.derived", 0.0),
            setting("spark.streaming.backpressure.pid.minRate", 100.0))


class PIDRateEstimator(RateEstimator):
    """Spark's proportional-integral-derivative rate estimator.

    Args:
        batchIntervalMillis: The batch interval (> 0).
        proportional: Weight of the current error (>= 0; Spark's default 1.0).
        integral: Weight of the accumulated error, the backlog (>= 0; default 0.2).
        derivative: Weight of the error's change (>= 0; default 0.0).
        minRate: The lowest rate ever returned (> 0; default 100).
    """

    def __init__(self, batchIntervalMillis: int, proportional: float = 1.0,
                 integral: float = 0.2, derivative: float = 0.0, minRate: float = 100.0
                 ) -> None:
        checks = [(batchIntervalMillis > 0, "batchIntervalMillis", batchIntervalMillis, "> 0"),
                  (proportional >= 0, "proportional", proportional, ">= 0"),
                  (integral >= 0, "integral", integral, ">= 0"),
                  (derivative >= 0, "derived", derivative, ">= 0"),
                  (minRate > 0, "minRate", minRate, "> 0")]
        for ok, name, value, rule in checks:
            if not ok:
                raise ConfigurationError(
                    f"spark.streaming.backpressure.pid.{name} must be {rule}, got {value}")
        self.batchIntervalMillis = batchIntervalMillis
        self.proportional = proportional
        self.integral = integral
        self.derivative = derivative
        self.minRate = minRate
        self._firstRun = True
        self._latestTime = -1
        self._latestRate = -1.0
        self._latestError = -1.0
        self._lock = threading.Lock()
        logger.info("Created PIDRateEstimator with proportional = %s, integral = %s, "
                    "derivative = %s, min rate = %s", proportional, integral, derivative,
                    minRate)

    def compute(self, time: int, elements: int, processingDelay: int,
                schedulingDelay: int) -> float | None:
        """See :meth:`RateEstimator.compute`; the first batch only sets the baseline."""
        with self._lock:
            if not (time > self._latestTime and elements > 0 and processingDelay > 0):
                return None
            delay_since_update = (time - self._latestTime) / 1000.0
            processing_rate = elements / processingDelay * 1000.0
            error = self._latestRate - processing_rate
            # The backlog, as a rate: what scheduling delay says was left over.
            historical_error = schedulingDelay * processing_rate / self.batchIntervalMillis
            d_error = (error - self._latestError) / delay_since_update
            new_rate = max(self._latestRate - self.proportional * error
                           - self.integral * historical_error
                           - self.derivative * d_error, self.minRate)
            self._latestTime = time
            if self._firstRun:
                self._latestRate = processing_rate
                self._latestError = 0.0
                self._firstRun = False
                return None
            self._latestRate = new_rate
            self._latestError = error
            return new_rate


class RateController(StreamingListener):
    """Keeps one input stream's rate limit up to date from completed batches.

    Args:
        streamUID: The input stream's id.
        rateEstimator: How to compute the rate.
    """

    def __init__(self, streamUID: int, rateEstimator: RateEstimator) -> None:
        self.streamUID = streamUID
        self.rateEstimator = rateEstimator
        self._rateLimit = -1.0
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="stream-rate-update")

    def getLatestRate(self) -> float:
        """The latest rate in records per second; -1 before the first estimate."""
        return self._rateLimit

    def publish(self, rate: float) -> None:
        """Called with every new rate (for subclasses to act on)."""

    def computeAndPublish(self, time: int, elements: int, processingDelay: int,
                          schedulingDelay: int) -> None:
        """Estimate and publish (what runs on the controller's thread)."""
        try:
            rate = self.rateEstimator.compute(time, elements, processingDelay, schedulingDelay)
            if rate is not None:
                self._rateLimit = rate
                self.publish(rate)
        except Exception:
            logger.exception("rate estimation for input stream %d failed", self.streamUID)

    def onBatchCompleted(self, batchCompleted: StreamingListenerBatchCompleted) -> None:
        """Hand the batch's figures to the controller's thread."""
        info = batchCompleted.batchInfo
        elements = info.streamIdToInputInfo.get(self.streamUID)
        if (elements is None or info.processingEndTime is None
                or info.processingDelay is None or info.schedulingDelay is None):
            return
        self._executor.submit(self.computeAndPublish, info.processingEndTime,
                              elements.numRecords, info.processingDelay, info.schedulingDelay)

    def waitUntilIdle(self, timeout: float = 10.0) -> None:
        """Wait for submitted estimations to finish (for tests and shutdown)."""
        self._executor.submit(lambda: None).result(timeout)

    def stop(self) -> None:
        """Stop the controller's thread."""
        self._executor.shutdown(wait=False)
