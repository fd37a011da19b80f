"""Exactly once on a 3-broker Apache Kafka cluster under the faults users meet.

The job is the main one, ``kafka-direct ingest`` on both APIs, in a process of its own. While
producers keep writing (idempotent, or transactional with some transactions aborted), a
seeded sequence of faults hits the real processes: a broker killed with SIGKILL (the
leader of a partition the job reads, or a follower) and started again, a broker paused with
SIGSTOP past the controller's session timeout, leadership moved back to the preferred
replicas, the job killed with SIGKILL and started again on a lost checkpoint (a new
directory: the offsets in PostgreSQL resume it), PostgreSQL restarted. The cluster has
replication factor 3, ``min.insync.replicas=2`` and unclean leader election off, so a
single broker down loses nothing acknowledged.

At the end the producers stop, one run goes to completion, and the table must equal the log
as a read_committed consumer reads it: every committed record once, no aborted one, no gap,
and the stored offsets at the log end. A run may also stop on its own with a typed error
(its kind's exit code and ``kafka-direct ingest stopped: <error>``: PostgreSQL or Kafka unreachable
past the job's patience); it is started again. The log itself is checked against what the
writer was told: every acknowledged record there once, in order, no aborted one visible.

The default run keeps one short sequence per API; ``-m slow`` runs the long ones.
"""

import os
import random
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import psycopg2
import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

import kafka_direct.errors
from kafka_direct.app.stops import exit_code
from kafka_direct.app.structured_ingest import stored_offsets
from kafka_direct.testing import EmbeddedPostgres

ROOT = Path(__file__).parents[2]
PARTITIONS = 3
CLI = [sys.executable, "-m", "kafka_direct.app.cli"]

pytestmark = pytest.mark.services


class Writer(threading.Thread):
    """Produces ``partition:sequence`` values to every partition until stopped.

    Idempotent (``acks=all``): broker faults cost retries, never a duplicate or a gap.
    Transactional: transactions of ``batch`` records, every fourth one aborted; an error
    that leaves the transaction abortable aborts it, a fatal one (a fenced producer) starts
    a new producer under the same ``transactional.id``.
    """

    def __init__(self, cluster, topic, transactional, rate=300, batch=40):
        super().__init__(daemon=True)
        self.cluster, self.topic, self.transactional = cluster, topic, transactional
        self.rate, self.batch = rate, batch
        self.stopping = threading.Event()
        self.sequence = 0
        self.committed = 0
        self.aborted = 0
        self.errors = []
        self.crashed = None
        #: Sequences a committed transaction (or, idempotent, an acknowledgement) holds.
        self.acknowledged = []
        self.transactional_id = f"writer-{uuid.uuid4().hex[:8]}"

    def producer(self):
        config = self.cluster.params(**{"enable.idempotence": True, "acks": "all",
                                         "linger.ms": 5, "message.timeout.ms": 120000})
        if self.transactional:
            config["transactional.id"] = self.transactional_id
            config["transaction.timeout.ms"] = 120000  # at least message.timeout.ms
            producer = Producer(config)
            self._retry(lambda: producer.init_transactions(30))
            return producer
        return Producer(config)

    def _retry(self, step, attempts=30):
        for attempt in range(attempts):
            try:
                return step()
            except KafkaException as error:
                if not error.args[0].retriable() or attempt == attempts - 1:
                    raise
                time.sleep(0.5)
        return None

    def run(self):
        try:
            self._write()
        except BaseException as error:  # the test fails on it, never passes over it
            self.crashed = repr(error)

    def _write(self):
        producer = self.producer()
        failed = []
        purged = {KafkaError._PURGE_QUEUE, KafkaError._PURGE_INFLIGHT}

        def delivered(error, _message):
            # An abort purges what was not sent yet: those were never to be in the log.
            if error is not None and not (self.transactional and error.code() in purged):
                failed.append(error)

        while not self.stopping.is_set():
            started = time.monotonic()
            first = self.sequence
            try:
                if self.transactional:
                    producer.begin_transaction()
                for _ in range(self.batch):
                    for partition in range(PARTITIONS):
                        producer.produce(self.topic, f"{partition}:{self.sequence}".encode(),
                                         partition=partition, on_delivery=delivered)
                    self.sequence += 1
                if self.transactional:
                    if self.sequence // self.batch % 4 == 0:
                        producer.flush(60)  # sent first: the log holds aborted records
                        self._retry(lambda p=producer: p.abort_transaction(60))
                        self.aborted += 1
                    else:
                        self._retry(lambda p=producer: p.commit_transaction(60))
                        self.committed += 1
                        self.acknowledged.append((first, self.sequence))
                else:
                    producer.poll(0)
                    self.acknowledged.append((first, self.sequence))
            except KafkaException as error:
                kafka_error = error.args[0]
                self.errors.append(str(kafka_error))
                if kafka_error.txn_requires_abort():
                    self._retry(lambda p=producer: p.abort_transaction(60))
                    self.aborted += 1
                elif kafka_error.fatal():
                    producer = self.producer()
                else:
                    raise
            except BufferError:
                producer.poll(0.1)
            pause = self.batch * PARTITIONS / (self.rate * PARTITIONS) - (
                time.monotonic() - started)
            if pause > 0:
                time.sleep(pause)
        remaining = producer.flush(120)
        if remaining or failed:
            self.errors.append(f"{remaining} undelivered, {len(failed)} failed: {failed[:3]}")

    def expected(self, partition):
        """The values the log must hold, in order, for ``partition``."""
        return [f"{partition}:{n}".encode() for first, end in self.acknowledged
                for n in range(first, end)]

    def stop(self):
        self.stopping.set()
        self.join(240)


def committed_log(cluster, topic):
    """{(partition, offset): value} of every record a read_committed consumer reads."""
    consumer = Consumer(cluster.params(**{"group.id": f"check-{uuid.uuid4().hex[:6]}",
                                          "enable.auto.commit": False,
                                          "isolation.level": "read_committed"}))
    records = {}
    try:
        ends = {}
        for partition in range(PARTITIONS):
            _, ends[partition] = consumer.get_watermark_offsets(
                TopicPartition(topic, partition), timeout=30, cached=False)
        consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        deadline = time.monotonic() + 180
        done = set()
        while len(done) < PARTITIONS and time.monotonic() < deadline:
            for message in consumer.consume(1000, 1.0):
                if message.error() is None:
                    records[(message.partition(), message.offset())] = message.value()
            for partition in range(PARTITIONS):
                position = consumer.position([TopicPartition(topic, partition)])[0].offset
                if position >= ends[partition]:
                    done.add(partition)
        assert len(done) == PARTITIONS, f"reading the log did not reach its end: {done}"
        return records, ends
    finally:
        consumer.close()


class Chaos:
    """One API's ingest job against the cluster, and the faults to throw at it."""

    def __init__(self, cluster, database, schema, api, tmp_path, rng):
        self.cluster, self.database, self.schema, self.api = cluster, database, schema, api
        self.tmp, self.rng = tmp_path, rng
        self.topic = f"chaos-{api}-{uuid.uuid4().hex[:8]}"
        cluster.create_topic(self.topic, PARTITIONS)
        self.group = f"g-{self.topic}"
        self.runs = 0
        self.counts = {"job kills": 0, "broker kills (leader)": 0,
                       "broker kills (follower)": 0, "broker pauses": 0, "leader moves": 0,
                       "postgres restarts": 0, "fresh checkpoints": 0, "typed stops": 0}

    def start(self, rate=200, idle=None):
        self.runs += 1
        path = self.tmp / f"run-{self.runs}.out"
        argv = [*CLI, "ingest", "--api", self.api,
                "--bootstrap-servers", self.cluster.bootstrap_servers,
                "--topic", self.topic, "--group", self.group, "--schema", self.schema,
                "--table", "events", "--batch-interval", "0.5",
                "--max-rate-per-partition", str(rate)]
        if self.api == "structured":  # the direct stream keeps no checkpoint of its own
            fresh = self.runs % 2 == 0
            self.counts["fresh checkpoints"] += fresh
            checkpoint = self.tmp / (f"checkpoint-{self.runs}" if fresh else "checkpoint")
            argv += ["--checkpoint-dir", str(checkpoint)]
        if idle is not None:
            argv += ["--stop-after-idle", str(idle)]
        env = {**os.environ, "KAFKA_DIRECT_PG_DSN": self.database.dsn,
               "PYTHONPATH": str(ROOT)}
        with open(path, "w") as out:
            process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT,
                                       env=env)
        process.path = path
        return process

    @staticmethod
    def batches(process):
        return sum(line.startswith("batch ") for line in process.path.read_text().splitlines())

    def wait_batch(self, process, timeout=180):
        seen = self.batches(process)
        deadline = time.monotonic() + timeout
        while self.batches(process) <= seen and process.poll() is None:
            assert time.monotonic() < deadline, process.path.read_text()[-3000:]
            time.sleep(0.05)

    def ended(self, process):
        """Whether the run has ended; a typed stop is counted, anything else fails."""
        code = process.poll()
        if code is None:
            return False
        self.typed_stop(code, process.path.read_text())
        return True

    def typed_stop(self, code, text):
        """A run that stopped on its own: a block naming a typed error, and its exit code."""
        stopped = [line for line in text.splitlines()
                   if line.startswith("kafka-direct ingest stopped: ")]
        assert stopped, f"exit code {code}:\n{text[-4000:]}"
        name = stopped[-1].split(": ", 2)[1]
        assert name.endswith("Error") and name in dir(kafka_direct.errors), stopped[-1]
        assert code == exit_code(getattr(kafka_direct.errors, name)) != 0, \
            f"exit code {code}:\n{text[-4000:]}"
        self.counts["typed stops"] += 1

    def broker_fault(self, kind):
        leaders = self.cluster.leaders(self.topic)
        leader = leaders[self.rng.randrange(PARTITIONS)]
        if kind == "kill leader" and leader > 0:
            victim = leader
            self.counts["broker kills (leader)"] += 1
        elif kind.startswith("kill"):
            victim = self.rng.choice([n for n in (1, 2, 3) if n != leader])
            self.counts["broker kills (follower)"] += 1
        if kind.startswith("kill"):
            self.cluster.kill_broker(victim)
            time.sleep(self.rng.uniform(1.0, 4.0))
            self.cluster.restart_broker(victim)
        elif kind == "pause":
            victim = self.rng.choice((1, 2, 3))
            self.cluster.pause_broker(victim)
            time.sleep(self.rng.uniform(5.0, 8.0))  # past broker.session.timeout.ms (4 s)
            self.cluster.resume_broker(victim)
            self.counts["broker pauses"] += 1
        elif kind == "leader move":
            self.cluster.elect_preferred_leaders(self.topic, range(PARTITIONS))
            self.counts["leader moves"] += 1

    def round(self, faults):
        """One run of the job: it reads, meets ``faults``, then is killed (or has stopped)."""
        process = self.start()
        try:
            self.wait_batch(process)
            for fault in faults:
                if fault == "postgres restart":
                    self.database.restart()
                    self.counts["postgres restarts"] += 1
                else:
                    self.broker_fault(fault)
                if self.ended(process):
                    return
            time.sleep(self.rng.uniform(0.0, 2.0))
            if not self.ended(process):
                process.send_signal(signal.SIGKILL)
                process.wait(60)
                self.counts["job kills"] += 1
        finally:
            if process.poll() is None:
                process.kill()
                process.wait(60)

    def finish(self):
        for _ in range(3):
            process = self.start(rate=0, idle=3)
            code = process.wait(600)
            text = process.path.read_text()
            if code == 0:
                return text
            self.typed_stop(code, text)
        raise AssertionError(f"the job did not finish: {text[-4000:]}")

    def check(self):
        log, ends = committed_log(self.cluster, self.topic)
        with psycopg2.connect(self.database.dsn) as connection, connection.cursor() as cur:
            cur.execute(f'SELECT kafka_partition, kafka_offset, value FROM "{self.schema}".events')
            rows = cur.fetchall()
            if self.api == "dstream":
                cur.execute(f'SELECT kafka_partition, next_offset FROM "{self.schema}".'
                            "kafka_offsets WHERE group_id = %s", (self.group,))
                stored = dict(cur.fetchall())
        connection.close()
        if self.api == "structured":
            stored = {tp.partition: offset for tp, offset in stored_offsets(
                self.database.dsn, self.schema, self.group).items()}
        for partition in range(PARTITIONS):  # Kafka kept what it acknowledged, once, in order
            held = [value for (p, _), value in sorted(log.items()) if p == partition]
            assert held == self.writer.expected(partition), f"the log of partition {partition}"
        table = {}
        duplicates = 0
        for partition, offset, value in rows:
            duplicates += (partition, offset) in table
            table[(partition, offset)] = bytes(value)
        assert duplicates == 0, f"{duplicates} duplicate rows"
        missing = sorted(set(log) - set(table))[:5]
        extra = sorted(set(table) - set(log))[:5]
        assert not missing and not extra, f"missing {missing}, not in the log {extra}"
        assert table == log
        assert stored == ends, f"stored offsets {stored}, log end {ends}"
        return len(rows)


def run_chaos(cluster, database, schema, api, tmp_path, seed, rounds, transactional,
              kinds):
    rng = random.Random(seed)
    chaos = Chaos(cluster, database, schema, api, tmp_path, rng)
    writer = chaos.writer = Writer(cluster, chaos.topic, transactional)
    writer.start()
    try:
        for index in range(rounds):
            faults = [kinds[index % len(kinds)]] if kinds else []
            if rng.random() < 0.3 and kinds:
                faults.append(rng.choice(kinds))
            chaos.round(faults)
    finally:
        writer.stop()
        for node in cluster.nodes:  # whatever happened, the cluster is whole again
            node.resume()
            if not node.alive():
                cluster.restart_broker(node.node_id)
    assert writer.crashed is None, writer.crashed
    assert writer.sequence > 0 and not [e for e in writer.errors if "undelivered" in e], \
        writer.errors
    summary = chaos.finish()
    assert "0 duplicates" in summary and "stored offsets == log end" in summary, summary
    rows = chaos.check()
    counts = ", ".join(f"{value} {name}" for name, value in chaos.counts.items())
    print(f"{api} on 3 brokers ({'transactional' if transactional else 'idempotent'} "
          f"writer, {writer.committed} commits, {writer.aborted} aborts): {chaos.runs} runs, "
          f"{counts}; {rows} rows checked against the log, exactly once")
    return chaos


@pytest.fixture
def own_postgres(scratch):
    with EmbeddedPostgres(data_dir=scratch / "pg") as database:
        with database.connect() as connection, connection.cursor() as cursor:
            cursor.execute("CREATE SCHEMA chaos")
        connection.close()
        yield database


BROKER_FAULTS = ["kill leader", "pause", "kill follower", "leader move"]


# The default suite keeps the direct stream's run (about 25 s); the structured job's (about a
# minute: a JVM and a query restarted after each kill) runs with the slow fault runs, beside
# its mixed faults below.
@pytest.mark.parametrize("api", ["dstream", pytest.param("structured", marks=pytest.mark.slow)])
@pytest.mark.timeout(600)
def test_a_leader_killed_and_the_job_killed_lose_and_duplicate_nothing(
        kafka_cluster, postgres, pg_schema, api, tmp_path):
    chaos = run_chaos(kafka_cluster, postgres, pg_schema, api, tmp_path, seed=7, rounds=1,
                      transactional=False, kinds=["kill leader"])
    assert chaos.counts["broker kills (leader)"] == 1


@pytest.mark.slow  # a fault run: kills, pauses and restarts real processes
@pytest.mark.parametrize("api", ["dstream", "structured"])
@pytest.mark.parametrize("transactional", [False, True], ids=["idempotent", "transactional"])
@pytest.mark.timeout(3600)
def test_broker_faults_mixed_with_job_kills_and_postgres_restarts(
        kafka_cluster, own_postgres, api, transactional, tmp_path):
    chaos = run_chaos(kafka_cluster, own_postgres, "chaos", api, tmp_path,
                      seed=2026 + transactional, rounds=10, transactional=transactional,
                      kinds=[*BROKER_FAULTS, "postgres restart"])
    assert chaos.counts["job kills"] + chaos.counts["typed stops"] >= 8
