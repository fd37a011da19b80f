"""The planning bench's figures: which triggers count, the percentile, the peers' answer.

A trigger counted twice, the source's first batch or an empty trigger counted, or a peer's
line misread would put a wrong figure beside the target of 10 ms.
"""

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[2] / "bench"))

import planning_scale
import planning_support


class FakeClock:
    """``time`` for trigger_planning: sleeping advances the monotonic clock at once."""

    def __init__(self):
        self.now = 0.0

    def monotonic(self):
        return self.now

    def sleep(self, seconds):
        self.now += seconds


class FakeQuery:
    """A query whose progress grows by one listed round at each look."""

    def __init__(self, rounds):
        self.rounds = rounds
        self.looks = 0

    @property
    def recentProgress(self):  # PySpark's name
        self.looks += 1
        return [p for round_ in self.rounds[:self.looks] for p in round_]


def progress(batch, rows, latest, planning):
    return {"batchId": batch, "numInputRows": rows,
            "durationMs": {"latestOffset": latest, "queryPlanning": planning,
                           "triggerExecution": 500}}


def test_only_later_triggers_that_read_rows_count_once_each(monkeypatch):
    monkeypatch.setattr(planning_support, "time", FakeClock())
    query = FakeQuery([[progress(0, 8, 900, 100), progress(1, 8, 10, 5)],
                       [progress(2, 0, 3, 3)],  # an empty trigger
                       [progress(3, 8, 20, 7)],
                       [progress(4, 8, 1, 1), progress(5, 8, 2, 2)]])
    fed = []
    planning = planning_support.trigger_planning(query, 3, lambda: fed.append(1), timeout=60)
    # Each look lists every earlier trigger again: none counts twice.
    assert planning == [15, 27, 2]
    assert len(fed) == query.looks == 4


def test_a_missing_duration_counts_as_none_and_the_wait_ends_at_the_timeout(monkeypatch):
    clock = FakeClock()
    monkeypatch.setattr(planning_support, "time", clock)
    query = FakeQuery([[{"batchId": 1, "numInputRows": 3, "durationMs": {"queryPlanning": 4}}]])
    assert planning_support.trigger_planning(query, 5, lambda: None, timeout=10) == [4]
    assert clock.now == pytest.approx(10)


def test_a_trigger_whose_rows_are_not_read_counts_when_its_offsets_moved(monkeypatch):
    monkeypatch.setattr(planning_support, "time", FakeClock())
    moved = {**progress(1, 0, 30, 8), "sources": [{"startOffset": '{"t":{"0":1}}',
                                                    "endOffset": '{"t":{"0":2}}'}]}
    still = {**progress(2, 0, 5, 5), "sources": [{"startOffset": '{"t":{"0":2}}',
                                                   "endOffset": '{"t":{"0":2}}'}]}
    first = {**progress(3, 0, 6, 6), "sources": [{"startOffset": None,
                                                   "endOffset": '{"t":{"0":2}}'}]}
    unknown = {**progress(4, 0, 7, 7), "sources": [{"startOffset": None, "endOffset": None}]}
    query = FakeQuery([[moved, still, first, unknown]])
    assert planning_support.trigger_planning(query, 5, lambda: None, timeout=2) == [38, 12]


def test_percentile95_is_the_nearest_rank():
    assert planning_support.percentile95(list(range(20, 0, -1))) == 19
    assert planning_support.percentile95([7.5]) == 7.5
    with pytest.raises(ValueError, match="no batch"):
        planning_support.percentile95([])


def test_summary_line_names_p50_p95_max_and_cpu_only_when_measured():
    line = planning_support.summary_line("JVM kafka source, 1000 partitions",
                                         [float(v) for v in range(1, 21)])
    assert line.startswith("JVM kafka source, 1000 partitions")
    assert "p50    10.5 ms" in line and "p95    19.0 ms" in line
    assert "max    20.0 ms" in line and "(20 batches)" in line and "CPU" not in line
    line = planning_support.summary_line("x", [1.0, 2.0], [3.0, 5.0])
    assert "CPU/batch p50   4.0 ms p95   5.0 ms" in line


def test_peer_lines_are_read_from_the_last_result_line():
    answer = {"spark": "4.2.0", "lines": [
        {"label": "JVM kafka source, 1000 partitions", "ms": [12, 30], "cpu": []},
        {"label": "JVM direct stream, 1000 partitions", "ms": [9.5], "cpu": [4.25]}]}
    stdout = ("-------\nTime: 1000 ms\n...\nRESULT {\"lines\": []}\n"
              + planning_support.RESULT + json.dumps(answer) + "\n")
    assert planning_support.peer_lines(stdout) == [
        {"label": "JVM kafka source, 1000 partitions", "ms": [12.0, 30.0], "cpu": []},
        {"label": "JVM direct stream, 1000 partitions", "ms": [9.5], "cpu": [4.25]}]


@pytest.mark.parametrize("stdout", ["Time: 1000 ms\n", "RESULT {\"lines\": [{\"ms\": []}]}\n",
                                    "RESULT [1, 2]\n"])
def test_a_peers_answer_missing_or_of_another_shape_is_refused(stdout):
    with pytest.raises(ValueError, match="RESULT"):
        planning_support.peer_lines(stdout)


def test_the_peers_are_off_by_default_and_sizes_are_checked(capsys):
    args = planning_scale.arguments([])
    assert (args.topics, args.partitions, args.batches, args.peers) == (10, 100, 20, False)
    assert planning_scale.arguments(["--peers", "--batches", "5"]).peers
    with pytest.raises(SystemExit):
        planning_scale.arguments(["--batches", "0"])
    assert "--batches must be at least 1" in capsys.readouterr().err


def test_peers_whose_connectors_cannot_be_resolved_stop_the_bench_before_it_measures(
        monkeypatch):
    from kafka_direct.errors import ServiceError
    from kafka_direct.testing import jvm_peers

    def unresolved(version):
        raise ServiceError(f"Spark {version}'s Kafka connectors: no repository answered")

    monkeypatch.setattr(jvm_peers, "spark_kafka_jars", unresolved)
    with pytest.raises(SystemExit, match=r"--peers: .* nothing was measured: .*no repository"):
        planning_scale.prepare_peers()
