"""The operators of DStream, as PySpark's streaming API named them.

Durations are seconds (int or float). Functions given to ``foreachRDD``, ``transform`` and
``transformWith`` may take the batch time first (a ``datetime``, as in PySpark); see
:mod:`kafka_direct.streaming.callables`. Pair operators work on streams of ``(key, value)``.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from kafka_direct.errors import ConfigurationError
from kafka_direct.streaming.callables import with_time
from kafka_direct.streaming.durations import batch_datetime, to_ms

if TYPE_CHECKING:
    from kafka_direct.streaming.context import StreamingContext
    from kafka_direct.streaming.dstream import DStream

__all__ = ["DStreamOperators"]


class DStreamOperators:
    """Operators shared by every DStream (mixed into :class:`DStream`)."""

    ssc: StreamingContext

    @property
    def slideDuration(self) -> int:
        """Milliseconds between the stream's RDDs (defined by DStream)."""
        raise NotImplementedError

    # -- building blocks -----------------------------------------------------------------

    def _transform_ms(self, func: Callable[[int, Any], Any]) -> DStream:
        from kafka_direct.streaming.transformed_dstream import TransformedDStream

        return TransformedDStream(self.ssc, [self._self()], lambda t, rdds: func(t, rdds[0]))

    def _self(self) -> DStream:
        from kafka_direct.streaming.dstream import DStream

        if not isinstance(self, DStream):
            raise TypeError("operators belong to DStream")
        return self

    def _partitions(self, numPartitions: int | None) -> int:
        return numPartitions or self.ssc.sparkContext.defaultParallelism

    # -- per-batch transformations -------------------------------------------------------

    def transform(self, func: Callable[..., Any], withTime: bool | None = None) -> DStream:
        """Each batch's RDD through ``func(rdd)`` or ``func(time, rdd)``."""
        call = with_time(func, 1, withTime, "transform")
        return self._transform_ms(lambda t, rdd: call(batch_datetime(t), rdd))

    def transformWith(self, func: Callable[..., Any], other: DStream,
                      keepSerializer: bool = False, *, withTime: bool | None = None
                      ) -> DStream:
        """``func(rdd, otherRdd)`` or ``func(time, rdd, otherRdd)`` per batch.

        The signature is PySpark's. Which form ``func`` has is read from its parameters, as
        PySpark does (two: the RDDs; three: the time first), or said with ``withTime``.

        Args:
            func: Returns the batch's RDD from this stream's and ``other``'s RDDs.
            other: A stream with the same slide duration.
            keepSerializer: Accepted for PySpark's API; without a JVM there is no
                serializer to keep, so it changes nothing.
            withTime: True or False if ``func``'s form cannot be read from its signature.

        Raises:
            ConfigurationError: ``func`` takes neither form, or ``other`` slides differently.
        """
        from kafka_direct.streaming.transformed_dstream import TransformedDStream

        del keepSerializer
        call = with_time(func, 2, withTime, "transformWith")
        return TransformedDStream(self.ssc, [self._self(), other],
                                  lambda t, rdds: call(batch_datetime(t), rdds[0], rdds[1]))

    def mapPartitionsWithIndex(self, f: Callable[[int, Any], Any],
                               preservesPartitioning: bool = False) -> DStream:
        """Each RDD's partitions through ``f(index, iterator)``."""
        return self._transform_ms(
            lambda _t, rdd: rdd.mapPartitionsWithIndex(f, preservesPartitioning))

    def mapPartitions(self, f: Callable[[Any], Any],
                      preservesPartitioning: bool = False) -> DStream:
        """Each RDD's partitions through ``f(iterator)``."""
        return self._transform_ms(lambda _t, rdd: rdd.mapPartitions(f, preservesPartitioning))

    def map(self, f: Callable[[Any], Any], preservesPartitioning: bool = False) -> DStream:
        """Every element through ``f``."""
        return self._transform_ms(lambda _t, rdd: rdd.map(f, preservesPartitioning))

    def flatMap(self, f: Callable[[Any], Any], preservesPartitioning: bool = False) -> DStream:
        """Every element through ``f``, the results flattened."""
        return self._transform_ms(lambda _t, rdd: rdd.flatMap(f, preservesPartitioning))

    def filter(self, f: Callable[[Any], bool]) -> DStream:
        """The elements for which ``f`` is true."""
        return self._transform_ms(lambda _t, rdd: rdd.filter(f))

    def glom(self) -> DStream:
        """Each partition as one list."""
        return self._transform_ms(lambda _t, rdd: rdd.glom())

    def repartition(self, numPartitions: int) -> DStream:
        """Each RDD reshuffled into ``numPartitions`` partitions."""
        return self._transform_ms(lambda _t, rdd: rdd.repartition(numPartitions))

    def union(self, other: DStream) -> DStream:
        """Both streams' elements, batch by batch (same slide duration)."""
        from kafka_direct.streaming.transformed_dstream import UnionDStream

        return UnionDStream(self.ssc, [self._self(), other])

    def count(self) -> DStream:
        """One element per batch: the number of elements (0 for an empty batch)."""

        def count_rdd(_t: int, rdd: Any) -> Any:
            zero = rdd.context.parallelize([(None, 0)], 1)
            return (rdd.map(lambda _x: (None, 1)).union(zero)
                    .reduceByKey(operator.add, 1).map(lambda kv: kv[1]))

        return self._transform_ms(count_rdd)

    def reduce(self, func: Callable[[Any, Any], Any]) -> DStream:
        """One element per batch: the elements reduced with ``func`` (none if empty)."""
        return self.map(lambda x: (None, x)).reduceByKey(func, 1).map(lambda kv: kv[1])

    def countByValue(self) -> DStream:
        """``(value, count)`` per distinct value of each batch."""
        return self.map(lambda x: (x, 1)).reduceByKey(operator.add)

    # -- pairs -----------------------------------------------------------------------------

    def mapValues(self, f: Callable[[Any], Any]) -> DStream:
        """``(k, f(v))`` for every pair."""
        return self._transform_ms(lambda _t, rdd: rdd.mapValues(f))

    def flatMapValues(self, f: Callable[[Any], Any]) -> DStream:
        """``(k, w)`` for every ``w`` in ``f(v)``."""
        return self._transform_ms(lambda _t, rdd: rdd.flatMapValues(f))

    def combineByKey(self, createCombiner: Callable[[Any], Any],
                     mergeValue: Callable[[Any, Any], Any],
                     mergeCombiners: Callable[[Any, Any], Any],
                     numPartitions: int | None = None) -> DStream:
        """Per batch, values of each key combined (Spark's combineByKey)."""
        return self._transform_ms(lambda _t, rdd: rdd.combineByKey(
            createCombiner, mergeValue, mergeCombiners, self._partitions(numPartitions)))

    def reduceByKey(self, func: Callable[[Any, Any], Any],
                    numPartitions: int | None = None) -> DStream:
        """Per batch, the values of each key reduced with ``func``."""
        return self.combineByKey(lambda x: x, func, func, numPartitions)

    def groupByKey(self, numPartitions: int | None = None) -> DStream:
        """Per batch, ``(key, iterable of values)``."""
        return self._transform_ms(
            lambda _t, rdd: rdd.groupByKey(self._partitions(numPartitions)))

    def partitionBy(self, numPartitions: int, partitionFunc: Any = None) -> DStream:
        """Each RDD partitioned by key."""
        from pyspark.rdd import portable_hash

        function = partitionFunc or portable_hash
        return self._transform_ms(lambda _t, rdd: rdd.partitionBy(numPartitions, function))

    def _join(self, kind: str, other: DStream, numPartitions: int | None) -> DStream:
        n = self._partitions(numPartitions)
        return self.transformWith(lambda a, b: getattr(a, kind)(b, n), other, withTime=False)

    def join(self, other: DStream, numPartitions: int | None = None) -> DStream:
        """Per batch, the inner join of the two streams' pairs."""
        return self._join("join", other, numPartitions)

    def leftOuterJoin(self, other: DStream, numPartitions: int | None = None) -> DStream:
        """Per batch, the left outer join."""
        return self._join("leftOuterJoin", other, numPartitions)

    def rightOuterJoin(self, other: DStream, numPartitions: int | None = None) -> DStream:
        """Per batch, the right outer join."""
        return self._join("rightOuterJoin", other, numPartitions)

    def fullOuterJoin(self, other: DStream, numPartitions: int | None = None) -> DStream:
        """Per batch, the full outer join."""
        return self._join("fullOuterJoin", other, numPartitions)

    def cogroup(self, other: DStream, numPartitions: int | None = None) -> DStream:
        """Per batch, ``(key, (values here, values there))``."""
        return self._join("cogroup", other, numPartitions)

    # -- output ----------------------------------------------------------------------------

    def foreachRDD(self, func: Callable[..., Any], withTime: bool | None = None) -> DStream:
        """Run ``func(rdd)`` or ``func(time, rdd)`` for every batch (an output operation)."""
        call = with_time(func, 1, withTime, "foreachRDD")
        return self._output(lambda t, rdd: call(batch_datetime(t), rdd), "foreachRDD")

    def _output(self, func: Callable[[int, Any], None], name: str) -> DStream:
        from kafka_direct.streaming.foreach_dstream import ForEachDStream

        return ForEachDStream(self.ssc, self._self(), func, name).register()

    def pprint(self, num: int = 10) -> DStream:
        """Print the first ``num`` elements of every batch, as PySpark does."""
        if num <= 0:
            raise ConfigurationError(f"pprint needs num > 0, got {num}")

        def take_and_print(time: int, rdd: Any) -> None:
            taken = rdd.take(num + 1)
            lines = ["-------------------------------------------",
                     f"Time: {batch_datetime(time)}",
                     "-------------------------------------------"]
            lines.extend(str(record) for record in taken[:num])
            if len(taken) > num:
                lines.append("...")
            print("\n".join(lines) + "\n", flush=True)

        return self._output(take_and_print, "pprint")

    print = pprint

    def saveAsTextFiles(self, prefix: str, suffix: str | None = None) -> DStream:
        """Save each batch as text files under ``prefix-<time in ms>[.suffix]``."""

        def save(time: int, rdd: Any) -> None:
            path = f"{prefix}-{time}" + (f".{suffix}" if suffix else "")
            rdd.saveAsTextFile(path)

        return self._output(save, "saveAsTextFiles")

    # -- caching and checkpointing ---------------------------------------------------------

    def persist(self, storageLevel: Any = None) -> DStream:
        """Persist every RDD of the stream at ``storageLevel`` (default MEMORY_ONLY)."""
        from pyspark import StorageLevel

        stream = self._self()
        stream.storageLevel = storageLevel or StorageLevel.MEMORY_ONLY
        return stream

    def cache(self) -> DStream:
        """Persist every RDD of the stream in memory."""
        return self.persist()

    def checkpoint(self, interval: float) -> DStream:
        """Checkpoint the stream's RDDs every ``interval`` seconds (multiple of the slide)."""
        stream = self._self()
        stream.checkpointDuration = to_ms(interval, "checkpoint interval")
        return stream

    # -- windows and state (see windowed_operators) ----------------------------------------

    def slice(self, begin: Any, end: Any) -> list[Any]:
        """The RDDs between two ``datetime``s (or epoch ms), both ends included."""
        stream = self._self()
        return stream.slice_ms(_as_ms(begin), _as_ms(end))


def _as_ms(moment: Any) -> int:
    from datetime import datetime

    if isinstance(moment, datetime):
        return int(moment.timestamp() * 1000)
    if isinstance(moment, int) and not isinstance(moment, bool):
        return moment
    raise ConfigurationError(f"slice takes datetimes or epoch milliseconds, got {moment!r}")
