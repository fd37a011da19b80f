"""`kafka-direct ingest --timestamp-column --header-columns`: the record's Kafka timestamp and
headers as typed columns, on both APIs, against the real broker and PostgreSQL."""

import datetime
import time

import pytest
from confluent_kafka import Producer

from tests.app.test_ingest_tables import ingest
from tests.app.test_ingest_typed import columns, ok, query

APIS = ["dstream", "structured"]


@pytest.mark.parametrize("api", APIS)
def test_the_timestamp_and_headers_become_columns(kafka, kafka_topic, postgres, pg_schema, api,
                                                 job_host):
    topic = kafka_topic(partitions=1)
    producer = Producer(kafka.params())
    base = int(time.time() * 1000) - 3_600_000  # an hour ago (older ones meet retention)
    for i in range(6):
        headers = [("trace", f"tr-{i}".encode()), ("attempt", b"1")]
        if i % 2:
            headers.append(("attempt", str(i + 10).encode()))  # repeated: the last wins
        if i == 5:
            headers = []  # no headers at all: NULLs
        producer.produce(topic, value=f'{{"id": {i}}}'.encode(), timestamp=base + i * 1000,
                         headers=headers)
    producer.flush(30)
    out = ok(ingest(job_host, kafka, postgres, pg_schema, api, f"g-{topic}", "--topic", topic,
                    "--table", "meta", "--value-format", "json", "--timestamp-column", "ts",
                    "--header-columns", "trace,attempt:integer"))
    assert "stored offsets == log end" in out
    assert columns(postgres, pg_schema, "meta") == {
        "topic": "text", "kafka_partition": "integer", "kafka_offset": "bigint",
        "key": "bytea", "id": "bigint", "ts": "timestamp with time zone", "trace": "text",
        "attempt": "integer"}
    rows = query(postgres, f'SELECT id, ts, trace, attempt FROM "{pg_schema}".meta ORDER BY id')
    start = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC) + datetime.timedelta(
        milliseconds=base)
    assert rows == [
        (i, start + datetime.timedelta(seconds=i), None if i == 5 else f"tr-{i}",
         None if i == 5 else (i + 10 if i % 2 else 1)) for i in range(6)]


def test_a_log_append_time_topic_gives_the_brokers_time(kafka, kafka_topic, postgres, pg_schema,
                                                       job_host):
    topic = kafka_topic(partitions=1, config={"message.timestamp.type": "LogAppendTime"})
    producer = Producer(kafka.params())
    before = datetime.datetime.now(datetime.UTC) - datetime.timedelta(seconds=5)
    producer.produce(topic, value=b"x", timestamp=int(time.time() * 1000) - 3_600_000)
    producer.flush(30)
    ok(ingest(job_host, kafka, postgres, pg_schema, "dstream", f"g-{topic}", "--topic", topic,
              "--table", "appended", "--timestamp-column", "ts"))
    ((ts,),) = query(postgres, f'SELECT ts FROM "{pg_schema}".appended')
    assert ts >= before  # the broker's append time, not the hour-old time the producer set
