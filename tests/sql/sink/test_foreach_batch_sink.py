"""foreach_batch_sink's and the microBatch options' checks, before anything runs."""

import pytest

from kafka_direct.errors import ConfigurationError
from kafka_direct.sql import foreach_batch_sink
from kafka_direct.sql.sink.options import parse_options

BASE = {"dsn": "host=db password=hunter2", "password": "s3cret", "table": "t",
        "mode": "append"}


@pytest.mark.parametrize(("options", "message"), [
    ({"dsn": "x"}, "needs option table"),
    ({**BASE, "table": " "}, "needs option table"),
    ({**BASE, "mode": "merge"}, "mode 'merge' is unknown"),
    ({**BASE, "microBatch.queryId": "q"}, "sets option microbatch.queryid itself"),
    ({**BASE, "MICROBATCH.BATCHID": "1"}, "sets option microbatch.batchid itself"),
    ({"table": "t"}, "needs option mode, as it cannot see the query's output mode"),
    ({**BASE, "mode": None}, "needs option mode"),
    ({**BASE, "columns": ["a", "b"]}, "option columns must be text, a number or a boolean"),
])
def test_bad_options_are_refused_when_built(options, message):
    with pytest.raises(ConfigurationError, match=message):
        foreach_batch_sink(options)


def test_repr_names_the_target_never_a_secret():
    text = repr(foreach_batch_sink(BASE, schema="s", mode="complete"))
    assert text == "foreach_batch_sink(s.t, overwrite)"
    assert "hunter2" not in text and "s3cret" not in text


def test_none_is_no_option_and_booleans_are_spark_text():
    sink = foreach_batch_sink(BASE, password=None, schema=None, createTable=True)
    assert "password" not in sink._options and "schema" not in sink._options
    assert sink._options["createTable"] == "true"
    assert repr(sink) == "foreach_batch_sink(public.t, append)"


def test_keywords_win_over_the_mapping():
    assert "append" in repr(foreach_batch_sink({**BASE, "mode": "complete"}, mode="update"))


@pytest.mark.parametrize(("options", "message"), [
    ({"microBatch.queryId": "q"}, "go together"),
    ({"microBatch.batchId": "1"}, "go together"),
    ({"microBatch.queryId": "q", "microBatch.batchId": "-1"}, "batchId must be"),
    ({"microBatch.queryId": "q", "microBatch.batchId": "x"}, "whole number"),
    ({"microBatch.queryId": " ", "microBatch.batchId": "1"}, "queryId must be"),
    ({"microBatch.queryId": "write:abc", "microBatch.batchId": "1"}, "queryId must be"),
])
def test_micro_batch_options_are_checked(options, message):
    with pytest.raises(ConfigurationError, match=message):
        parse_options({"table": "t", **options}, ["id"], False)


def test_micro_batch_options_parse():
    options = parse_options({"table": "t", "microbatch.queryid": "q-1",
                             "microbatch.batchid": "7"}, ["id"], False)
    assert options.microBatch == ("q-1", 7)
