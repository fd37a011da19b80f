"""The offsets JSON of a query's recent batches, read once: the engine hands the same back.

Structured Streaming hands the source its offsets as JSON data at every step of a trigger:
``latestOffset`` gets the previous batch's end, ``partitions`` that start and the new end
(which ``latestOffset`` just returned), ``commit`` the end again. Reading a thousand
partitions' offsets by the codec's rules (:func:`kafka_direct.offsets_json.offsets_from_json`)
cost about 3 ms each time, so a trigger read the same offsets three times over.

:class:`ParsedOffsets` remembers the last few JSON values and what they read as. JSON data
equal to a remembered value reads as the same offsets (the codec is a pure function of the
data), so it is answered with a copy of them; anything else is read, and checked, by the
codec. Offsets the source itself wrote (:meth:`ParsedOffsets.written`) are remembered as
well, but only once they pass the codec's rules for numbers: the partition numbers and
offsets the JSON can hold (topics and partitions of a ``TopicPartition`` are checked
already). So an equal value given back is exactly as valid, and reads the same, as if read
from scratch; the check at the boundary is unchanged for anything new.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kafka_direct.conf_values import MAX_OFFSET
from kafka_direct.offsets_json import (
    MAX_PARTITION,
    SourceOffsets,
    offsets_from_json,
    offsets_to_json,
)
from kafka_direct.topic_partition import TopicPartition

__all__ = ["ParsedOffsets"]

#: JSON values remembered: a trigger's start and end, and the previous trigger's.
_REMEMBERED = 4

_INT = frozenset({int})


def _exact_ints(data: SourceOffsets) -> bool:
    # The types of each topic's offsets gathered in C (a generator's step per offset was
    # a thousand Python steps a read).
    return all(_INT.issuperset(map(type, partitions.values())) for partitions in data.values())


class ParsedOffsets:
    """The codec of one source's offsets, with its recent answers remembered."""

    def __init__(self) -> None:
        # (JSON data, offsets), most recent last.
        self._recent: list[tuple[SourceOffsets, dict[TopicPartition, int]]] = []

    def read(self, data: Any, what: str) -> dict[TopicPartition, int]:
        """``offsets_from_json(data, what)``: a new dict the caller may change.

        Raises:
            ConfigurationError: ``data`` is not offsets JSON by the codec's rules.
        """
        if type(data) is dict:
            for known, offsets in reversed(self._recent):
                # Equal data with exact ints only: 42.0 and True equal 42 and 1 in Python,
                # and the codec refuses them.
                if data == known and _exact_ints(data):
                    return dict(offsets)
        offsets = offsets_from_json(data, what)
        # The caller's own value may change after this: remembered as a copy (two levels).
        self._remember({topic: dict(partitions) for topic, partitions in data.items()},
                       offsets)
        return dict(offsets)

    def written(self, offsets: Mapping[TopicPartition, int]) -> SourceOffsets:
        """``offsets_to_json(offsets)``; remembered when the codec would read it back."""
        data = offsets_to_json(offsets)
        if all(type(o) is int and 0 <= o <= MAX_OFFSET for o in offsets.values()) and all(
                tp.partition <= MAX_PARTITION for tp in offsets):
            self._remember({topic: dict(partitions) for topic, partitions in data.items()},
                           dict(offsets))
        return data

    def _remember(self, data: SourceOffsets, offsets: dict[TopicPartition, int]) -> None:
        self._recent.append((data, offsets))
        del self._recent[:-_REMEMBERED]
