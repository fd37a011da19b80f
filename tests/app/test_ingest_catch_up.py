"""The ingest job's direct stream reads a batch's input when the batch can run."""

import contextlib

import pytest

from kafka_direct.app.ingest_job import run_ingest
from kafka_direct.app.ingest_options import IngestOptions


class _Built(Exception):
    """Raised by the stand-in StreamingContext once it has the job's settings."""


def test_the_ingest_stream_waits_for_the_previous_batch_before_reading(
        postgres, pg_schema, monkeypatch):
    # With batches planned at their tick, a job whose first batch took seconds (Spark's
    # workers, consumers and connections start then) never catches up at a short interval:
    # each queued batch holds one interval's records and costs about as much as the
    # interval. The engine's setting makes a late batch read everything that came.
    seen = {}

    class Context:
        def __init__(self, sc, batchDuration, conf=None):
            seen.update(conf or {})
            raise _Built

    @contextlib.contextmanager
    def no_spark(*args, **kwargs):
        yield object()

    monkeypatch.setattr("kafka_direct.runtime.spark.spark_context", no_spark)
    monkeypatch.setattr("kafka_direct.streaming.context.StreamingContext", Context)
    options = IngestOptions(topics=("t",), schema=pg_schema, group="catch-up",
                            batchInterval=0.25)
    with pytest.raises(_Built):
        run_ingest(options, "127.0.0.1:9", postgres.dsn)
    assert seen["spark.streaming.waitForPreviousBatch"] == "true"
