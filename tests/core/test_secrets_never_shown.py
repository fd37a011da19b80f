"""Secrets of every kind, planted at once, never show while things fail.

Planted: a DSN password in key=value form (with a space, which libpq then complains about),
a URI DSN's password (with a bad ``%``), ``sasl.password``, ``sasl.jaas.config`` (what Java
and Scala users bring), ``ssl.key.password`` and ``sasl.oauthbearer.client.secret``.
Scanned: the errors (text, repr, context), the reprs of the stream's settings, the stores
and the sinks, every log record, and the statistics page with its JSON and metrics.
"""

import json
import logging
import urllib.request

import pytest

from kafka_direct import ConfigurationError, KafkaDirectError, KafkaUtils, LocationStrategies
from kafka_direct import ConsumerStrategies as CS
from kafka_direct.streaming.ui.server import StreamingUI
from offsets import PostgresOffsetStore
from sinks import IdempotentPostgresSink, TransactionalPostgresSink
from tests.streaming.helpers import Driver

# Each secret is unique and long enough that any piece of it showing is a leak.
SECRETS = {
    "dsn key=value": "Kv9xQ2 pass-dsn-kv",
    "dsn uri": "Ur1%zzpass-dsn-uri",
    "sasl.password": "Sa7pass-sasl-password",
    "sasl.jaas.config": "Ja5pass-jaas-config",
    "ssl.key.password": "Ss3pass-ssl-key",
    "sasl.oauthbearer.client.secret": "Oa2pass-oauth-secret",
}
# The distinctive tails: each must never appear in any output.
NEEDLES = ["Kv9xQ2", "pass-dsn-kv", "Ur1", "pass-dsn-uri", "Sa7pass", "Ja5pass", "Ss3pass",
           "Oa2pass", "At8", "pass-at-sign", "Cm6", "pass-comma", "Pw4pass"]

BAD_DSNS = [
    f"host=127.0.0.1 user=app password={SECRETS['dsn key=value']} dbname=x",
    f"postgresql://app:{SECRETS['dsn uri']}@127.0.0.1:1/x",
    f"host=127.0.0.1 port=1 user=app password='{SECRETS['dsn key=value']}' dbname=x "
    "connect_timeout=2",
    # An unencoded '@': libpq takes the password's tail for the host and quotes it.
    "postgresql://app:At8@pass-at-sign@127.0.0.1:1/x",
    "host=127.0.0.1 port=1 user=app password=Cm6,pass-comma dbname=x connect_timeout=2",
]


def secret_params(kafka, jaas=False):
    params = kafka.params(**{
        "group.id": "secrets",
        "sasl.password": SECRETS["sasl.password"],
        "ssl.key.password": SECRETS["ssl.key.password"],
        "sasl.oauthbearer.client.secret": SECRETS["sasl.oauthbearer.client.secret"],
    })
    if jaas:  # librdkafka has no JAAS: refused, and the refusal must not quote it
        params["sasl.jaas.config"] = (
            "org.apache.kafka.common.security.plain.PlainLoginModule required "
            f'username="u" password="{SECRETS["sasl.jaas.config"]}";')
    return params


def assert_clean(what, text):
    for needle in NEEDLES:
        assert needle not in text, f"a secret ({needle!r}) shows in {what}: {text!r}"


def shown(error):
    return "\n".join([str(error), repr(error), repr(getattr(error, "context", {})),
                      *(str(v) for v in vars(error).values())])


@pytest.fixture
def all_logs(caplog):
    caplog.set_level(logging.DEBUG)
    yield caplog
    assert_clean("the logs", "\n".join(
        f"{r.getMessage()} {r.exc_text or ''}" for r in caplog.records))


@pytest.mark.parametrize("dsn", BAD_DSNS, ids=["kv-with-space", "uri-bad-percent", "kv-down",
                                                "uri-raw-at", "kv-comma"])
def test_database_errors_show_no_piece_of_the_password(dsn, all_logs):
    store = PostgresOffsetStore(dsn, schema="s")
    assert_clean("the store's repr", repr(store))
    with pytest.raises(KafkaDirectError) as raised:
        store.load("g")
    assert_clean("the store's error", shown(raised.value))
    for sink in (TransactionalPostgresSink(dsn, "t", store, "g"),
                 IdempotentPostgresSink(dsn, "t")):
        assert_clean("a sink's repr", repr(sink))


@pytest.mark.parametrize("dsn", BAD_DSNS, ids=["kv-with-space", "uri-bad-percent", "kv-down",
                                                "uri-raw-at", "kv-comma"])
def test_the_structured_sinks_errors_show_no_password_given_apart(dsn, all_logs):
    from kafka_direct.postgres.connection import Database

    database = Database(dsn, "Pw4pass-option")
    with pytest.raises(Exception) as raised:
        database.connect()
    # A DSN libpq refuses to merge with the password must not make the description raise.
    assert_clean("the sink's database error", database.describe(raised.value))


def refusal(spark, topic, params):
    """The ConfigurationError of a stream with ``params``, at construction or start."""
    driver = Driver(spark)
    try:
        with pytest.raises(ConfigurationError) as raised:
            stream = KafkaUtils.createDirectStream(
                driver.ssc, LocationStrategies.PreferConsistent(), CS.Subscribe([topic], params))
            assert_clean("the stream's settings", repr(stream.settings))
            stream.foreachRDD(lambda rdd: None)
            driver.start()
            driver.run(1)
            driver.ssc.awaitTermination(30)
        return raised.value
    finally:
        driver.ssc.stop(stopSparkContext=False)


def test_kafka_secrets_stay_hidden_in_settings_errors_and_logs(spark, kafka, kafka_topic,
                                                               all_logs):
    topic = kafka_topic()
    driver = Driver(spark)
    stream = KafkaUtils.createDirectStream(driver.ssc, LocationStrategies.PreferConsistent(),
                                           CS.Subscribe([topic], secret_params(kafka)))
    assert_clean("the stream's settings", repr(stream.settings) + str(stream.settings))
    assert_clean("the strategy", repr(stream.consumerStrategy))
    driver.ssc.stop(stopSparkContext=False)
    assert_clean("a refused JAAS line", shown(refusal(spark, topic,
                                                      secret_params(kafka, jaas=True))))
    bad = {**secret_params(kafka), "fetch.wait.max.ms": "soon"}
    assert_clean("a refused value", shown(refusal(spark, topic, bad)))


def leaky_output(rdd):
    """An output operation failing with a third party's error that quotes secrets."""
    rdd.count()
    raise RuntimeError(f"could not reach {BAD_DSNS[1]} (also tried {BAD_DSNS[0]}) with "
                       f"sasl.password={SECRETS['sasl.password']}")


def test_a_failing_stream_shows_no_secret_on_its_page_json_metrics_or_error(
        spark, kafka, kafka_topic, all_logs):
    topic = kafka_topic()
    kafka.produce(topic, [b"1", b"2"])
    driver = Driver(spark, conf={"spark.streaming.ui.enabled": "true",
                                 "spark.streaming.ui.port": "0"})
    stream = KafkaUtils.createDirectStream(
        driver.ssc, LocationStrategies.PreferConsistent(),
        CS.Subscribe([topic], {**secret_params(kafka), "auto.offset.reset": "earliest"}))
    stream.foreachRDD(leaky_output)
    driver.start()
    try:
        with pytest.raises(RuntimeError):
            driver.run(1)
            driver.ssc.awaitTermination(30)
    finally:
        driver.ssc.stop(stopSparkContext=False)
    # The page as it stood when the stream failed (the context's own server is gone).
    ui = StreamingUI(driver.ssc, driver.ssc.progressListener, port=0)
    ui.start()
    try:
        def get(path):
            return urllib.request.urlopen(ui.url + path, timeout=10).read().decode()

        batches = json.loads(get("api/v1/streaming/batches"))
        assert batches and any("RuntimeError" in json.dumps(b) for b in batches)
        pages = [get(""), get("api/v1/streaming/statistics"), get("metrics"),
                 *(get(f"api/v1/streaming/batches/{b['batchId']}") for b in batches),
                 *(get(f"batch?id={b['batchId']}") for b in batches)]
    finally:
        ui.stop()
    assert_clean("the statistics page, its JSON and metrics", "\n".join(pages))
