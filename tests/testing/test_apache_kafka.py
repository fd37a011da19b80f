"""Apache Kafka started by the harness: its jars, its cache, one node and a cluster of three."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition

from kafka_direct import ConfigurationError, ServiceError
from kafka_direct.testing import ApacheKafka
from kafka_direct.testing import maven as jars_module
from kafka_direct.testing.broker_choice import broker_choice, kafka_service
from kafka_direct.testing.kafka_jars import KAFKA_VERSION, kafka_jars
from kafka_direct.testing.process import wait_for

ROOT = Path(__file__).parents[2]
MARKER = f"kafka_2.13-{KAFKA_VERSION}.jar"


def values(cluster, topic, partition):
    consumer = Consumer(cluster.params(**{"group.id": "check", "enable.auto.commit": False}))
    try:
        _, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=30,
                                                 cached=False)
        consumer.assign([TopicPartition(topic, partition, 0)])
        seen = []
        deadline = time.monotonic() + 60
        while len(seen) < high and time.monotonic() < deadline:
            seen += [m.value() for m in consumer.consume(500, 1.0) if m.error() is None]
        return seen
    finally:
        consumer.close()


def test_the_default_broker_is_apache_kafka_and_other_choices_are_checked(monkeypatch):
    monkeypatch.delenv("KAFKA_DIRECT_BROKER", raising=False)
    monkeypatch.delenv("KAFKA_DIRECT_BOOTSTRAP", raising=False)
    assert broker_choice() == "apache" and isinstance(kafka_service(), ApacheKafka)
    monkeypatch.setenv("KAFKA_DIRECT_BROKER", "kafka")
    with pytest.raises(ConfigurationError, match="KAFKA_DIRECT_BROKER must be one of apache"):
        kafka_service()


def test_kafka_home_without_kafka_is_refused_by_name(monkeypatch, tmp_path):
    monkeypatch.setenv("KAFKA_HOME", str(tmp_path))
    with pytest.raises(ConfigurationError, match="KAFKA_HOME=.* holds no Apache Kafka jars"):
        kafka_jars()


@pytest.mark.services
def test_kafka_home_serves_the_jars_offline(monkeypatch, tmp_path):
    # A distribution's layout (libs/), made of the cached jars: nothing is resolved.
    cached = kafka_jars()
    (tmp_path / "libs").mkdir()
    for jar in cached.glob("*.jar"):
        (tmp_path / "libs" / jar.name).symlink_to(jar)
    monkeypatch.setenv("KAFKA_HOME", str(tmp_path))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "empty-cache"))
    monkeypatch.setenv("PATH", "/nonexistent")  # no mvn to fall back on
    assert kafka_jars() == tmp_path / "libs"


def fake_maven(jar_set, work, jars):
    """A resolver that 'downloads' the set's marker jar and one dependency."""
    for name in (jar_set.marker, "dependency-1.0.jar"):
        (jars / name).write_bytes(b"jar " + name.encode())
    return True, "done"


def test_a_cache_entry_is_used_whole_or_not_at_all(monkeypatch, tmp_path):
    monkeypatch.delenv("KAFKA_HOME", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(jars_module, "_with_maven", fake_maven)
    old = os.umask(0o002)  # a user's own group may write: the entry must still be closed
    try:
        entry = kafka_jars()
    finally:
        os.umask(old)
    assert jars_module._complete(entry, MARKER)
    assert kafka_jars() == entry  # complete: not resolved again
    manifest = entry / "MANIFEST.sha256"
    jar = entry / f"kafka_2.13-{KAFKA_VERSION}.jar"
    extra = entry / "planted.jar"
    extra.write_bytes(b"x")  # the JVM would load it: a jar the manifest does not list
    assert not jars_module._complete(entry, MARKER)
    extra.unlink()
    jar.write_bytes(b"jar, cut short or swapped")
    assert not jars_module._complete(entry, MARKER)
    jar.unlink()
    assert not jars_module._complete(entry, MARKER)
    manifest.write_text("")  # an empty manifest names no broker
    assert not jars_module._complete(entry, MARKER)
    # Resolved again: the damaged entry is set aside, not deleted under a running broker.
    assert jars_module._complete(kafka_jars(), MARKER)
    assert len(list(tmp_path.glob(f"kafka-direct/apache-kafka-{KAFKA_VERSION}.replaced-*"))) == 1


def test_a_cache_others_may_write_to_is_refused(monkeypatch, tmp_path):
    monkeypatch.delenv("KAFKA_HOME", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(jars_module, "_with_maven", fake_maven)
    monkeypatch.setattr(jars_module, "close_cache", lambda directory: None)
    (tmp_path / "kafka-direct").mkdir()
    (tmp_path / "kafka-direct").chmod(0o777)
    with pytest.raises(ConfigurationError, match="others may write to it"):
        kafka_jars()


@pytest.mark.services  # the resolver is a process of its own
def test_a_stalled_resolver_is_killed_at_its_deadline(monkeypatch, tmp_path):
    monkeypatch.setattr(jars_module, "_RESOLVE_TIMEOUT", 1.0)
    start = time.monotonic()
    ok, said = jars_module._run(["sleep", "30"], tmp_path, "a stalled resolver")
    assert not ok and "did not finish within 1 s" in said
    assert time.monotonic() - start < 10


def test_no_way_to_the_jars_is_one_error_naming_the_three(monkeypatch, tmp_path):
    monkeypatch.delenv("KAFKA_HOME", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setenv("PATH", "/nonexistent")  # neither mvn nor java
    monkeypatch.setattr(jars_module, "pyspark_home", lambda: None)
    monkeypatch.delenv("SPARK_HOME", raising=False)
    with pytest.raises(ServiceError) as raised:
        kafka_jars()
    message = str(raised.value)
    for way in ("Maven", "PySpark's Ivy", "KAFKA_HOME", "spark.jars.repositories"):
        assert way in message, message
    assert not list(tmp_path.glob("kafka-direct/apache-kafka-*/"))  # nothing half made


@pytest.mark.slow  # Ivy takes about 30 s over a repository of 95 modules
@pytest.mark.services
def test_pysparks_ivy_resolves_them_honouring_spark_jars_repositories(monkeypatch, tmp_path):
    # Without mvn: PySpark's Ivy, reading spark.jars.repositories from spark-defaults.conf.
    # The repository here is the local Maven one (filled by the first resolution), so the
    # test needs no network; Maven Central comes after it in the chain.
    m2 = Path.home() / ".m2" / "repository"
    if not (m2 / "org" / "apache" / "kafka" / "kafka_2.13" / KAFKA_VERSION).is_dir():
        pytest.skip("the local Maven repository does not hold Apache Kafka")
    conf = tmp_path / "conf"
    conf.mkdir()
    (conf / "spark-defaults.conf").write_text(
        f"spark.jars.repositories {m2.as_uri()}\nspark.jars.ivy {tmp_path / 'ivy'}\n")
    monkeypatch.setenv("SPARK_CONF_DIR", str(conf))
    monkeypatch.setattr(jars_module.shutil, "which",
                        lambda name: None if name == "mvn" else "/usr/bin/" + name
                        if Path("/usr/bin/" + name).exists() else None)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("KAFKA_HOME", raising=False)
    folder = kafka_jars()
    names = {jar.name for jar in folder.glob("*.jar")}
    assert {f"kafka_2.13-{KAFKA_VERSION}.jar", f"kafka-server-{KAFKA_VERSION}.jar",
            f"kafka-tools-{KAFKA_VERSION}.jar"} <= names
    assert (tmp_path / "ivy" / "cache").is_dir()  # spark.jars.ivy was honoured
    assert jars_module._complete(folder, MARKER)


FIRST_RUN = """
import sys
from kafka_direct.testing.kafka_jars import kafka_jars
print(kafka_jars())
"""


@pytest.mark.slow
@pytest.mark.services
def test_two_first_runs_at_once_share_one_download(tmp_path):
    env = {"XDG_CACHE_HOME": str(tmp_path), "PATH": "/usr/bin:/bin", "HOME": str(Path.home())}
    runs = [subprocess.Popen([sys.executable, "-c", FIRST_RUN], cwd=ROOT, env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for _ in range(2)]
    outputs = [run.communicate(timeout=900) for run in runs]
    assert all(run.returncode == 0 for run in runs), outputs
    folders = {out.strip() for out, _ in outputs}
    assert len(folders) == 1
    resolved = sum("resolving Apache Kafka" in err for _, err in outputs)
    assert resolved == 1, outputs  # the second waited, then used the first one's
    assert jars_module._complete(Path(folders.pop()), MARKER)
    assert not list(tmp_path.glob("kafka-direct/*.partial-*"))


@pytest.mark.slow  # the default run kills a leader in tests/app/test_cluster_faults.py
@pytest.mark.services
class _Node:
    """A node that records what its cluster does to it."""

    def __init__(self, calls):
        self.calls = calls

    def alive(self):
        return True

    def resume(self):
        self.calls.append("resume")

    def send_signal(self, signum):
        self.calls.append(("signal", signum))

    def stop(self):
        self.calls.append("stop")

    def kill(self):
        self.calls.append("kill")


def test_closing_a_broker_whose_data_goes_with_it_kills_it(tmp_path):
    # Its data folder is removed after: a graceful stop (a controlled shutdown that closes
    # every partition's log: past its 15 s limit with the suite's hundreds of topics, then
    # killed anyway) was waited out at the end of every pytest worker for nothing.
    calls = []
    own = ApacheKafka(brokers=3)
    own.nodes = [_Node(calls) for _ in range(3)]
    folder = own.data_dir
    own.close()
    assert calls == ["kill"] * 3
    assert not folder.exists()
    # A folder of the caller's keeps its data: the nodes stop gracefully.
    calls.clear()
    kept = ApacheKafka(data_dir=tmp_path / "data")
    kept.nodes = [_Node(calls)]
    kept.close()
    assert calls == ["resume", ("signal", signal.SIGTERM), "stop"]


def test_a_cluster_loses_nothing_acknowledged_when_a_leader_is_killed(kafka_cluster):
    topic = f"leader-kill-{time.monotonic_ns()}"
    kafka_cluster.create_topic(topic, partitions=2)
    assert all(len(isr) == 3 for isr in kafka_cluster.in_sync(topic).values())
    kafka_cluster.produce(topic, [b"before-%d" % i for i in range(300)], partition=0,
                          acks="all", enable_idempotence=True)
    leader = kafka_cluster.leaders(topic)[0]
    kafka_cluster.kill_broker(leader)
    try:
        # Another replica leads within the session timeout; writes go on with two in sync.
        assert wait_for(lambda: kafka_cluster.leaders(topic)[0] not in (leader, -1), 30)
        kafka_cluster.produce(topic, [b"after-%d" % i for i in range(300)], partition=0,
                              acks="all", enable_idempotence=True)
    finally:
        kafka_cluster.restart_broker(leader)
    assert wait_for(lambda: len(kafka_cluster.in_sync(topic)[0]) == 3, 60)
    kafka_cluster.elect_preferred_leaders(topic, [0, 1])
    assert wait_for(lambda: kafka_cluster.leaders(topic)[0] == leader, 30)
    assert values(kafka_cluster, topic, 0) == (
        [b"before-%d" % i for i in range(300)] + [b"after-%d" % i for i in range(300)])


@pytest.mark.slow
@pytest.mark.services
def test_a_paused_broker_is_fenced_and_comes_back(kafka_cluster):
    topic = f"pause-{time.monotonic_ns()}"
    kafka_cluster.create_topic(topic, partitions=1)
    leader = kafka_cluster.leaders(topic)[0]
    kafka_cluster.pause_broker(leader)
    try:
        # Past the broker session (4 s): the controller fences it and moves leadership.
        assert wait_for(lambda: kafka_cluster.leaders(topic)[0] not in (leader, -1), 30)
        kafka_cluster.produce(topic, [b"x"] * 10, partition=0, acks="all")
    finally:
        kafka_cluster.resume_broker(leader)
    assert wait_for(lambda: len(kafka_cluster.in_sync(topic)[0]) == 3, 60)
    assert kafka_cluster.end_offsets(topic, [0]) == {0: (0, 10)}


@pytest.mark.services  # Maven is a process of its own; the artifact is in its local repository
def test_maven_resolves_a_set_with_its_dependencies_and_unpacks_plugin_archives(
        monkeypatch, tmp_path):
    # PySpark's Ivy is out of reach: only Maven can make these entries.
    import shutil as shell

    if shell.which("mvn") is None:
        pytest.skip("mvn is not on PATH")
    monkeypatch.setattr(jars_module, "pyspark_home", lambda: None)
    monkeypatch.delenv("SPARK_HOME", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.chdir(tmp_path)  # not the generated project's folder
    from kafka_direct.testing.jvm_peers import POSTGRES_JDBC_VERSION, postgres_jdbc_driver

    driver = postgres_jdbc_driver()
    assert driver.name == f"postgresql-{POSTGRES_JDBC_VERSION}.jar" and driver.is_file()
    assert jars_module._complete(driver.parent, driver.name)
    # An archive (a Connect plugin) becomes the jars it holds, nothing else.
    archive = tmp_path / "plugin.tar.gz"
    import io
    import tarfile

    with tarfile.open(archive, "w:gz") as packed:
        for name in ("plugin/connector-1.0.jar", "plugin/README.md", "../escape.jar"):
            data = b"x" * 10
            info = tarfile.TarInfo(name)
            info.size = len(data)
            packed.addfile(info, io.BytesIO(data))
    folder = tmp_path / "unpacked"
    folder.mkdir()
    shell.copy(archive, folder / archive.name)
    jars_module._unpack(folder)
    assert sorted(path.name for path in folder.iterdir()) == ["connector-1.0.jar", "escape.jar"]
    assert not (tmp_path / "escape.jar").exists()


def test_a_jar_set_is_checked_when_made():
    from kafka_direct.testing.maven import JarSet

    with pytest.raises(ConfigurationError, match="not a Maven coordinate"):
        JarSet("x-1", "X", ("org.example:x",), marker="x-1.jar")
    with pytest.raises(ConfigurationError, match="plain folder name"):
        JarSet("../x", "X", ("org.example:x:1",), marker="x-1.jar")
    with pytest.raises(ConfigurationError, match="names no coordinates"):
        JarSet("x-1", "X", (), marker="x-1.jar")


def test_a_planted_upper_case_jar_and_another_sets_entry_are_told_apart(monkeypatch, tmp_path):
    monkeypatch.delenv("KAFKA_HOME", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(jars_module, "_with_maven", fake_maven)
    entry = kafka_jars()
    (entry / "planted.JAR").write_bytes(b"x")  # a class path "folder/*" loads it too
    assert not jars_module._complete(entry, MARKER)
    (entry / "planted.JAR").unlink()
    # Sweeping this entry's leftovers leaves another set whose name starts with its own.
    other = entry.with_name(entry.name + ".Final")
    other.mkdir()
    partial = entry.with_name(entry.name + ".partial-1")
    partial.mkdir()
    jars_module._sweep(entry)
    assert other.is_dir() and not partial.exists()


def test_spark_defaults_are_read_as_java_properties(monkeypatch, tmp_path):
    (tmp_path / "spark-defaults.conf").write_text(
        "# comment\nspark.jars.repositories=https://repo.example/maven\n"
        "spark.jars.ivy : ivy-home\nspark.jars.ivySettings\tconf/ivy.xml\n! also a comment\n")
    monkeypatch.setenv("SPARK_CONF_DIR", str(tmp_path))
    assert jars_module.spark_defaults() == {
        "spark.jars.repositories": "https://repo.example/maven", "spark.jars.ivy": "ivy-home",
        "spark.jars.ivySettings": "conf/ivy.xml"}
