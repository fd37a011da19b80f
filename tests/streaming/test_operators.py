"""Stream operators batch by batch, on a ManualClock."""

import functools
import operator
import os

import pytest

from kafka_direct import ConfigurationError
from tests.streaming.helpers import Driver


def collect_each_batch(stream, sink, key=sorted):
    stream.foreachRDD(lambda rdd: sink.append(key(rdd.collect())))


def run(spark, batches, build, interval=1):
    driver = Driver(spark, batch_seconds=interval)
    outputs = build(driver.ssc)
    driver.start()
    try:
        driver.run(batches)
    finally:
        driver.stop()
    return outputs


def test_per_batch_transformations(spark):
    def build(ssc):
        s = ssc.queueStream([[1, 2, 3, 4], [5, 6], []])
        out = {name: [] for name in ("map", "flatMap", "filter", "mapPartitions", "glom",
                                     "repartition", "count", "reduce", "countByValue",
                                     "union", "transform", "withIndex")}
        collect_each_batch(s.map(lambda x: x + 1), out["map"])
        collect_each_batch(s.flatMap(lambda x: [x, x]), out["flatMap"])
        collect_each_batch(s.filter(lambda x: x % 2 == 0), out["filter"])
        collect_each_batch(s.mapPartitions(lambda it: [sum(it)]), out["mapPartitions"],
                           key=lambda xs: sum(xs))
        collect_each_batch(s.glom(), out["glom"], key=lambda parts: sorted(
            x for part in parts for x in part))
        s.repartition(3).foreachRDD(lambda rdd: out["repartition"].append(
            rdd.getNumPartitions()))
        collect_each_batch(s.count(), out["count"])
        collect_each_batch(s.reduce(operator.add), out["reduce"])
        collect_each_batch(s.map(lambda x: x % 2).countByValue(), out["countByValue"])
        collect_each_batch(s.union(s.map(lambda x: -x)), out["union"])
        collect_each_batch(s.transform(lambda t, rdd: rdd.map(lambda x: (t.second, x))),
                           out["transform"])
        collect_each_batch(s.mapPartitionsWithIndex(lambda i, it: [(i, len(list(it)))]),
                           out["withIndex"], key=lambda xs: sum(n for _, n in xs))
        return out

    out = run(spark, 3, build)
    assert out["map"] == [[2, 3, 4, 5], [6, 7], []]
    assert out["flatMap"] == [[1, 1, 2, 2, 3, 3, 4, 4], [5, 5, 6, 6], []]
    assert out["filter"] == [[2, 4], [6], []]
    assert out["mapPartitions"] == [10, 11, 0]
    assert out["glom"] == [[1, 2, 3, 4], [5, 6], []]
    assert out["repartition"] == [3, 3, 3]
    assert out["count"] == [[4], [2], [0]]
    assert out["reduce"] == [[10], [11], []]
    assert out["countByValue"] == [[(0, 2), (1, 2)], [(0, 1), (1, 1)], []]
    assert out["union"] == [[-4, -3, -2, -1, 1, 2, 3, 4], [-6, -5, 5, 6], []]
    assert out["transform"] == [[(1, 1), (1, 2), (1, 3), (1, 4)], [(2, 5), (2, 6)], []]
    assert out["withIndex"] == [4, 2, 0]


def test_pair_operators_and_joins(spark):
    def build(ssc):
        left = ssc.queueStream([[("a", 1), ("b", 2), ("a", 3)], [("c", 5)]])
        right = ssc.queueStream([[("a", "x"), ("d", "y")], [("c", "z")]])
        out = {k: [] for k in ("reduceByKey", "groupByKey", "combineByKey", "mapValues",
                               "flatMapValues", "join", "left", "right", "full", "cogroup",
                               "partitionBy", "transformWith")}
        collect_each_batch(left.reduceByKey(operator.add), out["reduceByKey"])
        collect_each_batch(left.groupByKey().mapValues(sorted), out["groupByKey"])
        collect_each_batch(left.combineByKey(lambda v: [v], lambda c, v: [*c, v],
                                             lambda a, b: a + b).mapValues(sorted),
                           out["combineByKey"])
        collect_each_batch(left.mapValues(lambda v: v * 10), out["mapValues"])
        collect_each_batch(left.flatMapValues(lambda v: range(v)), out["flatMapValues"],
                           key=len)
        collect_each_batch(left.join(right), out["join"])
        collect_each_batch(left.leftOuterJoin(right), out["left"])
        collect_each_batch(left.rightOuterJoin(right), out["right"])
        collect_each_batch(left.fullOuterJoin(right), out["full"])
        collect_each_batch(left.cogroup(right).mapValues(lambda p: (sorted(p[0]),
                                                                    sorted(p[1]))),
                           out["cogroup"])
        left.partitionBy(2).foreachRDD(lambda rdd: out["partitionBy"].append(
            rdd.getNumPartitions()))
        collect_each_batch(left.transformWith(lambda a, b: a.subtractByKey(b), right),
                           out["transformWith"])
        return out

    out = run(spark, 2, build)
    assert out["reduceByKey"] == [[("a", 4), ("b", 2)], [("c", 5)]]
    assert out["groupByKey"] == [[("a", [1, 3]), ("b", [2])], [("c", [5])]]
    assert out["combineByKey"] == out["groupByKey"]
    assert out["mapValues"] == [[("a", 10), ("a", 30), ("b", 20)], [("c", 50)]]
    assert out["flatMapValues"] == [6, 5]
    assert out["join"] == [[("a", (1, "x")), ("a", (3, "x"))], [("c", (5, "z"))]]
    assert out["left"] == [[("a", (1, "x")), ("a", (3, "x")), ("b", (2, None))],
                           [("c", (5, "z"))]]
    assert out["right"] == [[("a", (1, "x")), ("a", (3, "x")), ("d", (None, "y"))],
                            [("c", (5, "z"))]]
    assert out["full"] == [[("a", (1, "x")), ("a", (3, "x")), ("b", (2, None)),
                            ("d", (None, "y"))], [("c", (5, "z"))]]
    assert out["cogroup"] == [[("a", ([1, 3], ["x"])), ("b", ([2], [])), ("d", ([], ["y"]))],
                              [("c", ([5], ["z"]))]]
    assert out["partitionBy"] == [2, 2]
    assert out["transformWith"] == [[("b", 2)], []]


def test_functions_with_and_without_time_including_partials(spark):
    seen = []

    def record(tag, time, rdd):
        seen.append((tag, time.second, rdd.count()))

    def build(ssc):
        s = ssc.queueStream([[1, 2]])
        s.foreachRDD(functools.partial(record, "partial"))
        s.foreachRDD(lambda rdd: seen.append(("plain", None, rdd.count())))
        s.foreachRDD(lambda *args: seen.append(("explicit", args[0].second, args[1].count())),
                     withTime=True)
        return seen

    run(spark, 1, build)
    assert sorted(seen, key=str) == sorted([("partial", 1, 2), ("plain", None, 2),
                                            ("explicit", 1, 2)], key=str)


def test_context_union_transform_and_slice(spark):
    captured = {}

    def build(ssc):
        a = ssc.queueStream([[1], [2], [3]])
        b = ssc.queueStream([[10], [20], [30]])
        out = {"union": [], "transform": []}
        collect_each_batch(ssc.union(a, b), out["union"])
        collect_each_batch(ssc.transform([a, b], lambda rdds: rdds[0].cartesian(rdds[1])),
                           out["transform"])
        a.persist()
        a.foreachRDD(lambda t, rdd: captured.setdefault("stream", a))
        ssc.remember(10)
        return out

    driver = Driver(spark)
    out = build(driver.ssc)
    driver.start()
    driver.run(3)
    from datetime import datetime
    sliced = captured["stream"].slice(datetime.fromtimestamp(1.0), datetime.fromtimestamp(2.5))
    driver.stop()
    assert out["union"] == [[1, 10], [2, 20], [3, 30]]
    assert out["transform"] == [[(1, 10)], [(2, 20)], [(3, 30)]]
    assert [rdd.collect() for rdd in sliced] == [[1], [2]]


def test_pprint_prints_pysparks_format(spark, capsys):
    def build(ssc):
        ssc.queueStream([list(range(12)), [1]]).pprint(10)

    run(spark, 2, build)
    out = capsys.readouterr().out
    from datetime import datetime
    first = "\n".join(["-------------------------------------------",
                       f"Time: {datetime.fromtimestamp(1)}",
                       "-------------------------------------------",
                       *[str(i) for i in range(10)], "...", ""])
    assert first in out
    assert f"Time: {datetime.fromtimestamp(2)}\n-------------------------------------------\n1\n" \
        in out


def test_save_as_text_files_uses_sparks_file_names(spark, tmp_path):
    prefix = str(tmp_path / "out")

    def build(ssc):
        ssc.queueStream([["a", "b"], ["c"]]).saveAsTextFiles(prefix, "txt")

    run(spark, 2, build)
    assert sorted(os.listdir(tmp_path)) == ["out-1000.txt", "out-2000.txt"]
    text = "".join((tmp_path / "out-1000.txt" / f).read_text()
                   for f in os.listdir(tmp_path / "out-1000.txt") if f.startswith("part-"))
    assert sorted(text.split()) == ["a", "b"]


def test_operators_reject_bad_arguments(spark):
    driver = Driver(spark)
    s = driver.ssc.queueStream([[1]])
    with pytest.raises(ConfigurationError, match="multiple of the slide duration of parent"):
        s.window(1.5)
    with pytest.raises(ConfigurationError, match="slide duration of windowed DStream"):
        s.window(4, 1.5)
    with pytest.raises(ConfigurationError, match="windowDuration"):
        s.window(0)
    with pytest.raises(ConfigurationError, match="pprint needs num > 0"):
        s.pprint(0)
    with pytest.raises(ConfigurationError, match="different slide durations"):
        s.union(s.window(2, 2))
    driver.stop()
