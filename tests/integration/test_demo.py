"""The main job: `kafka-direct demo` on a broker of its own or a given one."""

import re
import subprocess
import sys

from kafka_direct.cli import main


def test_demo_reads_every_produced_event_once_in_range_batches(kafka):
    done = subprocess.run(
        [sys.executable, "-m", "kafka_direct.cli", "demo", "--events", "1200",
         "--batch-size", "250", "--topic", "demo-test", "--bootstrap-servers",
         kafka.bootstrap_servers],
        capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout
    assert "produced 1200 events into demo-test (3 partitions)" in out
    assert "read 1200 of 1200 events" in out and "0 duplicates" in out
    ranges = re.findall(r"partition: (\d+), range: \[(\d+) -> (\d+)\]\)  records: (\d+)", out)
    assert ranges
    ends = {}
    for partition, start, end, records in ranges:
        start, end, records = int(start), int(end), int(records)
        assert end - start <= 250
        assert records == end - start  # no gaps in a plain topic
        assert ends.get(partition, 0) == start  # contiguous batches
        ends[partition] = end
    assert sum(ends.values()) == 1200


def test_demo_rejects_bad_arguments(capsys):
    assert main(["demo", "--events", "0"]) == 2
    assert "--events must be > 0" in capsys.readouterr().err
