"""Window and state operators of DStream (durations in seconds).

Windows and slides must be multiples of the stream's slide duration. Operators with an
inverse function (``countByWindow``, ``countByValueAndWindow``, ``groupByKeyAndWindow``
included), and ``updateStateByKey``, keep state across batches and therefore checkpoint
their RDDs: as in Spark they need a checkpoint directory, ``SparkContext.setCheckpointDir``
or ``StreamingContext.checkpoint(directory)`` (which also makes the stream recoverable).
"""

from __future__ import annotations

import logging
import operator
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from kafka_direct.errors import ConfigurationError
from kafka_direct.streaming.durations import to_ms

if TYPE_CHECKING:
    from kafka_direct.streaming.context import StreamingContext
    from kafka_direct.streaming.dstream import DStream

__all__ = ["WindowedOperators"]

logger = logging.getLogger(__name__)


class WindowedOperators:
    """Window and state operators (mixed into :class:`DStream`)."""

    ssc: StreamingContext

    @property
    def slideDuration(self) -> int:
        """Milliseconds between the stream's RDDs (defined by DStream)."""
        raise NotImplementedError

    def _self(self) -> DStream:
        raise NotImplementedError

    def _partitions(self, numPartitions: int | None) -> int:
        raise NotImplementedError

    def _durations(self, windowDuration: float, slideDuration: float | None
                   ) -> tuple[int, int]:
        window = to_ms(windowDuration, "windowDuration")
        slide = self.slideDuration if slideDuration is None else to_ms(slideDuration,
                                                                        "slideDuration")
        return window, slide

    def window(self, windowDuration: float, slideDuration: float | None = None) -> DStream:
        """Every slide, all elements of the last ``windowDuration`` seconds."""
        from kafka_direct.streaming.windowed_dstream import WindowedDStream

        window, slide = self._durations(windowDuration, slideDuration)
        return WindowedDStream(self.ssc, self._self(), window, slide)

    def reduceByKeyAndWindow(self, func: Callable[[Any, Any], Any],
                             invFunc: Callable[[Any, Any], Any] | None,
                             windowDuration: float, slideDuration: float | None = None,
                             numPartitions: int | None = None,
                             filterFunc: Callable[[Any], bool] | None = None) -> DStream:
        """Per key, the values of the window reduced with ``func``.

        With ``invFunc`` (undoing ``func``: ``invFunc(func(a, b), b) == a``), each window of
        at least five slides is computed from the previous one: cheaper for long windows,
        but it needs checkpointing. ``filterFunc`` drops pairs (such as counts fallen to
        zero) when the window adds new batches; as in PySpark it is used only with
        ``invFunc``, and ignored (with a warning) without.
        """
        from kafka_direct.streaming.windowed_dstream import ReducedWindowedDStream

        window, slide = self._durations(windowDuration, slideDuration)
        n = self._partitions(numPartitions)
        reduced = self._self().reduceByKey(func, numPartitions)
        if invFunc is None:
            if filterFunc is not None:
                logger.warning("reduceByKeyAndWindow ignores filterFunc when invFunc is None "
                               "(as PySpark): filter the result instead")
            return reduced.window(windowDuration, slideDuration).reduceByKey(func, n)

        def reduce_new(_t: int, previous: Any, new: Any) -> Any:
            new = new.reduceByKey(func, n)
            result = previous.union(new).reduceByKey(func, n) if previous is not None else new
            return result.filter(filterFunc) if filterFunc is not None else result

        def remove_old(_t: int, previous: Any, old: Any) -> Any:
            old = old.reduceByKey(func, n)
            joined = previous.leftOuterJoin(old, n)
            return joined.mapValues(lambda pair: invFunc(pair[0], pair[1])
                                    if pair[1] is not None else pair[0])

        return ReducedWindowedDStream(self.ssc, reduced, reduce_new, remove_old, window, slide)

    def reduceByWindow(self, reduceFunc: Callable[[Any, Any], Any],
                       invReduceFunc: Callable[[Any, Any], Any] | None,
                       windowDuration: float, slideDuration: float | None = None) -> DStream:
        """One element per slide: the window's elements reduced with ``reduceFunc``."""
        keyed = self._self().map(lambda x: (1, x))
        reduced = keyed.reduceByKeyAndWindow(reduceFunc, invReduceFunc, windowDuration,
                                             slideDuration, 1)
        return reduced.map(lambda kv: kv[1])

    def countByWindow(self, windowDuration: float, slideDuration: float | None = None
                      ) -> DStream:
        """One element per slide: the number of elements in the window."""
        return self._self().map(lambda _x: 1).reduceByWindow(
            operator.add, operator.sub, windowDuration, slideDuration)

    def countByValueAndWindow(self, windowDuration: float, slideDuration: float | None = None,
                              numPartitions: int | None = None) -> DStream:
        """``(value, count)`` over the window, for values present in it."""
        keyed = self._self().map(lambda x: (x, 1))
        counted = keyed.reduceByKeyAndWindow(operator.add, operator.sub, windowDuration,
                                             slideDuration, numPartitions)
        return counted.filter(lambda kv: kv[1] > 0)

    def groupByKeyAndWindow(self, windowDuration: float, slideDuration: float | None = None,
                            numPartitions: int | None = None) -> DStream:
        """``(key, values in the window)``, the values a ``pyspark.resultiterable.ResultIterable``.

        As PySpark's, it is ``reduceByKeyAndWindow`` with an inverse function: with a window
        of at least five slides each window is the previous one minus the batches that left
        it, so a key whose values all left the window stays, with no values (PySpark's
        ``('a', [])``), as long as the stream runs.
        """
        from pyspark.resultiterable import ResultIterable

        def extend(a: list[Any], b: list[Any]) -> list[Any]:
            return a + b

        def drop_oldest(a: list[Any], b: list[Any]) -> list[Any]:
            return a[len(b):]

        listed = self._self().mapValues(lambda v: [v])
        grouped = listed.reduceByKeyAndWindow(extend, drop_oldest, windowDuration,
                                              slideDuration, numPartitions)
        return grouped.mapValues(ResultIterable)

    def updateStateByKey(self, updateFunc: Callable[[list[Any], Any], Any],
                         numPartitions: int | None = None, initialRDD: Any = None) -> DStream:
        """State per key: ``updateFunc(new values, previous state or None)`` every batch.

        ``updateFunc`` is called for every key with state or new values, each batch;
        returning None removes the key. ``initialRDD`` holds ``(key, state)`` pairs to start
        from. Needs a checkpoint directory (``SparkContext.setCheckpointDir`` or
        ``StreamingContext.checkpoint``).
        """
        from kafka_direct.streaming.state_dstream import StateDStream

        if not callable(updateFunc):
            raise ConfigurationError(f"updateStateByKey needs a function, got {updateFunc!r}")
        n = self._partitions(numPartitions)

        def update(_t: int, state: Any, new: Any) -> Any:
            if state is None:
                grouped = new.groupByKey(n).mapValues(lambda vs: (list(vs), None))
            else:
                grouped = state.cogroup(new.partitionBy(n), n).mapValues(
                    lambda pair: (list(pair[1]), _first(pair[0])))
            updated = grouped.mapValues(lambda values_state: updateFunc(*values_state))
            return updated.filter(lambda kv: kv[1] is not None)

        return StateDStream(self.ssc, self._self(), update, initialRDD)


def _first(values: Iterable[Any]) -> Any:
    for value in values:
        return value
    return None
