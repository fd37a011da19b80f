"""InputStatusBoard: the input streams' figures as the engine last published them.

Input streams change their figures (next, latest and committed offsets) on the engine's
threads: the generator's while computing a batch, a job thread while committing. The
statistics page runs on threads of its own, so it never reads the streams: the engine
publishes a description of them whenever it has changed them, holding the lock that keeps
those changes out, and the page reads the last publication.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import Any

from kafka_direct.streaming.ui.statistics import capture_inputs, input_streams

__all__ = ["InputStatusBoard"]


class InputStatusBoard:
    """Holds the latest description of the input streams (see :func:`input_streams`)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._captured: list[tuple[Any, ...]] = []

    def publish(self, streams: Iterable[Any]) -> None:
        """Describe ``streams`` and make that the current figures.

        The caller must keep the streams from changing meanwhile (the scheduler's
        ``inputsLock``).
        """
        captured = capture_inputs(streams)
        with self._lock:
            self._captured = captured

    def snapshot(self) -> dict[int, dict[str, Any]]:
        """A copy of the current figures, the reader's to keep or change."""
        with self._lock:
            captured = self._captured
        # The published copy is never changed in place: describing it outside the lock is
        # safe, and the description is new each time (the reader's to keep or change).
        return input_streams(captured)
