"""The streaming statistics page, its JSON and metrics, against a running direct stream.

The numbers served are checked against the BatchInfos the listener bus delivered, and the
page is loaded in a real headless Chromium (Debian's package), which also takes a
screenshot.
"""

import json
import re
import shutil
import subprocess
import urllib.error
import urllib.request

import pytest

from kafka_direct import ConsumerStrategies, KafkaUtils, LocationStrategies
from tests.streaming.helpers import Driver

CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu",
                  "--disable-background-networking"]


def get(url):
    with urllib.request.urlopen(url, timeout=10) as response:
        return response.read().decode(), response.headers["Content-Type"]


@pytest.fixture
def running(spark, kafka, kafka_topic):
    """A direct stream of 3 completed batches with its page served; yields (driver, topic)."""
    topic = kafka_topic(partitions=2)
    kafka.produce(topic, [b"a"] * 30, partition=0)
    kafka.produce(topic, [b"b"] * 12, partition=1)
    driver = Driver(spark, conf={"spark.streaming.ui.enabled": "true",
                                 "spark.streaming.ui.port": "0",
                                 "spark.streaming.kafka.maxRatePerPartition": "10"})
    stream = KafkaUtils.createDirectStream(
        driver.ssc, LocationStrategies.PreferConsistent(),
        ConsumerStrategies.Subscribe([topic], kafka.params(**{
            "group.id": f"ui-{topic}", "auto.offset.reset": "earliest"})))

    def save(rdd):
        rdd.count()
        stream.commitAsync(rdd.offsetRanges())

    stream.foreachRDD(save)
    driver.start()
    try:
        driver.run(3)
        driver.ssc.scheduler.listenerBus.waitUntilEmpty()
        yield driver, topic
    finally:
        driver.stop()
    assert driver.ssc.uiWebUrl is None  # stopped with the context


def test_json_and_metrics_match_the_listeners_batch_infos(running):
    driver, topic = running
    url = driver.ssc.uiWebUrl
    assert url.startswith("http://127.0.0.1:")
    infos = {b.batchTime: b for b in driver.recorder.completed}
    stats = json.loads(get(url + "api/v1/streaming/statistics")[0])
    assert stats["batchDuration"] == 1000
    assert stats["numTotalCompletedBatches"] == len(infos) == 3
    # Partition 0 gives 10 a batch (the rate limit), partition 1 gives 10, then its last 2.
    assert stats["numProcessedRecords"] == sum(b.numRecords for b in infos.values()) == 42
    assert stats["avgInputRate"] == pytest.approx(14.0)
    batches = json.loads(get(url + "api/v1/streaming/batches")[0])
    for batch in batches:
        info = infos[batch["batchTime"]]
        assert (batch["inputSize"], batch["schedulingDelay"], batch["processingTime"],
                batch["totalDelay"]) == (info.numRecords, info.schedulingDelay,
                                         info.processingDelay, info.totalDelay)
        assert batch["status"] == "completed" and batch["numTotalOutputOps"] == 1
    first = min(infos)
    detail = json.loads(get(url + f"api/v1/streaming/batches/{first}")[0])
    [stream] = detail["inputs"]
    assert stream["offsetRanges"] == [
        {"topic": topic, "partition": 0, "fromOffset": 0, "untilOffset": 10, "count": 10},
        {"topic": topic, "partition": 1, "fromOffset": 0, "untilOffset": 10, "count": 10}]
    assert stream["rateLimit"]["maxRatePerPartition"] == {f"{topic}-0": 10.0,
                                                          f"{topic}-1": 10.0}
    assert detail["outputOperations"][0]["status"] == "succeeded"
    metrics, kind = get(url + "metrics")
    assert kind.startswith("text/plain; version=0.0.4")
    assert "kafka_direct_streaming_completed_batches_total 3" in metrics
    lag = dict(re.findall(r'kafka_direct_streaming_kafka_partition_lag\{.*partition="(\d)"\} '
                          r"(\d+)", metrics))
    assert lag == {"0": "0", "1": "0"}  # the third batch read up to the end
    committed = dict(re.findall(
        r'kafka_direct_streaming_kafka_partition_committed_offset\{.*partition="(\d)"\} (\d+)',
        metrics))
    assert committed == {"0": "30", "1": "12"}  # committed when the batch completed
    with pytest.raises(urllib.error.HTTPError, match="404"):
        get(url + "batch?id=42")


def chromium():
    binary = shutil.which("chromium") or shutil.which("chromium-browser")
    if binary is None:
        pytest.skip("Debian's chromium package is not installed (./run test installs it)")
    return binary


def test_the_page_in_headless_chromium(running, tmp_path):
    driver, topic = running
    binary = chromium()
    url = driver.ssc.uiWebUrl
    profile = ["--user-data-dir=" + str(tmp_path / "profile")]
    dom = subprocess.run([binary, *CHROMIUM_FLAGS, *profile, "--dump-dom", url],
                         capture_output=True, text=True, timeout=120)
    assert dom.returncode == 0, dom.stderr[-2000:]
    page = dom.stdout
    completed = driver.recorder.completed
    assert "Streaming Statistics" in page
    assert f"<b id=\"completed-batches\">{len(completed)}</b>" in page
    assert f"<b id=\"processed-records\">{sum(b.numRecords for b in completed)}</b>" in page
    assert page.count("<polyline") == 4  # the four timelines
    assert "Completed Batches (last 3 out of 3)" in page
    first = min(b.batchTime for b in completed)
    detail = subprocess.run([binary, *CHROMIUM_FLAGS, *profile, "--dump-dom",
                             f"{url}batch?id={first}"], capture_output=True, text=True,
                            timeout=120)
    assert f"<td>{topic}</td><td class=\"n\">1</td><td class=\"n\">0</td>" \
           f"<td class=\"n\">10</td>" in detail.stdout
    assert f"{topic}-0 at most 10 records/s" in detail.stdout
    shot = tmp_path / "statistics.png"
    taken = subprocess.run([binary, *CHROMIUM_FLAGS, *profile, "--window-size=1280,1000",
                            f"--screenshot={shot}", url], capture_output=True, text=True,
                           timeout=120)
    assert taken.returncode == 0, taken.stderr[-2000:]
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 10_000
