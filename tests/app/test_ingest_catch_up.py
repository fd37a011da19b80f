"""The ingest job's direct stream reads a batch's input when the batch can run."""

import contextlib

import pytest

from kafka_direct.app.ingest_job import run_ingest
from kafka_direct.app.ingest_options import IngestOptions


class _Built(Exception):
    """Raised by the stand-in StreamingContext once it has the job's settings."""


class _NoSpark:
    """A SparkContext stand-in: only its settings (``spark``, as ``getConf()`` answers)."""

    def __init__(self, spark=None):
        self.spark = dict(spark or {})

    def getConf(self):
        return self.spark


def the_streams_settings(postgres, pg_schema, monkeypatch, spark=None):
    """The settings the ingest job gives its StreamingContext."""
    seen = {}

    class Context:
        def __init__(self, sc, batchDuration, conf=None):
            seen.update(conf or {})
            raise _Built

    @contextlib.contextmanager
    def no_spark(*args, **kwargs):
        yield _NoSpark(spark)

    monkeypatch.setattr("kafka_direct.runtime.spark.spark_context", no_spark)
    monkeypatch.setattr("kafka_direct.streaming.context.StreamingContext", Context)
    options = IngestOptions(topics=("t",), schema=pg_schema, group="catch-up",
                            batchInterval=0.25)
    with pytest.raises(_Built):
        run_ingest(options, "127.0.0.1:9", postgres.dsn)
    return seen


def test_the_ingest_stream_waits_for_the_previous_batch_before_reading(
        postgres, pg_schema, monkeypatch):
    # With batches planned at their tick, a job whose first batch took seconds (Spark's
    # workers, consumers and connections start then) never catches up at a short interval:
    # each queued batch holds one interval's records and costs about as much as the
    # interval. The engine's setting makes a late batch read everything that came.
    seen = the_streams_settings(postgres, pg_schema, monkeypatch)
    assert seen["spark.streaming.waitForPreviousBatch"] == "true"


def test_the_ingest_stream_groups_small_ranges_unless_spark_is_told_otherwise(
        postgres, pg_schema, monkeypatch):
    # The job owns its sink, which writes a grouped task's ranges in one transaction: a
    # batch spread thin over many partitions pays for a Spark task per group, not per range.
    key = "spark.streaming.kafka.minOffsetsPerTask"
    assert the_streams_settings(postgres, pg_schema, monkeypatch)[key] == "10000"
    told = the_streams_settings(postgres, pg_schema, monkeypatch, {key: "0"})
    assert told[key] == "0"
