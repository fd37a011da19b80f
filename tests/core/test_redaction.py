"""One redaction for every place a secret could show."""

import pytest

from kafka_direct.redaction import REDACTED, redact_dsn_pieces, redact_params, redact_text

SECRET = "s3cr et%pw"  # a space and a percent sign: the cases libpq echoes


@pytest.mark.parametrize("text", [
    f"host=db user=app password='{SECRET}' dbname=x",
    "host=db user=app password=s3cretpw dbname=x",
    "postgresql://app:s3cr%20et%25pw@db:5432/x",
    "postgres://app:s3cr et%pw@db/x",
    'org.apache.kafka.common.security.plain.PlainLoginModule required username="u" '
    f'password="{SECRET}";',
    f"{{'bootstrap.servers': 'b:9092', 'sasl.password': '{SECRET}'}}",
    f"sasl.password={SECRET}",
    f"ssl.key.password: {SECRET}",
    f"sasl.oauthbearer.client.secret={SECRET}",
])
def test_texts_lose_their_secrets(text):
    shown = redact_text(text)
    for fragment in ("s3cr", "et%pw", "s3cretpw", "et%25pw"):
        assert fragment not in shown, shown
    assert REDACTED in shown


def test_plain_texts_are_unchanged():
    text = "group g: topic t partition 0 offsets 5 to 9 (password policy: none here)"
    assert redact_text("topic t partition 0 offsets 5 to 9") == \
        "topic t partition 0 offsets 5 to 9"
    assert "policy" in redact_text(text)


def test_params_lose_their_secret_values():
    params = {"bootstrap.servers": "b:9092", "sasl.password": SECRET,
              "sasl.jaas.config": f'x required password="{SECRET}";',
              "ssl.key.password": SECRET, "sasl.oauthbearer.client.secret": SECRET,
              "ssl.key.pem": "-----BEGIN", "group.id": "g"}
    shown = redact_params(params)
    assert shown["bootstrap.servers"] == "b:9092" and shown["group.id"] == "g"
    for key in params.keys() - {"bootstrap.servers", "group.id"}:
        assert shown[key] == REDACTED
    assert SECRET not in repr(shown)


def test_read_settings_repr_hides_secrets():
    from kafka_direct.rdd.kafka_rdd import ReadSettings

    settings = ReadSettings(params={"bootstrap.servers": "b:9092", "sasl.password": SECRET})
    assert SECRET not in repr(settings) and "b:9092" in repr(settings)
    assert SECRET not in str(settings)


def test_an_unquoted_password_with_separators_is_hidden_whole():
    for text in ("host=db password=Hun,ter2 dbname=x", "password=Hun;ter2}", 'password=Hu"n'):
        shown = redact_text(text)
        assert "ter2" not in shown and "Hu" not in shown.split("password=")[1], shown


def test_no_piece_of_a_uri_password_with_a_raw_at_sign_survives_a_drivers_message():
    dsn = "postgresql://u:Hu@nter2@127.0.0.1:1/x"
    shown = redact_dsn_pieces('could not translate host name "nter2@127.0.0.1"', dsn)
    assert "nter2" not in shown
