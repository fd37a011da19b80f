"""An early launch nobody took is stopped exactly once, however its end meets the abandon."""

import threading

from kafka_direct.runtime import early_launch


def _launch(stopped, finishing=None, finish=None):
    def start(imported):
        imported.set()
        return "conf", "gateway", "server"

    def stop(gateway, server):
        stopped.append((gateway, server))

    class Launch(early_launch.EarlyLaunch):
        def _run(self, start):
            super()._run(start)
            if finishing is not None:
                # The launch has decided whether it was abandoned; its thread still runs.
                finishing.set()
                finish.wait(10)

    return Launch(("key",), start, stop, False)


def test_a_launch_abandoned_while_its_thread_ends_is_stopped():
    stopped, finishing, finish = [], threading.Event(), threading.Event()
    launch = _launch(stopped, finishing, finish)
    assert finishing.wait(10)
    launch.abandon()  # the thread is still alive, past its own look at the abandon
    finish.set()
    launch._thread.join(10)
    assert stopped == [("gateway", "server")]


def test_a_launch_abandoned_before_it_ends_is_stopped_once():
    stopped, release = [], threading.Event()

    def start(imported):
        imported.set()
        release.wait(10)
        return "conf", "gateway", "server"

    launch = early_launch.EarlyLaunch(("key",), start, lambda g, s: stopped.append((g, s)),
                                      False)
    launch.wait_for_import()
    launch.abandon()
    release.set()
    launch._thread.join(10)
    assert stopped == [("gateway", "server")]


def test_a_launch_abandoned_after_it_ended_is_stopped_once():
    stopped = []
    launch = _launch(stopped)
    launch._thread.join(10)
    launch.abandon()
    assert stopped == [("gateway", "server")]
