"""The early JVM launch imports PySpark before its caller goes on, never beside it."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

_SOURCE_ROOT = str(Path(__file__).resolve().parents[2])

#: In a fresh interpreter, as the ``kafka-direct`` command starts: is PySpark wholly imported
#: when the block begins (the caller's own PySpark imports then find it done)?
SCRIPT = """
import sys
from kafka_direct.runtime.spark import launch_ahead
with launch_ahead(master="local[1]", app_name="launch-ahead-imports", own_session=True):
    module = sys.modules.get("pyspark")
    print("RESULT", module is not None and not module.__spec__._initializing, flush=True)
"""


@pytest.mark.services
def test_pyspark_is_imported_before_the_caller_goes_on():
    # The launch's thread imported PySpark while the ingest job's main thread imported
    # pyspark.sql: the two imports of one package cycle met, and the job died with
    # "cannot import name 'SQLContext' from partially initialized module 'pyspark.sql'"
    # (seen once in about thirty runs on a busy machine).
    path = os.pathsep.join(p for p in (_SOURCE_ROOT, os.environ.get("PYTHONPATH")) if p)
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PYTHONPATH": path})
    assert done.returncode == 0, done.stderr[-3000:]
    assert "RESULT True" in done.stdout, done.stdout + done.stderr[-3000:]


#: An interrupt (Ctrl-C) while the block waits for the launch's import: the launch must be
#: let go as at any other end of the block (not left pending with its JVM running, which
#: kept every later launch in the process from starting).
INTERRUPTED = """
from kafka_direct.runtime import early_launch, spark
def interrupted(self):
    raise KeyboardInterrupt
early_launch.EarlyLaunch.wait_for_import = interrupted
try:
    with spark.launch_ahead(master="local[1]", app_name="launch-ahead-interrupted",
                            own_session=True):
        print("RESULT entered", flush=True)
except KeyboardInterrupt:
    pass
launch = early_launch._early
print("RESULT pending", launch is not None, flush=True)
"""


@pytest.mark.services
def test_an_interrupt_while_waiting_for_the_import_lets_the_launch_go():
    path = os.pathsep.join(p for p in (_SOURCE_ROOT, os.environ.get("PYTHONPATH")) if p)
    done = subprocess.run([sys.executable, "-c", INTERRUPTED], capture_output=True,
                          text=True, timeout=120, env={**os.environ, "PYTHONPATH": path})
    assert done.returncode == 0, done.stderr[-3000:]
    assert "RESULT entered" not in done.stdout
    assert "RESULT pending False" in done.stdout, done.stdout + done.stderr[-3000:]
