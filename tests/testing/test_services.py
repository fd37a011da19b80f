"""The self-started services: restart keeps data, failures show logs, nothing outlives us."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from kafka_direct import ServiceError
from kafka_direct.testing import ApacheKafka, EmbeddedKafka, EmbeddedPostgres
from kafka_direct.testing.kafka import all_stopped
from kafka_direct.testing.process import ServiceProcess, wait_for

pytestmark = pytest.mark.services  # every test here starts services of its own


def test_kafka_restart_keeps_topics_and_records(own_kafka):
    own_kafka.create_topic("kept", partitions=2)
    own_kafka.produce("kept", [b"a", b"b", b"c"], partition=1)
    own_kafka.restart()
    assert own_kafka.end_offsets("kept", [0, 1]) == {0: (0, 0), 1: (0, 3)}
    own_kafka.produce("kept", [b"d"], partition=1)
    assert own_kafka.end_offsets("kept", [1]) == {1: (0, 4)}


def test_postgres_restart_keeps_committed_data():
    with EmbeddedPostgres() as pg:
        with pg.connect() as connection, connection.cursor() as cursor:
            cursor.execute("CREATE TABLE kept (n int)")
            cursor.execute("INSERT INTO kept VALUES (1), (2)")
        connection.close()
        pg.restart()
        with pg.connect() as connection, connection.cursor() as cursor:
            cursor.execute("SELECT sum(n) FROM kept")
            assert cursor.fetchone() == (3,)
        connection.close()
        if os.geteuid() == 0:
            postmaster = pg._process.process.pid
            assert os.stat(f"/proc/{postmaster}").st_uid != 0  # never runs as root


def broker_pid(broker):
    """The process id of a one-node broker of either kind."""
    return broker.nodes[0].pid if isinstance(broker, ApacheKafka) else broker._process.process.pid


@pytest.mark.parametrize("kind", ["apache", "noida"])
def test_a_broker_that_cannot_start_raises_with_its_log(kafka, kind):
    taken = int(kafka.bootstrap_servers.split(",")[0].rsplit(":", 1)[1])
    broker = (ApacheKafka(port=taken, startup_timeout=60) if kind == "apache"
              else EmbeddedKafka(port=taken, startup_timeout=20))
    with pytest.raises(ServiceError) as info:
        broker.start()
    broker.close()
    assert "kafka" in info.value.service.lower()
    assert "failed to start" in str(info.value)
    assert info.value.log_tail  # what the broker said is in the error
    if kind == "apache":
        assert "Address already in use" in info.value.log_tail, info.value.log_tail


def test_an_apache_kafka_node_killed_mid_write_restarts_with_what_it_acknowledged(own_kafka):
    # kill -9: a crash. Kafka recovers its log from disk; what it acknowledged (acks=all,
    # flushed by the page cache, the process gone) is all there after the restart.
    if not isinstance(own_kafka, ApacheKafka):
        pytest.skip("an emulator loses its log to kill -9")
    own_kafka.create_topic("crash", partitions=1)
    own_kafka.produce("crash", [b"%d" % i for i in range(500)], acks="all",
                      enable_idempotence=True)
    own_kafka.kill()
    own_kafka.start()
    assert own_kafka.end_offsets("crash", [0]) == {0: (0, 500)}
    # The idempotent producer goes on across the restart.
    own_kafka.produce("crash", [b"after"], enable_idempotence=True)
    assert own_kafka.end_offsets("crash", [0]) == {0: (0, 501)}


def test_tansu_backend_is_a_working_second_opinion():
    with EmbeddedKafka(backend="tansu") as broker:
        broker.create_topic("second", partitions=1)
        assert broker.produce("second", [b"1", b"2"]) == 2


CHILD = """
import json, sys, time
from kafka_direct.testing import ApacheKafka, EmbeddedPostgres
kafka = ApacheKafka().start()
pg = EmbeddedPostgres().start()
print(json.dumps([kafka.nodes[0].pid, pg._process.process.pid]), flush=True)
time.sleep(600)
"""


def _alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_services_die_with_a_killed_parent():
    child = subprocess.Popen([sys.executable, "-c", CHILD], stdout=subprocess.PIPE, text=True)
    try:
        pids = json.loads(child.stdout.readline())
        assert all(_alive(pid) for pid in pids)
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(10)
    assert wait_for(lambda: not any(_alive(pid) for pid in pids), 20), pids
    time.sleep(0.2)


_in_child = {"watch": False}


def _after_fork_in_child():
    if _in_child["watch"]:
        os.write(_in_child["fd"], b"python ran in the child")


os.register_at_fork(after_in_child=_after_fork_in_child)


def test_a_service_starts_with_no_python_between_fork_and_exec(tmp_path):
    # Python code in the child (a preexec_fn) forces a full fork, and a fork in a process
    # that holds gRPC's threads (a Spark Connect client in the same test worker) runs gRPC's
    # fork handlers there: once in a few hundred starts they aborted the restarted
    # PostgreSQL. The child must run nothing of ours before exec.
    marker = tmp_path / "marker"
    _in_child["fd"] = os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    _in_child["watch"] = True
    try:
        process = ServiceProcess("sleeper", ["sleep", "30"], tmp_path / "log")
        process.start()
        try:
            assert process.alive()
            # Its own process group (a terminal's Ctrl-C reaches the test run only).
            assert os.getpgid(process.process.pid) == process.process.pid
        finally:
            process.stop()
    finally:
        _in_child["watch"] = False
        os.close(_in_child["fd"])
    assert marker.read_bytes() == b""


STARTER = """
import json, os, signal, sys
from pathlib import Path
from kafka_direct.testing.process import ServiceProcess
process = ServiceProcess("sleeper", ["sleep", "60"], Path(sys.argv[1]))
process.start()
os.write(1, str(process.process.pid).encode())
os._exit(0)  # the starter dies at once: its service must die with it
"""


def test_a_starter_that_dies_right_after_start_leaves_no_service(tmp_path):
    # The death signal must be set when start() returns: through setpriv, that is after
    # setpriv itself ran, not when Popen returns.
    pids = []
    for i in range(20):
        done = subprocess.run([sys.executable, "-c", STARTER, str(tmp_path / f"log{i}")],
                              capture_output=True, text=True, timeout=60)
        pids.append(int(done.stdout.split()[0]))
    assert wait_for(lambda: not any(_alive(pid) for pid in pids), 20), [
        pid for pid in pids if _alive(pid)]


def test_a_death_signal_python_does_not_name_still_starts_the_service(tmp_path):
    process = ServiceProcess("sleeper", ["sleep", "30"], tmp_path / "log",
                             death_signal=signal.SIGRTMIN + 3)
    process.start()
    try:
        assert process.alive()
    finally:
        process.stop()


def test_a_paused_broker_has_stopped_when_pause_returns(own_kafka):
    # Under load a thread not yet scheduled since SIGSTOP answered a request sent right
    # after it: a test that paused the broker then saw a batch planned from it.
    pid = broker_pid(own_kafka)
    own_kafka.pause()
    try:
        assert all_stopped(pid)
        assert len(os.listdir(f"/proc/{pid}/task")) >= 1
    finally:
        own_kafka.resume()
    assert not all_stopped(pid) or wait_for(lambda: not all_stopped(pid), 10)
