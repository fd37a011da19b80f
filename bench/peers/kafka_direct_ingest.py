"""Contender: ``kafka-direct ingest`` (either API) writing a topic into PostgreSQL exactly once.

The real command (``python -m kafka_direct.app.cli ingest``) in a process of its own, as a
user runs it: raw records as bytea (``raw``), a JSON value's fields as typed columns
(``typed``, inserted), or those columns upserted on the key's ``id`` (``updates``). Batches
of about ``--batch-records`` through ``--max-rate-per-partition``; the job stops by itself
after one idle batch. With ``--kill-at`` the job's whole process tree (the command, Spark's
JVM in a session of its own, its Python workers) is frozen and killed with SIGKILL once the
table holds that fraction of the rows, and the same command is run again: it resumes from
the offsets in PostgreSQL.

Usage: see ``common.arguments`` and ``--api``, ``--batch-records``.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import common

ROOT = Path(__file__).resolve().parents[2]
_DSTREAM_LINE = re.compile(r"records (\d+)\s+scheduling \S+(?: s)?\s+processing ([\d.]+) s")
_QUERY_LINE = re.compile(r"^batch (\d+): (\d+) records in (\d+) ms", re.MULTILINE)


def rate(args) -> int:
    """Records per second per partition that make a batch of ``--batch-records``."""
    return max(1, round(args.batch_records / common.PARTITIONS / args.batch_interval))


def command(args) -> list[str]:
    argv = [sys.executable, "-m", "kafka_direct.app.cli", "ingest",
            "--bootstrap-servers", args.bootstrap_servers, "--dsn", f"env:{args.dsn_env}",
            "--topic", args.topic, "--group", args.table, "--table", args.table,
            "--api", args.api, "--batch-interval", str(args.batch_interval),
            "--max-rate-per-partition", str(rate(args)), "--stop-after-idle", "1",
            "--master", args.master, "--state-dir", str(Path(args.work) / "state")]
    if args.dataset != "raw":
        argv += ["--value-format", "json"]
    if args.mode == "upsert":
        argv += ["--key-format", "json", "--key-columns", "id"]
    if args.api == "structured":
        argv += ["--checkpoint-dir", str(Path(args.work) / "checkpoint")]
    return argv


def main() -> None:
    parser = common.arguments(__doc__.splitlines()[0])
    parser.add_argument("--api", choices=("dstream", "structured"), default="dstream")
    parser.add_argument("--batch-records", type=int, default=200_000)
    parser.add_argument("--batch-interval", type=float, default=0.5,
                        help="shorter than a batch takes: batches follow one another with no "
                             "idle wait, as the peers' AvailableNow batches do")
    args = parser.parse_args()
    import psycopg2

    connection = psycopg2.connect(common.dsn(args))
    connection.autocommit = True
    want = common.expected_rows(args.dataset, args.records)
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
    argv = command(args)
    start = time.perf_counter()
    first: list[float] = []
    caught_up: list[float] = []
    stop_watch = threading.Event()

    def watch() -> None:
        # As the peers are timed: from the start until the table holds the whole topic
        # (polled), not until the job has noticed an idle batch and shut Spark down.
        watcher = psycopg2.connect(common.dsn(args))
        watcher.autocommit = True
        try:
            while not stop_watch.is_set():
                if not first and common.any_row(watcher, args.table):
                    first.append(time.perf_counter() - start)
                rows = common.table_rows(watcher, args.table, args.dataset, args.records)
                if rows >= want and (not kill_at or kills_seen()):
                    caught_up.append(time.perf_counter() - start)
                    return
                # Counting a growing table costs PostgreSQL CPU: as often as the peers count.
                time.sleep(0.05 if not first else 0.5)
        finally:
            watcher.close()

    outputs, kills = [], 0
    kill_at = None if args.kill_at is None else args.kill_at * want

    def kills_seen() -> bool:
        return kills > 0

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    while True:
        log = Path(args.work) / f"ingest-{len(outputs)}.out"
        with open(log, "w+") as out:
            job = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT,
                                   env=environment, cwd=ROOT, start_new_session=True)
            killed = False
            try:
                while job.poll() is None:
                    if kill_at is not None and not kills and common.table_rows(
                            connection, args.table, args.dataset, args.records) >= kill_at:
                        # The whole application: Spark's JVM runs in a session of its own.
                        common.kill_tree(job.pid)
                        job.wait()
                        killed, kills = True, kills + 1
                        break
                    time.sleep(0.1)
            except BaseException:
                common.kill_tree(job.pid)  # never leave the job running
                raise
            out.seek(0)
            outputs.append(out.read())
        if killed:
            continue
        if job.returncode != 0:
            sys.stdout.write(outputs[-1][-5000:])
            raise SystemExit(f"kafka-direct ingest failed with exit code {job.returncode}")
        break
    exit_seconds = time.perf_counter() - start
    watcher.join(5.0)  # the job exited with every row committed: one more poll sees them
    stop_watch.set()
    if not caught_up:
        raise SystemExit("the job exited but its table never held the whole topic")
    seconds = caught_up[0]
    text = "\n".join(outputs)
    if args.api == "dstream":
        batches = [(int(n), float(s)) for n, s in _DSTREAM_LINE.findall(text)]
    else:
        batches = [(int(n), int(ms) / 1000) for _, n, ms in _QUERY_LINE.findall(text)]
    loaded = [(n, s) for n, s in batches if n]
    settings = {"api": args.api, "master": args.master, "batch records": args.batch_records,
                "max-rate-per-partition": rate(args),
                "batch interval": f"{args.batch_interval} s",
                "timed": "start to the table holding the whole topic (polled)",
                "value format": "raw" if args.dataset == "raw"
                else "json", "write": "upsert on key id" if args.mode == "upsert"
                else "insert", "sink": "transactional (rows and offsets in one transaction)"}
    common.result(f"kafka-direct ingest --api {args.api}", settings, seconds,
                  batch_seconds=sum(s for _, s in loaded), batches=len(loaded),
                  first_commit=first[0] if first else None, kills=kills,
                  exit_seconds=exit_seconds,
                  tracebacks=text.count("Traceback (most recent call last)"))



if __name__ == "__main__":
    main()
