"""The source's commits to its consumer group (``commitOffsetsToGroup``), off the trigger's path.

The group's offsets are for monitoring tools only: the query never resumes from them. A
synchronous commit is a round trip to the group coordinator, and the source made one in
each trigger's ``latestOffset`` or ``commit``, which Spark runs one after the other on the
micro-batch's critical path: a broker that answers late (a busy machine) delayed every
batch. :class:`GroupCommits` hands the offsets to a thread of the source's driver process
instead, which commits the newest offsets it was given (offsets given while it commits
replace each other: only the newest reach the group) and warns when a commit fails.
:meth:`GroupCommits.close` waits for the last offsets, so a run's end still reaches the
group.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping

from kafka_direct.offsets_json import offsets_to_json
from kafka_direct.topic_partition import TopicPartition

__all__ = ["GroupCommits"]

logger = logging.getLogger(__name__)

#: Commits next-to-read offsets to the group (raises on failure).
Committer = Callable[[Mapping[TopicPartition, int]], None]


class GroupCommits:
    """Commits offsets to a consumer group in a thread of its own, newest first.

    Args:
        commit: Commits offsets to the group, synchronously (raises on failure).
        group: The group's name (for the warning of a failed commit).
    """

    def __init__(self, commit: Committer, group: str) -> None:
        self._commit = commit
        self._group = group
        self._changed = threading.Condition()
        #: The newest offsets not yet handed to ``commit`` (None: none).
        self._pending: dict[TopicPartition, int] | None = None
        #: Whether the thread is inside ``commit``.
        self._busy = False
        self._closed = False
        self._thread: threading.Thread | None = None

    def submit(self, offsets: Mapping[TopicPartition, int]) -> None:
        """Commit ``offsets`` soon, in place of offsets submitted before and not yet sent."""
        with self._changed:
            if self._closed:
                return
            self._pending = dict(offsets)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, daemon=True,
                                                 name=f"group-commits-{self._group}")
                self._thread.start()
            self._changed.notify_all()

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every submitted offset was committed (or failed); False on timeout."""
        with self._changed:
            return self._changed.wait_for(lambda: self._pending is None and not self._busy,
                                          timeout)

    def close(self, timeout: float = 30.0) -> None:
        """Commit what is pending (waiting up to ``timeout`` seconds), then stop the thread."""
        self.flush(timeout)
        with self._changed:
            self._closed = True
            self._pending = None
            self._changed.notify_all()
            thread = self._thread
        if thread is not None:
            thread.join(timeout)

    def _run(self) -> None:
        while True:
            with self._changed:
                self._changed.wait_for(lambda: self._pending is not None or self._closed)
                if self._pending is None:  # closed
                    return
                offsets, self._pending, self._busy = self._pending, None, True
            try:
                self._commit(offsets)
            except Exception as error:  # monitoring only: the query goes on
                logger.warning("kafka-direct source: committing %s to group %s for "
                               "monitoring failed (the query goes on; it never resumes from "
                               "the group): %s", offsets_to_json(offsets), self._group, error)
            finally:
                with self._changed:
                    self._busy = False
                    self._changed.notify_all()
