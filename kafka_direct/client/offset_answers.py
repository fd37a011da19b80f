"""What Kafka answers to ``ListOffsets``, checked: an offset no log has is never an answer.

* :data:`LATEST_TIME`, :data:`EARLIEST_TIME`: the protocol's special times, asked through a
  consumer's ``offsets_for_times``;
* :func:`offset_spec`: an AdminClient ``OffsetSpec``;
* :func:`answered_list`, :func:`answered_future`: the offsets of a consumer's answer list, or
  of one AdminClient future, or :class:`UnansweredError`;
* :func:`stale_metadata`: whether a failure is worth one metadata refresh and a second ask.

A broker that stops answering mid-request can leave librdkafka's result at an offset no log
has (``OFFSET_INVALID``, -1001): taken as the end of a log it would read as data loss, so it
is a failed question (retried by the caller), never an answer.
"""

from __future__ import annotations

import operator
from collections.abc import Iterable, Sequence
from itertools import repeat
from typing import Any

from kafka_direct.client.error_codes import error_code
from kafka_direct.topic_partition import TopicPartition

__all__ = ["EARLIEST_TIME", "LATEST_TIME", "UnansweredError", "answered_future",
           "answered_list", "offset_spec", "stale_metadata"]

#: ``ListOffsets``' special times: the end of the log (for the isolation level), its start.
LATEST_TIME, EARLIEST_TIME = -1, -2

# An answer's fields, read in C over a whole answer list (a thousand partitions a batch).
_topic = operator.attrgetter("topic")
_partition = operator.attrgetter("partition")
_offset = operator.attrgetter("offset")
_error = operator.attrgetter("error")


class UnansweredError(Exception):
    """A ListOffsets question Kafka did not answer with an offset (a glitch: retried).

    Args:
        message: What was asked, of which partition, and what came back.
        code: librdkafka's error code, where a partition's answer carried one.
    """

    def __init__(self, message: str, code: int | None = None) -> None:
        super().__init__(message)
        self.code = code


def offset_spec(kind: str, *args: Any) -> Any:
    """An ``OffsetSpec`` (latest, earliest, for_timestamp) for ``list_offsets``."""
    from confluent_kafka import admin

    return getattr(admin.__dict__["OffsetSpec"], kind)(*args)


def _checked(where: str, offset: int, timestamp: bool = False) -> int:
    # Only a question by timestamp has a negative answer (-1: no record at or after it).
    if offset < 0 and not (timestamp and offset == -1):
        raise UnansweredError(f"ListOffsets for {where} answered offset {offset}, which no "
                              "log has (the broker did not answer the request in full)")
    return offset


def answered_list(answers: Iterable[Any], asked: Sequence[TopicPartition] = (),
                  topics: Sequence[str] | None = None, partitions: Sequence[int] | None = None
                  ) -> dict[TopicPartition, int]:
    """The offsets of a consumer's ``offsets_for_times`` answer, or UnansweredError.

    Args:
        answers: librdkafka's answer list.
        asked: The partitions of the request, in its order. librdkafka answers in that
            order, so an answer whose topic and partition are those of the asked
            partition at its place is keyed by that (already checked) TopicPartition
            rather than a new one: a thousand fewer objects built and validated per
            question. Any other answer gets a TopicPartition of its own.
        topics: The topic of each of ``asked``, when the caller keeps them.
        partitions: The partition number of each of ``asked``, when the caller keeps them.

    Raises:
        UnansweredError: A partition's answer was an error (with its code) or no offset.
    """
    answers = list(answers)
    count = len(asked)
    if count and len(answers) == count:
        offsets = list(map(int, map(_offset, answers)))
        # By identity: librdkafka's KafkaError fails an equality test with None. Topics
        # and partitions compared apart: no tuple built per answer.
        if all(map(operator.is_, map(_error, answers), repeat(None))) and min(offsets) >= 0 \
                and list(map(_partition, answers)) == (
                    partitions if partitions is not None else list(map(_partition, asked))) \
                and list(map(_topic, answers)) == (
                    topics if topics is not None else list(map(_topic, asked))):
            # Every answer an offset, in the request's order: read in C loops, keyed by
            # the asked partitions (the usual answer; anything else is looked at below).
            return dict(zip(asked, offsets, strict=True))
    found = {}
    for i, answer in enumerate(answers):
        topic, partition, error = answer.topic, answer.partition, answer.error
        if error is not None:
            raise UnansweredError(f"ListOffsets for {topic}-{partition} failed: "
                                  f"{error.str()}", error.code())
        offset = int(answer.offset)
        if offset < 0:
            _checked(f"{topic}-{partition}", offset)
        tp = asked[i] if i < count else None
        if tp is None or tp.partition != partition or tp.topic != topic:
            tp = TopicPartition(topic, partition)
        found[tp] = offset
    return found


def answered_future(key: Any, future: Any, timeout: float, timestamp: bool) -> int:
    """The offset an AdminClient ``future`` answers for partition ``key``, or UnansweredError.

    Raises:
        UnansweredError: No answer within ``timeout``, or no offset.
    """
    import concurrent.futures

    where = f"{key.topic}-{key.partition}"
    try:
        offset = int(future.result(timeout).offset)
    except concurrent.futures.TimeoutError:
        raise UnansweredError(f"ListOffsets for {where}: no answer within {timeout:g} s") \
            from None
    return _checked(where, offset, timestamp)


def stale_metadata(error: Exception) -> bool:
    """Whether ``error`` says the client's metadata may be behind the cluster.

    A partition just added, or a leader just moved: worth one metadata refresh before the
    question is asked again.
    """
    from confluent_kafka import KafkaError, KafkaException

    code: Any = None
    if isinstance(error, UnansweredError):
        code = error.code
    elif isinstance(error, KafkaException):
        code = error_code(error)
    return code in (KafkaError._UNKNOWN_PARTITION, KafkaError.LEADER_NOT_AVAILABLE,
                    KafkaError.NOT_LEADER_FOR_PARTITION,
                    KafkaError.UNKNOWN_TOPIC_OR_PART) or "leader" in str(error).lower()
