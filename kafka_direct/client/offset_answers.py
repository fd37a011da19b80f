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

from collections.abc import Iterable, Sequence
from typing import Any

from kafka_direct.topic_partition import TopicPartition

__all__ = ["EARLIEST_TIME", "LATEST_TIME", "UnansweredError", "answered_future",
           "answered_list", "offset_spec", "stale_metadata"]

#: ``ListOffsets``' special times: the end of the log (for the isolation level), its start.
LATEST_TIME, EARLIEST_TIME = -1, -2


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


def answered_list(answers: Iterable[Any], asked: Sequence[TopicPartition] = ()
                  ) -> dict[TopicPartition, int]:
    """The offsets of a consumer's ``offsets_for_times`` answer, or UnansweredError.

    Args:
        answers: librdkafka's answer list.
        asked: The partitions of the request, in its order. librdkafka answers in that
            order, so an answer whose topic and partition are those of the asked
            partition at its place is keyed by that (already checked) TopicPartition
            rather than a new one: a thousand fewer objects built and validated per
            question. Any other answer gets a TopicPartition of its own.

    Raises:
        UnansweredError: A partition's answer was an error (with its code) or no offset.
    """
    found = {}
    count = len(asked)
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
    elif isinstance(error, KafkaException) and error.args:
        code = getattr(error.args[0], "code", lambda: None)()
    return code in (KafkaError._UNKNOWN_PARTITION, KafkaError.LEADER_NOT_AVAILABLE,
                    KafkaError.NOT_LEADER_FOR_PARTITION,
                    KafkaError.UNKNOWN_TOPIC_OR_PART) or "leader" in str(error).lower()
