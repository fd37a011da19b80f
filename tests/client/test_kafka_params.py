import logging

import pytest

from kafka_direct import ConfigurationError
from kafka_direct.client.params import executor_params, reads_committed, redact, validate_params


def test_validate_params_requires_bootstrap_servers_and_plain_values():
    assert validate_params({"bootstrap.servers": "h:1"}) == {"bootstrap.servers": "h:1"}
    with pytest.raises(ConfigurationError, match="bootstrap.servers"):
        validate_params({"group.id": "g"})
    with pytest.raises(ConfigurationError, match="group.id"):
        validate_params({"bootstrap.servers": "h:1"}, require_group=True)
    with pytest.raises(ConfigurationError, match="must be a dict"):
        validate_params([("bootstrap.servers", "h:1")])
    with pytest.raises(ConfigurationError, match="valueDeserializer"):
        validate_params({"bootstrap.servers": "h:1", "value.deserializer": "x"})
    with pytest.raises(ConfigurationError, match="string, number or bool"):
        validate_params({"bootstrap.servers": "h:1", "client.id": None})


def test_secret_values_never_appear_in_errors_or_redacted_copies():
    params = {"bootstrap.servers": "h:1", "sasl.password": "hunter2", "ssl.key.password": "k"}
    shown = redact(params)
    assert shown["sasl.password"] == "[redacted]" and shown["ssl.key.password"] == "[redacted]"
    assert shown["bootstrap.servers"] == "h:1"
    with pytest.raises(ConfigurationError) as info:
        validate_params({"bootstrap.servers": "h:1", "sasl.password": ["hunter2"]})
    assert "hunter2" not in str(info.value)


def test_executor_params_force_safe_values_with_one_warning_each(caplog, monkeypatch):
    from kafka_direct.client import params as kafka_params

    monkeypatch.setattr(kafka_params, "_warned", set())  # earlier tests warned already
    user = {"bootstrap.servers": "h:1", "group.id": "g", "enable.auto.commit": "true",
            "auto.offset.reset": "latest", "fetch.min.bytes": 10,
            "allow.auto.create.topics": True}
    with caplog.at_level(logging.WARNING, logger="kafka_direct.client.params"):
        fixed = executor_params(user)
        executor_params(user)  # the same overrides again: no new warnings
    assert fixed["enable.auto.commit"] is False
    assert fixed["auto.offset.reset"] == "error"
    assert fixed["group.id"] == "spark-executor-g"
    assert fixed["fetch.min.bytes"] == 10
    assert user["group.id"] == "g"  # the caller's dict is untouched
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 1
    assert any("enable.auto.commit" in w for w in warnings)
    # auto.offset.reset is the driver's starting policy: executors always use "error",
    # and that is no mistake of the user's to warn about.
    assert not any("auto.offset.reset" in w for w in warnings)
    # Nor is topic creation, which the driver may allow for the topics it subscribes to:
    # executors never create one (a deleted topic would come back empty).
    assert fixed["allow.auto.create.topics"] is False
    assert not any("allow.auto.create.topics" in w for w in warnings)
    assert executor_params(fixed)["group.id"] == "spark-executor-g"  # idempotent


@pytest.mark.parametrize(("level", "committed"), [
    (None, True), ("read_committed", True), ("READ_Committed", True), (" read_committed", True),
    ("read_uncommitted", False), ("\tREAD_UNCOMMITTED", False)])
def test_the_isolation_level_is_read_as_librdkafka_reads_it(level, committed):
    params = {"bootstrap.servers": "b:9092"}
    if level is not None:
        params["isolation.level"] = level
    assert reads_committed(params) is committed
    from confluent_kafka import Consumer

    Consumer({**params, "group.id": "g"}).close()  # librdkafka takes every one of them


def test_executors_fetch_again_soon_after_a_failed_fetch():
    # librdkafka backs a partition's fetches off for fetch.error.backoff.ms (500 ms) after
    # a failed one: a cached consumer meeting a topic deleted and created again got
    # UNKNOWN_TOPIC_ID, had the new metadata within milliseconds, then fetched nothing for
    # half a second (of a poll timeout that may be one second in all).
    fixed = executor_params({"bootstrap.servers": "h:1"})
    assert fixed["fetch.error.backoff.ms"] <= 50
    kept = executor_params({"bootstrap.servers": "h:1", "fetch.error.backoff.ms": 500})
    assert kept["fetch.error.backoff.ms"] == 500  # a user's own value stays
    from confluent_kafka import Consumer

    Consumer({**fixed, "group.id": "g"}).close()  # librdkafka takes it
