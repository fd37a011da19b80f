"""A configuration's callbacks wrapped to hold one lock per call (kafka_direct.client.callbacks)."""

import threading
import time

import pytest

from kafka_direct.client.callbacks import one_at_a_time
from kafka_direct.errors import ConfigurationError
from tests.client import oauth_tokens


def test_every_function_and_the_loggers_log_hold_the_lock_and_the_rest_is_kept():
    lock = threading.RLock()
    held = []

    def stats(text):
        held.append(("stats", text, lock._is_owned()))
        return len(text)

    class _Logger:
        name = "mine"

        def log(self, level, fmt, *args):
            held.append(("log", level, lock._is_owned()))

    params = {"bootstrap.servers": "b:9092", "statistics.interval.ms": 100,
              "stats_cb": stats, "logger": _Logger(),
              "oauth_cb": "tests.client.oauth_tokens:provide"}
    guarded = one_at_a_time(params, lock)
    assert {k: v for k, v in guarded.items() if k not in ("stats_cb", "logger", "oauth_cb")} \
        == {"bootstrap.servers": "b:9092", "statistics.interval.ms": 100}
    assert guarded["stats_cb"]("{}") == 2
    guarded["logger"].log(7, "%s", "x")
    assert held == [("stats", "{}", True), ("log", 7, True)]
    assert guarded["logger"].name == "mine"
    assert guarded["oauth_cb"].function is oauth_tokens.provide  # the name imported
    assert params["stats_cb"] is stats  # the user's dict is left alone


def test_calls_from_two_threads_never_overlap_and_one_thread_may_nest():
    lock = threading.RLock()
    active, most = [0], [0]

    def slow(*_args):
        active[0] += 1
        most[0] = max(most[0], active[0])
        time.sleep(0.05)
        active[0] -= 1

    guarded = one_at_a_time({"error_cb": slow, "throttle_cb": slow}, lock)
    threads = [threading.Thread(target=guarded[key], args=(None,))
               for key in ("error_cb", "throttle_cb") for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(5)
    assert most == [1]
    nested = one_at_a_time({"error_cb": lambda e: guarded["throttle_cb"](e)}, lock)
    nested["error_cb"](None)  # the same thread takes the lock again: no deadlock


def test_a_wrapped_callback_is_wrapped_anew_with_the_new_lock_only():
    first, second = threading.RLock(), threading.RLock()

    def stats(_text):
        return first._is_owned(), second._is_owned()

    once = one_at_a_time({"stats_cb": stats}, first)
    again = one_at_a_time(once, second)
    assert again["stats_cb"].function is stats
    assert again["stats_cb"]("{}") == (False, True)


def test_a_callback_name_that_does_not_import_is_a_configuration_error():
    with pytest.raises(ConfigurationError, match="oauth_cb"):
        one_at_a_time({"oauth_cb": "no.such.module:provide"}, threading.RLock())
