"""The ingest job's options for the kafka-direct source (``--api structured``)."""

import os

import pytest

from kafka_direct.app.ingest_options import IngestOptions
from kafka_direct.app.structured_ingest import FIRST_BATCH_RECORDS, job_settings, source_options


def _options(**given):
    return IngestOptions(api="structured", **given)


@pytest.mark.parametrize("what", [{"pattern": r"events-\d+"}, {"topics": ("a", "b")}])
def test_the_rate_per_partition_is_the_sources_per_trigger_cap_for_every_partition(what):
    # 50 records/s per partition over 2 s batches: 100 offsets per partition and trigger,
    # counted by the source from the partitions it sees at each trigger (a pattern's
    # partitions are unknown at start, and topics gain partitions).
    options = source_options(_options(maxRatePerPartition=50, batchInterval=2.0, **what),
                             "k:9092", "dbname=x", {})
    assert options["maxOffsetsPerPartitionPerTrigger"] == "100"
    assert "maxOffsetsPerTrigger" not in options


def test_a_rate_below_one_record_per_batch_still_reads():
    # As the direct stream: at least one record per partition and batch, never "no cap".
    options = source_options(_options(pattern="e.*", maxRatePerPartition=1,
                                      batchInterval=0.5), "k:9092", "dbname=x", {})
    assert options["maxOffsetsPerPartitionPerTrigger"] == "1"


def test_no_rate_no_cap_and_the_rest_of_the_mapping():
    options = source_options(_options(pattern="e.*", group="g", schema="s",
                                      startingOffsets="latest"),
                             "k:9092", "dbname=x", {"security.protocol": "SSL"})
    assert options == {
        "kafka.security.protocol": "SSL", "kafka.bootstrap.servers": "k:9092",
        "subscribePattern": "e.*", "startingOffsets": "latest", "offsetStore.name": "g",
        "offsetStore.dsn": "dbname=x", "offsetStore.schema": "s", "kafka.group.id": "g",
        "commitOffsetsToGroup": "true",
        # No record crosses Spark's JVM: the sink reads the offset ranges.
        "emit": "offsetRanges",
        # The first batch pays for the query's start: a small one commits sooner.
        "maxOffsetsFirstTrigger": str(FIRST_BATCH_RECORDS)}


def test_the_first_batch_reads_at_most_the_first_batch_records():
    options = source_options(_options(topics=("t",), maxRatePerPartition=50_000,
                                      batchInterval=1.0, firstBatchRecords=2_000),
                             "k:9092", "dbname=x", {})
    assert options["maxOffsetsFirstTrigger"] == "2000"
    assert options["maxOffsetsPerPartitionPerTrigger"] == "50000"
    # 0: the first batch is capped as every other.
    none = source_options(_options(topics=("t",), firstBatchRecords=0), "k:9092",
                          "dbname=x", {})
    assert "maxOffsetsFirstTrigger" not in none


def test_first_batch_records_is_checked_and_for_the_structured_api_only():
    import argparse

    from kafka_direct.app.ingest_arguments import add_arguments, settings_from_args
    from kafka_direct.errors import ConfigurationError

    def settings(*argv):
        parser = argparse.ArgumentParser()
        add_arguments(parser)
        return settings_from_args(parser.parse_args(
            ["--bootstrap-servers", "k:9092", "--dsn", "dbname=x", *argv]), {})

    assert settings("--api", "structured").options.firstBatchRecords is None
    assert settings("--api", "structured", "--first-batch-records", "500"
                    ).options.firstBatchRecords == 500
    with pytest.raises(ConfigurationError, match="--first-batch-records must be >= 0"):
        settings("--api", "structured", "--first-batch-records", "-1")
    with pytest.raises(ConfigurationError, match="--first-batch-records is for --api structured"):
        settings("--first-batch-records", "500")
    with pytest.raises(ConfigurationError, match="firstBatchRecords"):
        _options(topics=("t",), firstBatchRecords=-1)


@pytest.mark.parametrize(("master", "parallelism"), [
    ("local[2]", "2"), ("local[2,4]", "2"), ("local", "1"), ("local[*]", None),
    ("local-cluster[2,1,1024]", None), ("spark://h:7077", None), ("yarn", None)])
def test_a_local_job_keeps_as_many_tasks_a_batch_as_it_has_threads(master, parallelism):
    # The quick-start settings' parallelism (4) ran a local[2] job's four small tasks a
    # batch in two waves, each task paying for its Python workers and transactions.
    settings = job_settings(master, "checkpoint")
    expected = parallelism or (str(os.cpu_count() or 1) if master == "local[*]" else None)
    assert settings.get("spark.default.parallelism") == expected
    assert settings["spark.sql.ui.explainMode"] == "simple"


@pytest.mark.parametrize(("master", "checkpoint", "local"), [
    ("local[2]", "checkpoint", True), ("local[2]", "file:///srv/c", True),
    ("yarn", "file:///srv/c", True), ("yarn", "/user/job/checkpoint", False),
    ("local[2]", "hdfs://nn/checkpoint", False), ("spark://h:7077", "s3a://b/c", False)])
def test_only_a_checkpoint_on_the_local_file_system_skips_hadoops_shell_commands(
        master, checkpoint, local):
    manager = job_settings(master, checkpoint).get(
        "spark.sql.streaming.checkpointFileManagerClass")
    assert (manager is not None) is local
    if local:
        assert manager.endswith(".FileSystemBasedCheckpointFileManager")


SUBMITTED_APP = """
from kafka_direct.app.ingest_options import IngestOptions, spark_context_arguments
from kafka_direct.runtime.spark import spark_context
options = IngestOptions(api="structured", master="local[2]", topics=("t",))
with spark_context(**spark_context_arguments(options, False)) as sc:
    conf = sc.getConf()
    print("RESULT", conf.get("spark.default.parallelism"), sc.defaultParallelism,
          conf.get("spark.sql.shuffle.partitions"), flush=True)
"""


@pytest.mark.services
def test_spark_submits_parallelism_wins_over_the_jobs(tmp_path):
    # The job's parallelism (its threads) is its own choice only where the user made none.
    import subprocess
    import sys
    from pathlib import Path

    import pyspark

    app = tmp_path / "app.py"
    app.write_text(SUBMITTED_APP)
    submit = Path(pyspark.__file__).parent / "bin" / "spark-submit"
    done = subprocess.run(
        [str(submit), "--master", "local[2]", "--conf", "spark.default.parallelism=7",
         "--conf", "spark.sql.shuffle.partitions=9", str(app)],
        capture_output=True, text=True, timeout=180,
        env={**os.environ, "PYSPARK_PYTHON": sys.executable,
             "PYSPARK_DRIVER_PYTHON": sys.executable})
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT")]
    assert lines, done.stdout[-2000:] + done.stderr[-3000:]
    assert lines[0].split()[1:] == ["7", "7", "9"]


def test_the_sink_writes_the_tables_columns_of_the_records_it_reads():
    from kafka_direct.app.structured_ingest import sink_options

    options = sink_options(_options(topics=("t",), group="g", schema="s", table="events"),
                           "dbname=x")
    assert options == {
        "dsn": "dbname=x", "schema": "s", "table": "events",
        # The records' topic, partition, offset, key and value (the source's offset
        # ranges, read by the sink) go to these columns, claimed by the first three.
        "columns": "topic,kafka_partition,kafka_offset,key,value",
        "offsetColumns": "topic,kafka_partition,kafka_offset",
        "offsetStore.name": "g", "offsetStore.schema": "s"}


def test_available_now_is_for_the_structured_api_and_ends_the_run_itself():
    import argparse

    from kafka_direct.app.ingest_arguments import add_arguments, settings_from_args
    from kafka_direct.errors import ConfigurationError

    def settings(*argv):
        parser = argparse.ArgumentParser()
        add_arguments(parser)
        return settings_from_args(parser.parse_args(
            ["--bootstrap-servers", "k:9092", "--dsn", "dbname=x", *argv]), {})

    assert not settings("--api", "structured").options.availableNow
    now = settings("--api", "structured", "--available-now").options
    assert now.availableNow and now.stopAfterIdleBatches == 0
    with pytest.raises(ConfigurationError, match="--available-now is for --api structured"):
        settings("--available-now")
    # The query ends at the log ends of its start: an idle count would never be reached.
    with pytest.raises(ConfigurationError, match="--stop-after-idle .*--available-now"):
        settings("--api", "structured", "--available-now", "--stop-after-idle", "2")
    # 0 is "never stop on idle": what --available-now does anyway.
    assert settings("--api", "structured", "--available-now", "--stop-after-idle", "0"
                    ).options.stopAfterIdleBatches == 0
    with pytest.raises(ConfigurationError, match="availableNow"):
        IngestOptions(topics=("t",), availableNow=True)
    with pytest.raises(ConfigurationError, match="availableNow"):
        _options(topics=("t",), availableNow=True, stopAfterIdleBatches=1)
