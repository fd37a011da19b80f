"""The source's offset options: ``startingOffsets`` / ``endingOffsets``, by timestamp, ``assign``.

The offsets options take the shape of the offset log's JSON
(:mod:`kafka_direct.offsets_json`, whose rules for topics and partitions they share),
with Spark's ``-2`` (earliest) and ``-1`` (latest): :func:`parse_offsets_option` reads them,
:func:`parse_timestamps_option` the ``...ByTimestamp`` options and :func:`parse_assign` the
``assign`` option (``{"t": [0, 1]}``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from kafka_direct.errors import ConfigurationError
from kafka_direct.offsets_json import (
    MAX_PARTITION,
    checked_integer,
    partition_number,
    topic_map,
)
from kafka_direct.topic_partition import TopicPartition

__all__ = [
    "EARLIEST",
    "LATEST",
    "parse_assign",
    "parse_offsets_option",
    "parse_timestamps_option",
]

#: Spark's special offsets in ``startingOffsets`` / ``endingOffsets`` JSON.
LATEST = -1
EARLIEST = -2


def _load(option: str, text: str, example: str) -> Any:
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as error:
        raise ConfigurationError(
            f"option {option!r} is not valid JSON ({error}); write it as {example}, or use "
            f"earliest / latest where the option allows") from None


def parse_offsets_option(option: str, text: str, *, allow_earliest: bool = True,
                         allow_latest: bool = True
                         ) -> tuple[dict[TopicPartition, int], dict[str, int]]:
    """``startingOffsets`` / ``endingOffsets`` JSON: offsets, ``-2`` earliest, ``-1`` latest.

    A topic may also be given as a whole, as Spark 4 allows: ``{"topicA": "earliest"}``
    (case-insensitive ``earliest`` / ``latest``) places every partition of the topic.

    Args:
        option: The option's name, for errors.
        text: The option's value.
        allow_earliest: Whether ``-2`` is allowed (not in a batch's ``endingOffsets``).
        allow_latest: Whether ``-1`` is allowed (not in a batch's ``startingOffsets``).

    Returns:
        The per-partition offsets, and the topic-level ones (topic -> -2 or -1).

    Raises:
        ConfigurationError: Not such JSON, an offset below -2, or a forbidden -1 / -2.
    """
    example = '{"topicA": {"0": 23, "1": -1}, "topicB": {"0": -2}, "topicC": "earliest"}'
    offsets: dict[TopicPartition, int] = {}
    topics: dict[str, int] = {}
    for topic, partitions in topic_map(_load(option, text, example), f"option {option!r}",
                                        example).items():
        if isinstance(partitions, str) and partitions.strip().lower() in ("earliest",
                                                                          "latest"):
            whole = EARLIEST if partitions.strip().lower() == "earliest" else LATEST
            if (whole == LATEST and not allow_latest) or (
                    whole == EARLIEST and not allow_earliest):
                raise ConfigurationError(
                    f"option {option!r}: topic {topic!r} can't be {partitions.strip()} for "
                    "batch queries; give offsets or the other end", topic=topic)
            topics[topic] = whole
            continue
        if not isinstance(partitions, Mapping):
            raise ConfigurationError(
                f"option {option!r}: topic {topic!r} must map partitions to offsets, or be "
                f"\"earliest\" or \"latest\", e.g. {example}; got {partitions!r}")
        for key, offset in partitions.items():
            partition = partition_number(topic, key, f"option {option!r}")
            tp = TopicPartition(topic, partition)
            value = checked_integer(offset, f"the offset of {tp}", f"option {option!r}", EARLIEST,
                             ">= 0, or -2 (earliest) or -1 (latest)")
            if value == LATEST and not allow_latest:
                raise ConfigurationError(
                    f"option {option!r}: {tp} can't be latest (-1) for batch queries; give "
                    "an offset or -2 (earliest)", topic=topic, partition=partition)
            if value == EARLIEST and not allow_earliest:
                raise ConfigurationError(
                    f"option {option!r}: {tp} can't be earliest (-2) for batch queries; give "
                    "an offset or -1 (latest)", topic=topic, partition=partition)
            offsets[tp] = value
    return offsets, topics


def parse_timestamps_option(option: str, text: str) -> dict[TopicPartition, int]:
    """``startingOffsetsByTimestamp`` / ``endingOffsetsByTimestamp``: epoch ms per partition.

    Raises:
        ConfigurationError: Not ``{"topic": {"partition": ms >= 0}}``.
    """
    example = '{"topicA": {"0": 1700000000000, "1": 1700000000000}}'
    timestamps: dict[TopicPartition, int] = {}
    for topic, partitions in topic_map(_load(option, text, example), f"option {option!r}",
                                        example).items():
        if not isinstance(partitions, Mapping):
            raise ConfigurationError(
                f"option {option!r}: topic {topic!r} must map partitions to timestamps, "
                f"e.g. {example}; got {partitions!r}")
        for key, ms in partitions.items():
            partition = partition_number(topic, key, f"option {option!r}")
            timestamps[TopicPartition(topic, partition)] = checked_integer(
                ms, f"the timestamp of {topic}-{partition}", f"option {option!r}", 0,
                "of epoch milliseconds >= 0")
    return timestamps


def parse_assign(text: str) -> tuple[TopicPartition, ...]:
    """The ``assign`` option: ``{"topicA": [0, 1], "topicB": [2]}``, sorted.

    Raises:
        ConfigurationError: Not such JSON, or no partition at all.
    """
    example = '{"topicA": [0, 1], "topicB": [2, 4]}'
    partitions: set[TopicPartition] = set()
    for topic, numbers in topic_map(_load("assign", text, example), "option 'assign'",
                                     example).items():
        if not isinstance(numbers, list):
            raise ConfigurationError(
                f"option 'assign': topic {topic!r} must map to a list of partition numbers, "
                f"e.g. {example}; got {numbers!r}")
        for number in numbers:
            if isinstance(number, bool) or not isinstance(number, int) or \
                    not 0 <= number <= MAX_PARTITION:
                raise ConfigurationError(
                    f"option 'assign': partition {number!r} of topic {topic!r} is not a "
                    f"partition number (an integer >= 0), e.g. {example}")
            partitions.add(TopicPartition(topic, number))
    if not partitions:
        raise ConfigurationError(
            f"option 'assign' names no partition ({text!r}); write e.g. {example}")
    return tuple(sorted(partitions))
