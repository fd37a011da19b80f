"""A minimal micro-batch streaming engine on PySpark RDDs (Spark Streaming's driver side).

It knows nothing of Kafka: input streams plug in as :class:`InputDStream` subclasses. The
engine decides *when* batches run and *what* they consist of; all data work is Spark RDD work.
"""

from __future__ import annotations

from kafka_direct.streaming.batch_info import (
    BatchInfo,
    JavaBatchInfo,
    JavaOutputOperationInfo,
    JavaStreamInputInfo,
    OutputOperationInfo,
    StreamInputInfo,
)
from kafka_direct.streaming.clock import Clock, ManualClock, SystemClock
from kafka_direct.streaming.context import StreamingContext
from kafka_direct.streaming.dstream import DStream
from kafka_direct.streaming.file_input_dstream import FileInputDStream
from kafka_direct.streaming.input_dstream import (
    ConstantInputDStream,
    InputDStream,
    QueueInputDStream,
)
from kafka_direct.streaming.listener import (
    StreamingListener,
    StreamingListenerBatchCompleted,
    StreamingListenerBatchStarted,
    StreamingListenerBatchSubmitted,
    StreamingListenerOutputOperationCompleted,
    StreamingListenerOutputOperationStarted,
    StreamingListenerStreamingStarted,
    StreamingListenerStreamingStopped,
)
from kafka_direct.streaming.rate_controller import PIDRateEstimator, RateController, RateEstimator
from kafka_direct.streaming.recurring_timer import RecurringTimer

__all__ = [
    "BatchInfo",
    "Clock",
    "ConstantInputDStream",
    "DStream",
    "FileInputDStream",
    "InputDStream",
    "JavaBatchInfo",
    "JavaOutputOperationInfo",
    "JavaStreamInputInfo",
    "ManualClock",
    "OutputOperationInfo",
    "PIDRateEstimator",
    "QueueInputDStream",
    "RateController",
    "RateEstimator",
    "RecurringTimer",
    "StreamInputInfo",
    "StreamingContext",
    "StreamingListener",
    "StreamingListenerBatchCompleted",
    "StreamingListenerBatchStarted",
    "StreamingListenerBatchSubmitted",
    "StreamingListenerOutputOperationCompleted",
    "StreamingListenerOutputOperationStarted",
    "StreamingListenerStreamingStarted",
    "StreamingListenerStreamingStopped",
    "SystemClock",
]
