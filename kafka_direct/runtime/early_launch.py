"""A driver JVM launched ahead, in a thread, for the context asked for next with its arguments.

A JVM takes seconds to start; a caller that knows which context it will make launches its
JVM now (:func:`ahead`) and does other work meanwhile. The contract:

- One launch is pending at a time, in this process: :func:`ahead` launches nothing while
  another is pending, nor where its ``start`` says no JVM is to be launched.
- The block :func:`ahead` guards begins once the launch's thread has imported PySpark (or
  failed before): the caller's own PySpark imports then find the package wholly imported.
- The context made with the same arguments takes the launch (:func:`take`): its settings,
  gateway and fork server, or the error the launch raised, raised there as at a start
  without it.
- A launch nobody took when the block ends, however it ends (an interrupt while waiting for
  the import included), is no longer pending and is stopped once it is done; the block's
  end does not wait for it.

What a launch does (its settings, the JVM's start and stop) is the caller's:
:mod:`~kafka_direct.runtime.spark` gives it.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["EarlyLaunch", "Start", "Stop", "ahead", "take"]

#: Works out a context's settings and launches its JVM: the settings, gateway and fork server
#: (or None). Sets the event it is given once PySpark is imported.
Start = Callable[[threading.Event], tuple[Any, Any, Any]]

#: Stops a launched JVM that no context uses, and its fork server (either may be None).
Stop = Callable[[Any, Any], None]


class EarlyLaunch:
    """A driver JVM launched in a thread, for the context that asks with the same arguments.

    Its settings are worked out in the thread too (PySpark's import, the warm daemon's
    check); what fails there is raised to the context that takes it, as at a start without
    it. A launch nobody takes is stopped when it is done (the caller does not wait for it).

    The caller goes on once PySpark is imported (``start`` sets the event it is given;
    0.13-0.2 s on a quiet core, while the JVM's launch has not begun anyway): a PySpark
    import of the caller's own beside the thread's (``pyspark.sql`` while ``pyspark`` was
    half imported) met the package's import cycle from both ends, and one of them failed
    with "cannot import name ... from partially initialized module".

    Args:
        key: The arguments of the context the launch is for (:func:`take` compares them).
        start: Runs in the thread (see :data:`Start`).
        stop: Stops the JVM of a launch nobody took (see :data:`Stop`).
        own_session: Whether the JVM runs in a session of its own (a context that wants one
            takes no JVM launched otherwise).
    """

    def __init__(self, key: tuple[Any, ...], start: Start, stop: Stop,
                 own_session: bool) -> None:
        self.key = key
        self.own_session = own_session
        self.conf: Any = None
        self.gateway: Any = None
        self.server: Any = None
        self.error: BaseException | None = None
        self._stop = stop
        self._lock = threading.Lock()
        # Both decided under the lock: whichever of the launch's end and the abandon comes
        # second stops the JVM, once (the thread may still be alive after its end).
        self._abandoned = False
        self._done = False
        self._thread = threading.Thread(target=self._run, args=(start,),
                                        name="spark-jvm-early-launch", daemon=True)
        self._imported = threading.Event()
        self._thread.start()

    def wait_for_import(self) -> None:
        """Return once the thread has imported PySpark (or failed before)."""
        self._imported.wait()

    def _run(self, start: Start) -> None:
        try:
            self.conf, self.gateway, self.server = start(self._imported)
        except BaseException as error:  # raised again where the context is made
            self.error = error
        finally:
            self._imported.set()  # a failure before the import: the caller finds it later
        with self._lock:
            self._done = True
            abandoned = self._abandoned
        if abandoned:
            self._stop(self.gateway, self.server)

    def take(self) -> tuple[Any, Any, Any]:
        """The settings, gateway and fork server (waits for the launch); raises its error."""
        self._thread.join()
        if self.error is not None:
            raise self.error
        return self.conf, self.gateway, self.server

    def abandon(self) -> None:
        """Stop the JVM once launched (now if it is); returns at once."""
        with self._lock:
            self._abandoned = True
            done = self._done
        if done:
            self._stop(self.gateway, self.server)


_early_lock = threading.Lock()
#: The pending launch: made by :func:`ahead`, let go by :func:`take` or the block's end.
_early: EarlyLaunch | None = None


@contextlib.contextmanager
def ahead(launch_now: Callable[[], EarlyLaunch | None]) -> Iterator[None]:
    """A launch pending for the block, where none is yet; let go at the block's end.

    Args:
        launch_now: Called under this module's lock where no launch is pending: the
            :class:`EarlyLaunch` it started, or None where no JVM is to be launched.
    """
    global _early
    launch: EarlyLaunch | None = None
    with _early_lock:
        if _early is None:
            launch = _early = launch_now()
    try:
        if launch is not None:
            # In the try: an interrupt while waiting still lets the launch go (below).
            launch.wait_for_import()
        yield
    finally:
        if launch is not None:
            with _early_lock:
                untaken = _early is launch
                if untaken:
                    _early = None
            if untaken:
                launch.abandon()


def take(key: tuple[Any, ...], launches_jvm: Callable[[bool], bool]) -> EarlyLaunch | None:
    """The pending launch for ``key``, no longer pending; None where there is none to take.

    Args:
        key: The arguments of the context being made.
        launches_jvm: Whether that context would launch a JVM of its own, given whether
            the launch's JVM runs in a session of its own: where not (a context runs, or
            spark-submit's JVM does), the launch stays pending and its block's end stops it.
    """
    global _early
    with _early_lock:
        launch = _early
        if launch is None or launch.key != key or not launches_jvm(launch.own_session):
            return None
        _early = None
        return launch
