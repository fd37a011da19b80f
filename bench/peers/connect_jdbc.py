"""Contender: Kafka Connect (standalone) with Debezium's JDBC sink connector into PostgreSQL.

A Connect worker JVM runs Debezium's JDBC sink on ``--topic`` into ``--table`` until the
table holds the whole topic (:func:`common.table_rows`), then stops; see
:mod:`bench.peers.common` for the contract. The table is created by the connector itself
(``schema.evolution=basic``), as its users let it: from the record's Connect schema it makes
``id bigint, name text, amount double precision, ts bigint`` for the typed datasets and
``topic text, kafka_partition integer, kafka_offset bigint, value bytea`` for ``raw``.

- ``raw``: the value through ``ByteArrayConverter``, then the single message transforms
  ``HoistField$Value`` (field ``value``) and ``InsertField$Value`` (the record's topic,
  partition and offset). ``--mode insert``: ``insert.mode=insert``, no primary key (a
  record delivered again after a crash is a second row); ``--mode upsert``:
  ``insert.mode=upsert`` on the primary key (topic, kafka_partition, kafka_offset).
- ``typed-connect``: ``insert.mode=insert``, no primary key.
- ``updates-connect``: ``insert.mode=upsert`` on the record key's ``id``.

A sink's progress is its consumer group's offsets, committed every
``offset.flush.interval.ms`` for what the connector has flushed: after ``--kill-at``'s
SIGKILL the worker starts again from the last commit, and in insert mode writes again what
it had written since.

Tuned as Debezium's documentation advises: ``batch.size`` rows per JDBC batch (2000 here;
500, 2000 and 5000 were measured), with ``consumer.override.max.poll.records`` as large (a
poll smaller than the batch caps it), larger fetches, ``tasks.max`` 2 (2 and 4 measured); and
the PostgreSQL driver's ``reWriteBatchedInserts=true``, which turns a batch into multi-row
INSERTs. Every setting is printed in the result (the JDBC URL's credentials are not).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import common
import psycopg2

from kafka_direct.testing.jvm_peers import DEBEZIUM_VERSION, debezium_jdbc_sink
from kafka_direct.testing.kafka_connect import KafkaConnect

CONTENDER = "kafka-connect-debezium-jdbc"
BYTES = "org.apache.kafka.connect.converters.ByteArrayConverter"
JSON = "org.apache.kafka.connect.json.JsonConverter"
#: The JVM as Kafka's own scripts start a Connect worker (kafka-run-class.sh's defaults).
JVM = ("-server", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20",
       "-XX:InitiatingHeapOccupancyPercent=35", "-XX:+ExplicitGCInvokesConcurrent",
       "-XX:+ExitOnOutOfMemoryError", "-Djava.awt.headless=true")


def connector(args: Any, url: str, user: str, password: str) -> dict[str, str]:
    """The sink connector's settings (its password among them).

    Its name is its consumer group's (``connect-<name>``): one of its own per run, or a run
    would start where an earlier one on the same topic left off.
    """
    settings = {
        "name": f"bench-{args.table}-{uuid.uuid4().hex[:8]}",
        "connector.class": "io.debezium.connector.jdbc.JdbcSinkConnector",
        "topics": args.topic,
        "tasks.max": str(args.tasks_max),
        "connection.url": url,
        "connection.username": user,
        "connection.password": password,
        "collection.name.format": args.table,
        "quote.identifiers": "true",
        "schema.evolution": "basic",
        "insert.mode": args.mode,
        "delete.enabled": "false",
        "batch.size": str(args.batch_size),
        "use.reduction.buffer": str(args.reduction_buffer).lower(),
        "connection.pool.min_size": "1",
        "connection.pool.max_size": str(max(2, args.tasks_max)),
        "consumer.override.max.poll.records": str(args.max_poll_records),
        "consumer.override.fetch.min.bytes": str(args.fetch_min_bytes),
        "consumer.override.fetch.max.wait.ms": "100",
        "consumer.override.fetch.max.bytes": str(64 * 1024 * 1024),
        "consumer.override.max.partition.fetch.bytes": str(args.partition_fetch_bytes),
        "consumer.override.auto.offset.reset": "earliest",
        # How long the group waits for a killed worker's consumer before the restarted one
        # gets its partitions (Kafka's default 45 s).
        "consumer.override.session.timeout.ms": str(args.session_timeout_ms),
    }
    if args.dataset == "raw":
        settings.update({
            "key.converter": BYTES, "value.converter": BYTES,
            "transforms": "hoist,meta",
            "transforms.hoist.type": "org.apache.kafka.connect.transforms.HoistField$Value",
            "transforms.hoist.field": "value",
            "transforms.meta.type": "org.apache.kafka.connect.transforms.InsertField$Value",
            "transforms.meta.topic.field": "topic",
            "transforms.meta.partition.field": "kafka_partition",
            "transforms.meta.offset.field": "kafka_offset",
        })
        if args.mode == "upsert":
            settings.update({"primary.key.mode": "record_value",
                             "primary.key.fields": "topic,kafka_partition,kafka_offset"})
        else:
            settings["primary.key.mode"] = "none"
    else:
        settings.update({"key.converter": JSON, "value.converter": JSON,
                         "key.converter.schemas.enable": "true",
                         "value.converter.schemas.enable": "true"})
        if args.mode == "upsert":
            settings.update({"primary.key.mode": "record_key", "primary.key.fields": "id"})
        else:
            settings["primary.key.mode"] = "none"
    return settings


def cpu_seconds(pid: int | None) -> float:
    """CPU seconds of a process and its waited-for children (utime, stime, cutime, cstime)."""
    if pid is None:
        return 0.0
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return sum(int(value) for value in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    parser = common.arguments(__doc__ or CONTENDER)
    parser.add_argument("--batch-size", type=int, default=2000,
                        help="Debezium's batch.size: rows per JDBC batch")
    parser.add_argument("--max-poll-records", type=int, default=None,
                        help="the consumer's max.poll.records (default: --batch-size)")
    parser.add_argument("--tasks-max", type=int, default=2,
                        help="tasks (consumers, JDBC connections): 2 beat 4 on 2 cores")
    parser.add_argument("--fetch-min-bytes", type=int, default=1024 * 1024)
    parser.add_argument("--partition-fetch-bytes", type=int, default=8 * 1024 * 1024)
    parser.add_argument("--reduction-buffer", action="store_true",
                        help="use.reduction.buffer: one write per key and batch")
    parser.add_argument("--rewrite-batched-inserts", action=argparse.BooleanOptionalAction,
                        default=True,
                        help="the JDBC driver's reWriteBatchedInserts=true (multi-row INSERTs)")
    parser.add_argument("--offset-flush-ms", type=int, default=10_000,
                        help="offset.flush.interval.ms: how often the sink commits offsets")
    parser.add_argument("--session-timeout-ms", type=int, default=45_000,
                        help="the sink consumer's session.timeout.ms (Kafka's default)")
    parser.add_argument("--heap-mb", type=int, default=2048)
    parser.add_argument("--timeout", type=float, default=3600.0)
    args = parser.parse_args()
    if args.dataset not in ("raw", "typed-connect", "updates-connect"):
        parser.error("Kafka Connect's JDBC sink reads raw, typed-connect or updates-connect")
    if args.max_poll_records is None:
        args.max_poll_records = args.batch_size
    want = common.expected_rows(args.dataset, args.records)
    url, properties = common.jdbc_url(common.dsn(args))
    if args.rewrite_batched_inserts:
        url += "?reWriteBatchedInserts=true"
    sink = connector(args, url, properties["user"], properties.get("password", ""))
    settings: dict[str, Any] = {
        key: value for key, value in sink.items()
        if key not in ("connection.password", "connection.url", "connection.username")}
    settings.update({"debezium": DEBEZIUM_VERSION, "heap_mb": args.heap_mb,
                     "jvm": " ".join(JVM), "offset.flush.interval.ms": args.offset_flush_ms,
                     "reWriteBatchedInserts": args.rewrite_batched_inserts})
    print("settings " + " ".join(f"{k}={v}" for k, v in settings.items()), flush=True)

    database = psycopg2.connect(common.dsn(args))
    database.autocommit = True

    def rows() -> int:
        return common.table_rows(database, args.table, args.dataset, args.records)

    quoted = '"' + args.table.replace('"', '""') + '"'

    def any_row() -> bool:
        """Whether the table shows a row yet (``table_rows`` counts only an upsert's newest)."""
        try:
            with database.cursor() as cursor:
                cursor.execute(f"SELECT EXISTS (SELECT 1 FROM {quoted})")
                return bool(cursor.fetchone()[0])
        except psycopg2.Error:
            return False

    def whole() -> bool:
        """Whether every record has its row: after a kill an insert-mode sink writes some
        twice, and ``table_rows`` counts those too (they would end the run early)."""
        # Timed as seen: the count below is the check's, not the sink's work.
        seen_at[0] = time.monotonic()
        if rows() < want:
            return False
        if args.dataset.startswith("updates") or not kills:
            return True  # without a kill nothing is written twice (the harness checks)
        key = "(kafka_partition, kafka_offset)" if args.dataset == "raw" else "id"
        with database.cursor() as cursor:
            cursor.execute(f"SELECT count(DISTINCT {key}) FROM {quoted}")
            return int(cursor.fetchone()[0]) >= want

    worker = KafkaConnect(
        args.bootstrap_servers, plugins=[debezium_jdbc_sink()], connectors=[sink],
        data_dir=Path(args.work) / "connect", offset_flush_interval_ms=args.offset_flush_ms,
        heap_mb=args.heap_mb, jvm_options=JVM, startup_timeout=300.0)
    kills = 0
    seen_at = [0.0]
    cpu = 0.0
    first_commit: float | None = None
    started = time.monotonic()
    try:
        worker.start()
        ready = time.monotonic() - started
        worker.wait_running(sink["name"], timeout=120.0)

        def progress(target: int | None) -> bool:
            nonlocal first_commit
            have = rows()
            if first_commit is None and (have > 0 or any_row()):
                first_commit = time.monotonic() - started
            if not worker.alive():
                raise SystemExit("Kafka Connect died:\n" + worker.log_tail())
            return whole() if target is None else have >= target

        if args.kill_at is not None:
            if not common.wait_until(lambda: progress(int(args.kill_at * want)), args.timeout,
                                     0.1):
                raise SystemExit("the table never reached --kill-at")
            cpu += cpu_seconds(worker.pid)
            worker.kill()
            killed = time.monotonic()
            kills += 1
            killed_at = rows()
            print(f"killed the worker at {killed_at} rows", flush=True)
            worker.start()
            worker.wait_running(sink["name"], timeout=120.0)
            restarted = round(time.monotonic() - killed, 3)
        if not common.wait_until(lambda: progress(None), args.timeout, 0.5):
            raise SystemExit(f"not caught up within {args.timeout:.0f} s: {rows()} of {want}")
        seconds = seen_at[0] - started
        if kills:
            after_kill = round(time.monotonic() - killed, 3)
        cpu += cpu_seconds(worker.pid)
        worker.stop()
    finally:
        worker.close()
    extra: dict[str, Any] = {"rows": rows(), "first_commit": first_commit,
                             "startup_seconds": round(ready, 3), "jvm_cpu_seconds": round(cpu, 3),
                             "rows_per_second": round(want / seconds, 1),
                             "records_per_second": round(args.records / seconds, 1)}
    if args.kill_at is not None:
        extra.update({"kills": kills, "rows_at_kill": killed_at,
                      "restart_seconds": restarted, "seconds_after_kill": after_kill})
    database.close()
    common.result(CONTENDER, settings, seconds, **extra)


if __name__ == "__main__":
    main()
