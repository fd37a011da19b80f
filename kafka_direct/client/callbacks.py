"""A user's librdkafka callbacks, called one at a time however many clients serve them.

The contract: callbacks given in one Kafka configuration (``error_cb``, ``stats_cb``,
``throttle_cb``, ``oauth_cb``, ``on_commit``, a ``logger``'s ``log``...) are called as by one
consumer: **never two at once**, so a callback need not be thread-safe. kafka-direct makes
several librdkafka clients of one configuration: the driver's
:class:`~kafka_direct.client.driver_consumer.DriverConsumer` has a group member polled by
its keeper thread, up to ``askers`` asking consumers each asking (and served) in a thread of
its own, and an admin client; a Python worker keeps many executor consumers (the cache, the
fetch sessions). Each client calls a callback in the thread that polls it, and its token
refresh (``oauth_cb``) in a librdkafka background thread of its own, so without a guard one
``stats_cb`` ran in four threads at once on the driver, and two executor consumers' token
refreshes overlapped.

:func:`one_at_a_time` wraps each callback of a configuration so that every call holds one
lock: one lock per driver consumer (its clients' callbacks never overlap; another stream's
may), and :data:`WORKER_CALLBACKS`, one per process, for the executors' consumers of a
Python worker. Each client still gets its own calls: every client asks ``oauth_cb`` for its
own token, only never while another call runs. Calls from one thread may nest (a lock held
again by the thread that holds it). The price: a call waits while another runs, so a
callback should return promptly (a token provider that takes a second holds up the others'
statistics for that second), and must never wait for another client's callback, which
waits for the lock.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any

from kafka_direct.client.params import resolve_callbacks

__all__ = ["WORKER_CALLBACKS", "one_at_a_time"]

#: The one lock of a process's executor consumers' callbacks (see the module's contract).
WORKER_CALLBACKS = threading.RLock()

#: The setting whose value is an object librdkafka calls a method of (``log``), not a function.
_LOGGER_KEY = "logger"


class _OneAtATime:
    """A user's callback called with ``lock`` held.

    Attributes:
        function: The user's callback.
        lock: The lock every call holds.
    """

    __slots__ = ("function", "lock")

    def __init__(self, function: Callable[..., Any], lock: Any) -> None:
        self.function = function
        self.lock = lock

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        with self.lock:
            return self.function(*args, **kwargs)

    def __repr__(self) -> str:
        return f"one_at_a_time({self.function!r})"


class _LoggerOneAtATime:
    """A user's ``logger`` whose ``log`` (what confluent-kafka calls) holds ``lock``.

    Attributes:
        logger: The user's logger.
        lock: The lock every call of ``log`` holds.
    """

    __slots__ = ("lock", "logger")

    def __init__(self, logger: Any, lock: Any) -> None:
        self.logger = logger
        self.lock = lock

    def log(self, *args: Any, **kwargs: Any) -> Any:
        """The user's ``logger.log``, with the lock held."""
        with self.lock:
            return self.logger.log(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        # Only once the slots are set (a copy asks before): else no recursion without end.
        if name in self.__slots__ or name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.logger, name)

    def __repr__(self) -> str:
        return f"one_at_a_time({self.logger!r})"


def _unwrapped(value: Any) -> Any:
    """The user's own callback or logger, when ``value`` wraps one."""
    if isinstance(value, _OneAtATime):
        return value.function
    if isinstance(value, _LoggerOneAtATime):
        return value.logger
    return value


def one_at_a_time(params: Mapping[str, Any], lock: Any) -> dict[str, Any]:
    """``params`` with every callback (named ones imported) called with ``lock`` held.

    Every value that is a function (after :func:`resolve_callbacks`) is wrapped, and the
    ``logger``'s ``log``; other settings are left as they are. A callback already wrapped
    is wrapped anew with ``lock`` only (never one lock inside another).

    Args:
        params: Kafka parameters.
        lock: The lock shared by every client whose callbacks must not overlap (a
            ``threading.RLock``: a callback may call another in the same thread).

    Raises:
        ConfigurationError: A callback named by a string that does not import, or a
            callback setting that is not a function (see :func:`resolve_callbacks`).
    """
    guarded = resolve_callbacks({key: _unwrapped(value) for key, value in params.items()})
    for key, value in guarded.items():
        # The logger first: an object with a ``log`` may be callable as well (a mock, a
        # logging proxy), and librdkafka calls its ``log``, never the object.
        if key == _LOGGER_KEY and value is not None and hasattr(value, "log"):
            guarded[key] = _LoggerOneAtATime(value, lock)
        elif callable(value):
            guarded[key] = _OneAtATime(value, lock)
    return guarded
