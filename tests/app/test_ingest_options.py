"""The ingest command's options for real clusters: properties, secrets, master, driver host.

No service is needed: :func:`settings_from_args` checks and resolves everything it can
before anything starts.
"""

import argparse

import pytest

from kafka_direct.app.ingest_arguments import (
    add_arguments,
    describe,
    settings_from_args,
    spark_master,
)
from kafka_direct.app.ingest_options import TASK_ATTEMPTS
from kafka_direct.errors import ConfigurationError
from kafka_direct.redaction import REDACTED

SECRET = "s3cret-not-shown"


def _settings(*argv, environ=None):
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return settings_from_args(parser.parse_args(list(argv)), environ or {})


@pytest.mark.parametrize("given, used", [
    ("local", f"local[1,{TASK_ATTEMPTS}]"),
    ("local[2]", f"local[2,{TASK_ATTEMPTS}]"),
    ("local[*]", f"local[*,{TASK_ATTEMPTS}]"),
    ("local[2,1]", "local[2,1]"),  # chosen by the user
    ("local-cluster[2,1,1024]", "local-cluster[2,1,1024]"),
    ("spark://master:7077", "spark://master:7077"),  # spark.task.maxFailures applies there
    ("yarn", "yarn"),
])
def test_a_plain_local_master_gets_task_retries(given, used):
    assert spark_master(given) == used


def test_the_driver_is_pinned_to_loopback_only_with_an_embedded_service():
    assert _settings().options.loopbackDriver is True  # both embedded
    assert _settings("--dsn", "host=db").options.loopbackDriver is True  # embedded broker
    given = _settings("--bootstrap-servers", "b:9092", "--dsn", "host=db", "--topic", "t",
                      "--master", "spark://m:7077")
    assert given.options.loopbackDriver is False
    assert given.options.master == "spark://m:7077"
    assert given.createTopics is False  # never on a cluster it did not start
    assert given.options.stopAfterIdleBatches == 0 and given.sampleEvents == 0
    assert _settings("--bootstrap-servers", "b:9092", "--dsn", "host=db", "--topic", "t",
                     "--create-topic").createTopics is True


def test_kafka_properties_file_params_and_environment(tmp_path):
    properties = tmp_path / "client.properties"
    properties.write_text("# a comment\n! another\n\nsecurity.protocol = SASL_SSL\n"
                          "sasl.mechanism: SCRAM-SHA-512\nsasl.username=loader\n"
                          "sasl.password=env:LOADER_PASSWORD\nssl.ca.location=/etc/ca.pem\n")
    settings = _settings("--bootstrap-servers", "b:9092", "--dsn", "host=db", "--topic", "t",
                         "--kafka-properties", str(properties),
                         "--kafka-param", "ssl.ca.location=/etc/other.pem",
                         environ={"LOADER_PASSWORD": SECRET})
    assert settings.kafkaParams == {
        "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "loader", "sasl.password": SECRET,
        "ssl.ca.location": "/etc/other.pem"}  # the command line wins over the file
    shown = repr(describe(settings))
    assert SECRET not in shown and REDACTED in shown


def test_the_dsn_comes_from_the_environment_or_a_file_never_needing_argv(tmp_path):
    dsn = f"host=db user=loader password={SECRET}"
    assert _settings(environ={"KAFKA_DIRECT_PG_DSN": dsn}).dsn == dsn
    assert _settings("--dsn", "env:LOADER_DSN", environ={"LOADER_DSN": dsn}).dsn == dsn
    file = tmp_path / "dsn"
    file.write_text(dsn + "\n")
    assert _settings("--dsn-file", str(file), environ={"KAFKA_DIRECT_PG_DSN": "other"}).dsn == dsn
    assert "dsn" in describe(_settings("--dsn-file", str(file)))
    assert SECRET not in repr(describe(_settings("--dsn-file", str(file))))


def test_a_property_the_job_owns_is_refused():
    with pytest.raises(ConfigurationError, match="group.id is set by --group"):
        _settings("--kafka-param", "group.id=other")


def test_the_settings_repr_shows_no_secret():
    settings = _settings("--bootstrap-servers", "b:9092", "--topic", "t", "--dsn",
                         f"host=db password={SECRET}DSN", "--kafka-param",
                         f"sasl.password={SECRET}K")
    shown = repr(settings)
    assert SECRET not in shown and REDACTED in shown
    assert "bootstrapServers='b:9092'" in shown and "host=db" in shown


def test_a_dsn_names_where_it_came_from(tmp_path):
    file = tmp_path / "loader.dsn"
    file.write_text("host=db\n")
    assert _settings("--dsn", "host=db").dsnSource == "--dsn"
    assert _settings("--dsn-file", str(file)).dsnSource == f"--dsn-file {file}"
    assert (_settings(environ={"KAFKA_DIRECT_PG_DSN": "host=db"}).dsnSource
            == "the environment variable KAFKA_DIRECT_PG_DSN")
    assert "LOADER" in _settings("--dsn", "env:LOADER", environ={"LOADER": "host=db"}).dsnSource
    with pytest.raises(ConfigurationError, match="environment variable KAFKA_DIRECT_PG_DSN"):
        _settings(environ={"KAFKA_DIRECT_PG_DSN": "env:NOT_SET_HERE"})


@pytest.mark.parametrize("master", ["local[0]", "local[-1]", "local[2,0]", "garbage",
                                    "spark://", "local[x]", "local-cluster[2]"])
def test_a_master_of_no_known_form_is_refused(master):
    with pytest.raises(ConfigurationError, match="--master must be local"):
        _settings("--master", master)


@pytest.mark.parametrize("master", ["local", "local[*]", "local[3,2]", "local[*,2]",
                                    "local-cluster[2,1,1024]", "spark://a:7077,b:7077",
                                    "yarn", "k8s://https://api:6443", "mesos://m:5050"])
def test_every_known_master_form_is_accepted(master):
    _settings("--bootstrap-servers", "b:9092", "--dsn", "host=db", "--topic", "t",
              "--master", master)


def test_an_empty_pattern_is_refused():
    with pytest.raises(ConfigurationError, match="--pattern is empty"):
        _settings("--pattern", "")


def test_a_wrong_jvm_archive_switch_is_refused_before_anything_starts():
    with pytest.raises(ConfigurationError, match="KAFKA_DIRECT_JVM_ARCHIVE must be 'on' or "
                                                 "'off'.*got 'Maybe'") as raised:
        _settings(environ={"KAFKA_DIRECT_JVM_ARCHIVE": " Maybe "})
    assert raised.value.setting == "KAFKA_DIRECT_JVM_ARCHIVE"
    for value in ("", "on", " OFF "):
        _settings(environ={"KAFKA_DIRECT_JVM_ARCHIVE": value})
