"""Streams computed batch by batch from other streams: transform, union."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from typing_extensions import override

from kafka_direct.errors import ConfigurationError
from kafka_direct.streaming.dstream import DStream

if TYPE_CHECKING:
    from kafka_direct.streaming.context import StreamingContext

__all__ = ["MultiParentDStream", "TransformedDStream", "UnaryDStream", "UnionDStream"]

#: ``func(time_ms, rdds)`` -> RDD or None.
RDDsFunction = Callable[[int, list[Any]], Any]


def _check_same_slide(parents: Sequence[DStream], what: str) -> int:
    if not parents:
        raise ConfigurationError(f"{what} needs at least one DStream")
    contexts = {id(p.ssc) for p in parents}
    if len(contexts) > 1:
        raise ConfigurationError(f"{what}: the DStreams belong to different StreamingContexts")
    slides = {p.slideDuration for p in parents}
    if len(slides) > 1:
        raise ConfigurationError(
            f"{what}: the DStreams have different slide durations "
            f"({', '.join(f'{s} ms' for s in sorted(slides))}); window them to one first")
    return slides.pop()


class UnaryDStream(DStream):
    """A stream computed from one parent, sliding with it unless it says otherwise."""

    def __init__(self, ssc: StreamingContext, parent: DStream) -> None:
        super().__init__(ssc)
        self.parent = parent

    @property
    @override
    def dependencies(self) -> list[DStream]:
        return [self.parent]

    @property
    @override
    def slideDuration(self) -> int:
        return self.parent.slideDuration


class MultiParentDStream(DStream):
    """A stream computed from several parents that share a slide duration."""

    def __init__(self, ssc: StreamingContext, parents: Sequence[DStream], what: str) -> None:
        self._slide = _check_same_slide(parents, what)
        super().__init__(ssc)
        self.parents = list(parents)

    @property
    @override
    def dependencies(self) -> list[DStream]:
        return list(self.parents)

    @property
    @override
    def slideDuration(self) -> int:
        return self._slide


class TransformedDStream(MultiParentDStream):
    """Each batch: ``func(time, [parent RDDs])``. Every RDD-to-RDD operator is one of these.

    Args:
        ssc: The context.
        parents: Streams read, all with the same slide duration.
        func: ``func(time_ms, rdds)`` returning the batch's RDD (or None for no RDD).
    """

    def __init__(self, ssc: StreamingContext, parents: Sequence[DStream],
                 func: RDDsFunction) -> None:
        super().__init__(ssc, parents, "transform")
        self.func = func

    @override
    def compute(self, validTime: int) -> Any:
        rdds = []
        for parent in self.parents:
            rdd = parent.getOrCompute(validTime)
            if rdd is None:
                rdd = self.ssc.sparkContext.emptyRDD()
            rdds.append(rdd)
        return self.func(validTime, rdds)


class UnionDStream(MultiParentDStream):
    """Each batch: the union of the parents' RDDs."""

    def __init__(self, ssc: StreamingContext, parents: Sequence[DStream]) -> None:
        super().__init__(ssc, parents, "union")

    @override
    def compute(self, validTime: int) -> Any:
        rdds = [rdd for rdd in (p.getOrCompute(validTime) for p in self.parents)
                if rdd is not None]
        if not rdds:
            return None
        return rdds[0] if len(rdds) == 1 else self.ssc.sparkContext.union(rdds)
