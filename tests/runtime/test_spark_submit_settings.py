"""Under spark-submit, its settings win over the defaults kafka-direct's contexts bring."""

import os
import subprocess
import sys
from pathlib import Path

import pyspark
import pytest

APP = """
from kafka_direct.testing import spark_context
with spark_context("local[1]", defaults={"spark.kdtest.setting": "from-defaults",
                                         "spark.kdtest.other": "from-defaults"},
                   archive=True) as sc:
    conf = sc.getConf()
    print("RESULT", conf.get("spark.kdtest.setting"), conf.get("spark.kdtest.other"),
          conf.get("spark.python.daemon.module"),
          conf.get("spark.driver.extraJavaOptions", "none").replace(" ", "+"), flush=True)
"""


@pytest.mark.services
def test_spark_submit_settings_win_over_defaults_and_the_warm_daemon(tmp_path):
    # SparkConf() built before connecting to spark-submit's JVM held none of its settings:
    # ``defaults`` overrode its --conf, and the warm daemon a daemon it named.
    app = tmp_path / "app.py"
    app.write_text(APP)
    submit = Path(pyspark.__file__).parent / "bin" / "spark-submit"
    done = subprocess.run(
        [str(submit), "--master", "local[1]", "--conf", "spark.kdtest.setting=from-submit",
         "--conf", "spark.python.daemon.module=pyspark.daemon",
         "--driver-java-options", "-Dkdtest=1", str(app)],
        capture_output=True, text=True, timeout=180,
        env={**os.environ, "PYSPARK_PYTHON": sys.executable,
             "PYSPARK_DRIVER_PYTHON": sys.executable})
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT")]
    assert lines, done.stdout[-2000:] + done.stderr[-3000:]
    # The JVM runs already: its options are spark-submit's, not the quick ones or the
    # class archive's, and the settings say so.
    *settings, options = lines[0].split()[1:]
    assert settings == ["from-submit", "from-defaults", "pyspark.daemon"]
    assert options.split("+")[-1] == "-Dkdtest=1"  # after Spark's own module options
    assert "SharedArchiveFile" not in options and "TieredStopAtLevel" not in options
