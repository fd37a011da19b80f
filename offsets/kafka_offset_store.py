"""KafkaOffsetStore: the consumer group's committed offsets in Kafka.

Kafka cannot commit offsets in the same transaction as results written elsewhere, so this
store gives at-least-once delivery: commit after the results are durable, and make the
results idempotent (see ``IdempotentPostgresSink``). ``commit`` checks that each range
continues from the committed offset, but the check and the commit are two requests: a
concurrent writer of the same group can slip in between.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from kafka_direct import OffsetRange, TopicPartition
from kafka_direct.client.driver_consumer import DriverConsumer
from kafka_direct.client.params import validate_params
from offsets.offset_store import OffsetStore, chain_ranges, check_commit

__all__ = ["KafkaOffsetStore"]


class KafkaOffsetStore(OffsetStore):
    """Offsets committed to Kafka consumer groups.

    Args:
        kafkaParams: librdkafka properties of the cluster (``bootstrap.servers``...); the
            group comes from each call.
    """

    def __init__(self, kafkaParams: Mapping[str, Any]) -> None:
        self.kafkaParams = validate_params(kafkaParams)

    def _client(self, group: str) -> DriverConsumer:
        return DriverConsumer({**self.kafkaParams, "group.id": group,
                               "enable.auto.commit": False})

    def load(self, group: str, topics: Iterable[str] | None = None
             ) -> dict[TopicPartition, int]:
        """The group's committed offsets of ``topics`` (required: Kafka lists by topic)."""
        if topics is None:
            raise ValueError("KafkaOffsetStore.load needs the topics to look up")
        client = self._client(group)
        try:
            counts = client.partitionsOf(topics)
            partitions = [TopicPartition(t, p) for t, n in counts.items() for p in range(n)]
            return client.committed(partitions)
        finally:
            client.close()

    def seed(self, group: str, offsets: Mapping[TopicPartition, int]) -> None:
        """Commit starting offsets for partitions the group has none for."""
        client = self._client(group)
        try:
            existing = client.committed(offsets)
            missing = {tp: o for tp, o in offsets.items() if tp not in existing}
            client.commit(missing)
        finally:
            client.close()

    def commit(self, group: str, offsetRanges: Sequence[OffsetRange]) -> None:
        """Commit the ranges' ends after checking they continue the committed offsets.

        Consecutive ranges of one partition are chained (see ``chain_ranges``); a repeated
        commit sends nothing.

        Raises:
            OffsetMismatchError: A range neither continues nor repeats the committed offset,
                or ranges of a partition do not chain; nothing is committed then.
        """
        ranges = chain_ranges(group, offsetRanges)  # before any request: bad input fails fast
        client = self._client(group)
        try:
            committed = client.committed(r.topicPartition() for r in ranges)
            pending = check_commit(group, ranges, committed)
            if pending:
                client.commit({r.topicPartition(): r.untilOffset for r in pending})
        finally:
            client.close()
