#
# Licensed to the Apache Software Foundation (ASF) under one or more
# contributor license agreements.  See the NOTICE file distributed with
# this work for additional information regarding copyright ownership.
# The ASF licenses this file to You under the Apache License, Version 2.0
# (the "License"); you may not use this file except in compliance with
# the License.  You may obtain a copy of the License at
#
# http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS,
# WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
# See the License for the specific language governing permissions and
# limitations under the License.
#
# ruff: noqa: SIM108  (Apache Spark's code, kept as it is)
# The test base of PySpark's streaming tests (python/pyspark/testing/streamingutils.py),
# adapted by kafka-direct: it runs on kafka-direct's StreamingContext, and the SparkContext
# is the one the test session already has if there is one (a process can hold only one),
# with spark.default.parallelism 1 while the class runs, as the original's own context has;
# wait_for stops waiting once the context has stopped.
# The Kinesis settings of the original are left out.
import contextlib
import tempfile
import time
import unittest

from pyspark import RDD, SparkContext

from kafka_direct.streaming import StreamingContext
from kafka_direct.testing import spark_context


class PySparkStreamingTestCase(unittest.TestCase):

    timeout = 30  # seconds
    duration = 0.5

    @classmethod
    def setUpClass(cls):
        class_name = cls.__name__
        cls._contexts = contextlib.ExitStack()
        shared = SparkContext._active_spark_context
        if shared is None:
            cls.sc = cls._contexts.enter_context(spark_context(
                "local[2]", class_name, conf={"spark.default.parallelism": "1"}))
        else:
            cls.sc = shared
            jconf = shared._jsc.sc().conf()
            previous = jconf.getOption("spark.default.parallelism")
            jconf.set("spark.default.parallelism", "1")

            def restore():
                if previous.isDefined():
                    jconf.set("spark.default.parallelism", previous.get())
                else:
                    jconf.remove("spark.default.parallelism")

            cls._contexts.callback(restore)
        cls.sc.setCheckpointDir(tempfile.mkdtemp())

    @classmethod
    def tearDownClass(cls):
        cls._contexts.close()

    def setUp(self):
        self.ssc = StreamingContext(self.sc, self.duration)

    def tearDown(self):
        if self.ssc is not None:
            self.ssc.stop(False)
        # The original also stops the JVM's StreamingContext here; kafka-direct has none, and
        # stops whatever context a test left active.
        active = StreamingContext.getActive()
        if active is not None:
            active.stop(False)

    def wait_for(self, result, n):
        start_time = time.time()
        while len(result) < n and time.time() - start_time < self.timeout:
            # kafka-direct: a context that stopped (a failed batch stops it) adds no results.
            if self.ssc is not None and self.ssc.state == "STOPPED":
                break
            time.sleep(0.01)
        if len(result) < n:
            print("timeout after", self.timeout)

    def _take(self, dstream, n):
        """
        Return the first `n` elements in the stream (will start and stop).
        """
        results = []

        def take(_, rdd):
            if rdd and len(results) < n:
                results.extend(rdd.take(n - len(results)))

        dstream.foreachRDD(take)

        self.ssc.start()
        self.wait_for(results, n)
        return results

    def _collect(self, dstream, n, block=True):
        """
        Collect each RDDs into the returned list.

        Returns
        -------
        list
            which will have the collected items.
        """
        result = []

        def get_output(_, rdd):
            if rdd and len(result) < n:
                r = rdd.collect()
                if r:
                    result.append(r)

        dstream.foreachRDD(get_output)

        if not block:
            return result

        self.ssc.start()
        self.wait_for(result, n)
        return result

    def _test_func(self, input, func, expected, sort=False, input2=None):
        """
        Parameters
        ----------
        input : list
            dataset for the test. This should be list of lists.
        func : function
            wrapped function. This function should return PythonDStream object.
        expected
            expected output for this testcase.
        """
        if not isinstance(input[0], RDD):
            input = [self.sc.parallelize(d, 1) for d in input]
        input_stream = self.ssc.queueStream(input)
        if input2 and not isinstance(input2[0], RDD):
            input2 = [self.sc.parallelize(d, 1) for d in input2]
        input_stream2 = self.ssc.queueStream(input2) if input2 is not None else None

        # Apply test function to stream.
        if input2:
            stream = func(input_stream, input_stream2)
        else:
            stream = func(input_stream)

        result = self._collect(stream, len(expected))
        if sort:
            self._sort_result_based_on_key(result)
            self._sort_result_based_on_key(expected)
        self.assertEqual(expected, result)

    def _sort_result_based_on_key(self, outputs):
        """Sort the list based on first value."""
        for output in outputs:
            output.sort(key=lambda x: x[0])
