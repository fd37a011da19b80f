"""A reused Python worker closed by Spark while idle leaves without calling PySpark's worker."""

import socket
import sys
import types

import pytest

from kafka_direct.rdd.worker_exit import end_lookup_daemon, quiet_idle_exit


@pytest.fixture
def daemon_main(monkeypatch):
    """A stand-in for ``python -m pyspark.daemon``'s ``__main__`` module."""
    calls = []
    main = types.ModuleType("__main__")
    main.__spec__ = types.SimpleNamespace(name="pyspark.daemon")

    def worker(sock, authenticated):
        calls.append(sock.recv(16))
        return 0

    main.worker = worker
    monkeypatch.setitem(sys.modules, "__main__", main)
    return main, calls


def test_a_closed_idle_worker_leaves_quietly(daemon_main):
    main, calls = daemon_main
    quiet_idle_exit()
    ours, spark = socket.socketpair()
    spark.close()  # Spark's JVM closed the idle worker
    assert main.worker(ours, True) == 1
    assert calls == []  # PySpark's worker (which reports to the closed socket) never ran
    ours.close()


def test_a_task_reaches_pysparks_worker_once_installed(daemon_main):
    main, calls = daemon_main
    quiet_idle_exit()
    quiet_idle_exit()  # installed once
    ours, spark = socket.socketpair()
    spark.sendall(b"task")
    assert main.worker(ours, True) == 0
    assert calls == [b"task"]
    ours.close()
    spark.close()


def test_nothing_changes_outside_a_daemon_worker(monkeypatch):
    main = types.ModuleType("__main__")
    main.worker = original = object()
    monkeypatch.setitem(sys.modules, "__main__", main)
    quiet_idle_exit()
    assert main.worker is original


def test_no_lookup_daemon_no_signal():
    gateway = types.SimpleNamespace(proc=types.SimpleNamespace(pid=2**22 + 12345))
    assert end_lookup_daemon(types.SimpleNamespace(_gateway=gateway)) == 0
