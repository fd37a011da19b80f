"""A store's connection or client, kept between its calls by one call at a time.

A new PostgreSQL connection or Kafka client costs milliseconds (a backend process and an
authentication; a coordinator lookup) against a fraction of one for the question it asks,
so a store keeps the one it made (:class:`Kept`). The rules, the same for every store:

* One call uses it at a time (:meth:`Kept.claim`); a call that finds it in use makes one
  of its own, closed after it.
* It belongs to the process that made it. A forked child finds its parent's and never
  uses it, closes it or frees it: a closed socket would end the parent's session, and a
  freed librdkafka client tears down threads the child does not have (the child
  crashes). It stays referenced, unused, until the child exits.
* A copy (a pickled store) starts with nothing kept: a socket cannot travel.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import Any, Generic, TypeVar

__all__ = ["Kept"]

T = TypeVar("T")

#: What forked children found kept by their parents' stores (see the module's rules).
_INHERITED: list[Any] = []


class Kept(Generic[T]):
    """One value kept between calls, by the process that made it.

    Args:
        close: Closes a value this process made (its errors are the caller's to ignore).
            A module-level function: it travels with a pickled copy.
    """

    __slots__ = ("_by", "_close", "_using", "_value")

    def __init__(self, close: Callable[[T], None]) -> None:
        self._close = close
        self._value: T | None = None
        self._by = 0
        self._using = threading.Lock()

    def __getstate__(self) -> Callable[[T], None]:
        return self._close

    def __setstate__(self, close: Callable[[T], None]) -> None:
        self.__init__(close)  # type: ignore[misc]

    def claim(self) -> bool:
        """Whether this call has the kept value to itself (then :meth:`release` after)."""
        return self._using.acquire(blocking=False)

    def release(self) -> None:
        """End the call that claimed it."""
        self._using.release()

    @property
    def value(self) -> T | None:
        """The value this process keeps (a claiming call's), or None."""
        if self._value is not None and self._by != os.getpid():
            self.drop()
        return self._value

    def keep(self, value: T) -> T:
        """Keep ``value`` (made by this process) in place of any other; returns it."""
        self.drop()
        self._value, self._by = value, os.getpid()
        return value

    def drop(self) -> None:
        """Close the kept value if this process made it (else leave it be); keep none."""
        value, self._value = self._value, None
        if value is None:
            return
        if self._by == os.getpid():
            self._close(value)
        else:
            _INHERITED.append(value)

    def close(self) -> None:
        """:meth:`drop`, once no call uses it."""
        with self._using:
            self.drop()
