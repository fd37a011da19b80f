"""reportLatestOffset: the JSON of the last latestOffset's latest, in every path."""

import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable

from kafka_direct.offsets_json import offsets_to_json
from tests.sql.source.test_source_stream_reader import (
    T0,
    T2,
    FakeClock,
    FakeLink,
    cluster_with,
    make_reader,
)


def oracle(reader):
    return offsets_to_json(reader._latest) if reader._latest is not None else None


@pytest.mark.parametrize("options", [
    {}, {"maxOffsetsPerTrigger": 4}, {"maxOffsetsFirstTrigger": 3},
    {"maxOffsetsPerPartitionPerTrigger": 2},
    {"minOffsetsPerTrigger": 5, "maxTriggerDelay": "10s"},
    {"failOnDataLoss": "false"},
])
def test_report_matches_the_latest_in_every_path(options):
    cluster = cluster_with()
    clock = FakeClock()
    reader = make_reader(cluster, clock=clock, **options)
    limit = reader.getDefaultReadLimit()
    start = reader.initialOffset()
    assert reader.reportLatestOffset() is None
    for step in range(8):
        if step == 2:
            cluster.add_partitions("t", 1)  # a changed partition set
        if step == 4 and options.get("failOnDataLoss") == "false":
            cluster.recreate("t", 2)
        cluster.produce(T0, step)
        if step >= 2 and step != 4:
            cluster.produce(T2, 1) if len(cluster.topics["t"]) > 2 else None
        end = reader.latestOffset(start, limit if step % 3 else ReadAllAvailable())
        report = reader.reportLatestOffset()
        assert report == oracle(reader), (step, end, report)
        clock.ms += 4_000
        start = end


def test_report_is_not_changed_by_a_caller_changing_the_returned_end():
    cluster = cluster_with()
    reader = make_reader(cluster)
    end = reader.latestOffset({"t": {"0": 0, "1": 0}}, ReadAllAvailable())
    end["t"]["0"] = 0  # the engine's own business: the source's report must not follow
    assert reader.reportLatestOffset() == {"t": {"0": 10, "1": 10}}


def test_catch_up_and_wait_paths_report_the_latest():
    cluster = cluster_with()
    link = FakeLink({"t": {"0": 8, "1": 8}})
    reader = make_reader(cluster, link=link)
    reader._link.hold = lambda: None
    end = reader.latestOffset({"t": {"0": 2, "1": 2}}, ReadAllAvailable())
    assert end == {"t": {"0": 8, "1": 8}}
    assert reader.reportLatestOffset() == oracle(reader)
