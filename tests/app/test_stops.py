"""The stop block and the exit codes, without services: one kind per error class."""

import pytest

from kafka_direct import errors
from kafka_direct.app.ingest_arguments import EPILOG
from kafka_direct.app.stops import EXIT_CODES, OTHER_ERROR, exit_code, first_line, stop_block


@pytest.mark.parametrize("name, code", [
    ("ConfigurationError", 2), ("BadRecordError", 65), ("RecordError", 65),
    ("SchemaChangeError", 66), ("SchemaRegistryError", 67), ("OffsetMismatchError", 68),
    ("GroupBusyError", 69), ("SinkWriteError", 71), ("OffsetStoreError", 72),
    ("KafkaReadError", 73), ("DataLossError", 73), ("PollTimeoutError", 73),
    ("StreamingQueryFailedError", 74), ("KafkaUnavailableError", OTHER_ERROR),
    ("ServiceError", OTHER_ERROR)])
def test_each_kind_of_stop_has_its_documented_code(name, code):
    assert exit_code(getattr(errors, name)) == code
    if name in EXIT_CODES:  # the rest by the class they derive from
        assert EXIT_CODES[name] == code
    assert exit_code(ValueError("x")) == OTHER_ERROR


def test_the_help_and_the_docs_draw_every_code():
    from pathlib import Path

    docs = (Path(__file__).parents[2] / "docs" / "ingest.md").read_text()
    for name, code in EXIT_CODES.items():
        assert f"| {code} |" in docs and f"`{name}`" in docs, name
        if name != "RecordError":
            assert f"{code:>5}  " in EPILOG and f"({name})" in EPILOG, name


def test_a_bad_records_block_names_where_what_to_do_and_the_dead_letters():
    error = errors.BadRecordError("record t-0 at offset 2 cannot be a row: not JSON",
                                  topic="t", partition=0, offset=2, cause="not JSON")
    block = stop_block("ingest", error, "s.t_dead_letter").splitlines()
    assert block[0] == ("kafka-direct ingest stopped: BadRecordError: record t-0 at offset "
                        "2 cannot be a row: not JSON")
    assert block[1] == "where: topic t, partition 0, offset 2"
    assert block[2].startswith("what to do: fix the record's producer")
    assert block[3] == "dead letters: s.t_dead_letter"
    assert block[4].startswith("exit code 65: ")


def test_a_ranges_block_and_one_without_a_place():
    error = errors.OffsetMismatchError("moved", group="g", topic="t", partition=1, stored=5,
                                       fromOffset=7, untilOffset=9)
    assert "where: group g, topic t, partition 1, offsets 7 to 9 (exclusive), stored " \
           "offset 5" in stop_block("ingest", error)
    lines = stop_block("ingest", errors.KafkaDirectError("odd")).splitlines()
    assert [line.split(":")[0] for line in lines] == [
        "kafka-direct ingest stopped", "what to do", "exit code 1"]


def test_a_message_loses_the_stack_under_it_and_its_secrets():
    text = ("An error occurred while calling o1.collect.\n: org.apache.spark.SparkException: "
            "boom password=hunter2\n\tat org.apache.spark.rdd.RDD.collect(RDD.scala:1)\n"
            "\tat java.base/java.lang.Thread.run(Thread.java:840)")
    shown = first_line(RuntimeError(text))
    assert shown.startswith("An error occurred while calling o1.collect. : org.apache")
    assert "RDD.scala" not in shown and "hunter2" not in shown
    assert first_line(RuntimeError("record at\nat offset 5 is bad")) == \
        "record at at offset 5 is bad"


def test_a_python_traceback_inside_sparks_text_is_cut_where_it_starts():
    text = ("[STREAM_FAILED] Query terminated with exception: Job aborted: "
            "org.apache.spark.api.python.PythonException: An exception was thrown from the "
            "Python worker: Traceback (most recent call last):\n  File \"w.py\", line 1\n"
            "ValueError: x")
    assert first_line(RuntimeError(text)) == (
        "[STREAM_FAILED] Query terminated with exception: Job aborted: "
        "org.apache.spark.api.python.PythonException: An exception was thrown from the "
        "Python worker:")


def test_the_marker_of_an_error_from_an_executor_is_not_shown():
    from kafka_direct.task_errors import encode_error

    carried = encode_error(errors.BadRecordError("bad", topic="t", partition=0, offset=1,
                                                 cause="c"))
    assert "kafka-direct-error:" in carried
    assert first_line(RuntimeError(f"Job aborted: {carried}")) == \
        "Job aborted: BadRecordError: bad"
