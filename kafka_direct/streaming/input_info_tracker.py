"""InputInfoTracker: per batch, what each input stream brought in."""

from __future__ import annotations

import logging
import threading

from kafka_direct.errors import StreamingStateError
from kafka_direct.streaming.batch_info import StreamInputInfo

__all__ = ["InputInfoTracker"]

logger = logging.getLogger(__name__)


class InputInfoTracker:
    """Batch time -> input stream id -> :class:`StreamInputInfo`."""

    def __init__(self) -> None:
        self._infos: dict[int, dict[int, StreamInputInfo]] = {}
        self._lock = threading.Lock()

    def reportInfo(self, batchTime: int, inputInfo: StreamInputInfo) -> None:
        """Record what an input stream brought into a batch (once per stream and batch)."""
        with self._lock:
            infos = self._infos.setdefault(batchTime, {})
            if inputInfo.inputStreamId in infos:
                raise StreamingStateError(
                    f"Input stream {inputInfo.inputStreamId} for batch {batchTime} is already "
                    "added into InputInfoTracker, this is an illegal state")
            infos[inputInfo.inputStreamId] = inputInfo

    def getInfo(self, batchTime: int) -> dict[int, StreamInputInfo]:
        """The infos of a batch (empty if none was reported)."""
        with self._lock:
            return dict(self._infos.get(batchTime, {}))

    def cleanup(self, batchThreshTime: int) -> None:
        """Forget batches before ``batchThreshTime``."""
        with self._lock:
            old = [t for t in self._infos if t < batchThreshTime]
            for t in old:
                del self._infos[t]
        if old:
            logger.info("remove old batch metadata: %s", " ".join(f"{t} ms" for t in old))
