"""The few places where kafka-direct reaches into PySpark and its JVM.

* :func:`ensure_pyspark_python`: executors start ``python3`` from PATH unless told
  otherwise, which may lack confluent-kafka; point them at this interpreter.
* :func:`live_executors`: the executors the scheduler has now (the driver excluded).
* :func:`located_rdd`: an RDD with one element per partition and real Spark preferred
  locations, built through the JVM's ``SparkContext.makeRDD(Seq[(T, Seq[String])])`` since
  PySpark has no Python API for preferred locations.
"""

from __future__ import annotations

import base64
import functools
import io
import logging
import operator
import os
import pickle
import struct
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import chain, repeat
from typing import Any, cast

from kafka_direct.rdd.location_strategy import ExecutorLocation

__all__ = ["ensure_pyspark_python", "live_executors", "located_rdd"]

logger = logging.getLogger(__name__)


def ensure_pyspark_python() -> None:
    """Make executors use this interpreter unless PYSPARK_PYTHON is already set.

    Must run before the SparkContext starts; it only sets the environment variable.
    """
    if not os.environ.get("PYSPARK_PYTHON"):
        os.environ["PYSPARK_PYTHON"] = sys.executable
        logger.debug("PYSPARK_PYTHON set to %s", sys.executable)


def live_executors(sc: Any) -> list[ExecutorLocation]:
    """The live executors of ``sc`` (host and id), the driver excluded.

    In local mode the driver runs the tasks and this is empty: no preferences are needed.
    It is asked without the JVM there (the status store's listing is a few Py4J calls, a
    millisecond of each batch's planning).
    """
    master = getattr(sc, "master", None)
    if isinstance(master, str) and (master == "local" or master.startswith("local[")):
        return []
    try:
        summaries = sc._jsc.sc().statusStore().executorList(True)
        found = []
        for i in range(summaries.size()):
            summary = summaries.apply(i)
            executor_id = str(summary.id())
            if executor_id == "driver":
                continue
            host = str(summary.hostPort()).rsplit(":", 1)[0]
            found.append(ExecutorLocation(host, executor_id))
        return sorted(found)
    except Exception as error:
        logger.warning("cannot list live executors (%s); tasks get no preferred location",
                       error)
        return []


def _scala_seq(jvm: Any, items: Sequence[Any]) -> Any:
    java_list = jvm.java.util.ArrayList()
    for item in items:
        java_list.add(item)
    try:  # Scala 2.13 (Spark 4)
        return jvm.scala.jdk.javaapi.CollectionConverters.asScala(java_list).toSeq()
    except Exception:
        return jvm.scala.collection.JavaConverters.asScalaBufferConverter(
            java_list).asScala().toSeq()


def _parallelize(sc: Any, elements: list[Any]) -> Any:
    """``sc.parallelize(elements, len(elements))``, pickled with the standard pickle.

    PySpark's own pickles each element with cloudpickle, one Pickler a partition: with a
    thousand offset ranges a batch that is most of the driver's planning time. Elements
    here are instances of importable classes, which the standard pickle handles.

    The frames reach the JVM as the bytes of one call, read there from memory. PySpark
    writes them to a file that the JVM reads through an unbuffered stream: a read call of
    the operating system per frame and per length, thousands a batch of a thousand ranges,
    and most of the JVM's part of its planning.
    """
    from pyspark.serializers import BatchedSerializer, PickleSerializer

    slices = len(elements)
    serializer = BatchedSerializer(PickleSerializer(), 1)  # type: ignore[no-untyped-call]
    frames = io.BytesIO()
    _FramesInOneWrite().dump_stream(elements, frames)
    jvm = _jvm_reader(sc)
    jrdd = jvm.read(jvm.context, jvm.stream(frames.getvalue()), slices)
    return _parallel_rdd_class()(jrdd, sc, serializer)


@dataclass(frozen=True, slots=True)
class _JvmReader:
    """What the JVM reads a parallelized collection with, looked up once per SparkContext.

    Py4J looks a class and its method up with a round trip to the JVM each, every time
    they are named.

    Attributes:
        context: The JVM's SparkContext.
        stream: ``java.io.ByteArrayInputStream``'s constructor.
        read: ``PythonRDD.readRDDFromInputStream(SparkContext, InputStream, int)``.
    """

    context: Any
    stream: Any
    read: Any

    def __post_init__(self) -> None:
        if not all(callable(member) for member in (self.stream, self.read)):
            raise TypeError("the JVM's stream constructor and reader must be callable")


def _jvm_reader(sc: Any) -> _JvmReader:
    reader = getattr(sc, "_kafka_direct_jvm_reader", None)
    if reader is None:
        jvm = sc._jvm
        reader = _JvmReader(sc._jsc.sc(), jvm.java.io.ByteArrayInputStream,
                            jvm.org.apache.spark.api.python.PythonRDD.readRDDFromInputStream)
        sc._kafka_direct_jvm_reader = reader
    return reader


@functools.cache
def _parallel_rdd_class() -> type:
    """PySpark's ``RDD`` over a parallelized collection, without two needless JVM calls.

    PySpark's constructor asks the JVM for the RDD's id at once, and the KafkaRDD over it
    whether it is a barrier stage (two calls); each is a round trip to the JVM in a
    batch's planning. The id is asked when first wanted; a parallelized collection is
    never a barrier stage.
    """
    from pyspark import RDD

    class ParallelRDD(RDD):  # type: ignore[type-arg]
        def __init__(self, jrdd: Any, ctx: Any, jrdd_deserializer: Any) -> None:
            self._jrdd = jrdd
            self.is_cached = False
            self.is_checkpointed = False
            self.has_resource_profile = False
            self.ctx = ctx
            self._jrdd_deserializer = jrdd_deserializer
            self._id = None
            self.partitioner = None

        def id(self) -> int:
            if self._id is None:
                self._id = self._jrdd.id()
            return int(self._id)

        def _is_barrier(self) -> bool:
            return False

    return ParallelRDD


class _FramesInOneWrite:
    """Writes what ``BatchedSerializer(PickleSerializer(), 1)`` writes, in one write.

    Each element is a frame: its length (4 bytes, big-endian), then the pickle of a list
    holding it, which that serializer reads back. PySpark's own writes each length and
    each pickle apart: two thirds of the Python time of a thousand ranges. Elements that
    are all ranges' ``(topic, partition, from, until)`` are written by :func:`_range_frames`.
    """

    def dump_stream(self, iterator: Iterable[Any], stream: Any) -> None:
        elements = list(iterator)
        ranges = _range_frames(elements)
        if ranges is not None:
            stream.write(ranges)
            return
        frames = []
        for element in elements:
            body = pickle.dumps([element], protocol=pickle.HIGHEST_PROTOCOL)
            frames.append(_LENGTH.pack(len(body)))
            frames.append(body)
        stream.write(b"".join(frames))


_LENGTH = struct.Struct(">i")

# A range's frame, opcode by opcode (a pickle any Python 3 reads; the protocol opcode is
# optional): EMPTY_LIST, MARK, the topic (SHORT_BINUNICODE or BINUNICODE), the partition
# (BININT1, BININT2, BININT or an 8-byte LONG1, the shortest that holds it), the two offsets
# (4-byte BININT when every offset of the batch fits, else 8-byte LONG1), TUPLE, APPEND,
# STOP. The bytes cross Py4J as base64 that the JVM decodes at about 30 ns a byte, so they
# are kept short. The head up to the offsets is the same batch after batch; only the
# offsets are new.
_OPEN = b"]("
_SHORT_OFFSETS = struct.Struct("<cici3s")
_LONG_OFFSETS = struct.Struct("<2sq2sq3s")
_BININT, _LONG8 = b"J", b"\x8a\x08"
_CLOSE = b"ta."
_INT32 = 1 << 31

#: Per partition, the head of its frame (its length included) for short and long offsets,
#: made once per process.
_heads: dict[tuple[str, int], tuple[bytes, bytes]] = {}
#: Heads kept at most (a pattern subscription's topics come and go).
_MAX_HEADS = 100_000


def _range_frames(elements: list[Any]) -> bytes | None:
    """The frames of ``elements`` when all are ``(str, int, int, int)`` tuples, else None.

    What ``pickle.dumps([element])`` makes of each (the same objects when read back), in
    C loops over the batch: a topic and partition's part is made once and kept.
    """
    if not elements or set(map(type, elements)) != {tuple} or set(map(len, elements)) != {4}:
        return None
    topics, partitions, froms, untils = zip(*elements, strict=True)
    if set(map(type, topics)) != {str} or set(map(type, partitions + froms + untils)) != {int}:
        return None
    short = min(min(froms), min(untils)) >= -_INT32 and max(max(froms), max(untils)) < _INT32
    keys = list(zip(topics, partitions, strict=True))
    kept = list(map(_heads.get, keys))
    if None in kept:  # a partition not seen before (or heads dropped): its head made now
        try:
            pairs = [pair if pair is not None else _head(*key)
                     for pair, key in zip(kept, keys, strict=True)]
        except struct.error:  # a partition beyond int64: pickled as any element
            return None
        new = {key: pair for key, pair, old in zip(keys, pairs, kept, strict=True)
               if old is None}
        if len(_heads) + len(new) > _MAX_HEADS:
            _heads.clear()  # the old heads go first: a batch's own are the likely next
        if len(new) <= _MAX_HEADS:
            _heads.update(new)
    else:
        pairs = cast(list[tuple[bytes, bytes]], kept)
    try:
        if short:
            offsets = list(map(_SHORT_OFFSETS.pack, repeat(_BININT), froms, repeat(_BININT),
                               untils, repeat(_CLOSE)))
        else:
            offsets = list(map(_LONG_OFFSETS.pack, repeat(_LONG8), froms, repeat(_LONG8),
                               untils, repeat(_CLOSE)))
    except struct.error:  # an offset beyond int64: pickled as any element
        return None
    heads = map(operator.itemgetter(0 if short else 1), pairs)
    return b"".join(chain.from_iterable(zip(heads, offsets, strict=True)))


def _head(topic: str, partition: int) -> tuple[bytes, bytes]:
    """A partition's frame length and pickle up to the offsets, for short and long ones.

    Raises:
        struct.error: The partition is beyond int64.
    """
    text = topic.encode("utf-8", "surrogatepass")
    name = (b"\x8c" + bytes([len(text)]) if len(text) < 256
            else b"X" + struct.pack("<I", len(text))) + text
    if 0 <= partition < 256:
        number = b"K" + bytes([partition])
    elif 0 <= partition < 65536:
        number = b"M" + struct.pack("<H", partition)
    elif -_INT32 <= partition < _INT32:
        number = b"J" + struct.pack("<i", partition)
    else:
        number = b"\x8a\x08" + struct.pack("<q", partition)
    body = _OPEN + name + number
    return (_LENGTH.pack(len(body) + _SHORT_OFFSETS.size) + body,
            _LENGTH.pack(len(body) + _LONG_OFFSETS.size) + body)


def located_rdd(sc: Any, elements: Sequence[Any], locations: Sequence[Sequence[str]]) -> Any:
    """An RDD with partition ``i`` holding only ``elements[i]``, preferring ``locations[i]``.

    Without any preference it is a plain ``parallelize``; with some, the partitions carry
    the given task locations as Spark preferred locations, so the scheduler sees them.

    The JVM gets the elements (pickled, in base64) and the hosts as one text each, split
    there: a Py4J call per element (a ``Tuple2``, a ``Seq`` of hosts) cost 8-9 s for a
    thousand partitions, a batch's planning on any cluster with executors. Partitions are
    built in runs of equally many locations (``grouped(k)`` pairs each element with its k
    hosts); runs are one or two in practice, as every strategy gives a partition zero or one
    location, and many runs fall back to a call per element.
    """
    from pyspark import RDD
    from pyspark.serializers import UTF8Deserializer

    if not elements:
        return sc.emptyRDD()
    if len(locations) != len(elements):
        raise ValueError(f"{len(elements)} elements but {len(locations)} location lists")
    if not any(locations):
        return _parallelize(sc, list(elements))
    runs = _runs(locations)
    if len(runs) > _MAX_RUNS or not _splittable(locations):
        return _located_one_by_one(sc, elements, locations)
    pieces: list[Any] = [RDD(_run_rdd(sc, elements[start:end], locations[start:end], k), sc,
                  UTF8Deserializer())  # type: ignore[no-untyped-call]
              for start, end, k in runs]
    texts = pieces[0] if len(pieces) == 1 else sc.union(pieces)
    return texts.map(_unpickle)


#: Runs of partitions with as many locations each, above which one call per element it is.
_MAX_RUNS = 16
_SEPARATOR = "\n"


def _runs(locations: Sequence[Sequence[str]]) -> list[tuple[int, int, int]]:
    """``(start, end, k)``: consecutive partitions with k locations each."""
    runs: list[tuple[int, int, int]] = []
    for index, hosts in enumerate(locations):
        if runs and runs[-1][2] == len(hosts):
            runs[-1] = (runs[-1][0], index + 1, len(hosts))
        else:
            runs.append((index, index + 1, len(hosts)))
    return runs


def _splittable(locations: Sequence[Sequence[str]]) -> bool:
    # A host with the separator in it, or empty (split would drop or merge it), cannot
    # travel in the joined text; Spark's task locations never are.
    return all(host and _SEPARATOR not in host for hosts in locations for host in hosts)


def _run_rdd(sc: Any, elements: Sequence[Any], locations: Sequence[Sequence[str]],
             k: int) -> Any:
    """A JVM ``RDD[String]`` of ``elements`` (base64 pickles), each with its k hosts.

    Only calls that Scala 2.12 (Spark 3.5) and 2.13 (Spark 4) both have: a Java list made a
    Scala ``List``, ``grouped``, and ``Iterator.zip`` (``List.zip`` needs an implicit
    builder on 2.12).
    """
    jvm = sc._jvm
    texts = _SEPARATOR.join(
        base64.b64encode(pickle.dumps(e, protocol=pickle.HIGHEST_PROTOCOL)).decode("ascii")
        for e in elements)
    split = jvm.java.util.regex.Pattern.compile(_SEPARATOR)
    to_list = jvm.java.util.stream.Collectors.toList()
    items = _scala_list(jvm, split.splitAsStream(texts).collect(to_list))
    string = jvm.scala.reflect.ClassTag.apply(jvm.java.lang.Class.forName("java.lang.String"))
    if k == 0:
        scala_rdd = sc._jsc.sc().makeRDD(items, len(elements), string)
    else:
        hosts = _scala_list(jvm, split.splitAsStream(
            _SEPARATOR.join(h for hs in locations for h in hs)).collect(to_list))
        pairs = items.iterator().zip(hosts.grouped(k)).toList()
        scala_rdd = sc._jsc.sc().makeRDD(pairs, string)
    return jvm.org.apache.spark.api.java.JavaRDD.fromRDD(scala_rdd, string)


def _scala_list(jvm: Any, java_list: Any) -> Any:
    """A Java list as a Scala immutable ``List`` (Scala 2.13, else 2.12)."""
    try:
        return jvm.scala.jdk.javaapi.CollectionConverters.asScala(java_list).toList()
    except Exception:
        return jvm.scala.collection.JavaConverters.asScalaBufferConverter(
            java_list).asScala().toList()


def _unpickle(text: str) -> Any:
    # Trusted: the driver's own pickle of an element it was given (an offset range), sent
    # through the JVM; never text from a record or a task failure.
    return pickle.loads(base64.b64decode(text))


def _located_one_by_one(sc: Any, elements: Sequence[Any],
                        locations: Sequence[Sequence[str]]) -> Any:
    from pyspark import RDD
    from pyspark.serializers import CPickleSerializer

    jvm = sc._jvm
    pairs = [
        jvm.scala.Tuple2(bytearray(pickle.dumps(element, protocol=pickle.HIGHEST_PROTOCOL)),
                         _scala_seq(jvm, list(hosts)))
        for element, hosts in zip(elements, locations, strict=True)
    ]
    byte_array = jvm.scala.reflect.ClassTag.apply(jvm.java.lang.Class.forName("[B"))
    scala_rdd = sc._jsc.sc().makeRDD(_scala_seq(jvm, pairs), byte_array)
    java_rdd = jvm.org.apache.spark.api.java.JavaRDD.fromRDD(scala_rdd, byte_array)
    return RDD(java_rdd, sc, CPickleSerializer())
