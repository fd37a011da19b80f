"""BatchLogListener: one concise line per completed batch, for people at a terminal.

``batch 12:00:04  records 3000  scheduling 0.01 s  processing 0.42 s  total 0.43 s  rate 1500/s``

The rate is the batch's records over the batch interval (what the stream is taking in); a
failed batch names its first failed output operation. Lines go to the module's logger at
INFO, and also to ``out`` (a text stream) when one is given.
"""

from __future__ import annotations

import datetime
import logging
from collections.abc import Callable
from typing import TextIO

from kafka_direct.streaming.batch_info import BatchInfo
from kafka_direct.streaming.listener import StreamingListener, StreamingListenerBatchCompleted

__all__ = ["BatchLogListener", "format_batch"]

logger = logging.getLogger(__name__)


def _seconds(milliseconds: int | None) -> str:
    return "-" if milliseconds is None else f"{milliseconds / 1000:.2f} s"


def format_batch(info: BatchInfo, batchSeconds: float) -> str:
    """The line of a completed batch."""
    when = datetime.datetime.fromtimestamp(info.batchTime / 1000).strftime("%H:%M:%S.%f")[:-3]
    rate = info.numRecords / batchSeconds if batchSeconds > 0 else 0.0
    line = (f"batch {when}  records {info.numRecords}  "
            f"scheduling {_seconds(info.schedulingDelay)}  "
            f"processing {_seconds(info.processingDelay)}  total {_seconds(info.totalDelay)}  "
            f"rate {rate:.0f}/s")
    failed = [op for _, op in sorted(info.outputOperationInfos.items())
              if op.failureReason is not None]
    if failed:
        reason = failed[0].failureReason or ""
        line += f"  FAILED {failed[0].name}: {reason.splitlines()[0] if reason else ''}"
    return line


class BatchLogListener(StreamingListener):
    """Logs (and optionally prints) one line per completed batch.

    Args:
        batchSeconds: The stream's batch interval, for the rate.
        out: Also write each line here (e.g. ``sys.stdout``).
        suffix: Adds the application's own figures to a batch's line (rows written...).
    """

    def __init__(self, batchSeconds: float, out: TextIO | None = None,
                 suffix: Callable[[BatchInfo], str] | None = None) -> None:
        self.batchSeconds = batchSeconds
        self.out = out
        self.suffix = suffix

    def onBatchCompleted(self, batchCompleted: StreamingListenerBatchCompleted) -> None:
        """Log the batch's line."""
        info = batchCompleted.batchInfo
        line = format_batch(info, self.batchSeconds)
        if self.suffix is not None:
            line += self.suffix(info)
        logger.info("%s", line)
        if self.out is not None:
            self.out.write(line + "\n")
            self.out.flush()
