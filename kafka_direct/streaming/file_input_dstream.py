"""FileInputDStream: each batch, the files that newly appeared in a directory (Spark's).

As Spark's ``FileInputDStream`` (``StreamingContext.textFileStream`` and
``binaryRecordsStream``): the batch of time ``t`` takes every file of the directory (or of
every directory a glob pattern matches) whose modification time is in ``(threshold, t]`` and
that no remembered batch took, where ``threshold`` is the later of the trailing end of the
remember window (``t`` minus ``spark.streaming.fileStream.minRememberDuration``, default
``spark.streaming.minRememberDuration``, 60 s, rounded up to whole batches) and, as Spark's
default ``newFilesOnly=true``, the clock's time when the stream was created: files already
there are ignored. Hidden files (names starting with ``.`` or ``_``) and directories are
ignored. Files must appear whole (written elsewhere and moved in): a file is read once, when
its batch runs, and never again, even if it is changed later.

The batch → files mapping of the remembered batches, and the creation time, are the stream's
checkpoint data: a recovered driver regenerates pending batches with the very same files,
and the batches of its down time take the files that appeared meanwhile, none twice. The
earlier remembered batches are read again, with their files, when a recovered stateful or
windowed stream asks for them (as Spark, which restores them as the stream's RDDs).

The directory is read with Python's file functions, so it must be local (a path or a
``file:`` URI); the batch's RDD reads the files with ``sc.textFile`` (lines) or
``sc.binaryRecords`` (fixed-length byte records), as ``file:`` paths.
"""

from __future__ import annotations

import fnmatch
import glob
import logging
import os
from typing import TYPE_CHECKING, Any

from typing_extensions import override

from kafka_direct.errors import CheckpointError, ConfigurationError
from kafka_direct.streaming.durations import conf_time_ms
from kafka_direct.streaming.input_dstream import InputDStream

if TYPE_CHECKING:
    from kafka_direct.streaming.context import StreamingContext

__all__ = ["FileInputDStream", "num_batches_to_remember"]

logger = logging.getLogger(__name__)

#: Spark's spark.streaming.minRememberDuration default (60 s).
_DEFAULT_MIN_REMEMBER_MS = 60_000
_GLOB_CHARS = frozenset("*?[")


def num_batches_to_remember(batchDuration: int, minRememberDuration: int) -> int:
    """Spark's ``calculateNumBatchesToRemember``: the remember duration in whole batches."""
    return max(1, -(-minRememberDuration // batchDuration))


def is_hidden(name: str) -> bool:
    """Whether a file name is hidden from file streams (Hadoop's: ``.`` or ``_`` first)."""
    return name.startswith((".", "_"))


def _local_path(directory: str) -> str:
    if directory.startswith("file://"):
        directory = directory[len("file://"):]
    elif directory.startswith("file:"):
        directory = directory[len("file:"):]
    elif "://" in directory:
        raise ConfigurationError(
            f"file streams read local directories only (a path or a file: URI); got "
            f"{directory!r}")
    return os.path.abspath(os.path.expanduser(directory))


class FileInputDStream(InputDStream):
    """The files that appear in a directory, read as text lines or fixed-length records.

    Build it with :meth:`StreamingContext.textFileStream` or
    :meth:`StreamingContext.binaryRecordsStream`.

    Args:
        ssc: The StreamingContext.
        directory: A local directory (path or ``file:`` URI), or a glob pattern of
            directories.
        recordLength: None for text lines; else the length in bytes of each binary record.
        newFilesOnly: Ignore the files already there when the stream is created (Spark's
            default); False takes every file of the remember window.

    Raises:
        ConfigurationError: ``directory`` is not a non-empty string of a local directory,
            ``recordLength`` is not a positive int, or the remember setting is malformed.
    """

    def __init__(self, ssc: StreamingContext, directory: str, recordLength: int | None = None,
                 newFilesOnly: bool = True) -> None:
        if not isinstance(directory, str | os.PathLike) or not str(directory).strip():
            raise ConfigurationError(
                f"a file stream needs a directory (a non-empty path), got {directory!r}")
        if recordLength is not None and (isinstance(recordLength, bool)
                                         or not isinstance(recordLength, int)
                                         or recordLength <= 0):
            raise ConfigurationError(
                f"recordLength must be a positive number of bytes, got {recordLength!r}")
        path = _local_path(os.fspath(directory))
        minRemember = conf_time_ms(
            ssc._conf, "spark.streaming.fileStream.minRememberDuration",
            conf_time_ms(ssc._conf, "spark.streaming.minRememberDuration",
                         _DEFAULT_MIN_REMEMBER_MS))
        super().__init__(ssc)
        self.directory = path
        self.recordLength = recordLength
        #: Files modified at or before this time (ms) are never taken (newFilesOnly).
        self.initialModTimeIgnoreThreshold = ssc.clock.getTimeMillis() if newFilesOnly else 0
        self.durationToRemember = self.slideDuration * num_batches_to_remember(
            self.slideDuration, minRemember)
        self.remember(self.durationToRemember)
        #: The files each remembered batch took, by batch time.
        self.batchTimeToSelectedFiles: dict[int, list[str]] = {}
        self.recentlySelectedFiles: set[str] = set()

    @property
    @override
    def name(self) -> str:
        kind = "text" if self.recordLength is None else f"binary records ({self.recordLength} B)"
        return f"file stream [{self.inputStreamId}] of {kind} in {self.directory}"

    @property
    @override
    def stableIdentity(self) -> str:
        """``files text|binary <directory>``: what it reads (the record length may change)."""
        return f"files {'text' if self.recordLength is None else 'binary'} {self.directory}"

    # -- finding files --------------------------------------------------------------------

    def _directories(self) -> list[str]:
        if _GLOB_CHARS & set(self.directory):
            return sorted(d for d in glob.glob(self.directory) if os.path.isdir(d))
        return [self.directory]

    def _ownsFile(self, path: str) -> bool:
        parent = os.path.dirname(path)
        if _GLOB_CHARS & set(self.directory):
            return fnmatch.fnmatchcase(parent, self.directory)
        return parent == self.directory

    def findNewFiles(self, currentTime: int) -> list[str]:
        """The files batch ``currentTime`` takes (Spark's ``findNewFiles``), sorted by path."""
        threshold = max(self.initialModTimeIgnoreThreshold,
                        currentTime - self.durationToRemember)
        found: list[str] = []
        for directory in self._directories():
            try:
                entries = list(os.scandir(directory))
            except FileNotFoundError:
                logger.warning("%s: directory %s does not exist (yet)", self.name, directory)
                continue
            for entry in entries:
                if is_hidden(entry.name) or entry.path in self.recentlySelectedFiles:
                    continue
                try:
                    if not entry.is_file():
                        continue
                    modTime = entry.stat().st_mtime_ns // 1_000_000
                except FileNotFoundError:  # removed meanwhile
                    continue
                if threshold < modTime <= currentTime:
                    found.append(entry.path)
        return sorted(found)

    # -- batches --------------------------------------------------------------------------

    @override
    def compute(self, validTime: int) -> Any:
        with self._lock:
            files = self.batchTimeToSelectedFiles.get(validTime)
            if files is None:  # a new batch (not one restored from a checkpoint)
                files = self.findNewFiles(validTime)
                self.batchTimeToSelectedFiles[validTime] = files
                self.recentlySelectedFiles.update(files)
        if files:
            logger.info("New files at time %d ms:\n%s", validTime, "\n".join(files))
        self.reportInfo(validTime, 0, {"files": list(files), "Description": "\n".join(files)})
        return self.filesToRDD(files)

    def filesToRDD(self, files: list[str]) -> Any:
        """The batch's RDD: the files' lines, or their records; an empty RDD for no file."""
        sc = self.ssc.sparkContext
        if not files:
            return sc.emptyRDD()
        uris = ["file:" + f for f in files]
        if self.recordLength is None:
            return sc.textFile(",".join(uris))
        rdds = [sc.binaryRecords(uri, self.recordLength) for uri in uris]
        return rdds[0] if len(rdds) == 1 else sc.union(rdds)

    @override
    def clearMetadata(self, time: int) -> None:
        super().clearMetadata(time)
        with self._lock:
            threshold = time - (self.rememberDuration or 0)
            old = [t for t in self.batchTimeToSelectedFiles if t < threshold]
            for t in old:
                self.recentlySelectedFiles.difference_update(
                    self.batchTimeToSelectedFiles.pop(t))
        if old:
            logger.debug("%s forgot the files of %d batches", self.name, len(old))

    # -- checkpoint data ------------------------------------------------------------------

    @override
    def checkpointState(self) -> dict[str, Any]:
        state = super().checkpointState()
        with self._lock:
            state["batches"] = {str(t): list(files) for t, files
                                in sorted(self.batchTimeToSelectedFiles.items())}
        state["initialModTimeIgnoreThreshold"] = self.initialModTimeIgnoreThreshold
        return state

    @override
    def restoreCheckpointState(self, state: dict[str, Any]) -> None:
        """Take back the remembered batches' files, once each is known to be the stream's.

        Raises:
            CheckpointError: A file is not in the stream's directory (the stream was named
                with ``setCheckpointId`` and its directory changed).
        """
        batches = {int(t): [str(f) for f in files]
                   for t, files in state.get("batches", {}).items()}
        foreign = sorted({f for files in batches.values() for f in files
                          if not self._ownsFile(f)})
        if foreign:
            raise CheckpointError(
                f"the checkpoint gives {self.name} (checkpoint id "
                f"{self.checkpointId or self.stableIdentity!r}) files outside its directory: "
                f"{', '.join(foreign[:5])}{' ...' if len(foreign) > 5 else ''}; recover with "
                "the stream reading the directory it read when the checkpoint was written, or "
                "delete the checkpoint directory to start afresh",
                directory=self.ssc.checkpointDir or "", stream=self.name)
        super().restoreCheckpointState(state)
        with self._lock:
            self.batchTimeToSelectedFiles = batches
            self.recentlySelectedFiles = {f for files in batches.values() for f in files}
            threshold = state.get("initialModTimeIgnoreThreshold")
            if threshold is not None:
                # The first run's start: files that appeared while the driver was down are new.
                self.initialModTimeIgnoreThreshold = int(threshold)
