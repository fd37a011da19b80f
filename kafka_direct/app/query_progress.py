"""Following a running streaming query: its batches counted, its end noticed, its failure typed.

The structured ingest job (:mod:`~kafka_direct.app.structured_ingest`) starts its query and
hands it to :func:`follow`, which polls the query's progress reports into a
:class:`QueryProgress` (batches and rows into the run's
:class:`~kafka_direct.app.ingest_options.IngestResult`, idle triggers counted), stops the
query after its running batch once it has been idle long enough or a stop is asked, and
raises what stopped it as the source's or the sink's typed error.

Spark reports an idle trigger (no new data) with the id of the batch that will run next and
no ``addBatch`` duration; that batch later reports again under the same id, with its rows.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any, TextIO

from kafka_direct.app.ingest_options import IngestResult
from kafka_direct.errors import KafkaDirectError, StreamingQueryFailedError

__all__ = ["POLL_S", "QueryProgress", "follow"]

logger = logging.getLogger(__name__)


class QueryProgress:
    """Counts the query's batches and rows; notices when it has been idle long enough.

    Idle is ``idleLimit`` triggers in a row that found no new offsets (as the direct
    stream's batches that read nothing): Spark reports each one when
    ``spark.sql.streaming.noDataProgressEventInterval`` is 0
    (:func:`~kafka_direct.app.structured_ingest.job_settings`), so the
    job stops right after the trigger that follows its last batch. Where Spark reports
    idle triggers less often (a setting given to spark-submit), ``idleLimit`` batch
    intervals without rows count as idle too.

    A batch's records and rows are Spark's count of the rows the query read
    (``numInputRows``), unless ``counts`` tells them: a query whose source hands on offset
    ranges reads one row per range, and its sink knows the records.
    """

    def __init__(self, result: IngestResult, idleLimit: int, batchInterval: float,
                 out: TextIO | None,
                 counts: Callable[[int], tuple[int, int] | None] | None = None) -> None:
        self.result = result
        self.counts = counts
        self.idleLimit = idleLimit
        self.batchInterval = batchInterval
        self.out = out
        self.seen = -1
        self.lastData: float | None = None  # idle time counts from the first report
        self.idleTriggers = 0  # in a row, since the last batch with rows (or the start)
        self.lastIdle: Any = None  # the idle report counted last (its timestamp)
        self.done = threading.Event()

    def _reports(self, query: Any) -> list[Any]:
        """The progress reports to look at: the last one, or all kept when some were missed.

        ``recentProgress`` has the JVM write up to a hundred reports as JSON and Python
        parse them, at every poll (five a second): more CPU than a small batch's planning.
        The last report is enough while it follows the batch counted last (a data batch
        one further, or an idle trigger reported under the id of the batch that runs next).
        """
        last = query.lastProgress
        if last is None:
            return []
        if int(last["batchId"]) <= self.seen + 1:
            return [last]
        return list(query.recentProgress)  # batches ran between two polls

    def poll(self, query: Any) -> None:
        """Count the batches ``query`` reported since the last poll; set ``done`` if idle."""
        for progress in self._reports(query):
            if self.lastData is None:
                self.lastData = time.monotonic()
            if _idle(progress):
                # An idle trigger, reported under the id of the batch that runs next: that
                # batch reports again, with its rows, when it runs.
                at = progress.get("timestamp")
                if at is not None and at != self.lastIdle:
                    self.lastIdle = at
                    self.idleTriggers += 1
                continue
            batch = int(progress["batchId"])
            if batch <= self.seen:
                continue
            self.seen = batch
            counted = self.counts(batch) if self.counts is not None else None
            if counted is not None:
                records, rows = counted
            else:
                records = rows = int(progress.get("numInputRows") or 0)
            self.result.batches += 1
            self.result.records += records
            self.result.rowsWritten += rows
            if records:
                self.lastData = time.monotonic()
                self.idleTriggers = 0
            else:  # nothing read: Spark's count, or a plan that moved no offset
                self.idleTriggers += 1
            if self.out is not None:
                durations = progress.get("durationMs") or {}
                self.out.write(f"batch {batch}: {records} records in "
                               f"{durations.get('triggerExecution', 0)} ms  total "
                               f"{self.result.rowsWritten}\n")
                self.out.flush()
        if self.lastData is None:  # still starting: its first batch has not ended
            return
        idleFor = time.monotonic() - self.lastData
        if not self.idleLimit or (self.idleTriggers < self.idleLimit
                                  and idleFor < self.idleLimit * self.batchInterval):
            return
        # Asked only now: a status costs the JVM two gateway calls and a JSON text, and
        # the job polls five times a second.
        status = query.status
        if not status.get("isDataAvailable") and not status.get("isTriggerActive"):
            self.done.set()


#: How often the job looks at its query (seconds) when nothing woke it sooner.
POLL_S = 0.2

#: How long an idle trigger's report is waited for once Spark said the trigger found no
#: data (seconds), before the job looks anyway.
_REPORT_WAIT_S = 0.5


def _idle(progress: Any) -> bool:
    """Whether a progress report is an idle trigger's: Spark added no batch."""
    return "addBatch" not in (progress.get("durationMs") or {})


def _idle_report(query: Any) -> Any:
    """When the query's last report was made, if it is an idle trigger's; else None."""
    last = query.lastProgress
    if last is None or not _idle(last):
        return None
    return last.get("timestamp")


def follow(query: Any, progress: QueryProgress, stopRequested: threading.Event,
           name: str, pause: Callable[[], None] | None = None,
           endsByItself: bool = False) -> None:
    """Follow ``query`` until it ends, the job has been idle long enough, or a stop is asked.

    The job looks at the query's progress every :data:`POLL_S` seconds, and at once when
    a trigger finds no new data (:func:`_wake_on_idle`): the job's stop after its last
    batch comes right after the trigger that follows it, not at the next look (0.1 s later
    on average). A stop, asked or idle, waits for the running batch: ``pause`` first keeps
    any later batch from starting (the source's ``pauseFile``), so the wait ends with the
    running batch even where the next one would follow at once (``Trigger.AvailableNow``,
    or batches longer than the interval); the query is then stopped between triggers.

    Args:
        query: The running query.
        progress: Where its batches are counted; says when the job has been idle enough.
        stopRequested: Set when the job is asked to stop (after the running batch).
        name: The query's name, for the error of a query that failed untyped.
        pause: Makes the query's source admit no new offsets; None: the stop waits for a
            moment between triggers.
        endsByItself: The query ends at its first trigger that admits nothing
            (``Trigger.AvailableNow``): once paused, the stop waits for that end.

    Raises:
        KafkaDirectError: What stopped the query (see :func:`_raise_failure`).
    """
    woken = threading.Event()
    _wake_on_idle(query, woken)
    while query.isActive:
        progress.poll(query)
        if progress.done.is_set() or stopRequested.is_set():
            _stop_after_running_batch(query, pause, endsByItself)
            break
        woken.wait(POLL_S)
        woken.clear()
    progress.poll(query)
    _raise_failure(query, query.exception(), name)


def _wake_on_idle(query: Any, woken: threading.Event) -> threading.Thread:
    """Set ``woken`` each time a trigger of ``query`` finds no new data, and when it ends.

    Spark's ``processAllAvailable`` returns once a trigger after its call found no new
    offsets, or the query ended; a thread of its own waits in it, again and again. With
    records arriving at every trigger it never returns: the job then looks at its query
    at its own pace only. It changes nothing in the query (Spark's tests wait with it).
    """

    def wait_for_idle_triggers() -> None:
        try:
            while query.isActive:
                before = _idle_report(query)
                query.processAllAvailable()
                # Spark wakes its waiters before it reports the trigger: the report follows
                # within moments, and the job's look must find it.
                deadline = time.monotonic() + _REPORT_WAIT_S
                while query.isActive and time.monotonic() < deadline:
                    at = _idle_report(query)
                    if at is not None and at != before:
                        break
                    time.sleep(0.005)
                woken.set()
        except Exception:  # the query failed, or the JVM is gone: the job finds out itself
            logger.debug("no more waiting for idle triggers", exc_info=True)
        finally:
            woken.set()

    thread = threading.Thread(target=wait_for_idle_triggers, name="kafka-direct-idle-wait",
                              daemon=True)
    thread.start()
    return thread


def _stop_after_running_batch(query: Any, pause: Callable[[], None] | None,
                              endsByItself: bool, timeout: float = 600.0) -> None:
    # Spark's stop() interrupts a running batch (the sink then aborts it and the next run
    # reads it again); waiting for the trigger to end first keeps its work. Without the
    # pause a batch that follows at once would keep the trigger active to the backlog's end.
    paused = False
    if pause is not None:
        try:
            pause()
            paused = True
        except OSError:
            logger.warning("the query's source could not be paused: its stop waits for a "
                           "moment between triggers", exc_info=True)
    # A query that ends by itself once paused is left to: between its batches Spark has
    # no trigger active for a moment while the next one may already ask the source.
    waitForEnd = paused and endsByItself
    deadline = time.monotonic() + timeout
    while query.isActive and (waitForEnd or _busy(query.status, paused)):
        if time.monotonic() >= deadline:
            break
        time.sleep(0.05)
    query.stop()


def _busy(status: Any, paused: bool) -> bool:
    """Whether a stop now would interrupt the query: a trigger runs, or the query starts.

    The start counts only with the source paused (``paused``): a stop while Spark starts
    the source's planner process leaves that process a traceback (its socket gone), and a
    paused first trigger admits nothing, so waiting for the start costs the start only.
    """
    if status.get("isTriggerActive"):
        return True
    # Spark's own words before the first trigger ("Initializing StreamExecution",
    # "Initializing sources").
    return paused and str(status.get("message", "")).startswith("Initializing")


def _raise_failure(query: Any, failure: BaseException | None, name: str) -> None:
    """Raise what stopped ``query``: its typed error when it carries one.

    Args:
        query: The streaming query.
        failure: How the query ended (``query.exception()``, or what ``awaitTermination``
            raised); None when it did not fail.
        name: The query's name, for the error of a query that failed untyped.

    Raises:
        KafkaDirectError: The source's or the sink's typed error, recovered from the text
            of Spark's exception.
        StreamingQueryFailedError: The query failed with an error of neither (redacted).
    """
    if failure is None:
        failure = query.exception()
    if failure is None:
        return
    from kafka_direct.task_errors import carried_error

    carried = carried_error(failure)
    if isinstance(carried, KafkaDirectError):
        raise carried
    from kafka_direct.redaction import redact_text

    raise StreamingQueryFailedError(
        f"the streaming query {name} failed: {redact_text(str(failure))}",
        query=name) from None
