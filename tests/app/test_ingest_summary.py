"""The ingest command's summary, its questions asked beside Spark's stop."""

import io
import threading

import pytest

from kafka_direct.app import ingest_summary
from kafka_direct.app.ingest_arguments import IngestSettings
from kafka_direct.app.ingest_options import IngestOptions, IngestResult
from kafka_direct.app.ingest_table import TableCheck
from kafka_direct.errors import ServiceError
from kafka_direct.topic_partition import TopicPartition

T0, T1 = TopicPartition("t", 0), TopicPartition("t", 1)


class Cluster:
    def topics(self):
        return {"t": 2}

    def end_offsets(self, topic, partitions):
        return {p: (0, 10 * (p + 1)) for p in partitions}


def _settings(api):
    return IngestSettings(options=IngestOptions(topics=("t",), api=api),
                          bootstrapServers="k:1", dsn="dbname=x", kafkaParams={},
                          createTopics=False, partitions=1, sampleEvents=0, stateDir=None)


@pytest.mark.parametrize("begun", [False, True])
def test_the_summary_is_the_same_whether_asked_beside_the_stop_or_after(monkeypatch, begun):
    threads = []

    def check_table(dsn, schema, table, group, ends, stored=None):
        threads.append(threading.current_thread().name)
        return TableCheck(30, 29, dict(stored), dict(ends))

    monkeypatch.setattr(ingest_summary, "check_table", check_table)
    result = IngestResult(batches=3, records=30, rowsWritten=30, offsets={T0: 10, T1: 15})
    facts = ingest_summary.SummaryFacts(_settings("structured"), Cluster(), "dbname=x", result)
    if begun:
        facts.begin()
        facts.begin()  # once only
    out = io.StringIO()
    ingest_summary.write_summary(_settings("structured"), facts, result, out)
    assert out.getvalue() == (
        "3 batches, 30 records read, 30 rows written\n"
        "table public.kafka_events: 30 rows, 1 duplicates\n"
        "stored offsets behind the log end (stored, end): {'t-1': (15, 20)}\n")
    assert threads == (["kafka-direct-summary"] if begun else ["MainThread"])


def test_what_failed_beside_the_stop_is_raised_where_the_summary_is_written(monkeypatch):
    def check_table(*args, **kwargs):
        raise ServiceError("PostgreSQL went away")

    monkeypatch.setattr(ingest_summary, "check_table", check_table)
    result = IngestResult(offsets={T0: 10, T1: 20})
    facts = ingest_summary.SummaryFacts(_settings("structured"), Cluster(), "dbname=x", result)
    facts.begin()
    with pytest.raises(ServiceError, match="went away"):
        ingest_summary.write_summary(_settings("structured"), facts, result, io.StringIO())
