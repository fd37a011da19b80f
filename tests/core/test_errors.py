import pickle

import pytest

from kafka_direct import errors
from kafka_direct.errors import (
    ConfigurationError,
    DataLossError,
    KafkaDirectError,
    OffsetOutOfRangeError,
    PollTimeoutError,
    UnknownTopicOrPartitionError,
)
from kafka_direct.task_errors import (
    CarriedTaskError,
    carry_errors,
    decode_error,
    encode_error,
    typed_errors,
)


def data_loss():
    return DataLossError("gone", topic="t", partition=3, fromOffset=1, untilOffset=9,
                         logStartOffset=5)


def test_every_public_error_derives_from_the_root():
    for name in errors.__all__:
        assert issubclass(getattr(errors, name), KafkaDirectError)
    assert issubclass(ConfigurationError, ValueError)


@pytest.mark.parametrize("error", [
    data_loss(),
    OffsetOutOfRangeError("end", topic="t", partition=0, fromOffset=0, untilOffset=9,
                          logEndOffset=4),
    PollTimeoutError("slow", topic="t", partition=0, fromOffset=0, untilOffset=9, position=3,
                     timeoutMs=100),
    UnknownTopicOrPartitionError("no", topic="x"),
    ConfigurationError("bad"),
])
def test_errors_pickle_with_type_and_attributes(error):
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is type(error)
    assert str(copy) == str(error)
    assert copy.context == error.context
    for key, value in error.context.items():
        assert getattr(copy, key) == value


def test_encoded_error_survives_being_embedded_in_spark_failure_text():
    text = ("py4j.protocol.Py4JJavaError: An error occurred ...\nTraceback ...\n"
            f"kafka_direct.task_errors.CarriedTaskError: {encode_error(data_loss())}\n\tat org...")
    decoded = decode_error(text)
    assert isinstance(decoded, DataLossError)
    assert (decoded.topic, decoded.partition, decoded.logStartOffset) == ("t", 3, 5)
    assert decode_error("no payload here") is None
    assert decode_error("[kafka-direct-error:AAAA]") is None  # damaged payload


def test_carry_errors_turns_our_errors_into_task_failures():
    def records():
        yield 1
        raise data_loss()

    it = carry_errors(records())
    assert next(it) == 1
    with pytest.raises(CarriedTaskError) as info:
        next(it)
    assert isinstance(decode_error(str(info.value)), DataLossError)


def test_typed_errors_rethrows_the_carried_error_chained_to_the_failure():
    spark_failure = RuntimeError("Job aborted: " + encode_error(data_loss()))
    with pytest.raises(DataLossError) as info, typed_errors():
        raise spark_failure
    assert info.value.__cause__ is spark_failure
    with pytest.raises(KeyError), typed_errors():
        raise KeyError("unrelated errors pass through")


def test_a_user_functions_error_is_kept_as_its_type_and_a_shortened_message():
    # One rule for both the readers' and the sinks' typed errors of a user function.
    from kafka_direct.task_errors import MAX_USER_MESSAGE, user_failure

    class Odd(ValueError):
        pass

    kind, text = user_failure(Odd("x" * MAX_USER_MESSAGE))
    assert kind.endswith(".<locals>.Odd") and text == "x" * MAX_USER_MESSAGE
    kind, text = user_failure(KeyError("y" * (MAX_USER_MESSAGE + 1)))
    # str() of a KeyError is its key's repr: the quote opens it, a "..." ends it.
    assert kind == "KeyError"
    assert text == repr("y" * (MAX_USER_MESSAGE + 1))[:MAX_USER_MESSAGE] + "..."
