"""The source's planner process keeps its long-lived heap out of full garbage collections.

Spark runs a streaming source's planning in a Python process of its own for the query's
life. Its heap (PySpark, pyarrow, the reader's clients) is walked by every full collection,
which lands in whichever trigger crosses the collector's threshold; once the first trigger
ran, those objects are frozen out of the collections until the reader stops.
"""

import gc
import json

from pyspark.sql.streaming.datasource import ReadAllAvailable

from kafka_direct.heap import thaw_at_stop
from tests.fakes.confluent_clients import CountingCluster
from tests.sql.source.test_source_round_trips import counting_reader


def test_the_heap_at_the_first_trigger_leaves_the_collections_until_the_reader_stops():
    thaw_at_stop()  # whatever an earlier test left frozen: this test's own is looked at
    gc.unfreeze()
    cluster = CountingCluster()
    reader = counting_reader(cluster)
    try:
        start = json.loads(json.dumps(reader.initialOffset()))
        assert gc.get_freeze_count() == 0
        for _ in range(2):
            cluster.end += 3
            end = json.loads(json.dumps(reader.latestOffset(start, ReadAllAvailable())))
            reader.partitions(start, end)
            start = end
            assert gc.get_freeze_count() > 0
        alive = reader.metadata  # made before the first trigger, alive as long as the reader
        assert not any(o is alive for o in gc.get_objects())
    finally:
        reader.stop()
    assert gc.get_freeze_count() == 0


def test_a_trigger_after_the_first_does_not_count_the_frozen_heap(monkeypatch):
    # gc.get_freeze_count() walks every frozen object: milliseconds a trigger at 100,000.
    thaw_at_stop()
    gc.unfreeze()
    cluster = CountingCluster()
    reader = counting_reader(cluster)
    try:
        start = json.loads(json.dumps(reader.initialOffset()))
        end = json.loads(json.dumps(reader.latestOffset(start, ReadAllAvailable())))
        counted = []
        monkeypatch.setattr(gc, "get_freeze_count", lambda: counted.append(1) or 1)
        for _ in range(3):
            cluster.end += 1
            start, end = end, json.loads(json.dumps(reader.latestOffset(end,
                                                                        ReadAllAvailable())))
        monkeypatch.undo()
        assert counted == []
    finally:
        reader.stop()
