"""KafkaOffsetStore: the consumer group's committed offsets in Kafka.

Kafka cannot commit offsets in the same transaction as results written elsewhere, so this
store gives at-least-once delivery: commit after the results are durable, and make the
results idempotent (see ``IdempotentPostgresSink``). ``commit`` checks that each range
continues from the committed offset, but the check and the commit are two requests: a
concurrent writer of the same group can slip in between.

A store keeps the client of the group it last served between calls (a new client connects
to the cluster and asks where the group's coordinator is first: tens of milliseconds, against
a few for the question itself). A call that finds it in use (another thread's) makes one of
its own, closed after the call; a client that failed is replaced; a pickled copy, or a
forked child, makes its own (the rules: :mod:`offsets.kept`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from kafka_direct import OffsetMismatchError, OffsetRange, TopicPartition
from kafka_direct.client.driver_consumer import DriverConsumer
from kafka_direct.client.params import validate_params
from offsets.kept import Kept
from offsets.offset_store import OffsetStore, chain_ranges, check_commit

__all__ = ["KafkaOffsetStore"]


def _close_client(kept: tuple[str, DriverConsumer]) -> None:
    kept[1].close()


class KafkaOffsetStore(OffsetStore):
    """Offsets committed to Kafka consumer groups.

    Args:
        kafkaParams: librdkafka properties of the cluster (``bootstrap.servers``...); the
            group comes from each call.
    """

    def __init__(self, kafkaParams: Mapping[str, Any]) -> None:
        self.kafkaParams = validate_params(kafkaParams)
        # The client kept between calls, with its group (see ``_client``).
        self._kept: Kept[tuple[str, DriverConsumer]] = Kept(_close_client)

    def close(self) -> None:
        """Close the client kept between calls (the next call makes another)."""
        self._kept.close()

    def _new(self, group: str) -> DriverConsumer:
        return DriverConsumer({**self.kafkaParams, "group.id": group,
                               "enable.auto.commit": False})

    @contextlib.contextmanager
    def _client(self, group: str) -> Iterator[DriverConsumer]:
        """The kept client of ``group`` when no other call uses it; else one for this call."""
        if not self._kept.claim():
            client = self._new(group)
            try:
                yield client
            finally:
                client.close()
            return
        try:
            kept = self._kept.value
            if kept is None or kept[0] != group:
                kept = self._kept.keep((group, self._new(group)))
            try:
                yield kept[1]
            except OffsetMismatchError:
                raise  # the offsets' answer, not the client's failure
            except BaseException:
                self._kept.drop()
                raise
        finally:
            self._kept.release()

    def load(self, group: str, topics: Iterable[str] | None = None
             ) -> dict[TopicPartition, int]:
        """The group's committed offsets of ``topics`` (required: Kafka lists by topic)."""
        if topics is None:
            raise ValueError("KafkaOffsetStore.load needs the topics to look up")
        with self._client(group) as client:
            counts = client.partitionsOf(topics)
            partitions = [TopicPartition(t, p) for t, n in counts.items() for p in range(n)]
            return client.committed(partitions)

    def seed(self, group: str, offsets: Mapping[TopicPartition, int]) -> None:
        """Commit starting offsets for partitions the group has none for."""
        with self._client(group) as client:
            existing = client.committed(offsets)
            missing = {tp: o for tp, o in offsets.items() if tp not in existing}
            client.commit(missing)

    def commit(self, group: str, offsetRanges: Sequence[OffsetRange]) -> None:
        """Commit the ranges' ends after checking they continue the committed offsets.

        Consecutive ranges of one partition are chained (see ``chain_ranges``); a repeated
        commit sends nothing.

        Raises:
            OffsetMismatchError: A range neither continues nor repeats the committed offset,
                or ranges of a partition do not chain; nothing is committed then.
        """
        ranges = chain_ranges(group, offsetRanges)  # before any request: bad input fails fast
        with self._client(group) as client:
            committed = client.committed(r.topicPartition() for r in ranges)
            pending = check_commit(group, ranges, committed)
            if pending:
                client.commit({r.topicPartition(): r.untilOffset for r in pending})
