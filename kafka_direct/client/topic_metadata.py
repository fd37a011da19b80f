"""What the cluster's metadata says of topics: partition counts, deleted topics, leaders.

The driver's consumer asks; the functions here read its answers
(:class:`~kafka_direct.client.driver_consumer.DriverConsumer` asks through its group's
member, whose refreshed metadata starts its rebalance when a subscribed topic grows). Each
takes ``metadata``, which asks the cluster's metadata: of every topic when given None, of
one topic by name otherwise.

Contract:

* A topic is unknown (deleted, or never created) only when the broker answers "unknown
  topic or partition" for it. Any other error, or a topic an answer leaves out, is a gap of
  the moment (no leader yet, a partial listing): the topic is neither counted nor unknown.
* A few topics are asked for by name; more than three by one listing of the cluster's
  topics, and a topic that listing leaves out or answers with an error is asked for by
  name.
* A known topic that a pattern's listing of every topic leaves out is asked for by name
  before it counts as unknown: one listing that misses it is not proof enough that it was
  deleted.
* Kafka's own topics (:data:`INTERNAL_TOPICS`) never match a pattern.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kafka_direct.topic_partition import TopicPartition

__all__ = ["INTERNAL_TOPICS", "Metadata", "TopicListing", "leaders", "list_matching",
           "list_topics", "topics_matching"]

#: Asks the cluster's metadata (a confluent-kafka ``ClusterMetadata``): of every topic
#: (None), or of one topic by name.
Metadata = Callable[[str | None], Any]

#: Kafka's own topics: never part of a pattern's match (as the Java client's
#: ``exclude.internal.topics=true``, its default).
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})

#: Topics asked at once above which one listing of all topics answers them.
_ONE_LISTING_ABOVE = 3

#: librdkafka's code for "the cluster has no such topic or partition" (the broker's answer).
_UNKNOWN_TOPIC_OR_PART = 3


@dataclass(frozen=True, slots=True)
class TopicListing:
    """What one metadata answer says of some topics.

    A topic in neither field was not answered for (a transient gap: no leader yet, an
    error of the moment, a partial listing): nothing can be concluded about it.

    Attributes:
        counts: Partition counts of the topics that exist.
        unknown: Topics the cluster says do not exist (deleted, or never created).
    """

    counts: Mapping[str, int] = field(default_factory=dict)
    unknown: frozenset[str] = frozenset()


def list_topics(metadata: Metadata, topics: Iterable[str]) -> TopicListing:
    """Partition counts of ``topics``, and which of them the cluster says do not exist.

    Only the broker's "unknown topic or partition" makes a topic unknown; any other
    error, or a topic left out of the answer, is a gap of the moment.

    More than a few topics are answered by one listing of the cluster's topics (a
    request per topic was most of a batch's listing at ten topics); a topic it leaves
    out or answers with an error is asked for by name, as a few topics are.
    """
    wanted = list(dict.fromkeys(topics))
    listed: dict[str, Any] = {}
    if len(wanted) > _ONE_LISTING_ABOVE:
        everything = metadata(None).topics
        listed = {topic: everything[topic] for topic in wanted
                  if topic in everything and everything[topic].error is None}
    counts: dict[str, int] = {}
    unknown: set[str] = set()
    for topic in wanted:
        described = listed.get(topic)
        if described is None:
            described = metadata(topic).topics.get(topic)
        if described is None:
            continue
        if described.error is None and described.partitions:
            counts[topic] = len(described.partitions)
        elif described.error is not None and \
                described.error.code() == _UNKNOWN_TOPIC_OR_PART:
            unknown.add(topic)
    return TopicListing(counts, frozenset(unknown))


def list_matching(metadata: Metadata, matches: Callable[[str], bool],
                  known: Iterable[str] = ()) -> TopicListing:
    """:func:`topics_matching`, and which ``known`` topics the cluster says do not exist.

    A known topic absent from the full listing is asked for by name before it counts as
    unknown: one listing that misses it is not proof enough that it was deleted.
    """
    counts = topics_matching(metadata, matches)
    absent = sorted(set(known) - set(counts))
    if not absent:
        return TopicListing(counts)
    confirmed = list_topics(metadata, absent)
    counts.update({topic: n for topic, n in confirmed.counts.items() if matches(topic)})
    return TopicListing(counts, confirmed.unknown)


def topics_matching(metadata: Metadata, matches: Callable[[str], bool]) -> dict[str, int]:
    """Partition counts of every topic whose name ``matches`` (Kafka's own left out)."""
    return {name: len(t.partitions) for name, t in metadata(None).topics.items()
            if name not in INTERNAL_TOPICS and matches(name) and t.error is None
            and t.partitions}


def leaders(metadata: Metadata, partitions: Iterable[TopicPartition]
            ) -> dict[TopicPartition, str]:
    """The host of each partition's leader broker (a partition without one is left out)."""
    answer = metadata(None)
    hosts = {broker_id: broker.host for broker_id, broker in answer.brokers.items()}
    found = {}
    for tp in partitions:
        topic = answer.topics.get(tp.topic)
        partition = topic.partitions.get(tp.partition) if topic is not None else None
        if partition is not None and partition.leader in hosts:
            found[tp] = hosts[partition.leader]
    return found
