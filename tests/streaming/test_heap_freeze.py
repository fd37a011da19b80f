"""The driver's heap at start is kept out of the garbage collector's full passes.

A full collection walks every object the collector tracks; with Spark's driver loaded that is
about 90,000 objects, 40-50 ms on a busy machine, run by whichever thread happens to cross
the collector's threshold: every several batches the generating thread. Objects alive when
the batches start (the graph, the streams' clients, Spark's and Py4J's modules) live as long
as the context; they are frozen at start, and let back at stop.
"""

import gc

from kafka_direct.heap import thaw_at_stop
from tests.streaming.helpers import Driver


def _tracked(obj):
    return any(o is obj for generation in range(3) for o in gc.get_objects(generation))


def test_objects_alive_at_start_leave_the_collections_until_stop(spark):
    thaw_at_stop()  # whatever an earlier test left frozen: this test's own is looked at
    gc.unfreeze()
    alive = [object(), {}]  # a container the collector tracks, made before the start
    assert _tracked(alive)
    driver = Driver(spark)
    driver.ssc.queueStream([[1]]).foreachRDD(lambda rdd: None)
    driver.start()
    try:
        assert gc.get_freeze_count() > 0
        assert not _tracked(alive)  # a full collection never walks it now
        gc.collect()
        assert not _tracked(alive)
    finally:
        driver.stop()
    assert gc.get_freeze_count() == 0  # let back: cycles among them may be collected again
    assert _tracked(alive)


def test_a_freeze_made_before_the_start_is_left_in_place(spark):
    thaw_at_stop()  # whatever an earlier test left frozen: this test's own is looked at
    gc.unfreeze()
    mine = [object()]
    gc.freeze()  # the application's own (before forking workers, say)
    try:
        driver = Driver(spark)
        driver.ssc.queueStream([[1]]).foreachRDD(lambda rdd: None)
        driver.start()
        driver.stop()
        assert not _tracked(mine)
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()
