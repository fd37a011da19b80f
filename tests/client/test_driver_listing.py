"""DriverConsumer.listTopics: a few topics by name, more in one listing of the cluster, and a
topic that listing leaves out or answers with an error asked for by name."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from confluent_kafka import KafkaError

from kafka_direct.client.driver_consumer import DriverConsumer


def _topic(partitions: int = 0, error: int | None = None) -> Any:
    return SimpleNamespace(partitions=dict.fromkeys(range(partitions)),
                           error=KafkaError(error) if error is not None else None)


class _Consumer:
    """A cluster of topics; records each metadata request (None: all topics)."""

    cluster: dict[str, Any] = {}
    asked: list[str | None] = []

    def __init__(self, params: dict[str, Any]) -> None:
        pass

    def list_topics(self, topic: str | None = None, timeout: float = 0) -> Any:
        _Consumer.asked.append(topic)
        if topic is None:
            return SimpleNamespace(topics=dict(self.cluster))
        return SimpleNamespace(topics={topic: self.by_name.get(
            topic, _topic(error=KafkaError.UNKNOWN_TOPIC_OR_PART))})

    by_name: dict[str, Any] = {}

    def close(self) -> None:
        pass


def _driver(cluster: dict[str, Any], by_name: dict[str, Any] | None = None) -> DriverConsumer:
    _Consumer.cluster, _Consumer.asked = cluster, []
    _Consumer.by_name = {**cluster, **(by_name or {})}
    return DriverConsumer({"bootstrap.servers": "b:9092", "group.id": "g"}, 1000,
                          consumerFactory=_Consumer, adminFactory=lambda params: None)


def test_a_few_topics_are_asked_for_by_name():
    driver = _driver({"a": _topic(2), "b": _topic(3)})
    listing = driver.listTopics(["a", "b", "gone"])
    assert listing.counts == {"a": 2, "b": 3} and listing.unknown == {"gone"}
    assert _Consumer.asked == ["a", "b", "gone"]


def test_many_topics_take_one_listing_and_names_only_for_what_it_does_not_answer():
    cluster = {f"t{i}": _topic(i + 1) for i in range(6)}
    cluster["t5"] = _topic(error=KafkaError.LEADER_NOT_AVAILABLE)  # a gap of the moment
    driver = _driver(cluster, by_name={"t5": _topic(6), "late": _topic(1)})
    listing = driver.listTopics([*(f"t{i}" for i in range(6)), "late", "gone", "t0"])
    assert listing.counts == {**{f"t{i}": i + 1 for i in range(6)}, "late": 1}
    assert listing.unknown == {"gone"}
    # The listing, then by name: the errored topic, one it left out, one that does not exist.
    assert _Consumer.asked == [None, "t5", "late", "gone"]
