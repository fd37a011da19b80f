"""librdkafka's error code of a failed client call, read one way for both clients.

confluent-kafka raises ``KafkaException(KafkaError)``, whose code is a method of its first
argument; the native columnar reader raises ``NativeError(code, text)``, whose first
argument is the code itself. Every decision on a code (retry, a missing partition, a moving
coordinator) reads it here, so a new client shape is taught in one place.
"""

from __future__ import annotations

__all__ = ["error_code"]


def error_code(error: BaseException) -> int | None:
    """The librdkafka error code of a failed client call (confluent-kafka's or the native one)."""
    first = error.args[0] if error.args else None
    if isinstance(first, int):  # the native reader's NativeError(code, text)
        return first
    code = getattr(first, "code", None)  # confluent-kafka's KafkaException(KafkaError)
    if callable(code):
        value = code()
        return value if isinstance(value, int) else None
    return None
