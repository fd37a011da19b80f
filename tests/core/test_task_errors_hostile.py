"""Errors cross from executors as data: a failure text that quotes a record runs nothing."""

import base64
import json
import os
import pickle

import pytest

from kafka_direct.errors import DataLossError, KafkaDirectError, PartitionsRevokedError
from kafka_direct.task_errors import decode_error, encode_error, typed_errors


class _Planted:
    """Unpickling this creates a file: proof that code from the data ran."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


def _hostile_text(path):
    # What a user's `raise ValueError(f"bad record {value}")` puts in a Spark failure when a
    # producer wrote this value into the topic.
    payload = base64.b64encode(pickle.dumps(_Planted(str(path)))).decode("ascii")
    return f"ValueError: bad record b'[kafka-direct-error:{payload}]'"


def test_a_pickle_planted_in_a_record_does_not_run(tmp_path):
    marker = tmp_path / "ran"
    text = _hostile_text(marker)
    assert decode_error(text) is None
    with pytest.raises(RuntimeError), typed_errors():
        raise RuntimeError("Job aborted: " + text)
    assert not marker.exists()


def test_encoded_errors_are_json_not_pickles():
    text = encode_error(DataLossError("gone", topic="t", partition=1, fromOffset=0,
                                      untilOffset=5, logStartOffset=3))
    payload = text.rsplit("[kafka-direct-error:", 1)[1].rstrip("]")
    data = json.loads(base64.b64decode(payload))
    assert data["type"] == "DataLossError"
    assert data["context"]["logStartOffset"] == 3


def _forged(data):
    raw = base64.b64encode(json.dumps(data).encode()).decode("ascii")
    return f"boom [kafka-direct-error:{raw}]"


@pytest.mark.parametrize("data", [
    {"type": "Popen", "message": "x", "context": {}},                      # not our class
    {"type": "object", "message": "x", "context": {}},
    {"type": "DataLossError", "message": 5, "context": {}},               # not a text
    {"type": "DataLossError", "message": "x", "context": {"__class__": 1}},  # private name
    {"type": "DataLossError", "message": "x", "context": {"args": 1}},
    {"type": "DataLossError", "message": "x", "context": {"t": {"nested": 1}}},
    {"type": "DataLossError", "message": "x", "context": []},
    ["DataLossError"],
])
def test_forged_payloads_are_ignored(data):
    assert decode_error(_forged(data)) is None


def test_list_context_survives():
    error = PartitionsRevokedError("taken", group="g", partitions=["t-0", "t-1"])
    decoded = decode_error(encode_error(error))
    assert isinstance(decoded, PartitionsRevokedError)
    assert decoded.partitions == ["t-0", "t-1"] and decoded.group == "g"


def test_non_scalar_context_is_sent_as_text():
    error = KafkaDirectError("odd", where=os.sep, thing=object())
    decoded = decode_error(encode_error(error))
    assert decoded is not None and decoded.where == os.sep
    assert isinstance(decoded.thing, str)


def test_a_payload_nested_too_deep_for_the_parser_is_ignored():
    import base64

    payload = base64.b64encode(("[" * 20000).encode()).decode()
    assert decode_error(f"bad record [kafka-direct-error:{payload}]") is None


def test_a_decoded_error_lacking_promised_attributes_reads_them_as_none():
    import base64
    import json

    from kafka_direct.errors import SinkWriteError

    body = json.dumps({"type": "SinkWriteError", "message": "m", "context": {}})
    error = decode_error(f"[kafka-direct-error:{base64.b64encode(body.encode()).decode()}]")
    assert isinstance(error, SinkWriteError) and error.table is None and error.cause is None


def test_a_carried_error_never_chains_the_library_error_below_it():
    # A driver library's error may quote a password (libpq quotes a DSN it cannot parse);
    # our error above it is redacted, and PySpark's traceback prints the whole chain.
    import traceback

    from kafka_direct.errors import OffsetStoreError
    from kafka_direct.task_errors import CarriedTaskError, carried, carried_error

    secret = "Sw0rd%fish"
    with pytest.raises(CarriedTaskError) as raised, carried():
        try:
            raise ValueError(f"invalid dsn: postgresql://app:{secret}@db/x")
        except ValueError as library:
            raise OffsetStoreError("reading the store failed: invalid DSN",
                                   store="s", cause="invalid DSN") from library
    shown = "".join(traceback.format_exception(raised.value))
    assert secret not in shown
    assert isinstance(carried_error(raised.value), OffsetStoreError)
