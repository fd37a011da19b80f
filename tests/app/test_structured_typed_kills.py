"""The typed structured job killed mid-run and rerun, on a transactional topic with aborts.

Its sink's tasks read the source's offset ranges and decode the records where they read
them; SIGKILL and SIGTERM at random batches, with and without a checkpoint, under the
interval trigger and AvailableNow. Upserts end with each key's newest committed value, appends
with every committed record once; stored offsets == log end.
"""

import json
import random
import signal

import psycopg2
import pytest
from confluent_kafka import Producer

from kafka_direct.app.structured_ingest import stored_offsets
from tests.app.test_ingest_signals import _Job

PARTITIONS = 3
IDS = 60
ROUNDS = 12


def _produce(kafka, topic):
    producer = Producer({"bootstrap.servers": kafka.bootstrap_servers,
                         "transactional.id": f"tx-{topic}"})
    producer.init_transactions(30)
    latest = {}
    records = 0
    for r in range(ROUNDS):
        producer.begin_transaction()
        for i in range(IDS):
            n = -1 if r % 3 == 2 else r
            producer.produce(topic, json.dumps({"id": i, "n": n}).encode(),
                             key=str(i).encode(), partition=i % PARTITIONS)
        producer.flush(30)
        if r % 3 == 2:
            producer.abort_transaction(30)
        else:
            producer.commit_transaction(30)
            latest.update({i: r for i in range(IDS)})
            records += IDS
    return latest, records


@pytest.mark.slow  # a fault run: kills a real process (docs/testing.md)
@pytest.mark.parametrize("keys", [True, False])
def test_typed_job_killed_and_rerun_loses_and_repeats_nothing(kafka, kafka_topic, postgres,
                                                              pg_schema, job_host, scratch,
                                                              keys):
    topic = kafka_topic(partitions=PARTITIONS)
    latest, records = _produce(kafka, topic)
    extra = ["--key-format", "string", "--key-columns", "id"] if keys else []
    base = ["--bootstrap-servers", kafka.bootstrap_servers, "--dsn", postgres.dsn,
            "--topic", topic, "--schema", pg_schema, "--group", "tk", "--api", "structured",
            "--table", "typed", "--value-format", "json", *extra,
            "--batch-interval", "0.5", "--max-rate-per-partition", "60",
            "--first-batch-records", "0", "--starting-offsets", "earliest"]
    rng = random.Random(7 + keys)
    for kill in range(3):
        checkpoint = ["--checkpoint-dir", str(scratch / "chk")] if kill % 2 else []
        now = ["--available-now"] if kill != 1 else ["--stop-after-idle", "2"]
        job = _Job([*base, *checkpoint, *now])
        job.wait_for_batches(1 + rng.randrange(2))
        job.process.send_signal(signal.SIGKILL if kill != 2 else signal.SIGTERM)
        job.finish(timeout=300)
    done = job_host.run(["ingest", *base, "--available-now"])
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    connection = psycopg2.connect(postgres.dsn)
    with connection, connection.cursor() as cursor:
        if keys:
            cursor.execute(f'SELECT id, n FROM "{pg_schema}".typed ORDER BY id')
            assert {int(i): n for i, n in cursor.fetchall()} == latest
        else:
            cursor.execute(f'SELECT count(*), count(DISTINCT (kafka_partition, kafka_offset)), '
                           f'count(*) FILTER (WHERE n = -1) FROM "{pg_schema}".typed')
            assert cursor.fetchone() == (records, records, 0)
    connection.close()
    stored = stored_offsets(postgres.dsn, pg_schema, "tk")
    ends = kafka.end_offsets(topic, range(PARTITIONS))
    assert {tp.partition: e for tp, e in stored.items()} == {p: e for p, (_, e) in ends.items()}
