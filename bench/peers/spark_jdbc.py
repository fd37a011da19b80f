"""Contender: Spark's ``kafka`` source, ``foreachBatch`` and Spark's JDBC writer into PostgreSQL.

The pipeline as users write it (PySpark, Spark's JVM connector spark-sql-kafka-0-10 and the
PostgreSQL JDBC driver given with ``spark.jars``):

- Read: ``readStream.format("kafka")``, ``startingOffsets=earliest``,
  ``maxOffsetsPerTrigger=200000`` (a batch about the size of kafka-direct's ingest job's),
  ``Trigger.AvailableNow``: what a user runs to load a backlog, it reads what the topic holds
  at the query's start in batches of that size and ends by itself. The checkpoint is
  ``<work>/checkpoint``: a restarted application resumes from it.
- Write, per batch (``foreachBatch``), with ``DataFrame.write.jdbc`` (URL with
  ``reWriteBatchedInserts=true``, ``batchsize=10000``); the write has the read's partitions
  (one task per Kafka partition; no repartition):

  - ``raw``: ``topic, partition AS kafka_partition, offset AS kafka_offset, key, value``,
    appended;
  - ``typed``: ``from_json(value, "id long, name string, amount double, ts long")``'s
    columns, appended;
  - ``updates`` (``--mode upsert``): the batch deduplicated (the newest offset per id, with
    ``max_by``; the shuffle keeps 4 partitions) and written by JDBC into a staging table
    (``<table>_staging``, ``mode=overwrite, truncate=true``), then
    ``INSERT ... SELECT ... ON CONFLICT (id) DO UPDATE`` from it into the target, run with
    psycopg2 on the driver (and the staging table dropped at the end).

- Tables: created by this command before the application starts, with the column types
  Spark's JDBC writer would create; the insert tables without a primary key (as JDBC's
  append creates them, so duplicates are counted), the upsert target with ``PRIMARY KEY
  (id)``.

Spark's ``foreachBatch`` is at least once: a batch interrupted by a crash is written again
after the restart (the checkpoint's commit log is written after the batch), so
``--kill-at`` may leave duplicates in the insert tables: a finding, not mended here.

``--kill-at F``: the application runs as a child process (this script with ``--inner``, in a
session of its own); when the table holds ``F`` of the expected rows, the child's whole
process tree (the Python driver, Spark's JVM, its Python workers) is killed with SIGKILL,
then the application is started again on the same checkpoint and runs to the end. Without
it the application runs as a child all the same (one code path).

Prints ``RESULT`` (common.result) with ``seconds`` (the command's start to the query's end,
all records written), ``first_commit`` (seconds from the start to the first row visible),
``batch_seconds`` and ``batches`` (the query's progress, every run), ``kills``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import spark_support
from common import arguments, dsn, expected_rows, jdbc_url, result, table_rows
from common import kill_tree as kill_pids

STARTED = spark_support.process_started()
MAX_OFFSETS_PER_TRIGGER = 200_000
JDBC_BATCH_SIZE = 10_000
TYPED_SCHEMA = "id long, name string, amount double, ts long"


def quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def create_table(connection, table: str, dataset: str, mode: str) -> None:
    """The target table, with the column types Spark's JDBC writer gives these columns."""
    if dataset == "raw":
        columns = "topic TEXT, kafka_partition INTEGER, kafka_offset BIGINT, key BYTEA, value BYTEA"
    else:
        columns = "id BIGINT, name TEXT, amount DOUBLE PRECISION, ts BIGINT"
        if mode == "upsert":
            columns = columns.replace("id BIGINT", "id BIGINT PRIMARY KEY")
    with connection.cursor() as cursor:
        cursor.execute(f"CREATE TABLE IF NOT EXISTS {quoted(table)} ({columns})")
    connection.commit()


def settings_of(args) -> dict:
    return {
        "pyspark": spark_support.spark_version(), "master": args.master,
        "source": "format('kafka') (spark-sql-kafka-0-10, spark.jars)",
        "startingOffsets": "earliest", "maxOffsetsPerTrigger": MAX_OFFSETS_PER_TRIGGER,
        "trigger": "AvailableNow", "kafka_options": {
            f"kafka.{k}": v for k, v in spark_support.JVM_CONSUMER_TUNING.items()},
        "sink": "foreachBatch + DataFrame.write.jdbc",
        "jdbc": {"url_options": "reWriteBatchedInserts=true", "batchsize": JDBC_BATCH_SIZE,
                 "partitions": "the read's (one per Kafka partition)",
                 "isolationLevel": "READ_UNCOMMITTED (Spark's default: a transaction "
                                   "per task)"},
        "table": "created before the start (no primary key for insert, PRIMARY KEY (id) "
                 "for upsert)",
        "upsert": ("dedup by max_by(offset) per id, JDBC overwrite(truncate) into a staging "
                   "table, then INSERT ... ON CONFLICT (id) DO UPDATE via psycopg2 on the "
                   "driver" if args.mode == "upsert" else None),
        "checkpoint": "<work>/checkpoint", "dataset": args.dataset, "mode": args.mode,
    }


def inner(args) -> None:
    """The Spark application: runs the query to its end, printing a line per batch."""
    import psycopg2
    from pyspark.sql import functions as F  # noqa: N812

    libpq = dsn(args)
    url, properties = jdbc_url(libpq)
    url += "?reWriteBatchedInserts=true"
    properties = {**properties, "driver": "org.postgresql.Driver",
                  "batchsize": str(JDBC_BATCH_SIZE)}
    conf = {}
    if args.mode == "upsert":
        # The shuffle of the dedup keeps the read's 4 partitions (adaptive execution would
        # merge them into one small partition, and one JDBC writer).
        conf["spark.sql.adaptive.coalescePartitions.enabled"] = "false"
    spark, _ = spark_support.session(args.master, "spark-jdbc-peer", jdbc=True, conf=conf)
    staging = f"{args.table}_staging"
    stream = (spark.readStream.format("kafka")
              .option("kafka.bootstrap.servers", args.bootstrap_servers)
              .option("subscribe", args.topic).option("startingOffsets", "earliest")
              .option("maxOffsetsPerTrigger", MAX_OFFSETS_PER_TRIGGER)
              .options(**{f"kafka.{k}": v for k, v in spark_support.JVM_CONSUMER_TUNING.items()})
              .load())
    if args.dataset == "raw":
        rows = stream.selectExpr("topic", "partition AS kafka_partition",
                                 "offset AS kafka_offset", "key", "value")
    else:
        rows = stream.select(F.from_json(F.col("value").cast("string"), TYPED_SCHEMA)
                             .alias("r"), "offset").select("r.*", "offset")
    merge = (f"INSERT INTO {quoted(args.table)} (id, name, amount, ts) "
             f"SELECT id, name, amount, ts FROM {quoted(staging)} "
             f"ON CONFLICT (id) DO UPDATE SET name = EXCLUDED.name, "
             f"amount = EXCLUDED.amount, ts = EXCLUDED.ts")

    def write(batch, epoch_id):
        started = time.time()
        if args.mode == "upsert":
            newest = (batch.groupBy("id")
                      .agg(F.max_by(F.struct("name", "amount", "ts"), "offset").alias("r"))
                      .select("id", "r.name", "r.amount", "r.ts"))
            newest.write.option("truncate", "true").jdbc(url, quoted(staging), "overwrite",
                                                         properties)
            with psycopg2.connect(libpq) as connection, connection.cursor() as cursor:
                cursor.execute(merge)
            connection.close()
        else:
            batch.drop("offset").write.jdbc(url, quoted(args.table), "append", properties)
        print("WROTE " + json.dumps({"epoch": epoch_id, "seconds": time.time() - started,
                                     "end": time.time()}), flush=True)

    query = (rows.writeStream.foreachBatch(write)
             .option("checkpointLocation", os.path.join(args.work, "checkpoint"))
             .trigger(availableNow=True).start())
    seen = set()

    def report():
        for batch in spark_support.progress_batches(query.recentProgress):
            if batch["batch"] not in seen:
                seen.add(batch["batch"])
                print("BATCH " + json.dumps(batch), flush=True)

    while not query.awaitTermination(0.5):
        report()
    report()
    print("DONE " + json.dumps({"end": time.time()}), flush=True)
    if args.mode == "upsert":
        with psycopg2.connect(libpq) as connection, connection.cursor() as cursor:
            cursor.execute(f"DROP TABLE IF EXISTS {quoted(staging)}")
        connection.close()
    spark.stop()


def kill_tree(child: subprocess.Popen) -> int:
    """SIGKILL the child's whole process tree: how many processes."""
    killed = kill_pids(child.pid)
    child.wait()
    return killed


class Run:
    """One start of the application: its process and what it printed."""

    def __init__(self, args) -> None:
        command = [sys.executable, os.path.abspath(__file__), *sys.argv[1:], "--inner"]
        self.batches: list[dict] = []
        self.done: float | None = None
        self.child = subprocess.Popen(command, stdout=subprocess.PIPE, text=True,
                                      start_new_session=True)
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        for line in self.child.stdout:
            if line.startswith("BATCH "):
                self.batches.append(json.loads(line[6:]))
            elif line.startswith("DONE "):
                self.done = json.loads(line[5:])["end"]
            sys.stderr.write(line)


def outer(args) -> None:
    import psycopg2

    connection = psycopg2.connect(dsn(args))
    create_table(connection, args.table, args.dataset, args.mode)
    expected = expected_rows(args.dataset, args.records)
    first_commit = None

    def visible() -> bool:
        nonlocal first_commit
        if first_commit is None:
            with connection.cursor() as cursor:
                cursor.execute(f"SELECT EXISTS (SELECT 1 FROM {quoted(args.table)})")
                if cursor.fetchone()[0]:
                    first_commit = time.time() - STARTED
            connection.rollback()
        return first_commit is not None

    runs, killed = [Run(args)], 0
    if args.kill_at is not None:
        threshold = args.kill_at * expected

        def reached() -> bool:
            visible()
            return (runs[0].child.poll() is not None
                    or table_rows(connection, args.table, args.dataset,
                                  args.records) >= threshold)

        while not reached():
            time.sleep(0.25)
        if runs[0].child.poll() is None:
            at = table_rows(connection, args.table, args.dataset, args.records)
            killed = kill_tree(runs[0].child)
            print(f"killed {killed} processes at {at} rows", file=sys.stderr, flush=True)
            runs.append(Run(args))
    last = runs[-1]
    while last.child.poll() is None:
        visible()
        time.sleep(0.1 if first_commit is None else 0.5)
    last.reader.join(timeout=30)
    visible()
    if last.child.returncode != 0 or last.done is None:
        raise SystemExit(f"the Spark application failed (exit {last.child.returncode})")
    rows = table_rows(connection, args.table, args.dataset, args.records)
    connection.close()
    if rows < expected:
        raise SystemExit(f"the query ended with {rows} rows of {expected}")
    batches = [b for run in runs for b in run.batches]
    result("spark-jdbc-foreachbatch", settings_of(args), last.done - STARTED,
           first_commit=first_commit, batch_seconds=sum(b["trigger_seconds"] for b in batches),
           batches=len(batches), batch_list=batches, kills=1 if args.kill_at is not None
           and len(runs) > 1 else 0, killed_processes=killed or None)


def main() -> None:
    parser = arguments(__doc__.splitlines()[0])
    parser.add_argument("--inner", action="store_true", help=argparse_hidden())
    args = parser.parse_args()
    if args.mode == "upsert" and not args.dataset.startswith("updates"):
        raise SystemExit("--mode upsert takes the updates dataset")
    if args.dataset not in ("raw", "typed", "updates"):
        raise SystemExit(f"dataset {args.dataset} is Kafka Connect's: not this contender's")
    os.makedirs(args.work, exist_ok=True)
    if args.inner:
        inner(args)
    else:
        outer(args)


def argparse_hidden() -> str:
    import argparse

    return argparse.SUPPRESS


if __name__ == "__main__":
    main()
