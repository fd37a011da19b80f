"""A token provider named by module path runs where each client is created: on executors."""

import os

import pytest

from kafka_direct import KafkaUtils, OffsetRange


def test_an_oauth_token_provider_named_by_module_path_runs_on_executors(
        kafka, kafka_topic, spark, tmp_path):
    # The broker's SASL listener takes Kafka's unsecured tokens; what matters is that the
    # executor's consumer imported the provider by its name and authenticated with its token.
    if kafka.sasl_bootstrap_servers is None:
        pytest.skip("this broker has no SASL_PLAINTEXT listener")
    topic = kafka_topic()
    kafka.produce(topic, [b"x"], partition=0)
    calls = tmp_path / "calls"
    params = {"bootstrap.servers": kafka.sasl_bootstrap_servers,
              "security.protocol": "SASL_PLAINTEXT", "sasl.mechanisms": "OAUTHBEARER",
              "sasl.oauthbearer.config": str(calls),
              "oauth_cb": "tests.client.oauth_tokens:provide"}
    rdd = KafkaUtils.createRDD(spark, params, [OffsetRange(topic, 0, 0, 1)])
    assert [r.value for r in rdd.collect()] == [b"x"]
    callers = {int(pid) for pid in calls.read_text().split()}
    assert callers - {os.getpid()}, "no executor process asked the provider for a token"
