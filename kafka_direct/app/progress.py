"""ProgressBar: progress of a bulk job (producing, ingesting) for people at a terminal.

On a terminal the bar redraws in place (``producing [#########.........]  45%  9000/20000
 3.1 s``); into a file or a pipe it writes a line at every tenth of the way instead, so logs
stay readable.
"""

from __future__ import annotations

import time
from types import TracebackType
from typing import TextIO

__all__ = ["ProgressBar"]


class ProgressBar:
    """A progress bar of ``total`` units.

    Args:
        total: Units of the whole job (> 0).
        label: What is being done.
        out: Where to draw.
        width: Characters of the bar.
    """

    def __init__(self, total: int, label: str, out: TextIO, width: int = 30) -> None:
        if total <= 0:
            raise ValueError(f"a progress bar needs a total > 0, got {total}")
        self.total = total
        self.label = label
        self.out = out
        self.width = width
        self.done = 0
        self._started = time.monotonic()
        isatty = getattr(out, "isatty", None)
        self._live = bool(isatty and isatty())
        self._lastTenth = -1

    def _line(self) -> str:
        fraction = min(1.0, self.done / self.total)
        filled = int(fraction * self.width)
        elapsed = time.monotonic() - self._started
        return (f"{self.label} [{'#' * filled}{'.' * (self.width - filled)}] "
                f"{fraction * 100:3.0f}%  {self.done}/{self.total}  {elapsed:.1f} s")

    def update(self, done: int) -> None:
        """Set how many units are done."""
        self.done = done
        if self._live:
            self.out.write("\r" + self._line())
            self.out.flush()
            return
        tenth = min(10, self.done * 10 // self.total)
        if tenth != self._lastTenth:
            self._lastTenth = tenth
            self.out.write(self._line() + "\n")
            self.out.flush()

    def __enter__(self) -> ProgressBar:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        if self._live:
            self.out.write("\n")
            self.out.flush()
