"""kafka-direct side by side with the JVM connectors users would pick instead: one command.

Starts Apache Kafka and PostgreSQL once, produces the same topics for every contender
(``common.py``: 100 B raw records; JSON values of 4 fields, inserted; the same fields
written 4 times per id, upserted; the JSON ones also in Kafka Connect's schema envelope),
then runs the contenders one after another, alternating, ``--rounds`` times, each a process
of its own under a subreaper so that the CPU of everything it starts (JVMs, Python
workers) is counted, beside the broker's and PostgreSQL's CPU from /proc:

read path (``--part read``; ``local[1]`` and ``local[2]``), into Spark's ``noop`` sink:
  our ``format("kafka-direct")`` and Spark's ``format("kafka")`` (``AvailableNow`` stream,
  and ``spark.read``), our ``KafkaUtils.createRDD(...).count()`` and the Scala one through
  Spark's JVM, and a raw confluent-kafka loop;
into PostgreSQL (``--part ingest``): ``kafka-direct ingest`` (both APIs), Spark's ``kafka``
  source with ``foreachBatch`` and its JDBC writer, Kafka Connect standalone with Debezium's
  JDBC sink, and a plain COPY of the same rows; every table checked against the log;
kill -9 (``--part kill``): each writer killed mid-run and started again; duplicates, gaps
  and stale rows counted.

Prints the settings of each contender, medians with their spreads, CPU microseconds per
record per process group, the ratios the targets name; writes the results as JSON
(``--out``), the tables as Markdown (``--markdown``) and a plot of rows/s (``--plot``).

Runs on the PySpark release whose Kafka connectors Maven Central serves (a virtual
environment of its own, made the first time, when the project's PySpark is newer).

Usage: python bench/peers/compare.py [--records N] [--rounds R] [--part read|ingest|kill]...
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path[:0] = [str(HERE), str(ROOT / "bench"), str(ROOT)]

import common  # noqa: E402
from environment import reexec_in_peer_environment  # noqa: E402
from ingest_job import WRAPPER  # noqa: E402  (the subreaper that counts a run's CPU)


@dataclass(frozen=True)
class Contender:
    """One way of doing the job, as a command (``script`` with ``args``) or a plain COPY."""

    key: str
    label: str
    family: str
    script: str | None
    args: tuple[str, ...] = ()
    dataset: str = "raw"
    mode: str = "insert"


@dataclass
class Measurement:
    """One run of one contender."""

    key: str
    label: str
    family: str
    dataset: str
    round: int
    records: int
    wall: float
    cpu: float
    cpu_broker: float
    cpu_postgres: float
    result: dict[str, Any] = field(default_factory=dict)
    check: dict[str, int] = field(default_factory=dict)
    load: float = 0.0  # the machine's 1-minute load average when the run ended


def process_cpu(pid: int) -> float:
    """CPU seconds of a service: its process and every process below it, running (the
    broker's threads; PostgreSQL's checkpointer, WAL writer, backends) or reaped."""
    total = 0
    for member in common.descendants(pid):
        try:
            with open(f"/proc/{member}/stat") as stat:
                text = stat.read()
        except OSError:
            continue
        fields = text[text.rindex(")") + 2:].split()
        total += sum(int(fields[i]) for i in (11, 12, 13, 14))
    return total / os.sysconf("SC_CLK_TCK")


def service_pid(service: Any) -> int:
    process = getattr(getattr(service, "_process", None), "process", None)
    if process is None:
        nodes = getattr(service, "nodes", None) or []
        process = getattr(getattr(nodes[0], "_process", None), "process", None) if nodes else None
    if process is None:
        raise SystemExit(f"no process of {service!r} to measure")
    return int(process.pid)


def drop(pg: Any, table: str) -> None:
    connection = pg.connect()
    connection.autocommit = True
    with connection.cursor() as cursor:
        cursor.execute(f'DROP TABLE IF EXISTS "{table}"')
        # The direct stream's and the source's offsets of a finished run: each run has its
        # own group and table, so only the tables go.
    connection.close()


def run_command(args: argparse.Namespace, contender: Contender, kafka: Any, pg: Any,
                pids: tuple[int, int], round_: int, kill_at: float | None = None,
                master: str = "local[2]") -> Measurement:
    """Run a contender's command once on a fresh table, measure it and check the table."""
    table = f"b_{contender.key.replace('-', '_')}_{contender.dataset.replace('-', '_')}_{round_}"
    records = args.records
    work = tempfile.mkdtemp(prefix=f"{contender.key}-", dir=args.work)
    argv = [sys.executable, "-c", WRAPPER, sys.executable, str(HERE / str(contender.script)),
            "--bootstrap-servers", kafka.bootstrap_servers,
            "--topic", args.topics[contender.dataset], "--records", str(records)]
    if contender.family == "read":
        argv += [*contender.args, "--master", master, "--work", work]
    else:
        argv += ["--dsn-env", "BENCH_PG_DSN", "--table", table, "--dataset", contender.dataset,
                 "--mode", contender.mode, "--work", work, "--master", master,
                 *contender.args]
        if kill_at is not None:
            argv += ["--kill-at", str(kill_at)]
        drop(pg, table)
    environment = {**os.environ, "BENCH_PG_DSN": pg.dsn, "PYTHONPATH": os.pathsep.join(
        [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    broker, postgres = process_cpu(pids[0]), process_cpu(pids[1])
    start = time.perf_counter()
    process = subprocess.Popen(argv, env=environment, cwd=work, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        stdout, stderr = process.communicate(timeout=args.timeout)
    except subprocess.TimeoutExpired:
        common.kill_tree(process.pid)  # the contender and every JVM and worker it started
        process.communicate()
        raise SystemExit(f"{contender.label} ({contender.dataset}) did not finish within "
                         f"{args.timeout:.0f} s") from None
    finished = subprocess.CompletedProcess(argv, process.returncode, stdout, stderr)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    # The services' CPU up to here: the check of the table below is the harness's, not the
    # contender's.
    broker, postgres = process_cpu(pids[0]) - broker, process_cpu(pids[1]) - postgres
    lines = [line for line in finished.stdout.splitlines() if line.startswith("RESULT ")]
    if finished.returncode != 0 or not lines:
        sys.stdout.write(finished.stdout[-3000:] + finished.stderr[-5000:])
        raise SystemExit(f"{contender.label} ({contender.dataset}) failed with exit code "
                         f"{finished.returncode}")
    result = json.loads(lines[-1][len("RESULT "):])
    check: dict[str, int] = {}
    if contender.family != "read":
        connection = pg.connect()
        check = common.verify(connection, table, contender.dataset, records)
        connection.close()
        drop(pg, table)
        if kill_at is None and any(check[k] for k in ("duplicates", "gaps", "stale", "wrong")):
            raise SystemExit(f"{contender.label} on {contender.dataset} left the table "
                             f"unequal to the log: {check}")
    return Measurement(contender.key, contender.label, contender.family, contender.dataset,
                       round_, int(result.get("records", records)), wall, cpu, broker,
                       postgres, result, check, os.getloadavg()[0])


def plain_copy(args: argparse.Namespace, pg: Any, pids: tuple[int, int], dataset: str,
               round_: int) -> Measurement:
    """The same rows, in memory, COPYed into a fresh table in one transaction."""
    from psycopg2 import sql

    from sinks.postgres_writer import copy_rows

    table = f"b_copy_{dataset}_{round_}"
    records = args.records
    if dataset == "raw":
        per = records // common.PARTITIONS
        rows: list[tuple[Any, ...]] = [
            (args.topics["raw"], p, i, common.raw_value(p, i))
            for p in range(common.PARTITIONS) for i in range(per)]
        columns: tuple[str, ...] = ("topic", "kafka_partition", "kafka_offset", "value")
        ddl = ("topic text NOT NULL, kafka_partition integer NOT NULL, kafka_offset bigint NOT "
               "NULL, value bytea, PRIMARY KEY (topic, kafka_partition, kafka_offset)")
    else:
        rows = [tuple(common.typed_record(n, records, False)[1].values())
                for n in range(records)]
        columns = ("id", "name", "amount", "ts")
        ddl = "id bigint PRIMARY KEY, name text, amount double precision, ts bigint"
    drop(pg, table)
    connection = pg.connect()
    with connection, connection.cursor() as cursor:
        cursor.execute(f'CREATE TABLE "{table}" ({ddl})')
    broker, postgres = process_cpu(pids[0]), process_cpu(pids[1])
    cpu = time.process_time()
    start = time.perf_counter()
    with connection, connection.cursor() as cursor:
        copy_rows(cursor, sql.Identifier(table), columns, rows)
    wall = time.perf_counter() - start
    cpu = time.process_time() - cpu
    check = common.verify(connection, table, dataset, records)
    connection.close()
    drop(pg, table)
    return Measurement("copy", "plain COPY, one transaction", "copy", dataset, round_, records,
                       wall, cpu, process_cpu(pids[0]) - broker, process_cpu(pids[1]) - postgres,
                       {"settings": {"rows": "in memory, text COPY, one transaction",
                                     "table": "primary key as the jobs' tables"},
                        "seconds": wall}, check)


def read_contenders(warmup: int = 0) -> list[Contender]:
    """The read path: ours and Spark's, each way of reading, and the raw loop.

    With ``warmup``, each Spark contender first reads the topic that many times in its
    session and the read after those is measured: a running query's later batches, with
    the JIT's work and the Python workers' start behind it.
    """
    if warmup:
        return [Contender(f"{c.key}-warm", f"{c.label}, warm", c.family, c.script,
                          (*c.args, "--warmup", str(warmup)))
                for c in read_contenders() if c.key != "read-raw"]
    out = []
    for mode, what in (("stream", "readStream AvailableNow -> noop"),
                       ("batch", "spark.read -> noop"), ("rdd", "createRDD().count()")):
        for impl, whose in (("kafka-direct", "kafka-direct"), ("kafka", "Spark JVM")):
            name = ("KafkaUtils.createRDD (Scala, py4j)" if mode == "rdd" and impl == "kafka"
                    else "KafkaUtils.createRDD (kafka-direct)" if mode == "rdd"
                    else f'format("{impl}") {what}')
            out.append(Contender(f"read-{mode}-{impl}", name, "read", "spark_read.py",
                                 ("--impl", impl, "--mode", mode, "--partitions",
                                  str(common.PARTITIONS))))
            del whose
    out.append(Contender("read-raw", "raw confluent-kafka loop", "read", "spark_read.py",
                         ("--impl", "kafka-direct", "--mode", "raw", "--partitions",
                          str(common.PARTITIONS))))
    return out


def ingest_contenders(datasets: list[str]) -> list[Contender]:
    """Into PostgreSQL: ours (both APIs), Spark's foreachBatch JDBC, Connect's JDBC sink."""
    out: list[Contender] = []
    for dataset in datasets:
        mode = "upsert" if dataset == "updates" else "insert"
        for api in ("dstream", "structured"):
            out.append(Contender(f"ours-{api}", f"kafka-direct ingest --api {api}",
                                 "kafka-direct", "kafka_direct_ingest.py", ("--api", api),
                                 dataset, mode))
        out.append(Contender("spark-jdbc", "Spark kafka + foreachBatch JDBC", "spark",
                             "spark_jdbc.py", (), dataset, mode))
        connect_dataset = dataset if dataset == "raw" else f"{dataset}-connect"
        out.append(Contender("connect-jdbc", "Kafka Connect + Debezium JDBC sink", "connect",
                             "connect_jdbc.py", (), connect_dataset, mode))
    return out


def rotated(contenders: list[Contender], round_: int) -> list[Contender]:
    """The contenders in a round's order: each round starts one further along, so that no
    contender always runs first, or always right after another."""
    if not contenders:
        return contenders
    shift = round_ % len(contenders)
    return contenders[shift:] + contenders[:shift]


def spread(values: list[float]) -> str:
    if len(values) == 1:
        return ""
    return f" [{min(values):,.0f}-{max(values):,.0f}]"


def summarise(measurements: list[Measurement], records: int) -> dict[str, Any]:
    """Medians per (contender, dataset, master): rates, CPU per record, spreads."""
    groups: dict[tuple[str, str, str], list[Measurement]] = {}
    for m in measurements:
        master = str(m.result.get("settings", {}).get("master", "")) if m.family == "read" else ""
        groups.setdefault((m.key, m.dataset, master), []).append(m)
    summary = {}
    for (key, dataset, master), runs in groups.items():
        # Every record is a row written (an upsert of ``updates`` too): rates per record.
        rows = records
        whole = [rows / m.wall for m in runs]
        timed = [rows / float(m.result["seconds"]) for m in runs if m.result.get("seconds")]
        batch = [rows / float(m.result["batch_seconds"]) for m in runs
                 if m.result.get("batch_seconds")]
        per_record = 1e6 / records
        summary[f"{key}|{dataset}|{master}"] = {
            "key": key, "label": runs[0].label, "family": runs[0].family, "dataset": dataset,
            "master": master, "runs": len(runs),
            "whole_rate": statistics.median(whole), "whole_rates": whole,
            "rate": statistics.median(timed) if timed else None, "rates": timed,
            "batch_rate": statistics.median(batch) if batch else None, "batch_rates": batch,
            "first_commit": statistics.median(
                [float(m.result["first_commit"]) for m in runs
                 if m.result.get("first_commit") is not None]) if any(
                m.result.get("first_commit") is not None for m in runs) else None,
            "cpu_us": statistics.median(m.cpu for m in runs) * per_record,
            "broker_us": statistics.median(m.cpu_broker for m in runs) * per_record,
            "postgres_us": statistics.median(m.cpu_postgres for m in runs) * per_record,
            # Per core: records per CPU second of every process involved (the contender's,
            # the broker's, PostgreSQL's), the measure that does not depend on how many
            # cores the machine lends each of them.
            "per_cpu_second": statistics.median(
                records / (m.cpu + m.cpu_broker + m.cpu_postgres) for m in runs),
            "load": [round(m.load, 1) for m in runs],
            "settings": runs[0].result.get("settings", {}),
            "detail": {k: v for k, v in runs[0].result.items()
                       if k not in ("settings", "contender")},
        }
    return summary


def fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


def markdown(summary: dict[str, Any], kills: list[Measurement], header: str) -> str:
    """The results as Markdown tables (the read path, into PostgreSQL, kill -9)."""
    out = [header, ""]
    reads = [s for s in summary.values() if s["family"] == "read"]
    if reads:
        out += ["| read path | master | records/s, the read (median [min-max]) | "
                "its batch | records/s, start included | CPU us/record (contender, start "
                "included) | broker us/record |", "|---|---|---|---|---|---|---|"]
        for s in sorted(reads, key=lambda s: (s["master"], s["key"])):
            out.append(f"| {s['label']} | {s['master']} | {fmt(s['rate'])}"
                       f"{spread(s['rates'])} | {fmt(s['batch_rate'])} | "
                       f"{fmt(s['whole_rate'])}"
                       f"{spread(s['whole_rates'])} | {s['cpu_us']:.2f} | "
                       f"{s['broker_us']:.2f} |")
        out.append("")
    writes = [s for s in summary.values() if s["family"] != "read"]
    if writes:
        out += ["| into PostgreSQL | dataset | rows/s, start to caught up (median [min-max]) "
                "| batches rows/s | first rows | CPU us/record: contender / broker / "
                "PostgreSQL | rows per CPU second (all three) |",
                "|---|---|---|---|---|---|---|"]
        for s in sorted(writes, key=lambda s: (s["dataset"].split("-")[0], s["family"],
                                               s["key"])):
            first = s["first_commit"]
            out.append(f"| {s['label']} | {s['dataset']} | {fmt(s['rate'])}"
                       f"{spread(s['rates'])} | {fmt(s['batch_rate'])} | "
                       f"{'-' if first is None else f'{first:.1f} s'} | "
                       f"{s['cpu_us']:.1f} / {s['broker_us']:.1f} / {s['postgres_us']:.1f} | "
                       f"{fmt(s['per_cpu_second'])} |")
        out.append("")
    if kills:
        out += ["| kill -9 mid-run, then restarted | dataset | rows | duplicates | gaps | "
                "stale | wrong |", "|---|---|---|---|---|---|---|"]
        for m in kills:
            c = m.check
            out.append(f"| {m.label} | {m.dataset} | {c['rows']:,} | {c['duplicates']:,} | "
                       f"{c['gaps']:,} | {c['stale']:,} | {c['wrong']:,} |")
        out.append("")
    return "\n".join(out)


def ratios(summary: dict[str, Any]) -> list[str]:
    """The ratios the targets name, from the medians of this run."""
    def rate(key: str, dataset: str, master: str = "local[2]",
             field_: str = "rate") -> float | None:
        s = summary.get(f"{key}|{dataset}|{master}")
        return None if s is None else s[field_]

    lines = []
    for master in ("local[1]", "local[2]"):
        for ours, theirs, what, target in (
                ("read-stream-kafka-direct", "read-stream-kafka", "source, AvailableNow", 1.0),
                ("read-batch-kafka-direct", "read-batch-kafka", "source, spark.read", 1.0),
                ("read-rdd-kafka-direct", "read-rdd-kafka", "KafkaRDD count", 1.0),
                ("read-stream-kafka-direct-warm", "read-stream-kafka-warm",
                 "source, AvailableNow, warm", 1.0),
                ("read-batch-kafka-direct-warm", "read-batch-kafka-warm",
                 "source, spark.read, warm", 1.0),
                ("read-rdd-kafka-direct-warm", "read-rdd-kafka-warm", "KafkaRDD count, warm",
                 1.0)):
            a, b = rate(ours, "raw", master), rate(theirs, "raw", master)
            if a and b:
                lines.append(f"{what}, {master}: kafka-direct / Spark JVM = {a / b:.2f}x "
                             f"(target >= {target})")
            a = rate(ours, "raw", master, "whole_rate")
            b = rate(theirs, "raw", master, "whole_rate")
            if a and b:
                lines.append(f"{what}, {master}, start included: {a / b:.2f}x "
                             f"(target >= {target})")
        for suffix in ("", "-warm"):
            a = rate(f"read-stream-kafka-direct{suffix}", "raw", master, "batch_rate")
            b = rate(f"read-stream-kafka{suffix}", "raw", master, "batch_rate")
            if a and b:
                lines.append(f"source per batch{suffix.replace('-', ', ')}, {master}: "
                             f"{a / b:.2f}x (target >= 1.0)")
    for dataset in ("raw", "typed", "updates"):
        for api in ("dstream", "structured"):
            ours = rate(f"ours-{api}", dataset, "")
            if not ours:
                continue
            for peer, connect_dataset, target in (
                    ("spark-jdbc", dataset, 1.5),
                    ("connect-jdbc", dataset if dataset == "raw" else f"{dataset}-connect", 2.0)):
                theirs = rate(peer, connect_dataset, "")
                if theirs:
                    lines.append(f"ingest {dataset}, --api {api} / {peer}: "
                                 f"{ours / theirs:.2f}x (target >= {target})")
                a = rate(f"ours-{api}", dataset, "", "per_cpu_second")
                b = rate(peer, connect_dataset, "", "per_cpu_second")
                if a and b:
                    lines.append(f"ingest {dataset}, --api {api} / {peer}, per core (records "
                                 f"per CPU second of all processes): {a / b:.2f}x")
            copy = rate("copy", dataset, "")
            if copy:
                lines.append(f"ingest {dataset}, --api {api} / plain COPY: {ours / copy:.2f}x")
    return lines


def plot(summary: dict[str, Any], path: Path, header: str) -> None:
    """A bar chart of rows/s per contender (the read path and into PostgreSQL)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter

    writes = sorted((s for s in summary.values() if s["family"] != "read" and s["rate"]),
                    key=lambda s: (s["dataset"].split("-")[0], s["family"], s["key"]))
    reads = sorted((s for s in summary.values() if s["family"] == "read" and s["rate"]),
                   key=lambda s: (s["master"], s["key"]))
    figure, axes = plt.subplots(1, 2, figsize=(15, 7.5))
    colours = {"kafka-direct": "#2b7bba", "spark": "#e8743b", "connect": "#8e6bbf",
               "copy": "#7f7f7f"}
    for axis, group, title in ((axes[0], reads, "read path: records/s"),
                               (axes[1], writes, "into PostgreSQL: rows/s (whole run)")):
        labels = [(s["label"] + (f" {s['master']}" if s["family"] == "read" else
                                 f" [{s['dataset'].split('-')[0]}]")) for s in group]
        values = [s["rate"] for s in group]
        errors = [[s["rate"] - min(s["rates"]) for s in group],
                  [max(s["rates"]) - s["rate"] for s in group]]
        colour = [colours.get(s["family"], "#2b7bba") if s["family"] != "read" else
                  ("#2b7bba" if "kafka-direct" in s["key"] else
                   "#7f7f7f" if s["key"] == "read-raw" else "#e8743b") for s in group]
        axis.barh(range(len(group)), values, xerr=errors, color=colour)
        axis.set_yticks(range(len(group)), labels, fontsize=7)
        axis.invert_yaxis()
        axis.set_title(title, fontsize=10)
        axis.xaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value / 1000:,.0f}k"))
    figure.suptitle(header, fontsize=9)
    figure.tight_layout()
    figure.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--part", action="append", choices=("read", "ingest", "kill"),
                        help="what to run (repeatable; default all)")
    parser.add_argument("--dataset", action="append", choices=("raw", "typed", "updates"),
                        help="datasets into PostgreSQL (repeatable; default all)")
    parser.add_argument("--only", action="append", default=[],
                        help="contender keys to run (repeatable; default all), e.g. ours-dstream")
    parser.add_argument("--masters", default="local[1],local[2]",
                        help="the read path's Spark masters")
    parser.add_argument("--read-warmup", type=int, default=0,
                        help="reads in each Spark session before the measured one (0: the "
                             "session's first read, start-up costs included)")
    parser.add_argument("--kill-at", type=float, default=0.5)
    parser.add_argument("--timeout", type=float, default=1800.0)
    parser.add_argument("--out", type=Path, help="write the results as JSON")
    parser.add_argument("--markdown", type=Path, help="write the tables as Markdown")
    parser.add_argument("--plot", type=Path, help="write a PNG of rows/s per contender")
    args = parser.parse_args()
    if args.records < 4 * common.PARTITIONS or args.records % common.PARTITIONS:
        parser.error(f"--records must be a multiple of {common.PARTITIONS} (the partitions), "
                     f"at least {4 * common.PARTITIONS}; got {args.records}")
    spark_version = reexec_in_peer_environment(ROOT)
    parts = args.part or ["read", "ingest", "kill"]
    datasets = args.dataset or ["raw", "typed", "updates"]

    from kafka_direct.runtime import jvm_archive
    from kafka_direct.testing import ApacheKafka, EmbeddedPostgres
    from kafka_direct.testing.jvm_peers import (
        debezium_jdbc_sink,
        kafka_connect_jars,
        postgres_jdbc_driver,
        spark_kafka_jars,
    )
    from kafka_direct.testing.kafka_jars import KAFKA_VERSION

    # As ./run ingest does: the archive of this Spark's classes, which the ingest job's JVM
    # maps (KAFKA_DIRECT_JVM_ARCHIVE=off: none).
    if jvm_archive.wanted(default=True):
        jvm_archive.build()
    # Every JVM part resolved before anything is timed.
    spark_kafka_jars(spark_version)
    kafka_connect_jars()
    debezium_jdbc_sink()
    postgres_jdbc_driver()
    import confluent_kafka
    import pyspark

    with tempfile.TemporaryDirectory(prefix="bench-peers-") as work, \
            ApacheKafka() as kafka, EmbeddedPostgres() as pg:
        args.work = work
        suffix = os.getpid()
        needed = {"raw"} | set(datasets) | {f"{d}-connect" for d in datasets if d != "raw"}
        args.topics = {d: f"bench-{d}-{suffix}" for d in needed}
        start = time.perf_counter()
        for dataset, topic in args.topics.items():
            common.produce(kafka, topic, dataset, args.records)
        with pg.connect() as connection, connection.cursor() as cursor:
            cursor.execute("SHOW server_version")
            (pg_version,) = cursor.fetchone()
        connection.close()
        header = (f"{args.records:,} records per topic on {common.PARTITIONS} partitions, "
                  f"{args.rounds} rounds; {os.cpu_count()} cores ({platform.machine()}), load "
                  f"{os.getloadavg()[0]:.1f} at start; Apache Kafka {KAFKA_VERSION}, "
                  f"PostgreSQL {pg_version}, PySpark {pyspark.__version__}, "
                  f"confluent-kafka {_first(confluent_kafka.version())} (librdkafka "
                  f"{_first(confluent_kafka.libversion())}), Java "
                  f"{_java_version()}, Python {platform.python_version()}")
        print(f"produced {len(args.topics)} topics ({time.perf_counter() - start:.0f} s); "
              + header, flush=True)
        pids = (service_pid(kafka), service_pid(pg))
        measurements: list[Measurement] = []
        kills: list[Measurement] = []

        def wanted(contender: Contender) -> bool:
            return not args.only or contender.key in args.only

        masters = [m.strip() for m in args.masters.split(",") if m.strip()]
        for round_ in range(args.rounds):
            if "read" in parts:
                for master in masters:
                    for contender in rotated(list(filter(wanted, read_contenders(
                            args.read_warmup))), round_):
                        m = run_command(args, contender, kafka, pg, pids, round_,
                                        master=master)
                        m.result.setdefault("settings", {})["master"] = master
                        measurements.append(m)
                        print(f"round {round_ + 1} {master} {contender.label}: "
                              f"{args.records / float(m.result['seconds']):,.0f} records/s "
                              f"({m.result['seconds']:.1f} s; process {m.wall:.1f} s), CPU "
                              f"{m.cpu * 1e6 / args.records:.2f} us/record", flush=True)
            if "ingest" in parts:
                for dataset in datasets:
                    if dataset != "updates" and (not args.only or "copy" in args.only):
                        measurements.append(plain_copy(args, pg, pids, dataset, round_))
                        m = measurements[-1]
                        print(f"round {round_ + 1} plain COPY [{dataset}]: "
                              f"{args.records / m.wall:,.0f} rows/s", flush=True)
                    for contender in rotated(list(filter(wanted, ingest_contenders(
                            [dataset]))), round_):
                        m = run_command(args, contender, kafka, pg, pids, round_)
                        measurements.append(m)
                        rows = args.records
                        print(f"round {round_ + 1} {contender.label} [{contender.dataset}]: "
                              f"{rows / float(m.result['seconds']):,.0f} rows/s whole run "
                              f"({m.result['seconds']:.1f} s), CPU {m.cpu * 1e6 / rows:.1f} "
                              f"us/record, check {m.check}", flush=True)
        if "kill" in parts:
            for dataset in [d for d in datasets if d != "updates"] or datasets:
                for contender in filter(wanted, ingest_contenders([dataset])):
                    m = run_command(args, contender, kafka, pg, pids, 99, kill_at=args.kill_at)
                    kills.append(m)
                    print(f"kill -9 at {args.kill_at:.0%}: {contender.label} "
                          f"[{contender.dataset}]: {m.check} (kills "
                          f"{m.result.get('kills')})", flush=True)
        summary = summarise(measurements, args.records)
        table = markdown(summary, kills, header)
        print()
        print(table)
        for s in summary.values():
            print(f"settings of {s['label']} [{s['dataset']}]: {json.dumps(s['settings'])}")
        print()
        for line in ratios(summary):
            print(line)
        if args.out:
            args.out.write_text(json.dumps({
                "header": header, "summary": summary,
                "measurements": [asdict(m) for m in measurements],
                "kills": [asdict(m) for m in kills], "ratios": ratios(summary)}, indent=1))
        if args.markdown:
            args.markdown.write_text(table + "\n" + "\n".join(
                f"- {line}" for line in ratios(summary)) + "\n")
        if args.plot:
            plot(summary, args.plot, header)


def _first(version: Any) -> str:
    """A version given as a string or as (string, number)."""
    return str(version if isinstance(version, str) else version[0])


def _java_version() -> str:
    found = subprocess.run(["java", "-version"], capture_output=True, text=True)
    first = (found.stderr or found.stdout).splitlines()[:1]
    return first[0].split('"')[1] if first and '"' in first[0] else "?"


if __name__ == "__main__":
    main()
