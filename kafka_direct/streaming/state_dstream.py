"""StateDStream: state per key carried from batch to batch (updateStateByKey)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from typing_extensions import override

from kafka_direct.streaming.dstream import DStream
from kafka_direct.streaming.transformed_dstream import UnaryDStream

if TYPE_CHECKING:
    from kafka_direct.streaming.context import StreamingContext

__all__ = ["StateDStream"]


class StateDStream(UnaryDStream):
    """Each batch: ``func(time, previous state or initial RDD, new RDD)``.

    With no new RDD for a batch the state stays as it was. The state is checkpointed, since
    recomputing it would need every batch since the start.

    Args:
        ssc: The context.
        parent: Stream of key-value pairs.
        func: Computes the new state RDD.
        initialRDD: State before the first batch (None: empty).
    """

    mustCheckpoint = True

    def __init__(self, ssc: StreamingContext, parent: DStream,
                 func: Callable[[int, Any, Any], Any], initialRDD: Any = None) -> None:
        super().__init__(ssc, parent)
        self.func = func
        self.initialRDD = initialRDD
        from pyspark import StorageLevel

        self.storageLevel = StorageLevel.MEMORY_ONLY

    @override
    def compute(self, validTime: int) -> Any:
        last = self.getOrCompute(validTime - self.slideDuration)
        rdd = self.parent.getOrCompute(validTime)
        if rdd is None:
            return last
        return self.func(validTime, last if last is not None else self.initialRDD, rdd)
