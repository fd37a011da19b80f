"""Output streams: the end of a pipeline, turning each batch's RDD into a job."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from typing_extensions import override

from kafka_direct.streaming.dstream import DStream
from kafka_direct.streaming.job import Job
from kafka_direct.streaming.transformed_dstream import UnaryDStream

if TYPE_CHECKING:
    from kafka_direct.streaming.context import StreamingContext

__all__ = ["ForEachDStream"]


class ForEachDStream(UnaryDStream):
    """Runs ``func(time_ms, rdd)`` for every batch in which the parent has an RDD.

    Args:
        ssc: The context.
        parent: The stream whose RDDs are handed to ``func``.
        func: ``func(time_ms, rdd)``; Spark jobs it starts belong to the batch.
        name: The output operation's name (``foreachRDD``, ``pprint`` ...).
    """

    def __init__(self, ssc: StreamingContext, parent: DStream,
                 func: Callable[[int, Any], None], name: str) -> None:
        super().__init__(ssc, parent)
        self.func = func
        self.name = name
        self.outputOpId = -1

    @override
    def compute(self, validTime: int) -> Any:
        return None

    def generateJob(self, time: int) -> Job | None:
        """The batch's job, or None when the parent has no RDD for ``time``."""
        rdd = self.parent.getOrCompute(time)
        if rdd is None:
            return None
        func = self.func

        def run() -> None:
            func(time, rdd)

        return Job(time, self.outputOpId, run, f"{self.name} at {self.creationSite}",
                   f"{self.name} at {self.creationSite} of {self.parent!r}")
