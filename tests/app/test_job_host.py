"""The job host (tests/app/job_host.py) reports runs as a process would, and outlives a crash."""

import itertools
import os
import signal

import pytest

from tests.app.job_host import JobHost, grouped_by_api


@pytest.fixture
def host():
    own = JobHost()
    try:
        yield own
    finally:
        own.shutdown()


def test_exit_codes_and_output_are_those_of_the_command(host):
    helped = host.run(["--help"])  # argparse ends it with SystemExit(0)
    assert helped.returncode == 0 and "ingest" in helped.stdout and helped.stderr == ""
    wrong = host.run(["ingest", "--batch-interval", "x"])  # SystemExit(2), usage on stderr
    assert wrong.returncode == 2 and "--batch-interval" in wrong.stderr and wrong.stdout == ""


def test_a_host_that_died_is_started_again(host):
    assert host.run(["--help"]).returncode == 0
    os.kill(host._process.pid, signal.SIGKILL)
    host._process.wait()
    assert host.run(["--help"]).returncode == 0


def test_a_missing_working_directory_is_a_failed_run_not_a_dead_host(host, tmp_path,
                                                                      monkeypatch):
    with monkeypatch.context() as patch:
        patch.setattr(os, "getcwd", lambda: str(tmp_path / "gone"))
        failed = host.run(["--help"])
    assert failed.returncode == 1 and "FileNotFoundError" in failed.stderr
    assert host.run(["--help"]).returncode == 0


def test_a_modules_runs_are_grouped_by_api_in_their_order_and_modules_keep_theirs():
    # (module, test, api): each test parametrized over both APIs, as collected.
    items = [("a", 1, "dstream"), ("a", 1, "structured"), ("a", 2, None),
             ("a", 3, "dstream"), ("a", 3, "structured"), ("b", 1, "structured"),
             ("b", 1, "dstream"), ("c", 1, None), ("c", 2, None)]
    grouped = grouped_by_api(items, lambda item: item[0], lambda item: item[2])
    # Module b starts with the API module a ended with.
    assert grouped == [("a", 1, "dstream"), ("a", 3, "dstream"), ("a", 2, None),
                       ("a", 1, "structured"), ("a", 3, "structured"), ("b", 1, "structured"),
                       ("b", 1, "dstream"), ("c", 1, None), ("c", 2, None)]
    runs = [item[2] for item in grouped if item[2] is not None]
    assert sum(1 for x, y in itertools.pairwise(runs) if x != y) == 2  # as collected: 4
    # A local cluster's runs stay together, both APIs' (one cluster), between the others.
    cluster = [("m", 1, "structured"), ("m", 2, "local-cluster"), ("m", 3, "dstream"),
               ("m", 2, "local-cluster")]
    assert grouped_by_api(cluster, lambda item: item[0], lambda item: item[2]) == [
        ("m", 3, "dstream"), ("m", 2, "local-cluster"), ("m", 2, "local-cluster"),
        ("m", 1, "structured")]
