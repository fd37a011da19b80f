"""Helpers for the translated kafka-0-10-sql suites: the small parts of Spark's KafkaTestUtils,
testImplicits and StreamTest that those tests use, over the ``kafka`` fixture's broker."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from confluent_kafka import Producer

from kafka_direct.task_errors import carried_error

__all__ = [
    "Batches",
    "StreamTest",
    "carried_error",
    "create_df",
    "delete_topic",
    "offsets_json",
    "read",
    "send_at",
    "send_messages",
    "stream",
    "string_values",
    "strings",
    "values_as_ints",
    "values_plus_one",
    "wait_until",
]


def read(spark_session: Any, kafka: Any, **options: Any) -> Any:
    """``spark.read.format("kafka-direct")`` on the test broker with ``options``."""
    reader = spark_session.read.format("kafka-direct").option(
        "kafka.bootstrap.servers", kafka.bootstrap_servers)
    for key, value in options.items():
        reader = reader.option(key, str(value))
    return reader.load()


def stream(spark_session: Any, kafka: Any, **options: Any) -> Any:
    """``spark.readStream.format("kafka-direct")`` on the test broker with ``options``."""
    reader = spark_session.readStream.format("kafka-direct").option(
        "kafka.bootstrap.servers", kafka.bootstrap_servers)
    for key, value in options.items():
        reader = reader.option(key, str(value))
    return reader.load()


def create_df(spark_session: Any, kafka: Any, topic: str, include_headers: bool = False,
              **options: Any) -> Any:
    """KafkaRelationSuite's ``createDF``: ``subscribe`` to ``topic``, values as strings."""
    if include_headers:
        return read(spark_session, kafka, subscribe=topic, includeHeaders="true",
                    **options).selectExpr("CAST(value AS STRING)", "headers")
    return read(spark_session, kafka, subscribe=topic, **options).selectExpr(
        "CAST(value AS STRING)")


def string_values(df: Any) -> list[str]:
    """checkAnswer's multiset of the first column: sorted."""
    return sorted(row[0] for row in df.collect())


def strings(numbers: Iterable[int]) -> list[str]:
    return sorted(str(n) for n in numbers)


def send_messages(kafka: Any, topic: str, values: Iterable[Any],
                  partition: int | None = None) -> int:
    """KafkaTestUtils.sendMessages: string values (encoded), to one partition or any."""
    return kafka.produce(topic, [str(v).encode() for v in values], partition=partition)


def send_at(kafka: Any, topic: str, values: Iterable[Any], partition: int,
            timestamp_ms: int, headers: Sequence[tuple[str, bytes]] | None = None) -> None:
    """Records with an explicit (CreateTime) timestamp, as RecordBuilder.timestamp(ts)."""
    producer = Producer(kafka.params(linger_ms=5))
    errors: list[Any] = []

    def delivered(error: Any, _message: Any) -> None:
        if error is not None:
            errors.append(error)

    for value in values:
        kwargs: dict[str, Any] = {}
        if headers is not None:
            kwargs["headers"] = list(headers)
        producer.produce(topic, value=str(value).encode(), partition=partition,
                         timestamp=timestamp_ms, on_delivery=delivered, **kwargs)
    assert producer.flush(30) == 0 and not errors, errors


def offsets_json(topic_offsets: dict[str, dict[int, int]]) -> str:
    """JsonUtils.partitionOffsets / partitionTimestamps."""
    return json.dumps({topic: {str(p): o for p, o in sorted(parts.items())}
                       for topic, parts in topic_offsets.items()})


def wait_until(condition: Callable[[], bool], timeout: float = 60,
               interval: float = 0.2) -> bool:
    """ScalaTest's ``eventually``: poll until true or the timeout."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(interval)
    return condition()


class Batches:
    """A ``foreachBatch`` target: each micro-batch's rows, as StreamTest's memory sink.

    ``project`` turns a batch DataFrame into the rows kept (default: ``CAST(value AS
    STRING)``).
    """

    def __init__(self, project: Callable[[Any], list[Any]] | None = None,
                 on_batch: Callable[[int], None] | None = None) -> None:
        self.rows: dict[int, list[Any]] = {}
        self.project = project or (lambda df: [r[0] for r in df.selectExpr(
            "CAST(value AS STRING)").collect()])
        self.on_batch = on_batch
        self.changed = threading.Condition()

    def __call__(self, df: Any, batch_id: int) -> None:
        rows = self.project(df)
        if self.on_batch is not None:
            self.on_batch(batch_id)
        with self.changed:
            self.rows[batch_id] = rows
            self.changed.notify_all()

    def all_rows(self) -> list[Any]:
        with self.changed:
            return [row for batch_id in sorted(self.rows) for row in self.rows[batch_id]]

    def sorted_values(self) -> list[Any]:
        return sorted(self.all_rows())

    def wait_for(self, condition: Callable[[Batches], bool], timeout: float = 60) -> bool:
        with self.changed:
            return self.changed.wait_for(lambda: condition(self), timeout)

    def wait_for_values(self, expected: Iterable[Any], timeout: float = 60) -> list[Any]:
        """CheckAnswer: wait until the rows so far equal ``expected`` (as multisets)."""
        want = sorted(expected)
        self.wait_for(lambda b: sorted(b.all_rows()) == want, timeout)
        return self.sorted_values()


def values_as_ints(df: Any) -> list[int]:
    """``CAST(value AS STRING)`` as ints: the suites' ``kafka.map(kv => kv._2.toInt)``."""
    return [int(r[0]) for r in df.selectExpr("CAST(value AS STRING)").collect()]


def values_plus_one(df: Any) -> list[int]:
    """The suites' ``kafka.map(kv => kv._2.toInt + 1)``."""
    return [n + 1 for n in values_as_ints(df)]


def delete_topic(kafka: Any, topic: str) -> None:
    """KafkaTestUtils.deleteTopic: delete and wait until the metadata no longer shows it."""
    kafka.delete_topic(topic)


class StreamTest:
    """Spark's ``testStream`` actions for one DataFrame: queries started one at a time on one
    checkpoint, every micro-batch's rows kept across restarts (as the memory sink)."""

    def __init__(self, df: Any, checkpoint: Any,
                 project: Callable[[Any], list[Any]] | None = values_as_ints) -> None:
        self.df = df
        self.checkpoint = str(checkpoint)
        self.batches = Batches(project)
        self.query: Any = None

    def start(self, **trigger: Any) -> StreamTest:
        """StartStream (default trigger: a 100 ms processing time)."""
        writer = (self.df.writeStream.foreachBatch(self.batches)
                  .option("checkpointLocation", self.checkpoint)
                  .trigger(**(trigger or {"processingTime": "100 milliseconds"})))
        self.query = writer.start()
        return self

    def process_all_available(self) -> None:
        """makeSureGetOffsetCalled / processAllAvailable."""
        self.query.processAllAvailable()

    def stop(self) -> None:
        """StopStream."""
        if self.query is not None:
            self.query.stop()

    def answer(self) -> list[Any]:
        return self.batches.sorted_values()

    def check_answer(self, expected: Iterable[Any]) -> None:
        """CheckAnswer: everything the query wrote so far, as a multiset."""
        self.process_all_available()
        assert self.answer() == sorted(expected)

    def check_new_answer(self, expected: Iterable[Any], before: list[Any]) -> list[Any]:
        """CheckNewAnswer: what was written since ``before`` (an earlier ``answer()``)."""
        self.process_all_available()
        now = self.answer()
        new = list(now)
        for value in before:
            new.remove(value)
        assert sorted(new) == sorted(expected)
        return now

    def expect_failure(self, timeout: float = 120) -> BaseException:
        """ExpectFailure: the query ends with an exception; returns it."""
        ended = False
        try:
            ended = self.query.awaitTermination(timeout)
        except Exception as error:
            return error
        raise AssertionError(f"the query did not fail (ended: {ended})")
