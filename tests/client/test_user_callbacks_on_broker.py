"""A user's librdkafka callbacks are called as by one consumer: never two at once.

The driver consumer asks through several librdkafka clients from several threads (the group
member polled by its keeper, the asking consumers, the admin client), and a Python worker
keeps many consumers; each client serves its callbacks in the thread that polls it, and its
token refreshes (``oauth_cb``) in a background thread of its own. The user gave one
consumer's configuration: their callbacks, usually not thread-safe, must never overlap.
"""

from __future__ import annotations

import base64
import json
import threading
import time
from typing import Any

import pytest

from kafka_direct.client import asking_consumers
from kafka_direct.client.cached_consumers import ConsumerCache
from kafka_direct.client.driver_consumer import DriverConsumer
from kafka_direct.client.params import executor_params
from kafka_direct.client.retry import Retrier
from kafka_direct.topic_partition import TopicPartition

_ASK = Retrier(maxRetries=3, backoffMs=200)


class _Overlaps:
    """A callback that counts its calls, the threads calling it and the most at once.

    Each call holds for ``hold`` seconds, so that calls from two threads at about the same
    time overlap unless something keeps them apart.
    """

    def __init__(self, hold: float = 0.05) -> None:
        self.hold = hold
        self._lock = threading.Lock()
        self.active = 0
        self.most = 0
        self.calls = 0
        self.threads: set[int] = set()

    def enter(self) -> None:
        with self._lock:
            self.active += 1
            self.calls += 1
            self.most = max(self.most, self.active)
            self.threads.add(threading.get_ident())

    def leave(self) -> None:
        with self._lock:
            self.active -= 1

    def __call__(self, *args: Any) -> None:
        self.enter()
        try:
            time.sleep(self.hold)
        finally:
            self.leave()


def _part(claims: dict[str, Any]) -> str:
    return base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b"=").decode()


class _Tokens(_Overlaps):
    """A token provider whose tokens live ``life`` seconds: librdkafka refreshes each
    client's token at 80% of its life, from that client's background thread."""

    def __init__(self, life: float = 2.0) -> None:
        super().__init__(hold=0.2)
        self.life = life

    def __call__(self, *args: Any) -> tuple[str, float, str]:  # type: ignore[override]
        self.enter()
        try:
            time.sleep(self.hold)
            now = time.time()
            claims = {"sub": "tester", "iat": now, "exp": now + self.life + 60}
            return f"{_part({'alg': 'none'})}.{_part(claims)}.", now + self.life, "tester"
        finally:
            self.leave()


@pytest.fixture
def small_requests(monkeypatch):
    # Requests of 3 partitions: 30 partitions make 10 requests, dealt to 3 consumers.
    monkeypatch.setattr(asking_consumers, "_REQUEST_PARTITIONS", 3)


def _sasl(kafka: Any, tokens: _Tokens, **extra: Any) -> dict[str, Any]:
    if kafka.sasl_bootstrap_servers is None:
        pytest.skip("this broker has no SASL_PLAINTEXT listener")
    return {"bootstrap.servers": kafka.sasl_bootstrap_servers,
            "security.protocol": "SASL_PLAINTEXT", "sasl.mechanisms": "OAUTHBEARER",
            "oauth_cb": tokens, **extra}


@pytest.mark.usefixtures("small_requests")
def test_a_driver_consumers_stats_callbacks_never_overlap(kafka, kafka_topic):
    topic = kafka_topic(partitions=30)
    partitions = {TopicPartition(topic, p) for p in range(30)}
    # Four clients' statistics every 100 ms, each call held 10 ms: a lock serves them all
    # (40 calls a second, 0.4 s of holding), yet two threads' calls at once would overlap.
    stats = _Overlaps(hold=0.01)
    errors = _Overlaps(hold=0.01)
    params = {**kafka.params(), "group.id": f"callbacks-{time.monotonic_ns()}",
              "statistics.interval.ms": 100, "stats_cb": stats, "error_cb": errors}
    driver = DriverConsumer(params, 10_000, askers=3)
    try:
        driver.subscribe([topic])  # the member's callbacks served by its keeper thread
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:
            assert _ASK("ends", lambda: driver.latestOffsets(partitions)) == dict.fromkeys(
                partitions, 0)
    finally:
        driver.close()
    assert stats.calls >= 10
    assert len(stats.threads) > 1  # several threads served them: an overlap was possible
    assert stats.most == 1
    assert errors.most <= 1


def test_a_driver_consumers_token_refreshes_never_overlap(kafka, kafka_topic):
    topic = kafka_topic(partitions=2)
    partitions = {TopicPartition(topic, p) for p in range(2)}
    tokens = _Tokens()
    driver = DriverConsumer(_sasl(kafka, tokens, **{"group.id": f"tokens-{time.monotonic_ns()}"}),
                            10_000, askers=3)
    try:
        made = tokens.calls  # one token per client, asked as each is made
        deadline = time.monotonic() + 4  # two refreshes of every client
        while time.monotonic() < deadline:
            assert _ASK("ends", lambda: driver.latestOffsets(partitions)) == dict.fromkeys(
                partitions, 0)
            time.sleep(0.2)
    finally:
        driver.close()
    assert made >= 3  # the asking consumer, the group member, the admin client
    assert tokens.calls >= 2 * made  # every client refreshed its own token
    assert len(tokens.threads) > 1
    assert tokens.most == 1


def test_an_executors_cached_consumers_token_refreshes_never_overlap(kafka, kafka_topic):
    topic = kafka_topic(partitions=3)
    for partition in range(3):
        kafka.produce(topic, [b"v"] * 2, partition=partition)
    tokens = _Tokens()
    params = executor_params(_sasl(kafka, tokens, **{"group.id": "tokens"}))
    cache = ConsumerCache()
    try:
        deadline = time.monotonic() + 4
        while time.monotonic() < deadline:
            for partition in range(3):
                with cache.lease(topic, partition, params) as consumer:
                    assert len(list(consumer.read(0, 2, 10_000))) == 2
            time.sleep(0.2)
        assert cache.created == 3
    finally:
        cache.clear()
    assert tokens.calls >= 6  # each consumer's first token and its refreshes
    assert len(tokens.threads) > 1
    assert tokens.most == 1



class _CallableLogger:
    """A logger object that is also callable (a mock, a logging proxy)."""

    def __init__(self) -> None:
        self.logged: list[tuple[Any, ...]] = []

    def __call__(self, *args: Any) -> None:
        pass

    def log(self, *args: Any) -> None:
        self.logged.append(args)


def test_a_callable_logger_object_still_gets_its_log_calls(kafka, kafka_topic):
    topic = kafka_topic(partitions=1)
    mine = _CallableLogger()
    params = {**kafka.params(), "group.id": f"callable-logger-{time.monotonic_ns()}",
              "logger": mine, "debug": "metadata"}
    driver = DriverConsumer(params, 10_000)
    try:
        driver.subscribe([topic])
        _ASK("ends", lambda: driver.latestOffsets({TopicPartition(topic, 0)}))
        time.sleep(1)
    finally:
        driver.close()
    assert mine.logged, "the logger's log was never called"


# Run in a process of its own: a deadlock would leave threads and clients that never end.
_ASKS_FROM_A_CALLBACK = r"""
import os, sys, threading, time
from kafka_direct.client import asking_consumers
from kafka_direct.client.driver_consumer import DriverConsumer
from kafka_direct.client.retry import Retrier
from kafka_direct.topic_partition import TopicPartition

asking_consumers._REQUEST_PARTITIONS = 3
topic = sys.argv[2]
parts = {TopicPartition(topic, p) for p in range(30)}
holder, answered, finished = {}, [], threading.Event()

def stats(text):
    # A metrics hook that also records the lag: it asks the ends once, from the keeper.
    if threading.current_thread().name.startswith("driver-consumer") and not answered \
            and "driver" in holder:
        answered.append(len(holder["driver"].latestOffsets(parts)))
        finished.set()

driver = DriverConsumer({"bootstrap.servers": sys.argv[1], "group.id": f"rv-{time.monotonic_ns()}",
                         "statistics.interval.ms": 100, "stats_cb": stats}, 10_000, askers=3)
holder["driver"] = driver
Retrier(maxRetries=5, backoffMs=200)("ends", lambda: driver.latestOffsets(parts))
driver.subscribe([topic])
print("ANSWERED" if finished.wait(30) else "HUNG", answered, flush=True)
os._exit(0)
"""



def test_a_callback_that_asks_end_offsets_through_its_driver_consumer_gets_its_answer(
        kafka, kafka_topic, tmp_path):
    # The keeper thread holds the callback lock in stats_cb, which asks end offsets: the
    # asking consumers' threads must not serve their own callbacks meanwhile (they would
    # wait for that lock while the keeper waits for their answers).
    import os
    import subprocess
    import sys
    from pathlib import Path

    topic = kafka_topic(partitions=30)
    script = tmp_path / "asks.py"
    script.write_text(_ASKS_FROM_A_CALLBACK)
    root = str(Path(__file__).resolve().parents[2])
    env = {**os.environ,
           "PYTHONPATH": os.pathsep.join([root, *filter(None, [os.environ.get("PYTHONPATH")])])}
    done = subprocess.run([sys.executable, str(script), kafka.bootstrap_servers, topic],
                          capture_output=True, text=True, timeout=90, env=env, cwd=root)
    assert "ANSWERED [30]" in done.stdout, done.stdout + done.stderr[-1500:]
