"""Callbacks named by module path in kafkaParams (``oauth_cb`` for token providers)."""

import pytest

from kafka_direct.client.params import check_with_librdkafka, resolve_callbacks
from kafka_direct.errors import ConfigurationError


def test_a_callback_named_by_module_path_is_imported():
    from tests.client import oauth_tokens

    for name in ("tests.client.oauth_tokens:provide",
                 "tests.client.oauth_tokens.provide"):
        resolved = resolve_callbacks({"oauth_cb": name, "group.id": "g"})
        assert resolved == {"oauth_cb": oauth_tokens.provide, "group.id": "g"}


def test_a_function_is_kept_and_other_settings_untouched():
    def provide(config):
        return "t", 0

    params = {"oauth_cb": provide, "sasl.oauthbearer.config": "tests.x:y"}
    assert resolve_callbacks(params) == params


@pytest.mark.parametrize(("value", "words"), [
    ("no.such.module:provide", "module 'no.such.module' cannot be imported"),
    ("tests.client.oauth_tokens:missing", "has no function 'missing'"),
    ("tests.client.oauth_tokens:os", "has no function 'os'"),
    ("provide", "names no function"),
    ("a b:c", "names no function"),
    (42, "must be a function or 'package.module:function', got int"),
])
def test_a_bad_callback_is_a_configuration_error_naming_the_key(value, words):
    with pytest.raises(ConfigurationError, match="oauth_cb") as info:
        resolve_callbacks({"oauth_cb": value})
    assert words in str(info.value)
    assert info.value.key == "oauth_cb"


def test_librdkafka_checks_the_resolved_callback(tmp_path):
    # confluent-kafka asks a client's token provider for its first token as it is created.
    calls = tmp_path / "calls"
    check_with_librdkafka({"bootstrap.servers": "b:9092",
                           "security.protocol": "SASL_PLAINTEXT",
                           "sasl.mechanisms": "OAUTHBEARER",
                           "sasl.oauthbearer.config": str(calls),
                           "oauth_cb": "tests.client.oauth_tokens:provide"})
    assert calls.read_text().split() == [str(__import__("os").getpid())]
    with pytest.raises(ConfigurationError, match="oauth_cb"):
        check_with_librdkafka({"oauth_cb": "no.such:thing"})


def _get_token(config, client_secret):
    return "token", 0.0


def test_a_refused_callback_object_never_shows_what_it_is_bound_to():
    # confluent-kafka's own OAuth example hands oauth_cb a functools.partial of the token
    # function and its client credentials: refused at the boundary (a callback crosses to
    # executors by name), the error names the type only.
    import functools

    from kafka_direct.dstream.consumer_strategy import Subscribe

    params = {"bootstrap.servers": "h:9092", "group.id": "g",
              "oauth_cb": functools.partial(_get_token, client_secret="TOPSECRET-42")}
    with pytest.raises(ConfigurationError) as refused:
        Subscribe(["t"], params)
    assert "oauth_cb" in str(refused.value) and "partial" in str(refused.value)
    assert "TOPSECRET-42" not in str(refused.value)


def test_a_token_given_where_a_callback_name_goes_is_never_echoed():
    from kafka_direct.client.driver_consumer import DriverConsumer

    token = "eyJhbGciOiJub25lIn0.eyJzdWIiOiJ4In0.SIGNATURE-SECRET"
    with pytest.raises(ConfigurationError, match="names no function") as refused:
        DriverConsumer({"bootstrap.servers": "h:9092", "group.id": "g", "oauth_cb": token})
    assert "oauth_cb" in str(refused.value)
    assert "SIGNATURE-SECRET" not in str(refused.value)
