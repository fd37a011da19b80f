"""The structured ingest job around its query: batch accounting from Spark's progress reports,
and Spark's engine log quiet only while the job's query runs.

Spark reports an idle trigger (no new data) with the id of the batch that will run next and
no ``addBatch`` duration; that batch later reports again under the same id, with its rows.
"""

import io
import threading
import time

from kafka_direct.app import query_progress
from kafka_direct.app.ingest_options import IngestResult
from kafka_direct.app.query_progress import QueryProgress

RAN = {"addBatch": 5, "latestOffset": 1, "triggerExecution": 9}
IDLE = {"latestOffset": 1, "triggerExecution": 1}


class FakeQuery:
    def __init__(self):
        self.reports = []
        self.listed = 0  # how often every kept report was asked for
        self.statusAsked = 0  # how often the query's status was asked for

    @property
    def status(self):
        self.statusAsked += 1
        return {"isDataAvailable": False, "isTriggerActive": False}

    @property
    def recentProgress(self):
        self.listed += 1
        return list(self.reports)

    @property
    def lastProgress(self):
        return self.reports[-1] if self.reports else None

    def report(self, batch, rows, durations, at=None):
        report = {"batchId": batch, "numInputRows": rows, "durationMs": durations}
        if at is not None:  # Spark's reports all have one; the older tests leave it out
            report["timestamp"] = at
        self.reports.append(report)


def test_a_batch_reported_idle_first_counts_when_it_runs():
    query, result, out = FakeQuery(), IngestResult(), io.StringIO()
    progress = QueryProgress(result, idleLimit=1000, batchInterval=0.5, out=out)
    query.report(0, 5, RAN)
    query.report(1, 7, RAN)
    progress.poll(query)
    query.report(2, 0, IDLE)
    query.report(2, 0, IDLE)
    progress.poll(query)
    query.report(2, 3, RAN)
    query.report(3, 0, IDLE)
    progress.poll(query)
    assert (result.batches, result.records, result.rowsWritten) == (3, 15, 15)
    assert [line.split(":")[0] for line in out.getvalue().splitlines()] == [
        "batch 0", "batch 1", "batch 2"]


def test_a_batchs_counts_come_from_its_plan_when_spark_counts_ranges():
    # The source hands on offset ranges: Spark's numInputRows counts ranges. The counts
    # given win; where they are unknown (None: the database did not answer), Spark's.
    query, result, out = FakeQuery(), IngestResult(), io.StringIO()
    known = {0: (10_000, 9_998), 1: None}
    progress = QueryProgress(result, idleLimit=1000, batchInterval=0.5, out=out,
                             counts=known.__getitem__)
    query.report(0, 2, RAN)  # two ranges
    query.report(1, 3, RAN)
    progress.poll(query)
    assert (result.batches, result.records, result.rowsWritten) == (2, 10_003, 10_001)
    assert out.getvalue().splitlines()[0].startswith("batch 0: 10000 records in")


def test_a_batch_whose_plan_moved_no_offset_counts_as_idle():
    # A batch that only binds its plan (a new query over a store that has everything):
    # Spark counts its one empty range, the plan no offset, so it counts toward
    # --stop-after-idle as an idle trigger.
    query, result = FakeQuery(), IngestResult()
    progress = QueryProgress(result, idleLimit=1, batchInterval=100.0, out=None,
                             counts=lambda batch: (0, 0))
    query.report(0, 1, RAN)
    progress.poll(query)
    assert progress.done.is_set() and result.records == 0


def test_rows_after_an_idle_report_keep_the_job_from_stopping_as_idle(monkeypatch):
    clock = [100.0]
    monkeypatch.setattr("kafka_direct.app.query_progress.time.monotonic", lambda: clock[0])
    query, result = FakeQuery(), IngestResult()
    progress = QueryProgress(result, idleLimit=4, batchInterval=0.5, out=None)  # idle after 2 s
    query.report(0, 5, RAN)
    progress.poll(query)
    clock[0] += 1.5
    query.report(1, 0, IDLE)
    progress.poll(query)
    clock[0] += 1.0
    query.report(1, 4, RAN)  # data again: the idle time starts over
    progress.poll(query)
    assert not progress.done.is_set()
    clock[0] += 2.5
    progress.poll(query)
    assert progress.done.is_set()


def test_a_batch_reported_twice_after_it_ran_counts_once():
    query, result = FakeQuery(), IngestResult()
    progress = QueryProgress(result, idleLimit=0, batchInterval=0.5, out=None)
    query.report(0, 5, RAN)
    progress.poll(query)
    progress.poll(query)  # recentProgress still holds it
    assert (result.batches, result.records) == (1, 5)




def test_a_poll_after_each_batch_reads_the_last_report_only():
    # Listing the kept reports costs the JVM a JSON text of each of up to a hundred.
    query, result = FakeQuery(), IngestResult()
    progress = QueryProgress(result, idleLimit=0, batchInterval=0.5, out=None)
    progress.poll(query)  # nothing reported yet
    for batch in range(5):
        query.report(batch, 0, IDLE)
        progress.poll(query)
        query.report(batch, 10, RAN)
        progress.poll(query)
        progress.poll(query)
    assert (result.batches, result.records, query.listed) == (5, 50, 0)


def test_batches_run_between_two_polls_are_all_counted():
    query, result = FakeQuery(), IngestResult()
    progress = QueryProgress(result, idleLimit=0, batchInterval=0.5, out=None)
    query.report(0, 1, RAN)
    query.report(1, 2, RAN)
    progress.poll(query)
    query.report(2, 4, RAN)
    query.report(3, 0, IDLE)
    query.report(3, 8, RAN)
    query.report(4, 0, IDLE)
    progress.poll(query)
    assert (result.batches, result.records) == (4, 15)
    assert query.listed == 2


def test_the_status_is_asked_only_once_the_job_may_have_been_idle_long_enough(monkeypatch):
    # Each status costs the JVM two gateway calls and a JSON text, five times a second:
    # only the idle stop needs it, and only once the idle time is up.
    clock = [100.0]
    monkeypatch.setattr("kafka_direct.app.query_progress.time.monotonic", lambda: clock[0])
    query, result = FakeQuery(), IngestResult()
    never = QueryProgress(result, idleLimit=0, batchInterval=0.5, out=None)
    query.report(0, 5, RAN)
    for _ in range(3):
        never.poll(query)
        clock[0] += 10
    assert query.statusAsked == 0
    progress = QueryProgress(IngestResult(), idleLimit=4, batchInterval=0.5, out=None)
    progress.poll(query)
    clock[0] += 1.9
    progress.poll(query)
    assert query.statusAsked == 0 and not progress.done.is_set()
    clock[0] += 0.1  # idle for 2 s: four batch intervals
    progress.poll(query)
    assert query.statusAsked == 1 and progress.done.is_set()


def test_an_idle_trigger_after_the_last_batch_stops_the_job_at_once(monkeypatch):
    # As the direct stream's: N triggers in a row that found nothing end the job, without
    # waiting N batch intervals more (Spark reports each idle trigger: the job sets
    # spark.sql.streaming.noDataProgressEventInterval to 0).
    clock = [100.0]
    monkeypatch.setattr("kafka_direct.app.query_progress.time.monotonic", lambda: clock[0])
    query, result = FakeQuery(), IngestResult()
    progress = QueryProgress(result, idleLimit=2, batchInterval=10.0, out=None)
    query.report(0, 5, RAN, at="t0")
    progress.poll(query)
    clock[0] += 0.1
    query.report(1, 0, IDLE, at="t1")
    progress.poll(query)
    progress.poll(query)  # the same report again: one idle trigger, not two
    assert not progress.done.is_set()
    query.report(1, 0, IDLE, at="t2")
    progress.poll(query)
    assert progress.done.is_set()  # two idle triggers, 0.1 s after the last batch


def test_rows_between_idle_triggers_start_the_count_over():
    query, result = FakeQuery(), IngestResult()
    progress = QueryProgress(result, idleLimit=2, batchInterval=10.0, out=None)
    query.report(0, 5, RAN, at="t0")
    query.report(1, 0, IDLE, at="t1")
    progress.poll(query)
    query.report(1, 4, RAN, at="t2")
    progress.poll(query)
    query.report(2, 0, IDLE, at="t3")
    progress.poll(query)
    assert not progress.done.is_set()
    query.report(2, 0, IDLE, at="t4")
    progress.poll(query)
    assert progress.done.is_set()


def test_the_job_asks_spark_to_report_every_idle_trigger():
    from kafka_direct.app.structured_ingest import job_settings

    assert job_settings("local[2]", "c")[
        "spark.sql.streaming.noDataProgressEventInterval"] == "0"


class RunningQuery(FakeQuery):
    """A query whose triggers a test runs: ``processAllAvailable`` as Spark's (it returns
    once a trigger after the call found no new data, or the query ended)."""

    def __init__(self):
        super().__init__()
        self.changed = threading.Condition()
        self.active = True
        self.noNewData = False
        self.stoppedAt = None

    @property
    def isActive(self):
        return self.active

    @property
    def status(self):
        return {"isDataAvailable": False, "isTriggerActive": False}

    def trigger(self, batch, rows, at):
        if not rows:  # as Spark: its waiters are woken before the trigger is reported
            with self.changed:
                self.noNewData = True
                self.changed.notify_all()
            time.sleep(0.05)
        with self.changed:
            self.report(batch, rows, RAN if rows else IDLE, at=at)

    def processAllAvailable(self):
        with self.changed:
            self.noNewData = False
            while self.active and not self.noNewData:
                self.changed.wait()

    def awaitTermination(self, timeout):
        time.sleep(timeout)

    def stop(self):
        with self.changed:
            self.active = False
            self.stoppedAt = time.monotonic()
            self.changed.notify_all()

    def exception(self):
        return None


def test_the_trigger_that_finds_no_data_after_the_last_batch_wakes_the_job(monkeypatch):
    # Looked at only every 30 s here: the idle trigger itself must wake the job up.
    monkeypatch.setattr(query_progress, "POLL_S", 30.0)
    query, result = RunningQuery(), IngestResult()
    progress = QueryProgress(result, idleLimit=1, batchInterval=1.0, out=None)

    def stream():
        time.sleep(0.3)  # the job waits for its first look's interval by now
        query.trigger(0, 5, "t0")
        time.sleep(0.3)
        query.trigger(1, 0, "t1")
        idleAt.append(time.monotonic())

    idleAt = []
    triggers = threading.Thread(target=stream, daemon=True)
    started = time.monotonic()
    triggers.start()
    query_progress.follow(query, progress, threading.Event(), "q")
    assert query.stoppedAt is not None and idleAt
    assert query.stoppedAt - idleAt[0] < 5.0, "stopped at the next look, not at the trigger"
    assert time.monotonic() - started < 10.0
    assert (result.batches, result.records) == (1, 5)


def test_a_stop_asked_while_batches_run_is_seen_at_the_next_look(monkeypatch):
    monkeypatch.setattr(query_progress, "POLL_S", 0.05)
    query, result = RunningQuery(), IngestResult()
    progress = QueryProgress(result, idleLimit=0, batchInterval=1.0, out=None)
    query.trigger(0, 5, "t0")
    asked = threading.Event()
    threading.Timer(0.2, asked.set).start()
    query_progress.follow(query, progress, asked, "q")
    assert query.stoppedAt is not None and not query.active
    assert (result.batches, result.records) == (1, 5)


class BackToBackQuery(RunningQuery):
    """Batches one after another, as under Trigger.AvailableNow or behind a backlog: the
    trigger is active at every look, the next batch starting as the last one ends, unless
    the source is paused (then, as under AvailableNow, the query ends by itself)."""

    def __init__(self, batches):
        super().__init__()
        self.batches = batches
        self.paused = False
        self.reportedAtPause = None

    @property
    def status(self):
        return {"isDataAvailable": True, "isTriggerActive": self.active}

    def pause(self):
        with self.changed:
            self.paused = True
            self.reportedAtPause = len(self.reports)

    def run(self, ran):
        for batch in range(self.batches):
            time.sleep(0.02)
            with self.changed:
                if not self.active or self.paused:
                    break
                self.report(batch, 5, RAN, at=f"t{batch}")
            ran.set()
        with self.changed:
            self.active = False  # the last batch done, or paused: the query ends by itself


def test_a_stop_asked_while_batches_run_back_to_back_waits_for_the_running_one_only(
        monkeypatch):
    # The trigger is never seen inactive between such batches: without the pause the stop
    # waited for every batch left (all of a backlog, under Trigger.AvailableNow).
    monkeypatch.setattr(query_progress, "POLL_S", 0.05)
    query, result = BackToBackQuery(batches=500), IngestResult()
    progress = QueryProgress(result, idleLimit=0, batchInterval=1.0, out=None)
    ran, asked = threading.Event(), threading.Event()
    threading.Thread(target=query.run, args=(ran,), daemon=True).start()
    ran.wait(30)

    def ask_after_two():
        while len(query.reports) < 2:
            time.sleep(0.001)
        asked.set()

    threading.Thread(target=ask_after_two, daemon=True).start()
    query_progress.follow(query, progress, asked, "q", pause=query.pause)
    assert query.reportedAtPause is not None, "the source was never paused"
    # At most the batch running when the pause came ends after it; every one is counted.
    assert len(query.reports) <= query.reportedAtPause + 1 < query.batches
    assert result.batches == len(query.reports)


class StartingQuery(RunningQuery):
    """A query still starting: Spark's status says so (no trigger active yet) until its
    sources are made; its first trigger then finds the source paused and, under
    Trigger.AvailableNow, the query ends by itself."""

    def __init__(self):
        super().__init__()
        self.message = "Initializing sources"
        self.messageAtStop = None

    @property
    def status(self):
        return {"message": self.message, "isDataAvailable": False,
                "isTriggerActive": False}

    def start_sources(self, after):
        time.sleep(after)
        with self.changed:
            self.message = "Waiting for next trigger"

    def stop(self):
        self.messageAtStop = self.message
        super().stop()


def test_a_stop_asked_while_the_query_starts_waits_for_its_sources(monkeypatch):
    # A stop in the middle of the source's start left its planner process a traceback
    # (its socket gone); paused, the first trigger admits nothing, so the wait is short.
    monkeypatch.setattr(query_progress, "POLL_S", 0.05)
    query, result = StartingQuery(), IngestResult()
    progress = QueryProgress(result, idleLimit=0, batchInterval=1.0, out=None)
    asked = threading.Event()
    asked.set()
    threading.Thread(target=query.start_sources, args=(0.3,), daemon=True).start()
    query_progress.follow(query, progress, asked, "q", pause=lambda: None)
    assert query.stoppedAt is not None
    assert query.messageAtStop == "Waiting for next trigger"


class GappyQuery(BackToBackQuery):
    """Back-to-back batches with Spark's short moment between them: no trigger active while
    the next one starts (its planning would be cut short by a stop just then)."""

    def __init__(self, batches):
        super().__init__(batches)
        self.between = False
        self.stoppedWhileRunning = False

    @property
    def status(self):
        return {"isDataAvailable": True, "isTriggerActive": self.active and not self.between}

    def run(self, ran):
        for batch in range(self.batches):
            with self.changed:
                self.between = True
            time.sleep(0.12)  # longer than a look: a stop would surely fall in here
            with self.changed:
                self.between = False
                if not self.active or self.paused:
                    break
            time.sleep(0.02)
            with self.changed:
                self.report(batch, 5, RAN, at=f"t{batch}")
            ran.set()
        with self.changed:
            self.active = False

    def stop(self):
        with self.changed:
            self.stoppedWhileRunning = self.active
        super().stop()


def test_a_paused_query_that_ends_by_itself_is_not_stopped_between_its_batches(monkeypatch):
    # Under Trigger.AvailableNow the paused source ends the query at its next trigger: the
    # stop waits for that end, never for a moment between triggers, where Spark's next
    # trigger may already be asking the source.
    monkeypatch.setattr(query_progress, "POLL_S", 0.05)
    query, result = GappyQuery(batches=50), IngestResult()
    progress = QueryProgress(result, idleLimit=0, batchInterval=1.0, out=None)
    ran, asked = threading.Event(), threading.Event()
    threading.Thread(target=query.run, args=(ran,), daemon=True).start()
    ran.wait(30)
    asked.set()
    query_progress.follow(query, progress, asked, "q", pause=query.pause, endsByItself=True)
    assert query.reportedAtPause is not None and not query.active
    assert not query.stoppedWhileRunning
    assert result.batches == len(query.reports) < query.batches
