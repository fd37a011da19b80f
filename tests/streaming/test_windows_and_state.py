"""Windowed and stateful operators, checked against the batches they cover."""

import operator

import pytest

from kafka_direct import ConfigurationError
from tests.streaming.helpers import Driver, ScriptedInputDStream

BATCHES = [[("a", 1), ("b", 1)], [("a", 1)], [("c", 2), ("a", 1)], [], [("b", 5)],
           [("a", 1)], [("c", 1)], [], [("a", 2)], [("b", 1)], [("a", 1)], []]


def expected_windows(window_batches, slide_batches, combine):
    """What each window holds, computed from the batch list itself."""
    results = []
    for end in range(slide_batches, len(BATCHES) + 1, slide_batches):
        pairs = [p for batch in BATCHES[max(0, end - window_batches):end] for p in batch]
        results.append(combine(pairs))
    return results


def sums(pairs):
    totals = {}
    for k, v in pairs:
        totals[k] = totals.get(k, 0) + v
    return sorted(totals.items())


def run(spark, build, batches=None, checkpoint=None):
    batches = len(BATCHES) if batches is None else batches
    driver = Driver(spark)
    if checkpoint is not None:
        driver.ssc.checkpoint(str(checkpoint))
    out = build(driver.ssc)
    driver.start()
    try:
        driver.run(batches)
    finally:
        driver.stop()
    return out


def test_window_unions_the_batches_of_the_window(spark):
    def build(ssc):
        out = []
        ScriptedInputDStream(ssc, BATCHES).window(3, 2).foreachRDD(
            lambda rdd: out.append(sorted(rdd.collect())))
        return out

    assert run(spark, build) == expected_windows(3, 2, sorted)


@pytest.mark.parametrize("window,slide", [(3, 1), (6, 1), (6, 2)])
def test_reduce_by_key_and_window_with_and_without_inverse_agree(spark, tmp_path, window,
                                                                 slide):
    def build(ssc):
        plain, incremental = [], []
        stream = ScriptedInputDStream(ssc, BATCHES)
        stream.reduceByKeyAndWindow(operator.add, None, window, slide).foreachRDD(
            lambda rdd: plain.append(sorted(rdd.collect())))
        stream.reduceByKeyAndWindow(operator.add, operator.sub, window, slide,
                                    filterFunc=lambda kv: kv[1] > 0).foreachRDD(
            lambda rdd: incremental.append(sorted(rdd.collect())))
        return plain, incremental

    plain, incremental = run(spark, build, checkpoint=tmp_path)
    assert plain == expected_windows(window, slide, sums)
    assert incremental == plain


def test_count_by_window_reduce_by_window_and_count_by_value_and_window(spark, tmp_path):
    def build(ssc):
        out = {"count": [], "reduce": [], "values": [], "groups": []}
        values = ScriptedInputDStream(ssc, BATCHES).map(lambda kv: kv[1])
        values.countByWindow(3, 1).foreachRDD(lambda rdd: out["count"].append(rdd.collect()))
        values.reduceByWindow(operator.add, operator.sub, 3, 1).foreachRDD(
            lambda rdd: out["reduce"].append(rdd.collect()))
        keys = ScriptedInputDStream(ssc, BATCHES).map(lambda kv: kv[0])
        keys.countByValueAndWindow(3, 1).foreachRDD(
            lambda rdd: out["values"].append(sorted(rdd.collect())))
        ScriptedInputDStream(ssc, BATCHES).groupByKeyAndWindow(3, 1).foreachRDD(
            lambda rdd: out["groups"].append(sorted((k, sorted(v)) for k, v in rdd.collect())))
        return out

    out = run(spark, build, checkpoint=tmp_path)
    assert out["count"] == [[n] for n in expected_windows(3, 1, len)]
    assert out["reduce"] == [[sum(v for _, v in pairs)] if pairs else [0]
                             for pairs in expected_windows(3, 1, list)]
    assert out["values"] == expected_windows(
        3, 1, lambda pairs: sums([(k, 1) for k, _ in pairs]))
    assert out["groups"] == expected_windows(3, 1, lambda pairs: sorted(
        (k, sorted(v for kk, v in pairs if kk == k)) for k in {k for k, _ in pairs}))


def test_update_state_by_key_with_an_initial_rdd(spark, tmp_path):
    def update(values, state):
        total = (state or 0) + sum(values)
        return None if total >= 8 else total  # keys reaching 8 are dropped

    def build(ssc):
        out = []
        initial = ssc.sparkContext.parallelize([("a", 0), ("z", 3)])
        stream = ScriptedInputDStream(ssc, BATCHES[:6])
        stream.updateStateByKey(update, initialRDD=initial).foreachRDD(
            lambda rdd: out.append(sorted(rdd.collect())))
        return out

    out = run(spark, build, batches=6, checkpoint=tmp_path)
    state = {"a": 0, "z": 3}
    expected = []
    for batch in BATCHES[:6]:
        keys = set(state) | {k for k, _ in batch}
        new = {}
        for k in keys:
            total = state.get(k, 0) + sum(v for kk, v in batch if kk == k)
            if total < 8:
                new[k] = total
        state = new
        expected.append(sorted(state.items()))
    assert out == expected


def test_stateful_operators_need_a_checkpoint_directory(spark, monkeypatch):
    # Neither the streaming context's nor the SparkContext's (another test may have set it).
    monkeypatch.setattr(spark, "getCheckpointDir", lambda: None)
    driver = Driver(spark)
    driver.ssc.queueStream([[("a", 1)]]).updateStateByKey(
        lambda vs, s: sum(vs)).foreachRDD(lambda rdd: None)
    with pytest.raises(ConfigurationError, match="checkpoint directory has not been set"):
        driver.start()
    driver.stop()
