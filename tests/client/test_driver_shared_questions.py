"""A question's ListOffsets requests asked by a few consumers at once (``askers``).

The answer must be what one consumer asking the requests one after the other gives, in
the same order; a failure in any share must surface with the type and text it has when
asked one after the other; the consumers beyond the first are made only when a question
has more than one request, and closed with the driver consumer.
"""

from __future__ import annotations

import threading
from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from kafka_direct.client.driver_consumer import STREAM_ASKERS, DriverConsumer
from kafka_direct.client.offset_answers import UnansweredError
from kafka_direct.errors import ConfigurationError, KafkaDirectError
from kafka_direct.topic_partition import TopicPartition

#: A thousand partitions: ten requests of 100.
THOUSAND = [TopicPartition(f"t{t}", p) for t in range(10) for p in range(100)]


def offset_of(topic: str, partition: int, query: int) -> int:
    """Each partition's own answer, for latest (-1) and earliest (-2)."""
    return int(topic[1:]) * 1000 + partition * 3 + (7 if query == -1 else 0)


class _Consumer:
    """A consumer whose answers depend only on what is asked, never on who asks or when.

    ``failures`` maps a topic to the failure of every request holding it: a KafkaError
    code answered for its partitions, or a KafkaException raised for the request.
    """

    made: list[_Consumer] = []
    failures: dict[str, Any] = {}
    #: Met by every consumer's first request when set: a share asked after another
    #: instead of beside it breaks the barrier.
    barrier: threading.Barrier | None = None

    def __init__(self, params: dict[str, Any]) -> None:
        self.asked: list[list[tuple[str, int]]] = []
        self.refreshed: list[str] = []
        self.closed = False
        self.threads: set[str] = set()
        _Consumer.made.append(self)

    def offsets_for_times(self, request: list[Any], timeout: float) -> list[Any]:
        if self.closed:
            raise RuntimeError("Consumer closed")
        if _Consumer.barrier is not None and not self.asked:
            _Consumer.barrier.wait(5)
        self.asked.append([(tp.topic, tp.partition) for tp in request])
        self.threads.add(threading.current_thread().name)
        failure = next((_Consumer.failures[tp.topic] for tp in request
                        if tp.topic in _Consumer.failures), None)
        if isinstance(failure, KafkaException):
            raise failure
        error = KafkaError(failure) if failure is not None and tp_failing(request) else None
        return [SimpleNamespace(
            topic=tp.topic, partition=tp.partition, error=error,
            offset=-1 if error else offset_of(tp.topic, tp.partition, tp.offset))
            for tp in request]

    def list_topics(self, topic: str, timeout: float) -> Any:
        self.refreshed.append(topic)
        return SimpleNamespace(topics={})

    def poll(self, timeout: float) -> None:
        return None

    def close(self) -> None:
        self.closed = True


def tp_failing(request: list[Any]) -> bool:
    return any(tp.topic in _Consumer.failures for tp in request)


class _Admin:
    def __init__(self, params: dict[str, Any]) -> None:
        pass


def _driver(askers: int, factory: Any = _Consumer) -> DriverConsumer:
    return DriverConsumer({"bootstrap.servers": "b:9092", "group.id": "g"}, 1000,
                          consumerFactory=factory, adminFactory=_Admin, askers=askers)


@pytest.fixture(autouse=True)
def _fresh() -> None:
    _Consumer.made, _Consumer.failures, _Consumer.barrier = [], {}, None


def _askers_of(driver: DriverConsumer) -> list[_Consumer]:
    # The consumers that asked: every one made but the group member.
    return [c for c in _Consumer.made if c is not driver._consumer]


@pytest.mark.parametrize("question", ["latestOffsets", "earliestOffsets"])
def test_shared_requests_answer_what_one_consumer_answers_in_the_same_order(question):
    serial, shared = _driver(1), _driver(STREAM_ASKERS)
    try:
        for partitions in (set(THOUSAND), set(THOUSAND), THOUSAND[:250], THOUSAND[::-7]):
            one = getattr(serial, question)(partitions)
            many = getattr(shared, question)(partitions)
            assert many == one
            # In the same (topic, partition) order: the stream's layout reads it in order.
            assert list(many) == list(one) == sorted(one, key=lambda tp: (tp.topic,
                                                                        tp.partition))
    finally:
        serial.close()
        shared.close()


def test_requests_are_dealt_to_the_askers_in_turn_and_asked_at_once():
    _Consumer.barrier = threading.Barrier(3)
    driver = _driver(3)
    try:
        assert driver.latestOffsets(set(THOUSAND)) == {
            tp: offset_of(tp.topic, tp.partition, -1) for tp in THOUSAND}
        askers = _askers_of(driver)
        assert len(askers) == 3
        # Request i (of 100 partitions, topic t<i>) to asker i % 3; each asked once.
        for index, asker in enumerate(askers):
            assert [request[0][0] for request in asker.asked] == [
                f"t{i}" for i in range(index, 10, 3)]
            assert all(len(request) == 100 for request in asker.asked)
        # The first share in the calling thread, the others in threads of their own.
        assert askers[0].threads == {threading.current_thread().name}
        assert all(asker.threads.isdisjoint(askers[0].threads) for asker in askers[1:])
    finally:
        driver.close()


def test_helpers_are_made_only_for_a_question_of_more_than_one_request():
    driver = _driver(3)
    try:
        driver.latestOffsets(THOUSAND[:100])  # one request
        assert len(_Consumer.made) == 2  # the asking consumer and the group member
        driver.latestOffsets(THOUSAND[:200])  # two requests: one helper
        assert len(_Consumer.made) == 3
        driver.latestOffsets(THOUSAND)
        driver.earliestOffsets(THOUSAND)
        assert len(_Consumer.made) == 4  # never more than askers in all
    finally:
        driver.close()


def test_every_consumer_and_thread_is_closed_with_the_driver_consumer():
    before = {t.name for t in threading.enumerate()}
    driver = _driver(3)
    driver.latestOffsets(THOUSAND)
    assert any(t.name.startswith("driver-questions-") for t in threading.enumerate())
    driver.close()
    assert len(_Consumer.made) == 4 and all(c.closed for c in _Consumer.made)
    assert {t.name for t in threading.enumerate()
            if t.name.startswith("driver-questions-")} <= before
    # Closed, it makes no helper again: asking fails as a closed consumer fails.
    with pytest.raises(RuntimeError, match="closed"):
        driver.latestOffsets(THOUSAND)
    assert len(_Consumer.made) == 4


@pytest.mark.parametrize("askers", [1, 3])
def test_a_timed_out_request_in_any_share_is_an_unanswered_question(askers):
    _Consumer.failures = {"t4": KafkaException(KafkaError(KafkaError._TIMED_OUT))}
    driver = _driver(askers)
    try:
        with pytest.raises(UnansweredError) as info:
            driver.latestOffsets(THOUSAND)
        assert not isinstance(info.value, KafkaDirectError)
        assert str(info.value) == ("ListOffsets for 100 partition(s) (t4-0 first): no "
                                   "answer within 1 s")
    finally:
        driver.close()


@pytest.mark.parametrize("askers", [1, 3])
def test_the_first_failed_request_in_request_order_is_the_error(askers):
    # t2 (asker 2's first request) fails with a partition's error, t7 (asker 1's third)
    # with a refusal of the whole request: t2 comes first in request order, as when the
    # requests are asked one after the other.
    _Consumer.failures = {"t7": KafkaException(KafkaError(KafkaError._INVALID_ARG)),
                          "t2": KafkaError.OFFSET_NOT_AVAILABLE}
    driver = _driver(askers)
    try:
        with pytest.raises(UnansweredError) as info:
            driver.latestOffsets(THOUSAND)
        assert info.value.code == KafkaError.OFFSET_NOT_AVAILABLE
        assert "t2-0" in str(info.value)
        del _Consumer.failures["t2"]
        with pytest.raises(KafkaException) as refused:
            driver.latestOffsets(THOUSAND)
        assert refused.value.args[0].code() == KafkaError._INVALID_ARG
    finally:
        driver.close()


def test_a_helpers_unknown_partition_refreshes_that_helpers_metadata():
    # The metadata is each consumer's own: the one that asked is refreshed, once.
    answers: dict[str, int] = {"t4": 1}

    class _Stale(_Consumer):
        def offsets_for_times(self, request: list[Any], timeout: float) -> list[Any]:
            topic = request[0].topic
            if answers.get(topic):
                answers[topic] -= 1
                self.asked.append([(tp.topic, tp.partition) for tp in request])
                return [SimpleNamespace(topic=tp.topic, partition=tp.partition, offset=-1,
                                        error=KafkaError(KafkaError._UNKNOWN_PARTITION))
                        for tp in request]
            return super().offsets_for_times(request, timeout)

    driver = _driver(3, _Stale)
    try:
        assert driver.latestOffsets(THOUSAND) == {
            tp: offset_of(tp.topic, tp.partition, -1) for tp in THOUSAND}
        askers = _askers_of(driver)
        assert [asker.refreshed for asker in askers] == [[], ["t4"], []]
    finally:
        driver.close()


def test_a_helper_the_configuration_refuses_is_a_configuration_error():
    made: list[Any] = []

    def factory(params: dict[str, Any]) -> Any:
        if len(made) == 3:  # the second helper
            raise ValueError("refused")
        made.append(_Consumer(params))
        return made[-1]

    driver = _driver(3, factory)
    try:
        with pytest.raises(ConfigurationError):
            driver.latestOffsets(THOUSAND)
        assert made[2].closed  # the helper made before the refusal
        assert driver.latestOffsets(THOUSAND[:100])  # one request: still answered
    finally:
        driver.close()


@pytest.mark.parametrize("askers", [0, -1, 1.5, "3", True])
def test_askers_must_be_a_positive_whole_number(askers):
    with pytest.raises(ConfigurationError, match="askers"):
        _driver(askers)
