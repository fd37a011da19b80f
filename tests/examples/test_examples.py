"""The runnable examples under examples/, run as a user would, against the test services."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).parents[2] / "examples"


def run_example(name, kafka, postgres):
    env = {**os.environ, "KAFKA_DIRECT_BOOTSTRAP": kafka.bootstrap_servers,
           "KAFKA_DIRECT_PG_DSN": postgres.dsn}
    done = subprocess.run([sys.executable, str(EXAMPLES / name)], capture_output=True,
                          text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    return done.stdout


def test_batch_job_from_store(kafka, postgres):
    out = run_example("batch_job_from_store.py", kafka, postgres)
    assert "first run: 3 rows" in out
    assert "second run: 1 rows" in out  # only what arrived since the first run
    assert "table words: 4 rows" in out


def test_stream_aggregates_with_ui(kafka, postgres):
    out = run_example("stream_aggregates_with_ui.py", kafka, postgres)
    assert "statistics page: http://127.0.0.1:" in out
    assert "processed records (from the metrics): 400" in out
    assert "clicks per user: {'u0': 100, 'u1': 100, 'u2': 100, 'u3': 100}" in out


@pytest.mark.parametrize("name", sorted(p.name for p in EXAMPLES.glob("[!_]*.py")))
def test_every_example_is_tested(name):
    assert f'"{name}"' in Path(__file__).read_text()
