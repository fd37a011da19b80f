"""Helpers for the translated kafka-0-10-sql suites: the small parts of Spark's KafkaTestUtils,
testImplicits and StreamTest that those tests use, over the ``kafka`` fixture's broker.

The source under test is kafka-direct's, or with ``KAFKA_DIRECT_CONFORMANCE_FORMAT=kafka``
Spark's own JVM ``kafka`` source (the reference run, docs/testing.md): the same tests, so that
one failing on Spark's source too is a fault of its translation. Under the reference a test of
kafka-direct's own options or behaviour is skipped (:func:`ours_only`) and a documented
difference is no longer expected to fail (:func:`difference`).
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import pytest
from confluent_kafka import Producer

from kafka_direct.errors import ConfigurationError
from kafka_direct.task_errors import carried_error

__all__ = [
    "FORMAT",
    "REFERENCE",
    "Batches",
    "StreamTest",
    "carried_error",
    "create_df",
    "delete_topic",
    "difference",
    "offsets_json",
    "option_name",
    "ours_only",
    "read",
    "refusal",
    "send_at",
    "send_messages",
    "since_spark",
    "source_reader",
    "stream",
    "string_values",
    "strings",
    "values_as_ints",
    "values_plus_one",
    "wait_until",
]


#: The environment variable that chooses the source under test.
FORMAT_VARIABLE = "KAFKA_DIRECT_CONFORMANCE_FORMAT"
#: ``kafka-direct`` (the default), or ``kafka``: Spark's own source, the reference.
FORMAT = os.environ.get(FORMAT_VARIABLE) or "kafka-direct"
if FORMAT not in ("kafka-direct", "kafka"):
    raise ConfigurationError(f"{FORMAT_VARIABLE}={FORMAT!r}: 'kafka-direct' (the default) or "
                             f"'kafka' (Spark's own source, the reference run)")
#: The run is the reference: Spark's ``kafka`` source under the same tests.
REFERENCE = FORMAT == "kafka"

#: Options the tests spell as kafka-direct does that Spark's source names otherwise, the one
#: place of that mapping. None today: kafka-direct keeps Spark's option names
#: (docs/migration.md); ``kafka.*`` settings the tests use are named alike in librdkafka and
#: Java's client.
SPARK_OPTION_NAMES: dict[str, str] = {}


def option_name(name: str) -> str:
    """``name`` as the source under test spells it."""
    return SPARK_OPTION_NAMES.get(name, name) if REFERENCE else name


def source_reader(spark_session: Any, streaming: bool = False, **options: Any) -> Any:
    """``spark.read`` (``readStream``) of the source under test, with ``options``."""
    result = (spark_session.readStream if streaming else spark_session.read).format(FORMAT)
    for key, value in options.items():
        result = result.option(option_name(key), str(value))
    return result


def read(spark_session: Any, kafka: Any, **options: Any) -> Any:
    """``spark.read.format("kafka-direct")`` on the test broker with ``options``."""
    return source_reader(spark_session, **{"kafka.bootstrap.servers": kafka.bootstrap_servers,
                                    **options}).load()


def stream(spark_session: Any, kafka: Any, **options: Any) -> Any:
    """``spark.readStream.format("kafka-direct")`` on the test broker with ``options``."""
    return source_reader(spark_session, streaming=True,
                  **{"kafka.bootstrap.servers": kafka.bootstrap_servers, **options}).load()


def ours_only(reason: str) -> Any:
    """Skip the test under the reference: it checks kafka-direct's own option or behaviour."""
    return pytest.mark.skipif(REFERENCE, reason=f"kafka-direct's own: {reason}")


def since_spark(release: str, what: str) -> Any:
    """Skip the test under the reference when Spark's connector predates ``release``, which
    brought what it tests (the reference runs the newest connector Maven Central serves,
    which may be older than the PySpark kafka-direct is tested on)."""
    import pyspark

    def parts(version: str) -> tuple[int, ...]:
        return tuple(int(p) for p in version.split(".")[:3] if p.isdigit())

    older = parts(pyspark.__version__) < parts(release)
    return pytest.mark.skipif(REFERENCE and older, reason=(
        f"Spark {pyspark.__version__}'s kafka source predates {what} (Spark {release})"))


def difference(reason: str, **kwargs: Any) -> Any:
    """A documented difference of kafka-direct's from Spark's source: a strict ``xfail`` on
    ours; under the reference the test runs as Spark's and must pass."""
    return pytest.mark.xfail(not REFERENCE, reason=reason, strict=True, **kwargs)


#: Exceptions of Spark's JVM that the Scala tests expect for a refused option or offset
#: (``IllegalArgumentException``, ``IllegalStateException``, ``AnalysisException`` or a
#: ``SparkException`` carrying one), by the names PySpark's errors give them.
_SPARK_REFUSALS = ("IllegalArgumentException", "IllegalStateException", "AnalysisException",
                   "SparkException", "SparkIllegalArgumentException",
                   "NumberFormatException",  # an IllegalArgumentException
                   # A query's failure: PySpark shows its message, not its cause's class.
                   "StreamingQueryException")


def refusal(raised: BaseException, *spark_parts: str) -> Any:
    """The refusal a test provoked, for the test's checks of its wording.

    On kafka-direct's source: its ``ConfigurationError`` (a ``ValueError``, Spark's
    ``IllegalArgumentException``), carried by Spark's failure, returned. Under the reference:
    Spark's exception, whose text holds ``spark_parts`` (the Scala test's expected message,
    case-insensitive); None is returned, as kafka-direct's wording is not Spark's.
    """
    if not REFERENCE:
        error = carried_error(raised)
        assert isinstance(error, ConfigurationError), raised
        return error
    text = f"{type(raised).__name__}: {raised}"
    assert any(name in text for name in _SPARK_REFUSALS), text[:3000]
    for part in spark_parts:
        assert part.lower() in text.lower(), (part, text[:3000])
    return None


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
