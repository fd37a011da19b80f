"""What every contender of the side-by-side benchmark shares: its data, its command line, its
result line and the check of its table.

A contender is a command (``python bench/peers/<name>.py ...``) that the harness
(``bench/peers/compare.py``) runs as a process of its own, so that the CPU of everything it
starts (JVMs, Python workers) is counted. It reads one prepared topic and writes it into a
fresh PostgreSQL table until the table holds the whole topic, then prints one line::

    RESULT {"contender": ..., "settings": {...}, "seconds": ..., ...}

and exits 0. The harness, not the contender, checks the table against the log
(:func:`verify`).

The datasets (all on 4 partitions):

- ``raw``: values of 100 B, no key. Table: ``topic text, kafka_partition integer,
  kafka_offset bigint, key bytea, value bytea`` (Kafka Connect's cannot write a null key
  column it was not given: the key column may be absent).
- ``typed``: JSON values of 4 fields, ``{"id": n, "name": ..., "amount": ..., "ts": ...}``
  (about 80 B), keyed by ``{"id": n}``, every ``id`` once. Table: at least ``id bigint,
  name text, amount double precision, ts bigint``; inserted.
- ``updates``: the same fields, each id written 4 times (:func:`typed_record`), its writes
  in one partition in order; upserted on ``id``, the newest (highest ``ts``) winning.
- ``typed-connect``, ``updates-connect``: the same records in Kafka Connect's JSON with its
  schema envelope (``{"schema": ..., "payload": ...}``), which a JDBC sink needs to know
  the columns' types (Confluent's Avro converter is not on Maven Central).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

PARTITIONS = 4
TS0 = 1_700_000_000_000
DATASETS = ("raw", "typed", "updates", "typed-connect", "updates-connect")

_SCHEMA = {"type": "struct", "name": "bench.Customer", "optional": False, "fields": [
    {"field": "id", "type": "int64", "optional": False},
    {"field": "name", "type": "string", "optional": False},
    {"field": "amount", "type": "double", "optional": False},
    {"field": "ts", "type": "int64", "optional": False}]}
_KEY_SCHEMA = {"type": "struct", "name": "bench.Key", "optional": False,
               "fields": [{"field": "id", "type": "int64", "optional": False}]}


def raw_value(partition: int, index: int) -> bytes:
    """The ``index``-th raw value of ``partition`` (100 B)."""
    return (f"{partition:02d}-{index:012d}-" + "x" * 85).encode()


def typed_record(n: int, records: int, updates: bool) -> tuple[int, dict[str, Any]]:
    """Record ``n``'s partition and fields.

    In ``updates``, id ``i`` is written by records ``n = i + k * (records // 4)`` for k in
    0..3: the same id always lands in partition ``i % 4``, and its later writes at higher
    offsets there, with a higher ``ts``.
    """
    ident = n % max(1, records // 4) if updates else n
    return ident % PARTITIONS, {"id": ident, "name": f"customer-{ident % 100_000:06d}",
                                "amount": round((n * 37) % 1_000_000 / 100, 2), "ts": TS0 + n}


def typed_records(dataset: str, records: int) -> Iterator[tuple[int, bytes, bytes]]:
    """(partition, key, value) of every record of a typed dataset, in produce order."""
    updates = dataset.startswith("updates")
    envelope = dataset.endswith("-connect")
    for n in range(records):
        partition, fields = typed_record(n, records, updates)
        key: Any = {"id": fields["id"]}
        value: Any = fields
        if envelope:
            key = {"schema": _KEY_SCHEMA, "payload": key}
            value = {"schema": _SCHEMA, "payload": fields}
        yield (partition, json.dumps(key, separators=(",", ":")).encode(),
               json.dumps(value, separators=(",", ":")).encode())


def produce(kafka: Any, topic: str, dataset: str, records: int) -> None:
    """Create ``topic`` and produce ``records`` records of ``dataset`` into it.

    Idempotent producers: a retried batch would otherwise land after the next ones, and a
    record's offset would no longer be its place in the dataset (what :func:`verify` checks).
    """
    kafka.create_topic(topic, PARTITIONS)
    if dataset == "raw":
        per = records // PARTITIONS
        for partition in range(PARTITIONS):
            kafka.produce(topic, (raw_value(partition, i) for i in range(per)),
                          partition=partition, enable_idempotence=True)
        return
    by_partition: dict[int, tuple[list[bytes], list[bytes]]] = {
        p: ([], []) for p in range(PARTITIONS)}
    for partition, key, value in typed_records(dataset, records):
        by_partition[partition][0].append(key)
        by_partition[partition][1].append(value)
    for partition, (keys, values) in by_partition.items():
        kafka.produce(topic, values, partition=partition, keys=keys, enable_idempotence=True)


def expected_rows(dataset: str, records: int) -> int:
    """How many rows the table must end with."""
    if dataset == "raw":
        return records // PARTITIONS * PARTITIONS
    return records // 4 if dataset.startswith("updates") else records


def verify(connection: Any, table: str, dataset: str, records: int) -> dict[str, int]:
    """Compare a contender's table with the log: rows, duplicates, gaps, stale rows.

    ``duplicates``: rows beyond one per record (raw: per partition and offset; typed: per
    id). ``gaps``: records of the log with no row. ``stale``: upserted ids whose row is not
    the newest write (an older ``ts`` won). ``wrong``: rows whose fields differ from the
    record they claim to be.
    """
    quoted = '"' + table.replace('"', '""') + '"'
    with connection.cursor() as cursor:
        if dataset == "raw":
            cursor.execute(f"SELECT count(*), count(DISTINCT (kafka_partition, kafka_offset)), "
                           f"count(*) FILTER (WHERE value IS DISTINCT FROM convert_to("
                           f"lpad(kafka_partition::text, 2, '0') || '-' || "
                           f"lpad(kafka_offset::text, 12, '0') || '-' || repeat('x', 85), "
                           f"'UTF8')) FROM {quoted}")
            rows, distinct, wrong = cursor.fetchone()
            want = expected_rows(dataset, records)
            return {"rows": rows, "duplicates": rows - distinct, "gaps": want - distinct,
                    "stale": 0, "wrong": wrong}
        updates = dataset.startswith("updates")
        quarter = max(1, records // 4)
        # The newest write of id i is n = i + 3 * quarter (updates); of record n, n itself.
        newest = f"id + {3 * quarter}" if updates else "id"
        cursor.execute(
            f"SELECT count(*), count(DISTINCT id), "
            f"count(*) FILTER (WHERE ts IS DISTINCT FROM {TS0} + {newest}), "
            f"count(*) FILTER (WHERE name IS DISTINCT FROM 'customer-' || "
            f"lpad((id % 100000)::text, 6, '0') OR amount IS DISTINCT FROM "
            f"round((((ts - {TS0}) * 37) % 1000000) / 100.0, 2)) "
            f"FROM {quoted} WHERE id >= 0 AND id < {quarter if updates else records}")
        rows, distinct, stale, wrong = cursor.fetchone()
        cursor.execute(f"SELECT count(*) FROM {quoted}")
        (everything,) = cursor.fetchone()
    want = expected_rows(dataset, records)
    return {"rows": everything, "duplicates": rows - distinct, "gaps": want - distinct,
            "stale": stale, "wrong": wrong + everything - rows}


def arguments(description: str) -> argparse.ArgumentParser:
    """The command line every contender takes (it may add its own options)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--bootstrap-servers", required=True)
    parser.add_argument("--dsn-env", default="BENCH_PG_DSN",
                        help="environment variable holding the libpq connection string")
    parser.add_argument("--topic", required=True)
    parser.add_argument("--table", required=True, help="a fresh table (the harness drops it)")
    parser.add_argument("--dataset", choices=DATASETS, required=True)
    parser.add_argument("--records", type=int, required=True, help="records in the topic")
    parser.add_argument("--mode", choices=("insert", "upsert"), default="insert")
    parser.add_argument("--master", default="local[2]", help="Spark contenders' master")
    parser.add_argument("--kill-at", type=float, default=None,
                        help="kill -9 the contender's processes once the table holds this "
                             "fraction of the rows, start it again and let it finish")
    parser.add_argument("--work", required=True, help="a scratch folder of the run's own")
    return parser


def dsn(args: argparse.Namespace) -> str:
    """The libpq connection string the harness passed in the environment."""
    value = os.environ.get(args.dsn_env, "")
    if not value:
        raise SystemExit(f"{args.dsn_env} is not set: the harness passes the DSN there")
    return value


def jdbc_url(libpq: str) -> tuple[str, dict[str, str]]:
    """A libpq DSN (key=value or a URI) as a JDBC URL and its properties (user, password).

    Raises:
        SystemExit: The DSN names a Unix socket (the JDBC driver speaks TCP only) or is
            not a libpq DSN.
    """
    from psycopg2.extensions import parse_dsn

    try:
        parts = parse_dsn(libpq)
    except Exception as error:  # psycopg2.ProgrammingError; its text may quote the DSN
        raise SystemExit(f"the harness's DSN is not a libpq connection string: "
                         f"{type(error).__name__}") from None
    host = parts.get("host", "127.0.0.1")
    if host.startswith("/"):
        raise SystemExit("the JDBC peers need PostgreSQL over TCP: give the DSN a host name "
                         "or address, not a socket folder")
    properties = {"user": parts.get("user", "postgres")}
    if "password" in parts:
        properties["password"] = parts["password"]
    return (f"jdbc:postgresql://{host}:{parts.get('port', '5432')}/"
            f"{parts.get('dbname', 'postgres')}", properties)


def table_rows(connection: Any, table: str, dataset: str, records: int) -> int:
    """Rows of the table that count toward done (0 while it does not exist yet)."""
    import psycopg2

    quoted = '"' + table.replace('"', '""') + '"'
    with connection.cursor() as cursor:
        try:
            if dataset.startswith("updates"):
                cursor.execute(f"SELECT count(*) FROM {quoted} WHERE ts >= "
                               f"{TS0 + 3 * max(1, records // 4)}")
            else:
                cursor.execute(f"SELECT count(*) FROM {quoted}")
            return int(cursor.fetchone()[0])
        except (psycopg2.errors.UndefinedTable, psycopg2.errors.UndefinedColumn):
            # Not created yet, or not yet with its columns (a job may add them later).
            connection.rollback()
            return 0


def descendants(root: int) -> set[int]:
    """``root`` and every process below it (from /proc)."""
    parents = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as stat:
                    text = stat.read()
            except OSError:
                continue
            parents[int(entry)] = int(text[text.rindex(")") + 2:].split()[1])
    tree, changed = {root}, True
    while changed:
        grown = tree | {pid for pid, parent in parents.items() if parent in tree}
        changed, tree = grown != tree, grown
    return tree


def kill_tree(root: int) -> int:
    """SIGKILL ``root`` and every process below it, whatever session each is in.

    The tree is frozen first (SIGSTOP, listed again until no new process appears), so that
    nothing forks or is re-parented between the listing and the kill: a crash of the whole
    application at one moment, as a machine's loss would be. Returns how many were killed.
    """
    tree: set[int] = set()
    while True:
        found = descendants(root) - tree
        if not found:
            break
        for pid in found:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGSTOP)
        tree |= found
    for pid in tree:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return len(tree)


def any_row(connection: Any, table: str) -> bool:
    """Whether the table exists and shows a committed row (of any write)."""
    import psycopg2

    quoted = '"' + table.replace('"', '""') + '"'
    with connection.cursor() as cursor:
        try:
            cursor.execute(f"SELECT 1 FROM {quoted} LIMIT 1")
            return cursor.fetchone() is not None
        except psycopg2.errors.UndefinedTable:
            connection.rollback()
            return False


def wait_until(done: Callable[[], bool], timeout: float, every: float = 0.25) -> bool:
    """Poll ``done`` until it holds or ``timeout`` seconds pass."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if done():
            return True
        time.sleep(every)
    return done()


def result(contender: str, settings: dict[str, Any], seconds: float, **more: Any) -> None:
    """Print the contender's result line (the harness reads the last one)."""
    print("RESULT " + json.dumps({"contender": contender, "settings": settings,
                                  "seconds": seconds, **more}), flush=True)
    sys.stdout.flush()
