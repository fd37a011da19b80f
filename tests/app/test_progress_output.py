"""Terminal output: the progress bar, the per-batch line, the metrics text format."""

import io
import math

import pytest

from kafka_direct.app.progress import ProgressBar
from kafka_direct.streaming import BatchInfo, OutputOperationInfo, StreamInputInfo
from kafka_direct.streaming.batch_log import format_batch
from kafka_direct.streaming.ui.metrics import prometheus_text


def test_progress_bar_writes_a_line_per_tenth_into_a_file():
    out = io.StringIO()
    with ProgressBar(200, "producing", out) as bar:
        for done in range(0, 201, 5):
            bar.update(done)
    lines = out.getvalue().splitlines()
    assert len(lines) == 11  # 0 %, 10 % ... 100 %
    assert lines[-1].startswith("producing [" + "#" * 30 + "] 100%  200/200")
    with pytest.raises(ValueError, match="total > 0"):
        ProgressBar(0, "x", out)


def test_batch_line_names_records_delays_rate_and_a_failure():
    info = BatchInfo(4000, {0: StreamInputInfo(0, 3000)}, submissionTime=4010,
                     processingStartTime=4020, processingEndTime=4440,
                     outputOperationInfos={0: OutputOperationInfo(
                         4000, 0, "foreachRDD at job.py:9", "", 4020, 4440,
                         "SinkWriteError: writing t-0 failed\nTraceback ...")})
    line = format_batch(info, 2.0)
    assert "records 3000  scheduling 0.01 s  processing 0.42 s  total 0.43 s  rate 1500/s" \
        in line
    assert line.endswith("FAILED foreachRDD at job.py:9: SinkWriteError: writing t-0 failed")


def test_metrics_text_escapes_labels_and_marks_missing_values():
    stats = {"batchDuration": 1000, "numTotalCompletedBatches": 0, "numFailedBatches": 0,
             "numReceivedRecords": 0, "numProcessedRecords": 0, "numWaitingBatches": 0,
             "numRunningBatches": 0, "numActiveBatches": 0}
    inputs = {0: {"name": 'odd "name"\\', "partitions": [
        {"topic": "t", "partition": 0, "nextOffset": 5, "latestOffset": 9, "lag": 4,
         "committedOffset": None}],
        "rateLimit": {"estimatedRate": None, "maxRatePerPartition": {}}}}
    text = prometheus_text(stats, None, 0, inputs)
    assert ('kafka_direct_streaming_kafka_partition_lag{stream="odd \\"name\\"\\\\",'
            'topic="t",partition="0"} 4') in text
    assert "kafka_direct_streaming_kafka_partition_committed_offset{" not in text
    delay = next(line for line in text.splitlines() if line.startswith(
        "kafka_direct_streaming_last_completed_batch_total_delay_seconds"))
    assert math.isnan(float(delay.split()[-1]))
    assert "# TYPE kafka_direct_streaming_completed_batches_total counter" in text
