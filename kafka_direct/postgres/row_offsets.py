"""The Kafka offsets of a direct write's rows, and its rows and claims beside others' claims.

A direct write (:mod:`kafka_direct.postgres.direct_write`) claims, per Kafka partition, the
offsets its rows carry. This is the arithmetic on those rows (Arrow record batches whose
topic, partition and offset columns are at the positions ``indexes``), without a database:

* :class:`RowOffsets`: per Kafka partition, the first and last offset and the number of
  rows of the batches it observed, as claims
  (:class:`~kafka_direct.postgres.sink_claims.Claim`); a row without its topic, partition
  or offset is refused;
* :func:`ranges_of`: the same of one batch's columns;
* :func:`uncovered_rows`: the rows whose offsets no claim covers;
* :func:`claim_pieces`: claims of rows written, split at the claims they lie between, so
  that they never overlap them.

Claims found in the database come as ``(topic, partition, from, until, token)``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kafka_direct.errors import ConfigurationError
from kafka_direct.postgres.sink_claims import Claim

__all__ = ["RowOffsets", "claim_pieces", "ranges_of", "uncovered_rows"]


class RowOffsets:
    """Per Kafka partition: the first and last offset and the rows of the batches seen.

    Args:
        indexes: Positions of the topic, partition and offset columns in the rows.
    """

    def __init__(self, indexes: tuple[int, int, int]) -> None:
        self.indexes = indexes
        self.seen: dict[tuple[str, int], list[int]] = {}

    def observe(self, batch: Any) -> Any:
        """Add a batch's rows, and hand the batch back (rows without coordinates: refused)."""
        topicAt, partitionAt, offsetAt = self.indexes
        topics, partitions, offsets = (batch.column(topicAt), batch.column(partitionAt),
                                       batch.column(offsetAt))
        if topics.null_count or partitions.null_count or offsets.null_count:
            raise ConfigurationError(
                "a row has no topic, partition or offset: the offset columns of a direct "
                "write must hold every row's Kafka coordinates", setting="offsetColumns")
        for key, low, high, count in ranges_of(topics, partitions, offsets):
            self._add(key, low, high, count)
        return batch

    def _add(self, key: tuple[str, int], low: int, high: int, count: int) -> None:
        was = self.seen.get(key)
        if was is None:
            self.seen[key] = [low, high, count]
        else:
            was[0], was[1], was[2] = min(was[0], low), max(was[1], high), was[2] + count

    def claims(self) -> list[Claim]:
        """A claim per Kafka partition seen, in (topic, partition) order."""
        return [Claim(t, p, low, high + 1, rows)
                for (t, p), (low, high, rows) in sorted(self.seen.items())]

    def keys(self) -> list[str]:
        """The Kafka partitions seen, as ``topic/partition``, in order."""
        return [f"{t}/{p}" for t, p in sorted(self.seen)]



def ranges_of(topics: Any, partitions: Any, offsets: Any
              ) -> list[tuple[tuple[str, int], int, int, int]]:
    """Per (topic, partition) of a batch's rows: the lowest and highest offset and the rows.

    Rows of one topic (the common case) are grouped with numpy: Arrow's group_by starts a
    query plan, about 3 ms a call, twice per write task; several topics take that way.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    if not len(offsets):
        return []
    distinct = pc.unique(topics)
    if len(distinct) == 1:
        import numpy as np

        topic = str(distinct[0].as_py())
        parts = np.asarray(partitions.to_numpy(zero_copy_only=False), dtype=np.int64)
        offs = np.asarray(offsets.to_numpy(zero_copy_only=False), dtype=np.int64)
        order = np.lexsort((offs, parts))
        parts, offs = parts[order], offs[order]
        starts = np.flatnonzero(np.r_[True, parts[1:] != parts[:-1]])
        ends = np.r_[starts[1:], len(parts)]
        return [((topic, int(parts[b])), int(offs[b]), int(offs[e - 1]), int(e - b))
                for b, e in zip(starts.tolist(), ends.tolist(), strict=True)]
    table = pa.table({"t": topics, "p": partitions, "o": offsets})
    grouped = table.group_by(["t", "p"]).aggregate([("o", "min"), ("o", "max"),
                                                    ("o", "count")])
    return [((str(topic), int(partition)), int(low), int(high), int(count))
            for topic, partition, low, high, count in zip(*(grouped.column(n).to_pylist()
                                                           for n in ("t", "p", "o_min",
                                                                     "o_max", "o_count")),
                                                         strict=True)]


def uncovered_rows(batches: Sequence[Any], indexes: tuple[int, int, int],
                   claimed: Sequence[tuple[str, int, int, int, str]]) -> list[Any]:
    """The rows of ``batches`` whose offsets no claim covers."""
    import pyarrow as pa
    import pyarrow.compute as pc

    topicAt, partitionAt, offsetAt = indexes
    kept = []
    for batch in batches:
        covered = pa.array([False] * batch.num_rows)
        for topic, partition, low, high, _ in claimed:
            inside = pc.and_(pc.and_(pc.equal(batch.column(topicAt), topic),
                                     pc.equal(batch.column(partitionAt), partition)),
                             pc.and_(pc.greater_equal(batch.column(offsetAt), low),
                                     pc.less(batch.column(offsetAt), high)))
            covered = pc.or_(covered, inside)
        rest = batch.filter(pc.invert(covered))
        if rest.num_rows:
            kept.append(rest)
    return kept


def claim_pieces(wrote: RowOffsets, batches: Sequence[Any], indexes: tuple[int, int, int],
                 claimed: Sequence[tuple[str, int, int, int, str]]) -> list[Claim]:
    """Claims of the rows written, split at the claims they lie between (never overlapping)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    topicAt, partitionAt, offsetAt = indexes
    pieces = []
    for (topic, partition) in sorted(wrote.seen):
        bounds = sorted((f, u) for t, p, f, u, _ in claimed if (t, p) == (topic, partition))
        offsets = pa.concat_arrays([
            b.column(offsetAt).filter(pc.and_(pc.equal(b.column(topicAt), topic),
                                              pc.equal(b.column(partitionAt), partition)))
            for b in batches]).cast(pa.int64()).to_numpy()
        edges = [-1, *(e for f, u in bounds for e in (f, u)), 2**63 - 1]
        for low, high in zip(edges[::2], edges[1::2], strict=True):
            inside = offsets[(offsets >= max(low, 0)) & (offsets < high)]
            if len(inside):
                pieces.append(Claim(topic, partition, int(inside.min()), int(inside.max()) + 1,
                                    len(inside)))
    return pieces
