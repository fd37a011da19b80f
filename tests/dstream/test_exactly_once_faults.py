"""Exactly once under crashes: the ingest job killed with SIGKILL, its services restarted.

Each test produces records, runs the job in a process of its own, breaks it at a chosen
moment of the batch lifecycle, starts it again until it finishes, then checks the table
against the log: every record exactly once, and the stored offsets at the log end.

Kill moments: ``random`` (any time, start-up included), ``batch`` (right after a batch
completes, while the next is generated and read), ``write`` (inside the COPY: the row
function has signalled it is writing), ``commit`` (right after the database committed a
range, before Spark learns of it; with the idempotent sink, between the rows and the
offsets).
"""

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kafka_direct.app.ingest_table import ensure_table
from kafka_direct.testing import EmbeddedPostgres

APP = Path(__file__).with_name("ingest_fault_app.py")
ROOT = Path(__file__).parents[2]
PARTITIONS = 3


def wait_for(predicate, timeout, what):
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.002)


class Job:
    """One run of the fault app; its output in files."""

    def __init__(self, settings, directory, name):
        self.out = directory / f"{name}.out"
        self.err = directory / f"{name}.err"
        with open(self.out, "w") as out, open(self.err, "w") as err:
            self.process = subprocess.Popen(
                [sys.executable, str(APP), json.dumps(settings)], stdout=out, stderr=err,
                cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})

    def batches(self):
        return sum(line.startswith("batch ") for line in self.out.read_text().splitlines())

    def running(self):
        return self.process.poll() is None

    def kill(self):
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(30)

    def finish(self, timeout=240):
        code = self.process.wait(timeout)
        return code, self.err.read_text()[-3000:]


class Scenario:
    """Records to ingest, the job's settings, and the checks."""

    def __init__(self, kafka, postgres, schema, topic, tmp_path, sink="transactional"):
        self.kafka, self.postgres, self.schema, self.topic = kafka, postgres, schema, topic
        self.directory = tmp_path
        self.marker = tmp_path / "writing"
        self.marker.touch()
        self.produced = 0
        self.runs = 0
        self.kills = []
        self.settings = {"bootstrap": kafka.bootstrap_servers, "dsn": postgres.dsn,
                         "topic": topic, "schema": schema, "group": "faults", "sink": sink,
                         "interval": 0.5, "rate": 300, "idle": 1, "marker": str(self.marker),
                         "rowDelay": 0.0005}
        with postgres.connect() as connection, connection.cursor() as cursor:
            if sink == "aggregate":
                cursor.execute(f'CREATE TABLE "{schema}".counts (key text, n bigint)')
            elif sink == "transactional":  # no key: only the offsets keep rows single
                cursor.execute(f'CREATE TABLE "{schema}".events (topic text, '
                               "kafka_partition int, kafka_offset bigint, key bytea, "
                               "value bytea)")
        connection.close()
        if sink == "idempotent":
            ensure_table(postgres.dsn, schema, "events")

    def produce(self, per_partition):
        for p in range(PARTITIONS):
            values = [f"{p}-{self.produced + i}".encode() for i in range(per_partition)]
            keys = [f"k{(self.produced + i) % 7}".encode() for i in range(per_partition)]
            self.kafka.produce(self.topic, values, partition=p, keys=keys)
        self.produced += per_partition

    def start(self, **overrides):
        self.runs += 1
        return Job({**self.settings, **overrides}, self.directory, f"run{self.runs}")

    def query(self, sql):
        with self.postgres.connect() as connection, connection.cursor() as cursor:
            cursor.execute(sql)
            rows = cursor.fetchall()
        connection.close()
        return rows

    def stored(self):
        return sum(n for (n,) in self.query(
            f"SELECT next_offset FROM \"{self.schema}\".kafka_offsets WHERE group_id = 'faults'"))

    def rows(self):
        table = "counts" if self.settings["sink"] == "aggregate" else "events"
        return self.query(f'SELECT count(*) FROM "{self.schema}".{table}')[0][0]

    def kill_at(self, job, moment, chooser):
        """Kill ``job`` at ``moment``; returns False if it finished first."""
        if moment == "random":
            time.sleep(chooser.uniform(0.5, 7.0))
        elif moment == "batch":
            seen = job.batches()
            wait_for(lambda: job.batches() > seen or not job.running(), 120, "a batch")
        elif moment == "write":
            size = self.marker.stat().st_size
            wait_for(lambda: self.marker.stat().st_size > size or not job.running(), 120,
                     "a write")
        elif moment == "commit":
            watch = self.rows if self.settings["sink"] == "idempotent" else self.stored
            before = watch()
            wait_for(lambda: watch() != before or not job.running(), 120, "a commit")
        if not job.running():
            return False
        job.kill()
        self.kills.append(moment)
        return True

    def run_to_end(self, attempts=4):
        for _ in range(attempts):
            code, err = self.start().finish()
            if code == 0:
                return
            assert code == 3, err  # a clear, typed error; anything else is a bug
        raise AssertionError(f"the job did not finish in {attempts} runs: {err}")

    def check(self):
        if self.settings["sink"] == "aggregate":
            counts = dict(self.query(f'SELECT key, sum(n) FROM "{self.schema}".counts '
                                     "GROUP BY key"))
            expected = {}
            for i in range(self.produced):
                expected[f"k{i % 7}"] = expected.get(f"k{i % 7}", 0) + PARTITIONS
            assert counts == expected
        else:
            rows = self.query(f'SELECT kafka_partition, kafka_offset, count(*) FROM '
                              f'"{self.schema}".events GROUP BY 1, 2')
            duplicates = [r for r in rows if r[2] != 1]
            assert not duplicates
            assert sorted((p, o) for p, o, _ in rows) == [
                (p, o) for p in range(PARTITIONS) for o in range(self.produced)]
        stored = dict(((t, p), o) for t, p, o in self.query(
            f"SELECT topic, kafka_partition, next_offset FROM \"{self.schema}\".kafka_offsets "
            "WHERE group_id = 'faults'"))
        assert stored == {(self.topic, p): self.produced for p in range(PARTITIONS)}


def kill_repeatedly(scenario, moments, seed):
    chooser = random.Random(seed)
    for moment in moments:
        scenario.produce(400)
        job = scenario.start()
        if not scenario.kill_at(job, moment, chooser):
            code, err = job.finish()
            assert code == 0, err
    scenario.run_to_end()
    scenario.check()


@pytest.fixture
def scenario(kafka, postgres, pg_schema, kafka_topic, tmp_path):
    def make(sink="transactional", broker=None, database=None):
        schema = pg_schema
        if database is not None:  # a server of the test's own: make the schema there
            schema = "faults"
            with database.connect() as connection, connection.cursor() as cursor:
                cursor.execute(f"CREATE SCHEMA {schema}")
            connection.close()
        if broker is not None:
            broker.create_topic("faults", PARTITIONS)
        return Scenario(broker or kafka, database or postgres, schema,
                        kafka_topic(partitions=PARTITIONS) if broker is None else "faults",
                        tmp_path, sink)

    return make


@pytest.mark.slow  # a fault run: kills or restarts real processes (docs/testing.md)
def test_kills_across_the_batch_lifecycle_lose_and_duplicate_nothing(scenario):
    s = scenario()
    kill_repeatedly(s, ["batch", "write", "commit"], seed=1)
    assert len(s.kills) >= 2, s.kills  # the job may finish before one moment comes


@pytest.mark.slow  # a fault run: kills or restarts real processes (docs/testing.md)
def test_idempotent_sink_killed_between_rows_and_offsets(scenario):
    s = scenario("idempotent")
    kill_repeatedly(s, ["commit", "write"], seed=2)
    assert s.kills, "no kill happened"


@pytest.mark.slow  # a fault run: kills or restarts real processes (docs/testing.md)
def test_aggregation_killed_midway_counts_every_record_once(scenario):
    s = scenario("aggregate")
    kill_repeatedly(s, ["write", "commit"], seed=3)
    assert s.kills, "no kill happened"


@pytest.mark.slow
@pytest.mark.parametrize("sink, rounds, seed, least", [
    ("transactional", 6, 4, 20),  # 24 kill moments
    ("idempotent", 3, 5, 8),
    ("aggregate", 2, 6, 5),
])
def test_many_kills_at_every_moment(scenario, sink, rounds, seed, least):
    s = scenario(sink)
    moments = ["random", "batch", "write", "commit"] * rounds
    kill_repeatedly(s, moments, seed=seed)
    print(f"{sink}: {len(s.kills)} kills of {len(moments)} planned ({s.kills}); "
          f"{s.runs} runs; {s.produced * PARTITIONS} records")
    assert len(s.kills) >= least


def test_a_second_job_of_the_same_group_fails_cleanly_and_writes_nothing(scenario):
    s = scenario()
    s.produce(600)
    first = s.start(rowDelay=0.002)
    wait_for(lambda: first.batches() >= 1, 120, "the first job's batch")
    code, err = s.start().finish()
    assert code == 3 and "GroupBusyError" in err and "'faults'" in err
    code, err = first.finish()
    assert code == 0, err
    s.check()


def restart_mid_stream(s, restart, what):
    s.produce(600)
    job = s.start(rowDelay=0.002)
    wait_for(lambda: job.batches() >= 1, 120, "a batch")
    restart()
    code, err = job.finish()
    assert code in (0, 3), err  # finished, or stopped with a typed error
    s.run_to_end()
    s.check()
    print(f"job after the {what} restart: exit {code} {err.strip()[-300:]}")


@pytest.mark.slow  # a fault run: kills or restarts real processes (docs/testing.md)
def test_postgres_restarted_mid_stream(scenario, scratch):
    with EmbeddedPostgres(data_dir=scratch / "pg") as database:
        restart_mid_stream(scenario(database=database), database.restart, "PostgreSQL")


@pytest.mark.slow  # a fault run: kills or restarts real processes (docs/testing.md)
def test_broker_restarted_mid_stream(scenario, own_kafka):
    restart_mid_stream(scenario(broker=own_kafka), own_kafka.restart, "broker")


class TypedScenario(Scenario):
    """Avro keys and values upserted on ``id``, tombstones deleting: a compacted topic's view.

    Keys belong to one partition each (as Kafka's partitioner keeps them), so the table must
    equal, for every key, its partition's last record, unless that is a tombstone.
    """

    def __init__(self, kafka, postgres, schema, topic, tmp_path, registry):
        from tests.app.test_ingest_typed import avro_serializer

        super().__init__(kafka, postgres, schema, topic, tmp_path, "typed")
        self.settings["sink"] = "transactional"
        self.settings["typed"] = {"registry": registry.url}
        self.settings["rate"] = 1000  # decoding and staging cost more per batch than raw
        self.value = avro_serializer(registry, {"type": "record", "name": "Row", "fields": [
            {"name": "id", "type": "long"}, {"name": "v", "type": "long"},
            {"name": "note", "type": ["null", "string"], "default": None}]}, topic)
        self.key = avro_serializer(registry, {"type": "record", "name": "RowKey", "fields": [
            {"name": "id", "type": "long"}]}, topic, "key")
        self.log = {p: [] for p in range(PARTITIONS)}  # (id, v or None) per offset

    def produce(self, per_partition):
        for p in range(PARTITIONS):
            keys, values = [], []
            for i in range(self.produced, self.produced + per_partition):
                ident = (i * 7) % 40 * PARTITIONS + p  # 40 keys of this partition's own
                v = None if i % 11 == 3 else i
                keys.append(self.key({"id": ident}))
                values.append(None if v is None else self.value({"id": ident, "v": v,
                                                                 "note": f"n{i}"}))
                self.log[p].append((ident, v))
            self.kafka.produce(self.topic, values, partition=p, keys=keys)
        self.produced += per_partition

    def rows(self):
        return self.query(f'SELECT count(*) FROM "{self.schema}".events')[0][0]

    def check(self):
        expected = {}
        for p, records in self.log.items():
            for offset, (ident, v) in enumerate(records):
                if v is None:
                    expected.pop(ident, None)
                else:
                    expected[ident] = (p, offset, v)
        rows = self.query(f'SELECT id, kafka_partition, kafka_offset, v FROM '
                          f'"{self.schema}".events')
        assert {ident: (p, o, v) for ident, p, o, v in rows} == expected
        assert len(rows) == len(expected)
        stored = dict(((t, p), o) for t, p, o in self.query(
            f"SELECT topic, kafka_partition, next_offset FROM \"{self.schema}\".kafka_offsets "
            "WHERE group_id = 'faults'"))
        assert stored == {(self.topic, p): self.produced for p in range(PARTITIONS)}
        assert self.query(f"SELECT count(*) FROM pg_tables WHERE schemaname = '{self.schema}' "
                          "AND tablename LIKE 'kafka_direct_stage_%'") == [(0,)]


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_typed_upserts_killed_at_every_moment_mirror_the_compacted_log(
        kafka, postgres, pg_schema, kafka_topic, tmp_path, schema_registry):
    # Avro records, upserts on id and tombstone deletes: after kills anywhere in the batch
    # lifecycle (staging, the batch's transaction, right after it), the table equals the
    # compacted log, every key once, the stored offsets at the log end, no staging left.
    scenario = TypedScenario(kafka, postgres, pg_schema, kafka_topic(partitions=PARTITIONS),
                             tmp_path, schema_registry)
    kill_repeatedly(scenario, ["random", "batch", "commit"] * 4, seed=23)
    assert len(scenario.kills) >= 8, scenario.kills
