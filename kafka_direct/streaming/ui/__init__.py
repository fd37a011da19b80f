"""The streaming statistics page, its JSON and Prometheus metrics (see :mod:`.server`)."""

from __future__ import annotations

from kafka_direct.streaming.ui.input_status import InputStatusBoard
from kafka_direct.streaming.ui.progress_listener import (
    ProgressSnapshot,
    StreamingJobProgressListener,
)
from kafka_direct.streaming.ui.server import StreamingUI

__all__ = ["InputStatusBoard", "ProgressSnapshot", "StreamingJobProgressListener",
           "StreamingUI"]
