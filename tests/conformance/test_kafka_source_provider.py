#
# Licensed to the Apache Software Foundation (ASF) under one or more
# contributor license agreements.  See the NOTICE file distributed with
# this work for additional information regarding copyright ownership.
# The ASF licenses this file to You under the Apache License, Version 2.0
# (the "License"); you may not use this file except in compliance with
# the License.  You may obtain a copy of the License at
#
#    http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS,
# WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
# See the License for the specific language governing permissions and
# limitations under the License.
#
"""Apache Spark's KafkaSourceProviderSuite (connector/kafka-0-10-sql) translated to Python:
the ``kafka-direct`` source's options are case-insensitive, as Spark's.

Spark's tests build the JVM ``KafkaBatch`` / ``KafkaMicroBatchStream`` and read their fields;
here the same options go through kafka-direct's option parser (``parse_source_options``, what
the source reads them with) and, where the option changes what a query reads, through a
query.

Left out:

* "continuous mode - options should be handled as case-insensitive": continuous processing is
  not available to Python data sources.
"""

import pytest

from kafka_direct.sql.source.options import parse_source_options
from tests.conformance.kafka_sql_utils import ours_only, send_messages, stream, values_as_ints

EXPECTED = "1111"


def upper_and_lower(key, value):
    """buildCaseInsensitiveStringMapForUpperAndLowerKey, with the required options."""
    required = {"kafka.bootstrap.servers": "dummy:9092", "subscribe": "dummy"}
    return [{key.upper(): value, **required}, {key.lower(): value, **required}]


PARSER_ONLY = ours_only("kafka-direct's option parser (the query test below runs on both)")


@PARSER_ONLY
@pytest.mark.parametrize("key,field", [("kafkaConsumer.pollTimeoutMs", "pollTimeoutMs")])
def test_batch_mode_options_should_be_handled_as_case_insensitive(key, field):
    """KafkaSourceProviderSuite: "batch mode - options should be handled as
    case-insensitive"."""
    for options in upper_and_lower(key, EXPECTED):
        parsed = parse_source_options(options, streaming=False)
        assert getattr(parsed, field) == int(EXPECTED)


@PARSER_ONLY
@pytest.mark.parametrize("key,field,expected", [
    ("kafkaConsumer.pollTimeoutMs", "pollTimeoutMs", 1111),
    ("maxOffsetsPerTrigger", "maxOffsetsPerTrigger", 1111),
    ("minOffsetsPerTrigger", "minOffsetsPerTrigger", 1111),
    ("maxTriggerDelay", "maxTriggerDelayMs", 1111),
    ("fetchOffset.numRetries", "numRetries", 1111),
    ("fetchOffset.retryIntervalMs", "retryIntervalMs", 1111),
])
def test_micro_batch_mode_options_should_be_handled_as_case_insensitive(key, field,
                                                                        expected):
    """KafkaSourceProviderSuite: "micro-batch mode - options should be handled as
    case-insensitive"."""
    for options in upper_and_lower(key, EXPECTED):
        parsed = parse_source_options(options, streaming=True)
        assert getattr(parsed, field) == expected


def test_micro_batch_mode_options_case_insensitive_in_a_query(spark_session, kafka,
                                                              kafka_topic, tmp_path):
    """KafkaSourceProviderSuite: "micro-batch mode - options should be handled as
    case-insensitive" (``MAXOFFSETSPERTRIGGER`` as a query sees it)."""
    topic = kafka_topic()
    send_messages(kafka, topic, range(15), partition=0)
    for name in ("MAXOFFSETSPERTRIGGER", "maxoffsetspertrigger"):
        sizes = []
        df = stream(spark_session, kafka, subscribe=topic, STARTINGOFFSETS="earliest",
                    **{name: 5})
        query = (df.writeStream.foreachBatch(
                     lambda d, _, sizes=sizes: sizes.append(len(values_as_ints(d))))
                 .option("checkpointLocation", str(tmp_path / name))
                 .trigger(availableNow=True).start())
        assert query.awaitTermination(120)
        assert sizes == [5, 5, 5]
