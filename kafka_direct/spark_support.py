"""The few places where kafka-direct reaches into PySpark and its JVM.

* :func:`ensure_pyspark_python`: executors start ``python3`` from PATH unless told
  otherwise, which may lack confluent-kafka; point them at this interpreter.
* :func:`live_executors`: the executors the scheduler has now (the driver excluded).
* :func:`located_rdd`: an RDD with one element per partition and real Spark preferred
  locations, built through the JVM's ``SparkContext.makeRDD(Seq[(T, Seq[String])])`` since
  PySpark has no Python API for preferred locations.
"""

from __future__ import annotations

import logging
import os
import pickle
import sys
from collections.abc import Sequence
from typing import Any

from kafka_direct.location_strategy import ExecutorLocation

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
    """
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
    """
    from pyspark import RDD
    from pyspark.serializers import BatchedSerializer, PickleSerializer

    slices = len(elements)
    serializer = BatchedSerializer(PickleSerializer(), 1)  # type: ignore[no-untyped-call]
    jrdd = sc._serialize_to_jvm(
        elements, serializer,
        lambda path: sc._jvm.PythonRDD.readRDDFromFile(sc._jsc, path, slices),
        lambda: sc._jvm.PythonParallelizeServer(sc._jsc.sc(), slices))
    return RDD(jrdd, sc, serializer)


def located_rdd(sc: Any, elements: Sequence[Any], locations: Sequence[Sequence[str]]) -> Any:
    """An RDD with partition ``i`` holding only ``elements[i]``, preferring ``locations[i]``.

    Without any preference it is a plain ``parallelize``; with some, the partitions carry
    the given task locations as Spark preferred locations, so the scheduler sees them.
    """
    from pyspark import RDD
    from pyspark.serializers import CPickleSerializer

    if not elements:
        return sc.emptyRDD()
    if not any(locations):
        return _parallelize(sc, list(elements))
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
