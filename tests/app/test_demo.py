"""The showcase: `kafka-direct demo` kills its ingest job and verifies exactly-once."""

import re
import subprocess
import sys

import pytest

from kafka_direct.app.cli import main


@pytest.mark.slow  # a fault run: kills or restarts real processes (docs/testing.md)
def test_demo_survives_a_kill_and_verifies_every_event_once(kafka, kafka_topic, postgres):
    # The topic exists already, with other records and fewer partitions: told to, the demo
    # deletes and re-creates it (it used to crash here, its admin client gone before the
    # deletion's answer came).
    topic = kafka_topic(partitions=1, prefix="demo")
    kafka.produce(topic, [b"stale"] * 20)
    done = subprocess.run(
        [sys.executable, "-m", "kafka_direct.app.cli", "demo", "--events", "3000",
         "--max-rate-per-partition", "250", "--batch-interval", "0.5", "--seed", "7",
         "--topic", topic, "--bootstrap-servers", kafka.bootstrap_servers,
         "--dsn", postgres.dsn, "--recreate-topic"],
        capture_output=True, text=True, timeout=300)
    out = done.stdout
    assert done.returncode == 0, out[-3000:] + done.stderr[-3000:]
    assert f"produced 3000 events into {topic} (3 partitions)" in out
    assert re.search(r"killed the ingest job with SIGKILL [\d.]+ s after its first batch, "
                     r"with \d+ of 3000 rows written", out)
    assert "run 2 | batch " in out  # the restarted job's progress lines
    assert "table demo_events: 3000 rows, 3000 distinct events, 0 duplicates, 0 missing" in out
    assert "stored offsets == log end for every partition" in out
    assert out.rstrip().endswith("OK: every event exactly once")


def test_demo_rejects_bad_arguments(capsys):
    assert main(["demo", "--events", "0"]) == 2
    assert "--events must be > 0" in capsys.readouterr().err


def test_demo_refuses_an_existing_topic_of_a_cluster_it_did_not_start(kafka, kafka_topic,
                                                                       postgres, capsys):
    topic = kafka_topic(partitions=1, prefix="demo")
    kafka.produce(topic, [b"precious"] * 5)
    assert main(["demo", "--topic", topic, "--bootstrap-servers", kafka.bootstrap_servers,
                 "--dsn", postgres.dsn]) == 2
    err = capsys.readouterr().err
    assert f"topic {topic!r} exists on {kafka.bootstrap_servers}" in err
    assert "--recreate-topic" in err
    assert kafka.end_offsets(topic, [0])[0][1] == 5  # untouched


def test_demo_help_names_recreate_topic(capsys):
    import pytest

    with pytest.raises(SystemExit):
        main(["demo", "--help"])
    assert "--recreate-topic" in capsys.readouterr().out


def test_demo_options_repr_hides_the_dsn():
    from kafka_direct.app.demo import DemoOptions

    shown = repr(DemoOptions(dsn="host=db user=u password=Hunter2Demo", topic="t"))
    assert "Hunter2Demo" not in shown
    assert "topic='t'" in shown and "host=db" in shown
