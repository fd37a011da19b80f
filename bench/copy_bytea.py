"""The sink's CSV of a ``bytea`` column, hex against its own text, and PostgreSQL's COPY of it.

The rows of ``bench/ingest_job.py`` (topic, kafka_partition, kafka_offset, a NULL key and a
~100 B printable value) as Arrow record batches, encoded by the sink's
``kafka_direct.postgres.copy_csv.encode_batch`` twice, alternately in one run: as it does
(a printable column as its own text) and with hex forced (as every ``bytea`` column went
before); each encoding COPYed by one backend into a fresh table with the job's primary
key. Prints, per form, the encoding's CPU and the backend's CPU per row (medians over the
rounds, the range in brackets) and the CSV's bytes per row.

Usage: python bench/copy_bytea.py [--rows N] [--rounds R]
"""

from __future__ import annotations

import argparse
import io
import os
import statistics
import time

import pyarrow as pa

import kafka_direct.postgres.copy_csv as copy_csv
from kafka_direct.testing import EmbeddedPostgres

BATCH = 10_000
TABLE = ("CREATE TABLE t (topic text NOT NULL, kafka_partition integer NOT NULL, "
         "kafka_offset bigint NOT NULL, key bytea, value bytea, "
         "PRIMARY KEY (topic, kafka_partition, kafka_offset))")


def batches(rows: int) -> list[pa.RecordBatch]:
    made = []
    for start in range(0, rows, BATCH):
        count = min(BATCH, rows - start)
        values = [(f"00-{i:012d}-" + "x" * 85).encode() for i in range(start, start + count)]
        made.append(pa.RecordBatch.from_arrays(
            [pa.array(["bench-ingest-job-123456"] * count), pa.array([0] * count, pa.int32()),
             pa.array(range(start, start + count), pa.int64()), pa.nulls(count, pa.binary()),
             pa.array(values, pa.binary())],
            names=["topic", "kafka_partition", "kafka_offset", "key", "value"]))
    return made


def backend_cpu(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    rows = batches(args.rows)
    # The sink's form: key and value as their own text into bytea columns (the catalog
    # says which); against hex for every binary column (no bytea column named).
    forms = {"text (as the sink does)": True, "hex (forced)": False}
    results: dict[str, list[tuple[float, float, float]]] = {name: [] for name in forms}
    with EmbeddedPostgres() as pg:
        connection = pg.connect()
        cursor = connection.cursor()
        cursor.execute("SELECT pg_backend_pid()")
        backend = cursor.fetchone()[0]
        for round_ in range(args.rounds):
            order = list(forms) if round_ % 2 == 0 else list(forms)[::-1]
            for name in order:
                cursor.execute("DROP TABLE IF EXISTS t")
                cursor.execute(TABLE)
                bytea = copy_csv.bytea_columns_of(cursor, "t") if forms[name] else ()
                connection.commit()
                cpu = time.process_time()
                encoded = [copy_csv.encode_batch(batch, bytea) for batch in rows]
                cpu = time.process_time() - cpu
                before = backend_cpu(backend)
                for data in encoded:
                    cursor.copy_expert("COPY t FROM STDIN WITH (FORMAT csv)", io.BytesIO(data))
                connection.commit()
                used = backend_cpu(backend) - before
                results[name].append((cpu * 1e6 / args.rows, used * 1e6 / args.rows,
                                      sum(map(len, encoded)) / args.rows))
        cursor.execute("SELECT count(*) FROM t")
        assert cursor.fetchone()[0] == args.rows
        connection.close()
    print(f"{args.rows} rows, {args.rounds} rounds, load average {os.getloadavg()[0]:.1f}")
    for name, runs in results.items():
        encode = [r[0] for r in runs]
        backend_us = [r[1] for r in runs]
        print(f"{name:24s}: encoding {statistics.median(encode):.2f} us a row "
              f"[{min(encode):.2f}-{max(encode):.2f}], PostgreSQL's COPY "
              f"{statistics.median(backend_us):.2f} us a row [{min(backend_us):.2f}-"
              f"{max(backend_us):.2f}], CSV {runs[0][2]:.0f} B a row")


if __name__ == "__main__":
    main()
