"""A planning process's long-lived heap, kept out of the garbage collector's full passes.

A full collection walks every object the collector tracks. A streaming driver holds about
90,000 of them once Spark, Py4J and the streams' clients are loaded, and the thread that
crosses the collector's threshold pays for the walk: every several batches, the generating
thread, 40-50 ms of a batch's planning on a busy machine. Those objects live as long as the
stream, so walking them finds nothing to free. The same holds in the Python process where
Spark runs a structured source's planning for the query's life.

:func:`freeze_at_start` moves them to the permanent generation (``gc.freeze()``): later
collections walk only what batches make. Frozen objects are still freed when their last
reference goes; only cycles among them wait. :func:`thaw_at_stop` lets them back into the
collections when the stream stops, so a process that starts many (a test suite) does not
keep each one's cycles. A freeze made before (the application's own) is left in place: then
neither freezes nor thaws. The direct stream's engine freezes when its context starts; the
structured source at its triggers' planning.
"""

from __future__ import annotations

import gc
import logging
import threading

__all__ = ["freeze_at_start", "thaw_at_stop"]

logger = logging.getLogger(__name__)

_lock = threading.Lock()
#: None until decided; then "ours" (this module froze, and thaws) or "theirs" (a freeze
#: was in place already: left to whoever made it). Decided once: ``gc.get_freeze_count()``
#: walks every frozen object (milliseconds at 100,000), too slow to ask at each trigger.
_state: str | None = None


def freeze_at_start() -> None:
    """Freeze every object alive now, unless a freeze is in place already."""
    global _state
    with _lock:
        if _state is not None:  # decided: the usual case, at every trigger after the first
            return
        if gc.get_freeze_count():
            _state = "theirs"
            return
        gc.freeze()
        _state = "ours"
        logger.debug("the long-lived heap is frozen out of garbage collections")


def thaw_at_stop() -> None:
    """Undo :func:`freeze_at_start`'s freeze (nothing if it made none)."""
    global _state
    with _lock:
        if _state == "ours":
            gc.unfreeze()
        _state = None
