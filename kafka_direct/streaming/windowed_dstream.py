"""Windowed streams: RDDs of the last ``windowDuration`` of a parent, every ``slideDuration``."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from typing_extensions import override

from kafka_direct.errors import ConfigurationError
from kafka_direct.streaming.dstream import DStream
from kafka_direct.streaming.transformed_dstream import UnaryDStream

if TYPE_CHECKING:
    from kafka_direct.streaming.context import StreamingContext

__all__ = ["ReducedWindowedDStream", "WindowDStream", "WindowedDStream", "check_window"]

#: ``func(time_ms, previous or None, new_rdd)`` -> RDD
WindowFunction = Callable[[int, Any, Any], Any]


def check_window(parent: DStream, windowDuration: int, slideDuration: int) -> None:
    """Windows and slides must be multiples of the parent's slide duration."""
    parent_slide = parent.slideDuration
    if windowDuration % parent_slide:
        raise ConfigurationError(
            f"The window duration of windowed DStream ({windowDuration} ms) must be a "
            f"multiple of the slide duration of parent DStream ({parent_slide} ms)")
    if slideDuration % parent_slide:
        raise ConfigurationError(
            f"The slide duration of windowed DStream ({slideDuration} ms) must be a "
            f"multiple of the slide duration of parent DStream ({parent_slide} ms)")


class WindowDStream(UnaryDStream):
    """What windowed streams share: a window over the parent, sliding every ``slide`` ms.

    Each parent RDD is read by several windows, so the parent is persisted (computed once),
    and it must remember its RDDs for a window longer than this stream remembers its own.
    """

    def __init__(self, ssc: StreamingContext, parent: DStream, windowDuration: int,
                 slideDuration: int) -> None:
        check_window(parent, windowDuration, slideDuration)
        super().__init__(ssc, parent)
        self.windowDuration = windowDuration
        self._slide = slideDuration
        from pyspark import StorageLevel

        if parent.storageLevel is None:
            parent.storageLevel = StorageLevel.MEMORY_ONLY

    @property
    @override
    def slideDuration(self) -> int:
        return self._slide

    @property
    @override
    def parentRememberDuration(self) -> int | None:
        return (self.rememberDuration or 0) + self.windowDuration


class WindowedDStream(WindowDStream):
    """Each slide: the union of the parent's RDDs of the last ``windowDuration`` ms."""

    @override
    def compute(self, validTime: int) -> Any:
        begin = validTime - self.windowDuration + self.parent.slideDuration
        rdds = self.parent.slice_ms(begin, validTime)
        if not rdds:
            return self.ssc.sparkContext.emptyRDD()
        return rdds[0] if len(rdds) == 1 else self.ssc.sparkContext.union(rdds)


class ReducedWindowedDStream(WindowDStream):
    """A windowed reduction kept up to date incrementally.

    With an inverse function and a window of at least five slides, each window is the
    previous window, minus the batches that left it (``invReduceFunc``), plus the batches
    that entered it (``reduceFunc``); otherwise the window is reduced from scratch. Its state
    spans batches, so it is checkpointed.

    Args:
        ssc: The context.
        parent: The stream of key-value pairs (already reduced per batch).
        reduceFunc: ``f(time, previous or None, rdd)``: the window plus new batches.
        invReduceFunc: ``f(time, previous, rdd)``: the window minus old batches, or None.
        windowDuration: Milliseconds of the window.
        slideDuration: Milliseconds between windows.
    """

    def __init__(self, ssc: StreamingContext, parent: DStream, reduceFunc: WindowFunction,
                 invReduceFunc: WindowFunction | None, windowDuration: int,
                 slideDuration: int) -> None:
        super().__init__(ssc, parent, windowDuration, slideDuration)
        self.reduceFunc = reduceFunc
        self.invReduceFunc = invReduceFunc
        self.mustCheckpoint = invReduceFunc is not None
        from pyspark import StorageLevel

        self.storageLevel = StorageLevel.MEMORY_ONLY

    def _union(self, rdds: list[Any]) -> Any:
        return rdds[0] if len(rdds) == 1 else self.ssc.sparkContext.union(rdds)

    @override
    def compute(self, validTime: int) -> Any:
        parent_slide = self.parent.slideDuration
        current_begin = validTime - self.windowDuration
        previous_end = validTime - self._slide
        previous_begin = current_begin - self._slide
        previous = self.getOrCompute(previous_end)
        if (self.invReduceFunc is not None and previous is not None
                and self.windowDuration >= 5 * self._slide):
            old = self.parent.slice_ms(previous_begin + parent_slide, current_begin)
            result = self.invReduceFunc(validTime, previous, self._union(old)) if old \
                else previous
            new = self.parent.slice_ms(previous_end + parent_slide, validTime)
            return self.reduceFunc(validTime, result, self._union(new)) if new else result
        current = self.parent.slice_ms(current_begin + parent_slide, validTime)
        if not current:
            return None
        return self.reduceFunc(validTime, None, self._union(current))
