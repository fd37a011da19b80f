"""The ingest job end to end, both APIs, beside a plain COPY of the same rows.

Produces a backlog (default 1M records of ~100 B in 4 partitions) on the embedded broker
(or KAFKA_DIRECT_BOOTSTRAP) and, in the same run, alternately:

(a) plain COPY: the same rows, already in memory, COPYed into a fresh table in one
    transaction on one connection (``sinks.postgres_writer.copy_rows``) - the baseline;
(b) ``kafka-direct ingest --api dstream``, (c) ``--api structured`` and (d) ``--api
    structured --available-now``: the real command (``python -m kafka_direct.app.cli
    ingest``) in a process of its own, on a fresh table and group,
    ``--max-rate-per-partition`` chosen so that a batch holds ``--batch-records`` (default
    200k); (b) and (c) stop after one idle batch and wait for the next interval after a
    batch shorter than it, (d) runs its batches one after another and ends at the backlog's
    end (``Trigger.AvailableNow``, as the JVM connectors' benchmark runs Spark's source).

For each job it prints:

* rows/s in its batches: records over the summed batch times of its own per-batch lines
  (the direct stream's processing time; the query's ``triggerExecution``);
* whole-run rows/s: records over the process's life (start to exit);
* time to first commit: from start until the table's first rows are visible (polled); the
  job's JVM starts from the archive of Spark's classes, built first as ``./run ingest``
  does, unless ``KAFKA_DIRECT_JVM_ARCHIVE=off``;
* CPU per record: the job's processes (the command, Spark's JVM, its Python workers: all
  are reaped by a small wrapper that is their subreaper, so ``RUSAGE_CHILDREN`` holds them)
  and the services' (broker, PostgreSQL and its backends);
* ratios to the plain COPY of the same round; medians (and minimums of the times) over
  rounds.

The job's stderr is checked for Python tracebacks (a reused Python worker at shutdown
printed one; none may remain).

Usage: python bench/ingest_job.py [--records N] [--rounds R]
       [--api dstream|structured|structured-now]
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from kafka_direct.testing import EmbeddedPostgres, kafka_service
from sinks.postgres_writer import copy_rows

COLUMNS = ("topic", "kafka_partition", "kafka_offset", "key", "value")
ROOT = Path(__file__).resolve().parent.parent

# Runs the job as its child and reaps every process the job leaves behind (Spark's JVM,
# its Python daemon and workers are re-parented here as orphans): their CPU then reaches
# this wrapper's RUSAGE_CHILDREN, and so the benchmark's.
WRAPPER = """
import ctypes, os, subprocess, sys
ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
code = subprocess.call(sys.argv[1:])
while True:
    try:
        os.wait()
    except ChildProcessError:
        break
sys.exit(code)
"""

_DSTREAM_LINE = re.compile(r"records (\d+)\s+scheduling \S+(?: s)?\s+processing ([\d.]+) s")
_QUERY_LINE = re.compile(r"^batch (\d+): (\d+) records in (\d+) ms", re.MULTILINE)


@dataclass
class Run:
    """What one run of the job measured."""

    api: str
    records: int
    batchSeconds: float
    wholeSeconds: float
    firstCommit: float | None
    cpuJob: float
    cpuServices: float
    cpuBroker: float
    batches: list[tuple[int, float]] = field(default_factory=list)
    tracebacks: int = 0

    @property
    def batchRate(self) -> float:
        return self.records / self.batchSeconds if self.batchSeconds else 0.0

    @property
    def wholeRate(self) -> float:
        return self.records / self.wholeSeconds


def produce(kafka, topic: str, records: int, partitions: int) -> list[tuple]:
    """Produce the backlog; returns the rows the job must write (as the plain COPY's)."""
    kafka.create_topic(topic, partitions)
    per = records // partitions
    rows = []
    for p in range(partitions):
        values = [(f"{p:02d}-{i:012d}-" + "x" * 85).encode() for i in range(per)]
        kafka.produce(topic, values, partition=p)
        rows.extend((topic, p, i, None, v) for i, v in enumerate(values))
    return rows


def service_cpu(pids: list[int]) -> float:
    """CPU seconds of the services' processes and their reaped children (backends)."""
    total = 0.0
    tick = os.sysconf("SC_CLK_TCK")
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as stat:
                text = stat.read()
        except OSError:
            continue
        fields = text[text.rindex(")") + 2:].split()
        total += sum(int(fields[i]) for i in (11, 12, 13, 14)) / tick
    return total


def service_pids(*services) -> list[int]:
    """The services' main processes: the broker's (its first node's) and the postmaster."""
    pids = []
    for service in services:
        nodes = getattr(service, "nodes", None)
        pid = getattr(nodes[0] if nodes else service, "pid", None)
        if not isinstance(pid, int):
            process = getattr(getattr(service, "_process", None), "process", None)
            pid = getattr(process, "pid", None)
        if isinstance(pid, int):
            pids.append(pid)
    return pids


def drop_table(pg, name: str) -> None:
    with pg.connect() as connection, connection.cursor() as cursor:
        cursor.execute(f"DROP TABLE IF EXISTS {name}")
    connection.close()


def plain_copy(pg, rows: list[tuple], name: str, pids: list[int]) -> tuple[float, float]:
    """COPY the rows into a fresh table in one transaction: (seconds, CPU seconds)."""
    from psycopg2 import sql

    drop_table(pg, name)
    with pg.connect() as connection, connection.cursor() as cursor:
        cursor.execute(f"CREATE TABLE {name} (topic text NOT NULL, kafka_partition integer "
                       "NOT NULL, kafka_offset bigint NOT NULL, key bytea, value bytea, "
                       "PRIMARY KEY (topic, kafka_partition, kafka_offset))")
    connection.close()
    connection = pg.connect()
    cpu, services = time.process_time(), service_cpu(pids)
    start = time.perf_counter()
    with connection, connection.cursor() as cursor:
        copy_rows(cursor, sql.Identifier(name), COLUMNS, rows)
    elapsed = time.perf_counter() - start
    cpu = time.process_time() - cpu + service_cpu(pids) - services
    connection.close()
    drop_table(pg, name)
    return elapsed, cpu


class FirstRows(threading.Thread):
    """Polls a table until its first committed rows are visible."""

    def __init__(self, pg, table: str, start: float) -> None:
        super().__init__(daemon=True)
        self.pg, self.table, self.start_time = pg, table, start
        self.seen: float | None = None
        self.finished = threading.Event()

    def run(self) -> None:
        import psycopg2

        connection = self.pg.connect()
        connection.autocommit = True
        try:
            with connection.cursor() as cursor:
                while not self.finished.is_set():
                    try:
                        cursor.execute(f"SELECT 1 FROM {self.table} LIMIT 1")
                        if cursor.fetchone() is not None:
                            self.seen = time.perf_counter() - self.start_time
                            return
                    except psycopg2.Error:
                        pass  # the job has not created the table yet
                    time.sleep(0.05)
        finally:
            connection.close()


#: The jobs measured: --api as given to the bench, and the command's options it stands for.
JOBS = {"dstream": "--api dstream", "structured": "--api structured",
        "structured-now": "--api structured --available-now"}
APIS = tuple(JOBS)


def run_job(args, kafka, pg, topic: str, api: str, name: str, pids: list[int],
            records: int) -> Run:
    """Run ``kafka-direct ingest`` once on a fresh table and group."""
    perPartition = args.batch_records // args.partitions
    rate = max(1, round(perPartition / args.batch_interval))
    command = [sys.executable, "-c", WRAPPER, sys.executable, "-m", "kafka_direct.app.cli",
               "ingest", "--bootstrap-servers", kafka.bootstrap_servers,
               "--dsn", "env:BENCH_INGEST_DSN", "--topic", topic, "--group", name,
               "--table", name, "--api", api.split("-")[0],
               "--batch-interval", str(args.batch_interval),
               "--max-rate-per-partition", str(rate), "--master", args.master,
               # Under Trigger.AvailableNow the query ends by itself at the backlog's end.
               *(["--available-now"] if api == "structured-now" else
                 ["--stop-after-idle", "1"])]
    environment = {**os.environ, "BENCH_INGEST_DSN": pg.dsn,
                   "PYTHONPATH": os.pathsep.join(
                       [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
    drop_table(pg, name)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    services, broker = service_cpu(pids), service_cpu(pids[:1])
    start = time.perf_counter()
    watcher = FirstRows(pg, name, start)
    watcher.start()
    with tempfile.TemporaryFile("w+") as err:
        finished = subprocess.run(command, env=environment, stdout=subprocess.PIPE,
                                  stderr=err, text=True, cwd=ROOT)
        whole = time.perf_counter() - start
        err.seek(0)
        stderr = err.read()
    watcher.finished.set()
    watcher.join()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpuServices = service_cpu(pids) - services
    cpuBroker = service_cpu(pids[:1]) - broker
    cpuJob = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if finished.returncode != 0:
        sys.stdout.write(finished.stdout)
        sys.stdout.write(stderr[-5000:])
        raise SystemExit(f"the {api} job failed with exit code {finished.returncode}")
    if args.verbose:
        sys.stdout.write(finished.stdout)
        sys.stdout.write(stderr)
    if api == "dstream":
        batches = [(int(n), float(s)) for n, s in _DSTREAM_LINE.findall(finished.stdout)]
    else:
        batches = [(int(n), int(ms) / 1000) for _, n, ms in _QUERY_LINE.findall(finished.stdout)]
    loaded = [(n, s) for n, s in batches if n]
    with pg.connect() as connection, connection.cursor() as cursor:
        cursor.execute(f"SELECT count(*), count(DISTINCT (kafka_partition, kafka_offset)) "
                       f"FROM {name}")
        count, distinct = cursor.fetchone()
    connection.close()
    if (count, distinct) != (records, records):
        raise SystemExit(f"the {api} job wrote {count} rows ({distinct} distinct) of "
                         f"{records}")
    drop_table(pg, name)
    return Run(api, sum(n for n, _ in loaded), sum(s for _, s in loaded), whole,
               watcher.seen, cpuJob, cpuServices, cpuBroker, loaded,
               stderr.count("Traceback (most recent call last)"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--batch-records", type=int, default=200_000,
                        help="records per batch (sets --max-rate-per-partition)")
    parser.add_argument("--batch-interval", type=float, default=1.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--api", action="append", choices=APIS,
                        help="the job's API (repeatable; default all three): structured-now "
                             "is --api structured --available-now")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--verbose", action="store_true", help="print the job's output")
    args = parser.parse_args()
    apis = args.api or list(APIS)
    # As ``./run ingest`` does: the archive of Spark's classes built first (once), which the
    # job's JVM maps unless KAFKA_DIRECT_JVM_ARCHIVE=off.
    from kafka_direct.runtime import jvm_archive

    if jvm_archive.wanted(default=True):
        jvm_archive.build()
    archived = bool(jvm_archive.jvm_options(default=True))
    print("Spark's JVM starts from the archive of its classes: "
          + ("yes" if archived else "no (KAFKA_DIRECT_JVM_ARCHIVE=off, or it could not be built)"))
    with kafka_service() as kafka, EmbeddedPostgres() as pg:
        topic = f"bench-ingest-job-{os.getpid()}"
        start = time.perf_counter()
        rows = produce(kafka, topic, args.records, args.partitions)
        records = len(rows)
        print(f"produced {records} records of ~100 B in {args.partitions} partitions "
              f"({time.perf_counter() - start:.1f} s); batches of {args.batch_records}, "
              f"interval {args.batch_interval} s, {args.master}")
        pids = service_pids(kafka, pg)
        copies: list[tuple[float, float]] = []
        runs: dict[str, list[Run]] = {api: [] for api in apis}
        for round_ in range(args.rounds):
            copies.append(plain_copy(pg, rows, f"plain_{round_}", pids))
            line = f"round {round_ + 1}: plain COPY {copies[-1][0]:.2f} s"
            for api in apis:
                run = run_job(args, kafka, pg, topic, api,
                              f"job_{api.replace('-', '_')}_{round_}", pids, records)
                runs[api].append(run)
                first = "-" if run.firstCommit is None else f"{run.firstCommit:.1f}"
                line += (f"; {api}: batches {run.batchSeconds:.2f} s "
                         f"({len(run.batches)}: "
                         + " ".join(f"{s:.1f}" for _, s in run.batches)
                         + f"), whole {run.wholeSeconds:.1f} s, first commit {first} s")
                if run.tracebacks:
                    line += f", {run.tracebacks} traceback(s) in its stderr"
            copy_ratio = ", ".join(
                f"{api} {r[-1].batchRate * copies[-1][0] / records:.2f}x/"
                f"{r[-1].wholeRate * copies[-1][0] / records:.2f}x" for api, r in runs.items())
            print(line + f"  [batches/whole vs COPY: {copy_ratio}]", flush=True)
        copy_seconds = [c for c, _ in copies]
        copy_rate = records / statistics.median(copy_seconds)
        copy_cpu = statistics.median(c for _, c in copies) * 1e6 / records
        print(f"records: {records}, {args.rounds} rounds (medians; best in brackets)")
        print(f"(a) plain COPY, one transaction : {copy_rate:10,.0f} rows/s "
              f"[{records / min(copy_seconds):,.0f}]  CPU {copy_cpu:.1f} us/record "
              "(this process + PostgreSQL)")
        for api, results in runs.items():
            batch = statistics.median(r.batchRate for r in results)
            whole = statistics.median(r.wholeRate for r in results)
            firsts = [r.firstCommit for r in results if r.firstCommit is not None]
            first = f"{statistics.median(firsts):.1f} s [{min(firsts):.1f}]" if firsts else "-"
            job_cpu = statistics.median(r.cpuJob for r in results) * 1e6 / records
            svc_cpu = statistics.median(r.cpuServices for r in results) * 1e6 / records
            broker_cpu = statistics.median(r.cpuBroker for r in results) * 1e6 / records
            ratios = [(r.batchRate * c / records, r.wholeRate * c / records)
                      for r, c in zip(results, copy_seconds, strict=True)]
            label = "bcd"[APIS.index(api)]  # as the module's docstring names them
            print(f"({label}) ingest {JOBS[api]:34s}: batches {batch:10,.0f} rows/s "
                  f"[{max(r.batchRate for r in results):,.0f}], whole run {whole:10,.0f} "
                  f"rows/s [{max(r.wholeRate for r in results):,.0f}], first commit {first}")
            print(f"    CPU {job_cpu:.1f} us/record in the job's processes + {svc_cpu:.1f} in "
                  f"the broker ({broker_cpu:.1f}) and PostgreSQL's backends ("
                  f"{svc_cpu - broker_cpu:.1f}); vs plain COPY (same round): batches "
                  f"{statistics.median(b for b, _ in ratios):.2f}x "
                  f"[{max(b for b, _ in ratios):.2f}] (target >= 1.0), whole run "
                  f"{statistics.median(w for _, w in ratios):.2f}x "
                  f"[{max(w for _, w in ratios):.2f}] (target >= 0.7)"
                  + (f"; tracebacks in stderr: {sum(r.tracebacks for r in results)}"
                     if any(r.tracebacks for r in results) else ""))


if __name__ == "__main__":
    main()
