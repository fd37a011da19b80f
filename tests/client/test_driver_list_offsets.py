"""DriverConsumer's ListOffsets answers: an offset Kafka never gives is never a log's end.

Ends and starts are asked through the consumer (``offsets_for_times`` with Kafka's special
times), high watermarks under ``read_committed`` and offsets by timestamp through the
AdminClient: both paths are held to the same answers here.
"""

from __future__ import annotations

import concurrent.futures
from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from kafka_direct.client.driver_consumer import DriverConsumer
from kafka_direct.client.retry import Retrier
from kafka_direct.errors import KafkaDirectError, KafkaUnavailableError
from kafka_direct.topic_partition import TopicPartition

T0 = TopicPartition("t", 0)
#: The answers that are a partition's error, not an offset.
ERRORS = (KafkaError._UNKNOWN_PARTITION, KafkaError.LEADER_NOT_AVAILABLE)


class _Answers:
    """Answers ListOffsets requests with ``answers`` in turn, one per request (the last
    again once they run out). An answer is an offset, or a ``KafkaError`` code."""

    answers: list[Any] = []
    calls = 0

    @classmethod
    def next(cls) -> Any:
        answer = cls.answers[min(_Answers.calls, len(cls.answers) - 1)]
        _Answers.calls += 1
        return answer


class _Consumer:
    """A confluent-kafka Consumer's ``offsets_for_times``: every partition gets the answer."""

    refreshed: list[str] = []
    questions: list[list[tuple[str, int, int]]] = []

    def __init__(self, params: dict[str, Any]) -> None:
        pass

    def offsets_for_times(self, request: list[Any], timeout: float) -> list[Any]:
        _Consumer.questions.append([(tp.topic, tp.partition, tp.offset) for tp in request])
        answer = _Answers.next()
        failed = KafkaError(answer) if answer in ERRORS else None
        return [SimpleNamespace(topic=tp.topic, partition=tp.partition,
                                offset=-1 if failed else answer, error=failed)
                for tp in request]

    def list_topics(self, topic: str, timeout: float) -> Any:
        _Consumer.refreshed.append(topic)
        return SimpleNamespace(topics={})

    def poll(self, timeout: float) -> None:
        return None

    def close(self) -> None:
        pass


class _Admin:
    """An AdminClient's ``list_offsets``: a settled future per partition."""

    def __init__(self, params: dict[str, Any]) -> None:
        pass

    def list_offsets(self, request: dict[Any, Any], **kwargs: Any) -> dict[Any, Any]:
        offset = _Answers.next()
        futures = {}
        for key in request:
            future: concurrent.futures.Future[Any] = concurrent.futures.Future()
            future.set_result(SimpleNamespace(offset=offset))
            futures[key] = future
        return futures

    def list_topics(self, *args: Any, **kwargs: Any) -> Any:
        return SimpleNamespace(topics={})


def _driver(answers: list[int], *, factory: type[_Consumer] | None = None,
            **params: str) -> DriverConsumer:
    _Answers.answers, _Answers.calls = answers, 0
    _Consumer.refreshed, _Consumer.questions = [], []
    return DriverConsumer({"bootstrap.servers": "b:9092", "group.id": "g", **params}, 1000,
                          consumerFactory=factory or _Consumer, adminFactory=_Admin)


# Each question on each path: the consumer's (ends and starts; high watermarks under
# read_uncommitted), and the admin client's (high watermarks under read_committed).
QUESTIONS = [("latestOffsets", {}), ("earliestOffsets", {}), ("highWatermarks", {}),
             ("highWatermarks", {"isolation.level": "read_uncommitted"}),
             ("latestOffsets", {"isolation.level": "READ_UNCOMMITTED"})]


@pytest.mark.parametrize("invalid", [-1001, -1, -2])
@pytest.mark.parametrize(("question", "params"), QUESTIONS)
def test_an_invalid_offset_is_a_failed_question_not_an_answer(question, params, invalid):
    # A broker that stops answering mid-request can leave librdkafka's result at
    # OFFSET_INVALID (-1001); taken as the end of a log it read as data loss.
    driver = _driver([invalid], **params)
    with pytest.raises(Exception) as info:
        getattr(driver, question)([T0])
    assert not isinstance(info.value, KafkaDirectError)
    assert "t-0" in str(info.value) and str(invalid) in str(info.value)


def test_ends_and_starts_are_asked_through_the_consumer_with_kafkas_special_times():
    driver = _driver([7])
    assert driver.latestOffsets([T0, TopicPartition("u", 3)]) == {
        T0: 7, TopicPartition("u", 3): 7}
    assert driver.earliestOffsets([T0]) == {T0: 7}
    assert _Consumer.questions == [[("t", 0, -1), ("u", 3, -1)], [("t", 0, -2)]]
    assert driver.latestOffsets([]) == {} and len(_Consumer.questions) == 2


def test_high_watermarks_under_read_committed_are_not_the_consumers_stable_ends():
    # The consumer answers at its own level (read_committed: the last stable offset); the
    # high watermark needs read_uncommitted, which only the admin client can ask.
    driver = _driver([9])
    assert driver.highWatermarks([T0]) == {T0: 9}
    assert _Consumer.questions == []


@pytest.mark.parametrize(("question", "params"), QUESTIONS)
def test_an_invalid_answer_is_retried_and_a_good_one_kept(question, params):
    driver = _driver([-1001, 7], **params)
    retry = Retrier(2, 0, "b:9092", sleep=lambda s: None)
    assert retry("reading offsets", lambda: getattr(driver, question)([T0])) == {T0: 7}


def test_invalid_answers_every_time_end_as_kafka_unavailable():
    driver = _driver([-1001])
    retry = Retrier(2, 0, "b:9092", sleep=lambda s: None)
    with pytest.raises(KafkaUnavailableError, match="failed 3 times"):
        retry("reading end offsets", lambda: driver.latestOffsets([T0]))


@pytest.mark.parametrize("code", [KafkaError._UNKNOWN_PARTITION,
                                  KafkaError.LEADER_NOT_AVAILABLE])
def test_a_partition_the_consumer_does_not_know_yet_refreshes_its_topic_once(code):
    # A partition added since the consumer's metadata was fetched: librdkafka answers
    # "Unknown partition" from its cache. One refresh of the topic, then the answer.
    driver = _driver([code, 42])
    assert driver.latestOffsets([T0, TopicPartition("t", 1)]) == {
        T0: 42, TopicPartition("t", 1): 42}
    assert _Consumer.refreshed == ["t"]


def test_a_partition_error_that_persists_names_the_partition():
    driver = _driver([KafkaError._UNKNOWN_PARTITION])
    with pytest.raises(Exception) as info:
        driver.latestOffsets([TopicPartition("t", 4)])
    assert not isinstance(info.value, KafkaDirectError)
    assert "t-4" in str(info.value) and "Unknown partition" in str(info.value)
    assert _Consumer.refreshed == ["t"]


def test_a_timestamp_with_no_record_after_it_is_the_end_offset():
    driver = _driver([-1, 9])
    assert driver.offsetsForTimes({T0: 123}) == {T0: 9}


@pytest.mark.parametrize(("level", "committed"), [
    ("READ_COMMITTED", True), ("Read_Committed", True), (" read_committed", True),
    ("\tREAD_COMMITTED", True), ("READ_UNCOMMITTED", False), (" read_uncommitted", False)])
def test_the_isolation_level_is_read_in_any_case_as_librdkafka_reads_it(level, committed):
    # librdkafka reads the level in any case and after leading whitespace: "READ_COMMITTED"
    # taken for read_uncommitted planned a batch to the high watermark, and " read_committed"
    # took the last stable offset for the high watermark (an open transaction was data
    # loss, or with failOnDataLoss=false a reset to the log start: records read again).
    driver = _driver([9], **{"isolation.level": level})
    assert driver.readCommitted is committed
    assert driver.highWatermarks([T0]) == {T0: 9}
    assert len(_Consumer.questions) == (0 if committed else 1)


def test_a_timed_out_answer_names_the_question():
    driver = _driver([5])

    class _Slow(_Admin):
        def list_offsets(self, request: dict[Any, Any], **kwargs: Any) -> dict[Any, Any]:
            return {key: concurrent.futures.Future() for key in request}

    driver._admin = _Slow({})
    driver.timeout = 0.01
    with pytest.raises(Exception) as info:
        driver.highWatermarks([T0])
    assert "t-0" in str(info.value) and "no answer" in str(info.value)


def test_a_timed_out_consumer_request_names_the_question():
    class _Slow(_Consumer):
        def offsets_for_times(self, request: list[Any], timeout: float) -> list[Any]:
            raise KafkaException(KafkaError(KafkaError._TIMED_OUT))

    driver = _driver([5], factory=_Slow)
    with pytest.raises(Exception) as info:
        driver.latestOffsets([T0, TopicPartition("t", 1)])
    assert not isinstance(info.value, KafkaDirectError)
    assert "2 partition(s)" in str(info.value) and "t-0" in str(info.value)
    assert "no answer" in str(info.value)


class _Clock:
    """A clock that the retrier's sleeps move forward."""

    def __init__(self):
        self.now = 0.0

    def sleep(self, seconds):
        self.now += seconds


@pytest.mark.parametrize("code", [KafkaError.OFFSET_NOT_AVAILABLE,
                                  KafkaError.NOT_LEADER_FOR_PARTITION,
                                  KafkaError.FENCED_LEADER_EPOCH])
def test_leadership_moving_is_waited_out_beyond_max_retries(code):
    # A broker failed and another replica takes over: for a moment Kafka answers "not
    # leader" or "leader high watermark not caught up". The Java consumer waits that out
    # (up to its API timeout, 60 s): so does the driver, whatever maxRetries says.
    clock = _Clock()
    answers = iter([code] * 20 + [7])

    def ask():
        answer = next(answers)
        if answer != 7:
            raise KafkaException(KafkaError(answer))
        return answer

    retry = Retrier(1, 200, "b:9092", sleep=clock.sleep, clock=lambda: clock.now)
    assert retry("reading end offsets", ask) == 7
    assert clock.now == pytest.approx(4.0)


def test_leadership_that_never_settles_ends_as_kafka_unavailable_after_the_timeout():
    clock = _Clock()

    def ask():
        raise KafkaException(KafkaError(KafkaError.OFFSET_NOT_AVAILABLE))

    retry = Retrier(1, 200, "b:9092", sleep=clock.sleep, clock=lambda: clock.now)
    with pytest.raises(KafkaUnavailableError, match="OFFSET_NOT_AVAILABLE"):
        retry("reading end offsets", ask)
    assert 60.0 <= clock.now <= 60.5


@pytest.mark.parametrize("code", [KafkaError._TRANSPORT, KafkaError.LEADER_NOT_AVAILABLE])
def test_other_failures_keep_to_max_retries(code):
    # LEADER_NOT_AVAILABLE too: librdkafka answers it from its cache for a deleted topic.
    clock = _Clock()

    def ask():
        raise KafkaException(KafkaError(code))

    retry = Retrier(1, 200, "b:9092", sleep=clock.sleep, clock=lambda: clock.now)
    with pytest.raises(KafkaUnavailableError, match="failed 2 times"):
        retry("reading end offsets", ask)


# -- many partitions ---------------------------------------------------------------------------

def test_a_thousand_partitions_are_asked_in_requests_of_at_most_100():
    # librdkafka matches a ListOffsets answer to its request partition by partition, in
    # time quadratic in the request's size: one request of a thousand partitions cost
    # about 10 ms of the driver's CPU, four of 250 about 4 ms, ten of 100 about 2.5 ms in
    # no more wall time (measured side by side on the same broker).
    partitions = [TopicPartition(f"t{t}", p) for t in range(10) for p in range(100)]
    driver = _driver([7])
    assert driver.latestOffsets(set(partitions)) == dict.fromkeys(partitions, 7)
    assert [len(q) for q in _Consumer.questions] == [100] * 10
    asked = [(topic, partition) for q in _Consumer.questions for topic, partition, _ in q]
    # Each once, in (topic, partition) order (librdkafka answers a sorted request faster).
    assert asked == sorted((tp.topic, tp.partition) for tp in partitions)
    assert all(query == -1 for q in _Consumer.questions for _, _, query in q)


def test_a_request_of_few_partitions_stays_one_request():
    partitions = [TopicPartition("t", p) for p in range(100)]
    driver = _driver([3])
    assert driver.earliestOffsets(partitions) == dict.fromkeys(partitions, 3)
    assert [len(q) for q in _Consumer.questions] == [100]


def test_the_same_partitions_are_asked_again_and_other_ones_anew():
    # The requests are kept for a set of partitions; any other set gets its own.
    first = {TopicPartition("t", p) for p in range(150)}
    driver = _driver([3])
    for partitions in (first, set(first), first - {TopicPartition("t", 7)},
                       first | {TopicPartition("u", 0)}):
        _Consumer.questions.clear()
        assert driver.latestOffsets(partitions) == dict.fromkeys(partitions, 3)
        asked = [(topic, partition) for q in _Consumer.questions for topic, partition, _ in q]
        assert asked == sorted((tp.topic, tp.partition) for tp in partitions)
    _Consumer.questions.clear()
    assert driver.earliestOffsets(first) == dict.fromkeys(first, 3)
    assert {query for q in _Consumer.questions for _, _, query in q} == {-2}


def test_an_unknown_partition_in_one_request_refreshes_its_topics_and_asks_it_again():
    # The second request's answer names a partition librdkafka does not know yet: only
    # that request is asked again, after one refresh of its topics.
    partitions = [TopicPartition(f"t{t}", p) for t in range(5) for p in range(100)]
    driver = _driver([11, KafkaError._UNKNOWN_PARTITION, 12, 13])
    found = driver.latestOffsets(partitions)
    assert [len(q) for q in _Consumer.questions] == [100] * 6
    assert found == {**dict.fromkeys(partitions[:100], 11),
                     **dict.fromkeys(partitions[100:200], 12),
                     **dict.fromkeys(partitions[200:], 13)}
    assert _Consumer.refreshed == ["t1"]


def test_answers_out_of_request_order_are_still_matched_by_partition():
    partitions = [TopicPartition("t", p) for p in range(4)]

    class _Reversed(_Consumer):
        def offsets_for_times(self, request: list[Any], timeout: float) -> list[Any]:
            return [SimpleNamespace(topic=tp.topic, partition=tp.partition,
                                    offset=10 + tp.partition, error=None)
                    for tp in reversed(request)]

    driver = _driver([0], factory=_Reversed)
    assert driver.latestOffsets(partitions) == {tp: 10 + tp.partition for tp in partitions}


class _MovingCoordinator(_Consumer):
    """A group whose coordinator is still loading or moving: the first ``failures`` group
    requests fail with ``code`` (as a broker answers a group it has just begun to own)."""

    failures = 0
    code = KafkaError.NOT_COORDINATOR
    committedOffsets: dict[tuple[str, int], int] = {}

    def _group_request(self) -> None:
        if _MovingCoordinator.failures > 0:
            _MovingCoordinator.failures -= 1
            raise KafkaException(KafkaError(_MovingCoordinator.code))

    def committed(self, request: list[Any], timeout: float) -> list[Any]:
        self._group_request()
        return [SimpleNamespace(topic=tp.topic, partition=tp.partition,
                                offset=self.committedOffsets.get((tp.topic, tp.partition), -1001))
                for tp in request]

    def commit(self, offsets: list[Any], asynchronous: bool) -> None:
        self._group_request()
        for tp in offsets:
            self.committedOffsets[(tp.topic, tp.partition)] = tp.offset


@pytest.mark.parametrize("code", [KafkaError.NOT_COORDINATOR,
                                  KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
                                  KafkaError.COORDINATOR_NOT_AVAILABLE])
def test_a_moving_group_coordinator_is_waited_out_by_commits_and_committed(code):
    # A group Kafka has just begun to own (or whose coordinator moved) answers "not the
    # coordinator" or "loading" for a moment: the Java consumer retries those until its
    # default.api.timeout.ms, and so do the driver's group requests (an offset store's seed,
    # load and commit).
    _MovingCoordinator.code, _MovingCoordinator.committedOffsets = code, {}
    driver = _driver([0], factory=_MovingCoordinator)
    _MovingCoordinator.failures = 2
    driver.commit({T0: 5})
    _MovingCoordinator.failures = 2
    assert driver.committed([T0]) == {T0: 5}


def test_a_group_error_that_is_no_coordinator_move_is_not_retried():
    _MovingCoordinator.code, _MovingCoordinator.committedOffsets = (
        KafkaError.GROUP_AUTHORIZATION_FAILED, {})
    driver = _driver([0], factory=_MovingCoordinator)
    _MovingCoordinator.failures = 1
    with pytest.raises(KafkaException):
        driver.committed([T0])
    assert _MovingCoordinator.failures == 0
