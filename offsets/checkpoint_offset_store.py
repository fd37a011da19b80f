"""CheckpointOffsetStore: offsets in a checkpoint directory, one JSON file per group.

For jobs whose results are idempotent or live beside the checkpoint (files, a local
database) and that want their position next to their checkpoints instead of in Kafka. The
directory may be the streaming checkpoint directory; the store writes under ``offsets/``.

Each group's offsets are one file, replaced atomically (write a temporary file, fsync,
rename): a crash leaves the previous or the new offsets, never a torn file. ``commit``
checks and writes under an exclusive ``flock`` on a lock file, so writers of the same group
on one machine (or on a filesystem with working POSIX locks) are serialised. The results
are written elsewhere, so delivery is at-least-once: commit after the results are durable.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import tempfile
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path

from kafka_direct import (
    CheckpointError,
    ConfigurationError,
    OffsetRange,
    TopicPartition,
)
from offsets.offset_store import OffsetStore, check_commit

__all__ = ["CheckpointOffsetStore"]

_FORMAT = 1
_SAFE = re.compile(r"[^A-Za-z0-9._-]")


class CheckpointOffsetStore(OffsetStore):
    """Offsets under ``directory/offsets/<group>.json``.

    Args:
        directory: The checkpoint directory (created when missing).
    """

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        if not str(directory):
            raise ConfigurationError("CheckpointOffsetStore needs a directory")
        self.directory = Path(directory) / "offsets"

    def __repr__(self) -> str:
        return f"CheckpointOffsetStore({str(self.directory.parent)!r})"

    def _path(self, group: str, suffix: str = ".json") -> Path:
        if not group:
            raise ConfigurationError("the consumer group must be a non-empty name")
        # Distinct groups keep distinct files even when their names differ only in
        # characters a file name cannot hold.
        safe = _SAFE.sub("_", group)
        if safe != group:
            safe += "-" + group.encode().hex()[:32]
        return self.directory / (safe + suffix)

    @contextlib.contextmanager
    def _locked(self, group: str) -> Iterator[None]:
        self.directory.mkdir(parents=True, exist_ok=True)
        with open(self._path(group, ".lock"), "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def _read(self, group: str) -> dict[TopicPartition, int]:
        path = self._path(group)
        try:
            document = json.loads(path.read_text())
            if document.get("group") != group or document.get("format") != _FORMAT:
                raise ValueError("not an offsets file of this group")
            return {TopicPartition(str(t), int(p)): int(o)
                    for t, p, o in document["offsets"]}
        except FileNotFoundError:
            return {}
        except (ValueError, KeyError, TypeError) as error:
            raise CheckpointError(
                f"the offsets file {path} is damaged ({error}); restore it from a backup or "
                "delete it to start the group per its auto.offset.reset") from error

    def _write(self, group: str, offsets: Mapping[TopicPartition, int]) -> None:
        path = self._path(group)
        document = {"format": _FORMAT, "group": group,
                    "offsets": [[tp.topic, tp.partition, o] for tp, o in sorted(offsets.items())]}
        fd, temporary = tempfile.mkstemp(dir=self.directory, prefix=".offsets-")
        try:
            with os.fdopen(fd, "w") as out:
                json.dump(document, out)
                out.flush()
                os.fsync(out.fileno())
            os.replace(temporary, path)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temporary)
            raise
        directory = os.open(self.directory, os.O_RDONLY)
        try:
            os.fsync(directory)  # the rename itself survives a power cut
        finally:
            os.close(directory)

    def load(self, group: str, topics: Iterable[str] | None = None
             ) -> dict[TopicPartition, int]:
        """The stored next offsets of ``group`` (of ``topics`` only, if given)."""
        offsets = self._read(group)
        if topics is None:
            return offsets
        wanted = set(topics)
        return {tp: o for tp, o in offsets.items() if tp.topic in wanted}

    def seed(self, group: str, offsets: Mapping[TopicPartition, int]) -> None:
        """Record starting offsets for partitions without one; stored ones stay."""
        with self._locked(group):
            stored = self._read(group)
            missing = {tp: int(o) for tp, o in offsets.items() if tp not in stored}
            if missing:
                self._write(group, {**stored, **missing})

    def commit(self, group: str, offsetRanges: Sequence[OffsetRange]) -> None:
        """Advance every range, all or nothing.

        Consecutive ranges of one partition are chained (see ``chain_ranges``).

        Raises:
            OffsetMismatchError: A range neither continues nor repeats its stored offset,
                or ranges of a partition do not chain (nothing is written then).
        """
        with self._locked(group):
            stored = self._read(group)
            pending = check_commit(group, offsetRanges, stored)
            if pending:
                self._write(group, {**stored, **{r.topicPartition(): r.untilOffset
                                                 for r in pending}})
