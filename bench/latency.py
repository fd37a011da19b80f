"""Produce-to-committed latency of ``kafka-direct ingest``, exactly once, both APIs.

A producer writes at a fixed rate (default 10,000 events/s round robin over 4 partitions),
each value starting with its produce time (``time.time_ns()`` when ``produce()`` is called).
The real command (``python -m kafka_direct.app.cli ingest``, ``--api dstream`` or
``--api structured``, interval or trigger ``--interval`` seconds, default 0.25) runs in a
process of its own into a fresh table, with the raw transactional sink.

Each row's latency is its transaction's commit time minus its produce time: PostgreSQL keeps
the commit time of every transaction (``track_commit_timestamp``, set here with ALTER SYSTEM
and a restart of the embedded server) and ``pg_xact_commit_timestamp(xmin)`` reads it, so
the figure does not depend on how often the table is polled. Where that setting cannot be
had (an external server without it), the time a poll first sees the row is used instead,
polling every ``--poll-ms`` (default 10 ms), and the output says so.

It prints, for the records produced after ``--warmup`` seconds:

* p50/p99/max of produce to committed, overall and per ``--window`` seconds, with the
  backlog (records produced, not yet committed) at the end of each window;
* whether the backlog grows: its least-squares slope over the measured time, in records
  per second, against a tolerance of half a second of production over the run;
* CPU per batch of each process: the Python driver (the command itself), the driver's JVM,
  the Python workers (every other process of the job: the worker daemon, its workers, the
  data source planners, the fork server and its children; their CPU once dead is in their
  parent's children's time), the
  broker and PostgreSQL (the postmaster and its backends, less the bench's own backend);
* the Python processes started in the measured time, by what they run, and per batch (a
  worker that is not reused, a planner started for every batch);
* the comparison to the targets (p99 <= 500 ms with no growing backlog; moonshot 300 ms).

At the end the producer stops, the job drains and stops (SIGINT: a graceful stop), and the
table is checked against what was produced: every record once.

Usage: python bench/latency.py [--api dstream|structured] [--rate 10000] [--seconds 40]
                               [--interval 0.25] [--minutes 10 for the target's duration]
"""

from __future__ import annotations

import argparse
import ctypes
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from bench_support import proc_table

from kafka_direct.testing import EmbeddedPostgres, kafka_service

ROOT = Path(__file__).resolve().parent.parent
PR_SET_CHILD_SUBREAPER = 36
TARGET_P99_MS = 500.0
MOONSHOT_P99_MS = 300.0
PAD = b"x" * 80
CLASSES = ("python driver", "driver JVM", "python workers", "broker", "postgresql")


def tree_cpu(table, pid: int, kids: dict[int, list[int]]) -> float:
    """CPU of a process, its reaped children and its live descendants."""
    if pid not in table:
        return 0.0
    _, _, own, reaped = table[pid]
    return own + reaped + sum(tree_cpu(table, child, kids) for child in kids.get(pid, ()))


def cpu_by_class(job: int, broker: int | None, postgres: int | None,
                 poller: int | None = None) -> dict[str, float]:
    """CPU seconds so far of each class of process (see the module's docstring).

    The bench's own PostgreSQL backend (``poller``, which reads the table) is left out.
    """
    table = proc_table()
    kids: dict[int, list[int]] = {}
    for pid, (ppid, _, _, _) in table.items():
        kids.setdefault(ppid, []).append(pid)
    # This process is the subreaper of the job's tree: a JVM or worker re-parented to it
    # is still the job's. Every java below us that is not the broker is the driver's JVM.
    jvms = [pid for pid, (_, name, _, _) in table.items()
            if name == "java" and pid != broker and _below(table, pid, os.getpid())]
    driverJvm = sum(table[pid][2] for pid in jvms)
    # Every other process of the job is a Python worker or planner: the JVM's children, the
    # fork server's (a child of the driver, whose forks are Spark's workers) and orphans
    # re-parented to this process. The services' trees are not the job's.
    services = {pid for pid in (broker, postgres) if pid}
    roots = [job] + [pid for pid, (ppid, _, _, _) in table.items()
                     if ppid == os.getpid() and pid != job
                     and not any(pid == s or _below(table, s, pid) for s in services)]
    driver = table[job][2] if job in table else 0.0
    workers = sum(tree_cpu(table, pid, kids) for pid in roots) - driver - driverJvm
    return {"python driver": driver,
            "driver JVM": driverJvm, "python workers": workers,
            "broker": tree_cpu(table, broker, kids) if broker else 0.0,
            "postgresql": (tree_cpu(table, postgres, kids) if postgres else 0.0)
            - (table[poller][2] if poller in table else 0.0)}


def print_tree(root: int) -> None:
    """Print the processes below ``root`` with their CPU (what the classes are made of)."""
    table = proc_table()
    kids: dict[int, list[int]] = {}
    for pid, (ppid, _, _, _) in table.items():
        kids.setdefault(ppid, []).append(pid)

    def show(pid: int, depth: int) -> None:
        _, name, own, reaped = table[pid]
        print(f"{'  ' * depth}{pid} {name} own {own:.2f} s, reaped children {reaped:.2f} s")
        for child in sorted(kids.get(pid, ())):
            show(child, depth + 1)

    show(root, 0)


def _below(table, pid: int, ancestor: int) -> bool:
    while pid in table and pid > 1:
        pid = table[pid][0]
        if pid == ancestor:
            return True
    return False


class ProcessStarts(threading.Thread):
    """Counts the Python processes that appear below this one, by what they run.

    Sampled every 20 ms: a process that lives less than that may be missed (Spark's
    Python workers and planners live longer).
    """

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.seen: dict[int, str] = {}
        self.counting = threading.Event()
        self.started: dict[str, int] = {}
        self.stopping = threading.Event()

    def run(self) -> None:
        root = os.getpid()
        while not self.stopping.is_set():
            table = proc_table()
            for pid, (_, name, _, _) in table.items():
                if pid in self.seen or not name.startswith("python") \
                        or not _below(table, pid, root):
                    continue
                try:
                    with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
                        words = cmdline.read().decode(errors="replace").split("\0")
                except OSError:
                    continue
                # What it runs: the module after -m and its worker module, if any.
                what = " ".join(words[words.index("-m") + 1:][:2]).strip() \
                    if "-m" in words else " ".join(words[1:2])
                self.seen[pid] = what
                if self.counting.is_set():
                    self.started[what] = self.started.get(what, 0) + 1
            time.sleep(0.02)


@dataclass
class Measured:
    """What the poller saw: (produce time ns, committed time ns) per record."""

    latencies: list[tuple[int, int]] = field(default_factory=list)
    committed: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)


class Producer(threading.Thread):
    """Produces ``rate`` records a second round robin over the partitions, stamped."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, rate: int) -> None:
        super().__init__(daemon=True)
        from confluent_kafka import Producer as KafkaProducer

        self.producer = KafkaProducer({"bootstrap.servers": bootstrap, "linger.ms": 1,
                                       "acks": "all"})
        self.topic, self.partitions, self.rate = topic, partitions, rate
        self.produced = 0
        self.stopping = threading.Event()
        self.started_ns = 0

    def run(self) -> None:
        tick = 0.005
        start = time.perf_counter()
        self.started_ns = time.time_ns()
        while not self.stopping.is_set():
            due = int((time.perf_counter() - start) * self.rate)
            while self.produced < due:
                stamp = b"%d|" % time.time_ns()
                self.producer.produce(self.topic, stamp + PAD,
                                      partition=self.produced % self.partitions)
                self.produced += 1
            self.producer.poll(0)
            time.sleep(tick)
        self.producer.flush(30)


class Poller(threading.Thread):
    """Reads the rows committed since the last poll, with their commit time."""

    def __init__(self, pg, table: str, topic: str, partitions: int, measured: Measured,
                 pollMs: float, commitTimes: bool) -> None:
        super().__init__(daemon=True)
        self.pg, self.table, self.topic, self.partitions = pg, table, topic, partitions
        self.measured, self.pollMs, self.commitTimes = measured, pollMs, commitTimes
        self.next = [0] * partitions
        self.stopping = threading.Event()
        self.backend: int | None = None  # its PostgreSQL backend's process id

    def run(self) -> None:
        import psycopg2

        committed = ("(extract(epoch FROM pg_xact_commit_timestamp(xmin)) * 1e9)::bigint"
                     if self.commitTimes else "0")
        # The topic too: the table's key starts with it, so each poll is a short index
        # range scan. Without it PostgreSQL may scan the whole table (in parallel workers)
        # 400 times a second, a core's worth of CPU taken from the job and counted as its.
        query = (f"SELECT kafka_offset, split_part(convert_from(value, 'UTF8'), '|', 1)"
                 f"::bigint, {committed} FROM {self.table} WHERE topic = %s AND "
                 "kafka_partition = %s AND kafka_offset >= %s ORDER BY kafka_offset")
        connection = self.pg.connect()
        connection.autocommit = True
        try:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_backend_pid()")
                self.backend = cursor.fetchone()[0]
                while not self.stopping.is_set():
                    started = time.perf_counter()
                    for partition in range(self.partitions):
                        try:
                            cursor.execute(query, (self.topic, partition,
                                                   self.next[partition]))
                        except psycopg2.Error:
                            break  # the job has not created its table yet
                        rows = cursor.fetchall()
                        seen = time.time_ns()
                        if rows:
                            self.next[partition] = rows[-1][0] + 1
                            with self.measured.lock:
                                self.measured.committed += len(rows)
                                self.measured.latencies.extend(
                                    (stamp, when if self.commitTimes else seen)
                                    for _, stamp, when in rows)
                    left = self.pollMs / 1000 - (time.perf_counter() - started)
                    if left > 0:
                        time.sleep(left)
        finally:
            connection.close()


class JobOutput(threading.Thread):
    """Keeps the job's per-batch lines with the time each arrived."""

    def __init__(self, stream, api: str) -> None:
        super().__init__(daemon=True)
        self.stream, self.api = stream, api
        self.batches: list[float] = []
        self.lines: list[str] = []

    def run(self) -> None:
        for line in self.stream:
            self.lines.append(line)
            batch = ("records" in line and "processing" in line) if self.api == "dstream" \
                else line.startswith("batch ")
            if batch:
                self.batches.append(time.perf_counter())


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


def slope(points: list[tuple[float, float]]) -> float:
    if len(points) < 2:
        return 0.0
    xs, ys = [x for x, _ in points], [y for _, y in points]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    den = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in points) / den if den else 0.0


def enable_commit_times(pg) -> bool:
    """Turn on track_commit_timestamp (a restart of the embedded server); False if not."""
    with pg.connect() as connection, connection.cursor() as cursor:
        cursor.execute("SHOW track_commit_timestamp")
        if cursor.fetchone()[0] == "on":
            return True
    connection.close()
    if not getattr(pg, "restartable", False):
        return False
    connection = pg.connect()
    connection.autocommit = True
    with connection.cursor() as cursor:
        cursor.execute("ALTER SYSTEM SET track_commit_timestamp = on")
    connection.close()
    pg.restart()
    return True


def service_pid(service) -> int | None:
    """The process of a local service (a one-node Apache Kafka's node), else None."""
    nodes = getattr(service, "nodes", None)
    pid = getattr(nodes[0] if nodes else service, "pid", None)
    return pid if isinstance(pid, int) else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--api", choices=("dstream", "structured"), default="dstream")
    parser.add_argument("--rate", type=int, default=10_000, help="events per second")
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--interval", type=float, default=0.25,
                        help="batch interval or trigger, seconds")
    parser.add_argument("--seconds", type=float, default=40.0, help="measured seconds")
    parser.add_argument("--minutes", type=float, default=None,
                        help="measured minutes (the target's duration is 10)")
    parser.add_argument("--warmup", type=float, default=5.0,
                        help="seconds of production before measuring")
    parser.add_argument("--window", type=float, default=5.0, help="seconds per line")
    parser.add_argument("--poll-ms", type=float, default=10.0)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--max-rate-per-partition", type=int, default=100_000)
    parser.add_argument("--verbose", action="store_true", help="print the job's output")
    parser.add_argument("--tree", action="store_true", help="print the process tree once")
    parser.add_argument("job_args", nargs="*", help="more ingest options (after --)")
    args = parser.parse_args()
    seconds = args.minutes * 60 if args.minutes else args.seconds
    ctypes.CDLL(None).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    from kafka_direct.runtime import jvm_archive

    if jvm_archive.wanted(default=True):
        jvm_archive.build()
    with kafka_service() as kafka, EmbeddedPostgres() as pg:
        commitTimes = enable_commit_times(pg)
        topic = table = f"latency_{args.api}_{os.getpid()}"
        kafka.create_topic(topic, args.partitions)
        command = [sys.executable, "-m", "kafka_direct.app.cli", "ingest",
                   "--bootstrap-servers", kafka.bootstrap_servers, "--dsn",
                   "env:BENCH_LATENCY_DSN", "--topic", topic, "--group", table, "--table",
                   table, "--api", args.api, "--batch-interval", str(args.interval),
                   "--max-rate-per-partition", str(args.max_rate_per_partition),
                   "--master", args.master, *args.job_args]
        environment = {**os.environ, "BENCH_LATENCY_DSN": pg.dsn, "PYTHONPATH": os.pathsep.join(
            [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
        load = os.getloadavg()
        job = subprocess.Popen(command, env=environment, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, cwd=ROOT)
        output = JobOutput(job.stdout, args.api)
        output.start()
        deadline = time.perf_counter() + 120
        while not output.batches:  # the job runs batches: Spark is up
            if job.poll() is not None or time.perf_counter() > deadline:
                sys.stdout.write("".join(output.lines[-60:]))
                raise SystemExit("the job did not start")
            time.sleep(0.1)
        measured = Measured()
        poller = Poller(pg, table, topic, args.partitions, measured, args.poll_ms,
                        commitTimes)
        poller.start()
        producer = Producer(kafka.bootstrap_servers, topic, args.partitions, args.rate)
        producer.start()
        starts = ProcessStarts()
        starts.start()
        time.sleep(args.warmup)
        starts.counting.set()
        pids = (job.pid, service_pid(kafka), service_pid(pg), poller.backend)
        cpuStart, batchStart = cpu_by_class(*pids), len(output.batches)
        measureStart = time.perf_counter()
        measureStartNs = time.time_ns()
        backlog: list[tuple[float, float]] = []
        windows: list[tuple[float, int, int]] = []
        nextWindow = measureStart + args.window
        while time.perf_counter() - measureStart < seconds:
            time.sleep(0.2)
            now = time.perf_counter()
            with measured.lock:
                committed = measured.committed
            backlog.append((now - measureStart, producer.produced - committed))
            if now >= nextWindow:
                windows.append((now - measureStart, time.time_ns(), backlog[-1][1]))
                nextWindow += args.window
            if job.poll() is not None:
                break
            if args.tree and len(backlog) == 10:
                print_tree(os.getpid())
        cpuEnd, batchEnd = cpu_by_class(*pids), len(output.batches)
        measureEndNs = time.time_ns()
        starts.counting.clear()
        starts.stopping.set()
        producer.stopping.set()
        producer.join()
        drained = time.perf_counter() + 30
        while measured.committed < producer.produced and time.perf_counter() < drained \
                and job.poll() is None:
            time.sleep(0.1)
        poller.stopping.set()
        poller.join()
        if job.poll() is None:
            job.send_signal(signal.SIGINT)
            try:
                job.wait(60)
            except subprocess.TimeoutExpired:
                job.kill()
                job.wait()
        output.join(5)
        if args.verbose:
            sys.stdout.write("".join(output.lines))
        with pg.connect() as connection, connection.cursor() as cursor:
            # No duplicate and no gap: each partition holds offsets 0..n-1 once.
            cursor.execute(f"SELECT count(*), count(DISTINCT (kafka_partition, kafka_offset))"
                           f" FROM {table}")
            rows, distinct = cursor.fetchone()
            cursor.execute(f"SELECT coalesce(sum(top), 0) FROM (SELECT max(kafka_offset) + 1"
                           f" AS top FROM {table} GROUP BY kafka_partition) AS tops")
            contiguous = cursor.fetchone()[0] == rows
        connection.close()

    report(args, seconds, load, commitTimes, measured, measureStartNs, measureEndNs, windows,
           backlog, cpuStart, cpuEnd, batchEnd - batchStart, producer.produced, rows,
           distinct, contiguous, job.returncode, output.lines, starts.started)


def report(args, seconds, load, commitTimes, measured, startNs, endNs, windows, backlog,
           cpuStart, cpuEnd, batches, produced, rows, distinct, contiguous, code, lines,
           started) -> None:
    inside = [(stamp, (when - stamp) / 1e6) for stamp, when in measured.latencies
              if startNs <= stamp < endNs]
    latencies = [ms for _, ms in inside]
    how = ("commit time (track_commit_timestamp)" if commitTimes
           else f"first seen by a poll every {args.poll_ms:g} ms")
    print(f"ingest --api {args.api}, interval {args.interval} s, {args.rate:,} events/s on "
          f"{args.partitions} partitions, {args.master}; measured {seconds:.0f} s after "
          f"{args.warmup:.0f} s of warm-up; latency: produce to {how}; load average at "
          f"start {load[0]:.1f} {load[1]:.1f} {load[2]:.1f} on {os.cpu_count()} cores")
    start = startNs
    for at, endWindow, left in windows:
        part = [ms for stamp, ms in inside if start <= stamp < endWindow]
        print(f"  {at:6.1f} s: {len(part):7,} records  p50 {percentile(part, 50):7.0f} ms  "
              f"p99 {percentile(part, 99):7.0f} ms  max {max(part, default=float('nan')):7.0f}"
              f" ms  backlog {left:7,}")
        start = endWindow
    perSecond = slope(backlog)
    tolerance = args.rate * 0.5 / max(seconds, 1)
    growing = perSecond > tolerance
    committed = len(latencies)
    # A record never committed counts as later than any that was.
    late = max(0, round(args.rate * seconds) - committed)
    latencies = latencies + [float("inf")] * late
    p50, p99 = percentile(latencies, 50), percentile(latencies, 99)
    worst = max(latencies, default=float("nan"))
    print(f"records produced in the measured time and committed: {committed:,} "
          f"(~{args.rate * seconds:,.0f} produced then); "
          f"p50 {p50:.0f} ms  p99 {p99:.0f} ms  max {worst:.0f} ms")
    print(f"backlog: slope {perSecond:+.1f} records/s (tolerance {tolerance:.1f}: half a second "
          f"of production over the run), mean {statistics.fmean(b for _, b in backlog):,.0f},"
          f" last {backlog[-1][1] if backlog else 0:,}: "
          + ("GROWING" if growing else "not growing"))
    print(f"batches in the measured time: {batches} ({batches / seconds:.2f}/s; "
          f"{seconds / max(batches, 1) * 1000:.0f} ms apart)")
    for name in CLASSES:
        cpu = cpuEnd[name] - cpuStart[name]
        print(f"  CPU {name:15s}: {cpu:7.2f} s = {cpu / max(batches, 1) * 1000:6.1f} ms per "
              f"batch, {cpu / seconds * 100:5.1f}% of a core, "
              f"{cpu * 1e6 / max(committed, 1):6.1f} us per record")
    total = sum(cpuEnd[n] - cpuStart[n] for n in CLASSES)
    print(f"  CPU {'all':15s}: {total:7.2f} s = {total / max(batches, 1) * 1000:6.1f} ms per "
          f"batch, {total / seconds * 100:5.1f}% of a core")
    print(f"Python processes started in the measured time: {sum(started.values())}"
          + "".join(f"; {n} {what}" for what, n in sorted(started.items(),
                                                           key=lambda i: -i[1]))
          + f" ({sum(started.values()) / max(batches, 1):.2f} per batch)")
    once = rows == distinct and contiguous
    exact = once and rows == produced
    print(f"table: {rows:,} rows, {distinct:,} distinct, {produced:,} produced: "
          + ("no duplicate, no gap" if once else "DUPLICATES OR GAPS")
          + ("; every record written" if rows == produced else
             f"; {produced - rows:,} not written 30 s after the producer stopped")
          + f"; job exit {code}")
    if code not in (0, None) or not once:
        sys.stdout.write("".join(lines[-40:]))
    verdict = "MET" if p99 <= TARGET_P99_MS and not growing and exact else "NOT MET"
    moon = "MET" if p99 <= MOONSHOT_P99_MS and not growing and exact else "not met"
    print(f"target p99 <= {TARGET_P99_MS:.0f} ms with no growing backlog: {verdict} "
          f"(p99 {p99:.0f} ms); moonshot p99 <= {MOONSHOT_P99_MS:.0f} ms: {moon}"
          + ("" if seconds >= 600 else "; the target's duration is 10 minutes (--minutes 10)"))


if __name__ == "__main__":
    main()
