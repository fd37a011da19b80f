"""The job host (tests/app/job_host.py) reports runs as a process would, and outlives a crash."""

import os
import signal

import pytest

from tests.app.job_host import JobHost


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
