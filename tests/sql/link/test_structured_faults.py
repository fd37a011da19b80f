"""Exactly once under crashes, on Structured Streaming: the query's driver killed with SIGKILL.

The job is the main one, ``kafka-direct ingest --api structured`` (kafka-direct source ->
kafka-direct-postgres sink), run in a process of its own and killed at random moments
(start-up, planning, reading, writing, committing: wherever the moment falls). Each round
produces more records first, so every run has work in flight. Restarts alternate between the
query's own checkpoint and a fresh checkpoint directory, from which the query resumes from
the offsets the sink stored in PostgreSQL. At the end one run goes to completion; then the
table must hold every produced record exactly once, and the stored offsets must be the log
end.
"""

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import psycopg2
import pytest

from kafka_direct.app.structured_ingest import stored_offsets
from kafka_direct.topic_partition import TopicPartition

ROOT = Path(__file__).parents[3]
PARTITIONS = 3
CLI = [sys.executable, "-m", "kafka_direct.app.cli"]


class Scenario:
    def __init__(self, kafka, postgres, schema, topic, tmp_path):
        self.kafka = kafka
        self.postgres = postgres
        self.schema = schema
        self.topic = topic
        self.tmp = tmp_path
        self.group = f"g-{topic}"
        self.produced = 0
        self.runs = 0
        self.kills = 0
        self.freshStarts = 0
        self.midStream = 0
        self.checkpoint = tmp_path / "checkpoint"

    def produce(self, per_partition):
        for partition in range(PARTITIONS):
            start = self.produced + partition * per_partition
            values = [f"{partition}:{start + i}".encode() for i in range(per_partition)]
            self.kafka.produce(self.topic, values, partition=partition)
        self.produced += per_partition * PARTITIONS

    extra = ()  # more ingest options (the typed variant's)
    #: How a run ends by itself: after idle triggers, or at the backlog of its start.
    ending = ("--stop-after-idle", "3")

    def start(self, fresh_checkpoint, rate=400):
        self.runs += 1
        if fresh_checkpoint:
            self.freshStarts += 1
            checkpoint = self.tmp / f"fresh-checkpoint-{self.runs}"
        else:
            checkpoint = self.checkpoint
        out = open(self.tmp / f"run-{self.runs}.out", "w")  # noqa: SIM115 - closed in wait
        argv = [*CLI, "ingest", "--api", "structured",
                "--bootstrap-servers", self.kafka.bootstrap_servers,
                "--topic", self.topic, "--group", self.group, "--schema", self.schema,
                "--table", "events", "--batch-interval", "0.5",
                "--max-rate-per-partition", str(rate), *self.ending,
                # Each run's first batch is smaller than the rate's (its end in the offset
                # log like any batch's): kills fall around it too.
                "--first-batch-records", "50",
                "--checkpoint-dir", str(checkpoint), *self.extra]
        env = {**os.environ, "KAFKA_DIRECT_PG_DSN": self.postgres.dsn,
               "PYTHONPATH": str(ROOT)}
        process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT,
                                   env=env)
        process.out = out
        process.path = self.tmp / f"run-{self.runs}.out"
        return process

    def batches(self, process):
        return sum(line.startswith("batch ") for line in process.path.read_text().splitlines())

    def kill_at_random(self, process, rng):
        """SIGKILL during start-up (one run in four) or while batches run (the others)."""
        if rng.random() < 0.25:
            time.sleep(rng.uniform(0.5, 6.0))
        else:  # a moment within the stream: planning, reading, staging or committing
            deadline = time.monotonic() + 120
            while (self.batches(process) == 0 and process.poll() is None
                   and time.monotonic() < deadline):
                time.sleep(0.05)
            time.sleep(rng.uniform(0.0, 2.5))
        if process.poll() is None:
            process.send_signal(signal.SIGKILL)
            self.kills += 1
            self.midStream += self.batches(process) > 0
        process.wait(60)
        process.out.close()

    def run_to_end(self, timeout=600):
        # No cap: the backlog of every round is read in a few batches.
        process = self.start(fresh_checkpoint=False, rate=0)
        try:
            code = process.wait(timeout)
        finally:
            process.out.close()
        text = process.path.read_text()
        assert code == 0, text[-4000:]
        return text

    def check(self):
        with psycopg2.connect(self.postgres.dsn) as connection, connection.cursor() as cur:
            cur.execute(f'SELECT count(*), count(DISTINCT (kafka_partition, kafka_offset)) '
                        f'FROM "{self.schema}".events')
            rows, distinct = cur.fetchone()
        connection.close()
        assert distinct == rows, f"{rows - distinct} duplicate rows"
        assert rows == self.produced, f"{rows} rows for {self.produced} records"
        stored = stored_offsets(self.postgres.dsn, self.schema, self.group)
        ends = {TopicPartition(self.topic, p): high for p, (_, high) in
                self.kafka.end_offsets(self.topic, range(PARTITIONS)).items()}
        assert stored == ends


@pytest.fixture
def scenario(kafka, postgres, pg_schema, kafka_topic, tmp_path):
    return Scenario(kafka, postgres, pg_schema, kafka_topic(partitions=PARTITIONS), tmp_path)


def kill_repeatedly(scenario, kills, seed, per_round=1500):
    rng = random.Random(seed)
    for round_ in range(kills):
        scenario.produce(per_round)
        process = scenario.start(fresh_checkpoint=round_ % 2 == 1)
        scenario.kill_at_random(process, rng)
    scenario.produce(per_round)
    summary = scenario.run_to_end()
    scenario.check()
    assert "0 duplicates" in summary and "stored offsets == log end" in summary, summary
    print(f"structured ingest: {scenario.kills} kills of {kills} planned "
          f"({scenario.midStream} after a batch had run), "
          f"{scenario.freshStarts} fresh checkpoints, {scenario.runs} runs, "
          f"{scenario.produced} records, exactly once")


@pytest.mark.slow  # a fault run: kills or restarts real processes (docs/testing.md)
@pytest.mark.timeout(600)
def test_driver_killed_and_restarted_from_checkpoint_or_postgres(scenario):
    # Seed 3: one kill during start-up (then resumed from the checkpoint), one after a batch
    # has run (then resumed on a fresh checkpoint, from PostgreSQL). Many more: -m slow.
    kill_repeatedly(scenario, kills=2, seed=3)
    assert scenario.kills == 2 and scenario.midStream >= 1


@pytest.mark.slow
@pytest.mark.timeout(2400)
def test_many_driver_kills(scenario):
    kill_repeatedly(scenario, kills=22, seed=2026, per_round=600)
    assert scenario.kills >= 20 and scenario.midStream >= 12


class AvailableNowScenario(Scenario):
    """Each run under Trigger.AvailableNow: batches back to back, ending at its start's ends."""

    ending = ("--available-now",)


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_available_now_runs_killed_and_restarted(kafka, postgres, pg_schema, kafka_topic,
                                                 tmp_path):
    # A run that ends by itself at the log ends of its start: killed anywhere in its
    # batches, the next run (its checkpoint or a fresh one) fixes a new target and reads on.
    scenario = AvailableNowScenario(kafka, postgres, pg_schema,
                                    kafka_topic(partitions=PARTITIONS), tmp_path)
    kill_repeatedly(scenario, kills=8, seed=39)
    assert scenario.kills >= 6 and scenario.midStream >= 3


class TypedScenario(Scenario):
    """Avro keys and values upserted on ``id``, tombstones deleting: a compacted topic's view.

    Keys belong to one partition each; the table must equal, for every key, its partition's
    last record unless that is a tombstone, with that record's coordinates.
    """

    def __init__(self, kafka, postgres, schema, topic, tmp_path, registry):
        from tests.app.test_ingest_typed import avro_serializer

        super().__init__(kafka, postgres, schema, topic, tmp_path)
        self.extra = ("--value-format", "avro", "--key-format", "avro", "--schema-registry",
                      registry.url, "--key-columns", "id", "--on-tombstone", "delete")
        self.value = avro_serializer(registry, {"type": "record", "name": "Row", "fields": [
            {"name": "id", "type": "long"}, {"name": "v", "type": "long"}]}, topic)
        self.key = avro_serializer(registry, {"type": "record", "name": "RowKey", "fields": [
            {"name": "id", "type": "long"}]}, topic, "key")
        self.log = {p: [] for p in range(PARTITIONS)}

    def produce(self, per_partition):
        for partition in range(PARTITIONS):
            keys, values = [], []
            for i in range(len(self.log[partition]),
                           len(self.log[partition]) + per_partition):
                ident = (i * 7) % 60 * PARTITIONS + partition
                v = None if i % 13 == 5 else i
                keys.append(self.key({"id": ident}))
                values.append(None if v is None else self.value({"id": ident, "v": v}))
                self.log[partition].append((ident, v))
            self.kafka.produce(self.topic, values, partition=partition, keys=keys)
        self.produced += per_partition * PARTITIONS

    def check(self):
        expected = {}
        for partition, records in self.log.items():
            for offset, (ident, v) in enumerate(records):
                if v is None:
                    expected.pop(ident, None)
                else:
                    expected[ident] = (partition, offset, v)
        with psycopg2.connect(self.postgres.dsn) as connection, connection.cursor() as cur:
            cur.execute(f'SELECT id, kafka_partition, kafka_offset, v FROM "{self.schema}".events')
            rows = cur.fetchall()
            cur.execute(f"SELECT count(*) FROM pg_tables WHERE schemaname = '{self.schema}' "
                        "AND tablename LIKE 'kafka_direct_stage_%'")
            (leftover,) = cur.fetchone()
        connection.close()
        assert {ident: (p, o, v) for ident, p, o, v in rows} == expected
        assert len(rows) == len(expected)
        stored = stored_offsets(self.postgres.dsn, self.schema, self.group)
        ends = {TopicPartition(self.topic, p): high for p, (_, high) in
                self.kafka.end_offsets(self.topic, range(PARTITIONS)).items()}
        assert stored == ends
        # A killed query's staged tables go with its batch's commit when it resumes from its
        # checkpoint, else by age (staleStagingMinutes), as the raw sink's: some may be left.
        print(f"typed structured faults: {leftover} staging tables of killed runs left")


@pytest.mark.slow
@pytest.mark.timeout(2400)
def test_typed_upserts_driver_killed_mirror_the_compacted_log(kafka, postgres, pg_schema,
                                                              kafka_topic, tmp_path,
                                                              schema_registry):
    scenario = TypedScenario(kafka, postgres, pg_schema, kafka_topic(partitions=PARTITIONS),
                             tmp_path, schema_registry)
    rng = random.Random(31)
    for round_ in range(10):
        scenario.produce(300)
        process = scenario.start(fresh_checkpoint=round_ % 2 == 1)
        scenario.kill_at_random(process, rng)
    scenario.produce(300)
    summary = scenario.run_to_end()
    scenario.check()
    assert "stored offsets == log end" in summary, summary
    assert scenario.kills >= 8 and scenario.midStream >= 4
