"""Metadata checkpoints: data, not code, so they survive changes to the application.

A checkpoint is JSON: the batch interval, the zero time, the checkpoint time, the batches
not yet done (pending), and each stream's state (for an input stream its per-batch inputs,
such as Kafka offset ranges; for a stateful stream the files of its checkpointed RDDs). On
recovery the application's setup function rebuilds the graph, and the checkpoint gives the
streams their state back.

Format 2 keys each stream's state by the stream's stable identity (see
:mod:`kafka_direct.streaming.dstream_graph`), so the state finds its stream whatever order
the rebuilt application creates streams in. Format 1 keyed it by creation order
(``"<id>:<class>"``); such checkpoints are still read, but only by an application with the
very same streams (``DStreamGraph.restoreCheckpointState``).

Files are ``checkpoint-<time ms>`` in the checkpoint directory, written atomically: to a
temporary file, then renamed over the target after the previous target became
``checkpoint-<time>.bk``. The newest ten checkpoints are kept. Reading takes the newest file
that parses; a damaged one is skipped with a warning.
"""

from __future__ import annotations

import json
import logging
import os
import re
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kafka_direct.errors import CheckpointError

__all__ = ["Checkpoint", "CheckpointReader", "CheckpointWriter"]

logger = logging.getLogger(__name__)

FORMAT_VERSION = 2
#: Versions this code reads: 1 keyed stream state by creation order, 2 by stable identity.
READABLE_VERSIONS = (1, 2)
KEEP = 10
_NAME = re.compile(r"^checkpoint-(\d+)(\.bk)?$")


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """The driver's state at one batch time.

    Attributes:
        checkpointTime: The batch time it was taken at (epoch ms).
        batchDuration: The batch interval (ms).
        zeroTime: The graph's zero time (ms).
        pendingTimes: Batches generated but not completed when it was taken.
        streams: Each stream's state: in format 2 keyed by the stream's stable identity,
            each ``{"class": <stream class>, "state": <its state>}``; in format 1 keyed
            ``"<id>:<class>"`` (creation order), each the state itself.
        appName: Spark application name, for people.
        formatVersion: The format of ``streams`` (written as ``version``).
    """

    checkpointTime: int
    batchDuration: int
    zeroTime: int
    pendingTimes: tuple[int, ...] = ()
    streams: dict[str, Any] = field(default_factory=dict)
    appName: str = ""
    formatVersion: int = FORMAT_VERSION

    def to_json(self) -> str:
        """The checkpoint as JSON text."""
        return json.dumps({
            "version": self.formatVersion, "checkpointTime": self.checkpointTime,
            "batchDuration": self.batchDuration, "zeroTime": self.zeroTime,
            "pendingTimes": list(self.pendingTimes), "streams": self.streams,
            "appName": self.appName}, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Checkpoint:
        """Parse JSON written by :meth:`to_json`.

        Raises:
            ValueError: The text is not a checkpoint of a version this code reads.
        """
        data = json.loads(text)
        if not isinstance(data, dict) or data.get("version") not in READABLE_VERSIONS:
            versions = " or ".join(map(str, READABLE_VERSIONS))
            raise ValueError(f"not a checkpoint of version {versions}")
        return cls(int(data["checkpointTime"]), int(data["batchDuration"]),
                   int(data["zeroTime"]), tuple(int(t) for t in data.get("pendingTimes", [])),
                   dict(data.get("streams", {})), str(data.get("appName", "")),
                   int(data["version"]))


def checkpoint_files(directory: Path) -> list[Path]:
    """Checkpoint files of a directory, newest first (a backup after its main file)."""
    found = []
    for path in directory.iterdir():
        match = _NAME.match(path.name)
        if match:
            found.append((int(match.group(1)), 1 if match.group(2) else 0, path))
    found.sort(key=lambda item: (-item[0], item[1]))
    return [path for _, _, path in found]


class CheckpointWriter:
    """Writes checkpoints atomically into a directory, keeping the newest ten.

    Args:
        directory: The checkpoint directory (created if missing).
    """

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self.latestCheckpointTime: int | None = None

    def write(self, checkpoint: Checkpoint) -> Path:
        """Write ``checkpoint``; returns its file."""
        with self._lock:
            if (self.latestCheckpointTime is not None
                    and checkpoint.checkpointTime < self.latestCheckpointTime):
                logger.info("skipping checkpoint of %d ms: one of %d ms is written already",
                            checkpoint.checkpointTime, self.latestCheckpointTime)
                return self.directory / f"checkpoint-{self.latestCheckpointTime}"
            target = self.directory / f"checkpoint-{checkpoint.checkpointTime}"
            backup = self.directory / f"checkpoint-{checkpoint.checkpointTime}.bk"
            descriptor, temp = tempfile.mkstemp(prefix=".checkpoint-", dir=self.directory)
            try:
                with os.fdopen(descriptor, "w") as out:
                    out.write(checkpoint.to_json())
                    out.flush()
                    os.fsync(out.fileno())
                if target.exists():
                    os.replace(target, backup)
                os.replace(temp, target)
            except BaseException:
                Path(temp).unlink(missing_ok=True)
                raise
            self.latestCheckpointTime = checkpoint.checkpointTime
            logger.info("Checkpoint for time %d ms saved to file '%s'",
                        checkpoint.checkpointTime, target)
            self._delete_old()
            return target

    def _delete_old(self) -> None:
        times = sorted({int(m.group(1)) for p in self.directory.iterdir()
                        if (m := _NAME.match(p.name))}, reverse=True)
        for old in times[KEEP:]:
            for suffix in ("", ".bk"):
                (self.directory / f"checkpoint-{old}{suffix}").unlink(missing_ok=True)


class CheckpointReader:
    """Finds the newest readable checkpoint of a directory."""

    @staticmethod
    def read(directory: str | os.PathLike[str]) -> Checkpoint | None:
        """The newest checkpoint that parses, or None when the directory has none.

        Raises:
            CheckpointError: The directory cannot be listed, or it has checkpoint files and
                none of them can be read.
        """
        path = Path(directory)
        if not path.exists():
            return None
        try:
            files = checkpoint_files(path)
        except OSError as error:
            raise CheckpointError(
                f"cannot list checkpoint directory {path}: {error}; fix its permissions or "
                "use another directory", directory=str(path)) from error
        failures = []
        for candidate in files:
            try:
                checkpoint = Checkpoint.from_json(candidate.read_text())
            except (OSError, ValueError, KeyError, TypeError) as error:
                logger.warning("Error reading checkpoint from file %s: %s; trying an older one",
                               candidate, error)
                failures.append(f"{candidate.name}: {error}")
                continue
            logger.info("Checkpoint successfully loaded from %s", candidate)
            return checkpoint
        if failures:
            raise CheckpointError(
                f"Failed to read checkpoint from directory {path}: every checkpoint file is "
                f"damaged ({'; '.join(failures[:3])}); delete the directory to start afresh",
                directory=str(path))
        return None
