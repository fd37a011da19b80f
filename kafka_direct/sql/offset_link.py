"""The link between the kafka-direct source and the PostgreSQL sink of one query.

INTERFACE ONLY, being written: the source records each batch's planned offsets here and
starts from the sink's committed offsets; the sink stores a batch's end offsets in the same
transaction as its rows.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["SourceLink"]

#: Source offsets as the source's JSON: {"topic": {"partition": next offset}}.
SourceOffsets = dict[str, dict[str, int]]


@dataclass(frozen=True, slots=True)
class SourceLink:
    """Where a source records its plans and finds its committed offsets (PostgreSQL)."""

    dsn: str
    store: str
    schema: str = "public"

    @staticmethod
    def from_options(options: Mapping[str, Any]) -> SourceLink | None:
        """The link the options ask for (``offsetStore.name``/``.dsn``/``.schema``), or None."""
        raise NotImplementedError

    def committed(self) -> SourceOffsets | None:
        """The end offsets of the newest batch the sink committed under this store."""
        raise NotImplementedError

    def record_plan(self, start: SourceOffsets, end: SourceOffsets) -> None:
        """Record the offsets of the batch being planned (before any task runs)."""
        raise NotImplementedError
