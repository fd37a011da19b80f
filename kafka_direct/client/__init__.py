"""Kafka clients of kafka-direct's own: the native columnar reader (see :mod:`.columnar`)."""
