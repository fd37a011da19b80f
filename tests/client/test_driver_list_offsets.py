"""DriverConsumer's ListOffsets answers: an offset Kafka never gives is never a log's end."""

from __future__ import annotations

import concurrent.futures
from types import SimpleNamespace
from typing import Any

import pytest

from kafka_direct.client.driver_consumer import DriverConsumer
from kafka_direct.client.retry import Retrier
from kafka_direct.errors import KafkaDirectError, KafkaUnavailableError
from kafka_direct.topic_partition import TopicPartition


class _Consumer:
    def __init__(self, params: dict[str, Any]) -> None:
        pass

    def close(self) -> None:
        pass


class _Admin:
    """Answers every ListOffsets with ``offsets`` in turn (one per request)."""

    answers: list[int] = []

    def __init__(self, params: dict[str, Any]) -> None:
        self.calls = 0

    def list_offsets(self, request: dict[Any, Any], **kwargs: Any) -> dict[Any, Any]:
        offset = type(self).answers[min(self.calls, len(type(self).answers) - 1)]
        self.calls += 1
        futures = {}
        for key in request:
            future: concurrent.futures.Future[Any] = concurrent.futures.Future()
            future.set_result(SimpleNamespace(offset=offset))
            futures[key] = future
        return futures

    def list_topics(self, *args: Any, **kwargs: Any) -> Any:
        return SimpleNamespace(topics={})


def _driver(answers: list[int]) -> DriverConsumer:
    _Admin.answers = answers
    return DriverConsumer({"bootstrap.servers": "b:9092", "group.id": "g"}, 1000,
                          consumerFactory=_Consumer, adminFactory=_Admin)


@pytest.mark.parametrize("invalid", [-1001, -1, -2])
@pytest.mark.parametrize("question", ["latestOffsets", "earliestOffsets", "highWatermarks"])
def test_an_invalid_offset_is_a_failed_question_not_an_answer(question, invalid):
    # A broker that stops answering mid-request can leave librdkafka's result at
    # OFFSET_INVALID (-1001); taken as the end of a log it read as data loss.
    driver = _driver([invalid])
    with pytest.raises(Exception) as info:
        getattr(driver, question)([TopicPartition("t", 0)])
    assert not isinstance(info.value, KafkaDirectError)
    assert "t-0" in str(info.value) and str(invalid) in str(info.value)


def test_an_invalid_answer_is_retried_and_a_good_one_kept():
    driver = _driver([-1001, 7])
    retry = Retrier(2, 0, "b:9092", sleep=lambda s: None)
    assert retry("reading end offsets",
                 lambda: driver.latestOffsets([TopicPartition("t", 0)])) == {
        TopicPartition("t", 0): 7}


def test_invalid_answers_every_time_end_as_kafka_unavailable():
    driver = _driver([-1001])
    retry = Retrier(2, 0, "b:9092", sleep=lambda s: None)
    with pytest.raises(KafkaUnavailableError, match="failed 3 times"):
        retry("reading end offsets", lambda: driver.latestOffsets([TopicPartition("t", 0)]))


def test_a_timestamp_with_no_record_after_it_is_the_end_offset():
    driver = _driver([-1, 9])
    assert driver.offsetsForTimes({TopicPartition("t", 0): 123}) == {TopicPartition("t", 0): 9}


def test_a_timed_out_answer_names_the_question():
    driver = _driver([5])

    class _Slow(_Admin):
        def list_offsets(self, request: dict[Any, Any], **kwargs: Any) -> dict[Any, Any]:
            return {key: concurrent.futures.Future() for key in request}

    driver._admin = _Slow({})
    driver.timeout = 0.01
    with pytest.raises(Exception) as info:
        driver.latestOffsets([TopicPartition("t", 0)])
    assert "t-0" in str(info.value) and "no answer" in str(info.value)
