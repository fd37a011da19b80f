"""`kafka-direct ingest`: the main job from the command line."""

import os
import subprocess
import sys

import pytest

#: Runs a command as its child and, once it exited, names the processes it left running
#: (orphans come to this process, their subreaper).
LEFT_BEHIND = """
import ctypes, os, subprocess, sys
ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
code = subprocess.call(sys.argv[1:])
left = []
for entry in filter(str.isdigit, os.listdir("/proc")):
    try:
        with open(f"/proc/{entry}/stat") as stat:
            text = stat.read()
    except OSError:
        continue
    state, parent = text[text.rindex(")") + 2:].split()[:2]
    if int(parent) == os.getpid() and state != "Z":
        left.append(text[text.index("(") + 1:text.rindex(")")])
print("LEFT RUNNING", sorted(left), file=sys.stderr)
sys.exit(code)
"""


def test_ingest_writes_a_topic_once_and_a_rerun_adds_only_new_records(kafka, kafka_topic,
                                                                      postgres, pg_schema,
                                                                      job_host):
    topic = kafka_topic(partitions=2)
    argv = [sys.executable, "-m", "kafka_direct.app.cli", "ingest", "--bootstrap-servers",
            kafka.bootstrap_servers, "--dsn", postgres.dsn, "--topic", topic, "--schema",
            pg_schema, "--batch-interval", "0.5", "--stop-after-idle", "1", "--ui-port", "0",
            "--sample-events", "500"]
    first = subprocess.run([sys.executable, "-c", LEFT_BEHIND, *argv], capture_output=True,
                           text=True, timeout=300)
    assert first.returncode == 0, first.stdout[-2000:] + first.stderr[-2000:]
    # Its JVM ended with its job, not after the command's exit.
    left = next(line for line in first.stderr.splitlines() if line.startswith("LEFT RUNNING"))
    assert "java" not in left, first.stderr[-2000:]
    assert "produced 500 sample events" in first.stdout
    assert "streaming statistics: http://127.0.0.1:" in first.stdout
    assert "batch " in first.stdout and "written 500" in first.stdout
    assert f"table {pg_schema}.kafka_events: 500 rows, 0 duplicates" in first.stdout
    assert "stored offsets == log end" in first.stdout
    # Quiet by default: none of the notes Spark's JVM prints at every start reach the user.
    # (Spark's note that this machine's hostname resolves to a loopback address stays: it
    # is about the machine's set-up, which a user running a cluster job needs to know.)
    for noise in ("incubator modules", "default log4j profile", "default log level",
                  "NativeCodeLoader"):
        assert noise not in first.stderr, first.stderr[-2000:]
    # The rerun's rows are what counts, not its process: it runs in the job host.
    again = job_host.run([*argv[3:-1], "200"])
    assert again.returncode == 0, again.stdout[-2000:] + again.stderr[-2000:]
    assert f"table {pg_schema}.kafka_events: 700 rows, 0 duplicates" in again.stdout
    assert "200 records read, 200 rows written" in again.stdout


def test_ingest_idempotent_sink_and_explicit_starting_offsets(kafka, kafka_topic, postgres,
                                                             pg_schema, job_host):
    topic = kafka_topic(partitions=1)
    kafka.produce(topic, [b"v"] * 50)
    done = _ingest(job_host, kafka, postgres, topic, pg_schema, "--table", "from_ten", "--sink",
                   "idempotent", "--starting-offsets", f'{{"{topic}": {{"0": 10}}}}')
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert f"table {pg_schema}.from_ten: 40 rows, 0 duplicates" in done.stdout


@pytest.mark.services  # the job starts its own embedded services
def test_ingest_without_services_starts_the_embedded_ones_and_creates_its_topic(scratch):
    env = {k: v for k, v in os.environ.items()
           if k not in ("KAFKA_DIRECT_PG_DSN", "KAFKA_DIRECT_BOOTSTRAP")}
    done = subprocess.run(
        [sys.executable, "-m", "kafka_direct.app.cli", "ingest", "--sample-events", "300",
         "--batch-interval", "0.5", "--state-dir", str(scratch / "state")],
        capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "created topic kafka-direct-events (3 partitions)" in done.stderr
    assert "table public.kafka_events: 300 rows, 0 duplicates" in done.stdout
    assert "stored offsets == log end" in done.stdout



def _ingest(job_host, kafka, postgres, topic, schema, *extra, process=False):
    """Run the job (in the job host, keeping Spark's JVM; ``process``: as a process)."""
    return job_host.run(
        ["ingest", "--bootstrap-servers", kafka.bootstrap_servers, "--dsn", postgres.dsn,
         "--topic", topic, "--schema", schema, "--batch-interval", "0.5", "--stop-after-idle",
         "1", *extra], process=process)


def test_a_structured_rerun_with_nothing_new_ends_cleanly(
        kafka, kafka_topic, postgres, pg_schema, job_host):
    # The second run's query is new (fresh checkpoint) and its first batch reads nothing:
    # it used to stop with exit 2 ("read nothing from a linked source while the store
    # follows query ..."). That the store then goes on with the new query is tested on the
    # source and sink (tests/sql/link/test_sink_kafka.py), at a fraction of this cost.
    topic = kafka_topic(partitions=2)
    kafka.produce(topic, [b"v"] * 6)
    for produced, total in ((0, 6), (0, 6)):
        kafka.produce(topic, [b"w"] * produced)
        done = _ingest(job_host, kafka, postgres, topic, pg_schema, "--api", "structured")
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
        assert f"table {pg_schema}.kafka_events: {total} rows, 0 duplicates" in done.stdout


def test_the_structured_jobs_first_batch_reads_at_most_first_batch_records(
        kafka, kafka_topic, postgres, pg_schema, job_host):
    # The first batch pays for the query's start: a small one commits its rows sooner; the
    # next batches read as the rate says, and every record lands once.
    topic = kafka_topic(partitions=2)
    for partition in range(2):
        kafka.produce(topic, [b"v"] * 60, partition=partition)
    done = _ingest(job_host, kafka, postgres, topic, pg_schema, "--api", "structured",
                   "--first-batch-records", "5", "--max-rate-per-partition", "1000")
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "batch 0: 5 records in" in done.stdout
    assert "batch 1: 115 records in" in done.stdout
    assert f"table {pg_schema}.kafka_events: 120 rows, 0 duplicates" in done.stdout
    assert "stored offsets == log end" in done.stdout
    # The group learns each batch's end (for lag tools), the last one's too.
    from confluent_kafka import Consumer
    from confluent_kafka import TopicPartition as KafkaTopicPartition

    consumer = Consumer({"bootstrap.servers": kafka.bootstrap_servers,
                         "group.id": "kafka-direct-ingest", "enable.auto.commit": False})
    try:
        committed = consumer.committed([KafkaTopicPartition(topic, p) for p in range(2)],
                                       timeout=30)
    finally:
        consumer.close()
    assert [c.offset for c in committed] == [60, 60]


def test_the_structured_job_with_available_now_reads_what_the_topics_hold_and_ends(
        kafka, kafka_topic, postgres, pg_schema, job_host):
    # Trigger.AvailableNow: the batches run one after another, each capped by the rate,
    # up to the log ends of the query's start; the query then ends by itself (no idle
    # trigger waited for: the job is given no --stop-after-idle).
    topic = kafka_topic(partitions=2)
    for partition in range(2):
        kafka.produce(topic, [b"v"] * 60, partition=partition)
    done = job_host.run(
        ["ingest", "--bootstrap-servers", kafka.bootstrap_servers, "--dsn", postgres.dsn,
         "--topic", topic, "--schema", pg_schema, "--api", "structured", "--available-now",
         "--batch-interval", "30", "--max-rate-per-partition", "1", "--first-batch-records",
         "5"])
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "batch 0: 5 records in" in done.stdout
    # 30 records a partition and batch: a 30 s trigger would take minutes for these.
    assert "batch 1: 60 records in" in done.stdout
    assert "batch 2: 55 records in" in done.stdout
    assert "batch 3:" not in done.stdout
    assert f"table {pg_schema}.kafka_events: 120 rows, 0 duplicates" in done.stdout
    assert "stored offsets == log end" in done.stdout


@pytest.mark.parametrize("api", ["dstream", "structured"])
def test_a_failing_job_ends_with_its_typed_error_on_both_apis(kafka, kafka_topic, postgres,
                                                              pg_schema, api, job_host):
    # Records the job never read are deleted: the next run stops with DataLossError, the
    # same way on both APIs (the structured job used to end with an untyped
    # StreamingQueryException carrying a base64 marker).
    topic = kafka_topic(partitions=1)
    kafka.produce(topic, [b"v"] * 5)
    first = _ingest(job_host, kafka, postgres, topic, pg_schema, "--api", api)
    assert first.returncode == 0, first.stdout[-2000:] + first.stderr[-2000:]
    kafka.produce(topic, [b"w"] * 5)
    kafka.delete_records(topic, 0, 10)
    # What the user's terminal shows: a process of its own, Spark's error output included.
    done = _ingest(job_host, kafka, postgres, topic, pg_schema, "--api", api, process=True)
    assert done.returncode == 73, done.stdout[-2000:] + done.stderr[-2000:]
    assert "kafka-direct ingest stopped: DataLossError: " in done.stderr, done.stderr[-3000:]
    assert f"{topic}-0" in done.stderr and "it resumes from the stored offsets" in done.stderr
    # The job's own last words (Spark's task-failure log lines, in a process of its own
    # above them, are Spark's).
    for text in (done.stdout, done.stderr.strip().splitlines()[-1]):
        assert "unexpected" not in text and "StreamingQueryException" not in text
        assert "kafka-direct-error:" not in text  # the carrier's marker stays inside


def test_a_mistake_found_when_the_structured_query_starts_is_exit_2(kafka, kafka_topic,
                                                                     postgres, pg_schema,
                                                                     job_host):
    topic = kafka_topic(partitions=1)
    kafka.produce(topic, [b"v"] * 5)
    # What the user's terminal shows: a process of its own, Spark's error output included.
    done = _ingest(job_host, kafka, postgres, topic, pg_schema, "--api", "structured",
                   "--starting-offsets", f'{{"{topic}": {{"0": 100}}}}', process=True)
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-2000:]
    # One line, not Spark's page of JVM and Python stack above it.
    for page in ("terminated with error", "Traceback", "\tat org.apache"):
        assert page not in done.stderr, done.stderr[-3000:]
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("kafka-direct ingest: ConfigurationError: option 'startingOffsets'"), \
        last
    assert "beyond its end offset 5" in last and "kafka-direct-error:" not in last


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
@pytest.mark.parametrize("api", ["dstream", "structured"])
def test_the_jobs_lag_is_visible_to_kafkas_group_tools(kafka, kafka_topic, postgres, pg_schema,
                                                       api, protocol, job_host):
    # After each batch's PostgreSQL commit its end offsets go to the consumer group, for
    # monitoring only: a group lag tool then shows the job caught up, on both group
    # protocols (the classic one and KIP-848's).
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
    from confluent_kafka.admin import AdminClient

    from kafka_direct.testing import ApacheKafka

    topic = kafka_topic(partitions=2)
    kafka.produce(topic, [b"a"] * 7, partition=0)
    kafka.produce(topic, [b"b"] * 4, partition=1)
    group = f"lag-{api}-{protocol}-{pg_schema}"
    done = _ingest(job_host, kafka, postgres, topic, pg_schema, "--api", api, "--group", group,
                   "--kafka-param", f"group.protocol={protocol}")
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap_servers})
    request = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, 0),
                                                   TopicPartition(topic, 1)])
    answer = admin.list_consumer_group_offsets([request])[group].result(30)
    assert {tp.partition: tp.offset for tp in answer.topic_partitions} == {0: 7, 1: 4}
    if not isinstance(kafka, ApacheKafka):
        return
    # Kafka's own tool (kafka-consumer-groups.sh) reads the same group as caught up.
    described = kafka.run_tool("org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
                               "--bootstrap-server", kafka.bootstrap_servers, "--describe",
                               "--group", group)
    assert described.returncode == 0, described.stdout + described.stderr
    lines = [line.split() for line in described.stdout.splitlines() if topic in line]
    header = next(line.split() for line in described.stdout.splitlines() if "LAG" in line)
    column = {name: header.index(name) for name in ("PARTITION", "CURRENT-OFFSET",
                                                     "LOG-END-OFFSET", "LAG")}
    shown = {int(line[column["PARTITION"]]): (int(line[column["CURRENT-OFFSET"]]),
                                              int(line[column["LOG-END-OFFSET"]]),
                                              int(line[column["LAG"]])) for line in lines}
    assert shown == {0: (7, 7, 0), 1: (4, 4, 0)}, described.stdout


@pytest.mark.cluster
@pytest.mark.parametrize("api", ["dstream", "structured"])
def test_the_job_on_separate_executor_processes(kafka, kafka_topic, postgres, pg_schema, api,
                                                job_host):
    # local-cluster: executors are JVMs of their own, with their own Python workers; the
    # source, the sink and the offset store must work with nothing shared with the driver.
    # The driver is the job host (a process of its own, kept for the next run with this
    # master): what is tested is the executors' side, and a new driver JVM per API would
    # only add its start.
    topic = kafka_topic(partitions=3)
    for partition in range(3):
        kafka.produce(topic, [f"{partition}-{i}".encode() for i in range(40)],
                      partition=partition)
    done = _ingest(job_host, kafka, postgres, topic, pg_schema, "--api", api,
                   "--master", "local-cluster[2,1,1024]")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert f"table {pg_schema}.kafka_events: 120 rows, 0 duplicates" in done.stdout
    assert "stored offsets == log end" in done.stdout
