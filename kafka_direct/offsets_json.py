"""Offsets as JSON, ``{"topic": {"partition": next offset}}``: the one codec and its rules.

The source keeps its offsets in Spark's offset log in this shape, the offset link keeps a
store's offsets and plans in PostgreSQL in it, and the ingest job takes its
``--starting-offsets`` in it, so all read and write it here, with one rule set:

* topics are non-empty names;
* partitions are strings of decimal digits with no leading zero (``"0"``, ``"12"``, not
  ``"007"`` nor ``7``), up to 2**31 - 1: the text of a partition number is one text, so
  two spellings never name one partition;
* offsets are integers (not booleans) from 0 to 2**63 - 1: Kafka's *next offset to read*.

Structured Streaming compares offsets *as text* (a batch runs when the end differs from the
start), so the JSON of one set of offsets must always be the same text:
:func:`offsets_to_json` orders topics by name and partitions by number (``"2"`` before
``"10"``), whatever order the offsets came in. ``{"t": {"0": 42}}`` means offsets up to 41
of ``t-0`` were read.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from kafka_direct.conf_values import MAX_OFFSET
from kafka_direct.errors import ConfigurationError
from kafka_direct.topic_partition import TopicPartition

__all__ = [
    "MAX_PARTITION",
    "SourceOffsets",
    "checked_integer",
    "normalise_offsets",
    "offsets_from_json",
    "offsets_json",
    "offsets_to_json",
    "partition_number",
    "topic_map",
]

#: Source offsets as JSON data: {"topic": {"partition": next offset}}.
SourceOffsets = dict[str, dict[str, int]]

#: The largest partition number (Kafka's partitions are int32).
MAX_PARTITION = 2**31 - 1


def offsets_to_json(offsets: Mapping[TopicPartition, int]) -> SourceOffsets:
    """``offsets`` as JSON data in the one stable order (topics by name, partitions by number).

    Args:
        offsets: Next offset to read per partition.

    Returns:
        A new dict whose insertion order ``json.dumps`` keeps.
    """
    by_topic: dict[str, dict[int, int]] = {}
    for tp, offset in offsets.items():
        by_topic.setdefault(tp.topic, {})[tp.partition] = int(offset)
    return {topic: {str(p): by_topic[topic][p] for p in sorted(by_topic[topic])}
            for topic in sorted(by_topic)}


def partition_number(topic: str, key: Any, what: str) -> int:
    """A partition key of the JSON as its number (see the module's rules).

    Raises:
        ConfigurationError: ``key`` is not the text of a partition number.
    """
    text = key if isinstance(key, str) else None
    if text is None or not text.isascii() or not text.isdigit() \
            or (len(text) > 1 and text[0] == "0") or int(text) > MAX_PARTITION:
        raise ConfigurationError(
            f"{what}: partition {key!r} of topic {topic!r} is not a partition number; write "
            f'partitions as strings of digits, e.g. {{"{topic}": {{"0": 42}}}}',
            topic=topic)
    return int(text)


def checked_integer(value: Any, where: str, what: str, minimum: int, meaning: str) -> int:
    """``value`` if it is an int (not a bool) from ``minimum`` to 2**63 - 1.

    Raises:
        ConfigurationError: Anything else, naming ``where`` and ``meaning``.
    """
    if isinstance(value, bool) or not isinstance(value, int) or not \
            minimum <= value <= MAX_OFFSET:
        raise ConfigurationError(
            f"{what}: {where} is {value!r}; it must be an integer {meaning}")
    return value


def topic_map(data: Any, what: str, example: str) -> dict[str, Any]:
    """``data`` as a dict of topics (non-empty names).

    Raises:
        ConfigurationError: ``data`` is not a JSON object of topics.
    """
    if not isinstance(data, Mapping) or not all(isinstance(t, str) and t for t in data):
        raise ConfigurationError(
            f"{what} must be a JSON object of topics, e.g. {example}; got {data!r}")
    return dict(data)


def offsets_from_json(data: Any, what: str = "source offset") -> dict[TopicPartition, int]:
    """Read offsets written by :func:`offsets_to_json` (the offset log, a store, a plan).

    Args:
        data: The JSON data (already parsed).
        what: How errors name the data.

    Raises:
        ConfigurationError: Not ``{"topic": {"partition": offset >= 0}}`` by the module's
            rules.
    """
    offsets: dict[TopicPartition, int] = {}
    for topic, partitions in topic_map(data, what, '{"t": {"0": 42}}').items():
        if not isinstance(partitions, Mapping):
            raise ConfigurationError(
                f"{what}: topic {topic!r} must map partitions to offsets, got {partitions!r}")
        for key, offset in partitions.items():
            partition = partition_number(topic, key, what)
            offsets[TopicPartition(topic, partition)] = checked_integer(
                offset, f"the offset of {topic}-{partition}", what, 0,
                f">= 0 and at most {MAX_OFFSET}")
    return offsets


def normalise_offsets(data: Any, what: str) -> SourceOffsets:
    """``data`` checked by the module's rules, as JSON data in the one stable order.

    Raises:
        ConfigurationError: ``data`` is not ``{"topic": {"partition": offset}}``.
    """
    return offsets_to_json(offsets_from_json(data, what))


def offsets_json(offsets: Any, what: str = "offsets") -> str:
    """The offsets as compact JSON text in the one stable order.

    Raises:
        ConfigurationError: ``offsets`` is not ``{"topic": {"partition": offset}}``.
    """
    return json.dumps(normalise_offsets(offsets, what), separators=(",", ":"))
