"""The archive of Spark's classes: used by the tests where it is on and by the ingest job
unless it is off, only whole and ours, ignored quietly when unusable, built without leaving
anything behind when it cannot be."""

import os
import subprocess
import sys

import pytest

from kafka_direct.errors import ConfigurationError
from kafka_direct.testing import jvm_archive, spark, spark_home


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv(jvm_archive.SWITCH, "on")
    # PySpark's own Spark home: nothing in the cache but the archive's files.
    monkeypatch.setenv(spark_home.SWITCH, "off")
    return tmp_path / "cache"


def publish(content=b"archive"):
    path = jvm_archive.archive_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content)
    path.chmod(0o444)
    path.with_name(path.name + ".size").write_text(str(len(content)))
    return path


def test_options_only_for_a_whole_archive_of_our_own_when_on(cache, monkeypatch):
    path = jvm_archive.archive_path()
    assert path is not None and path.parent == cache / "kafka-direct"
    assert jvm_archive.jvm_options() == ""  # none yet
    publish()
    assert f"-XX:SharedArchiveFile={path}" in jvm_archive.jvm_options()
    monkeypatch.delenv(jvm_archive.SWITCH)
    assert jvm_archive.jvm_options() == ""  # not on: the user's own JVMs never map it
    monkeypatch.setenv(jvm_archive.SWITCH, "on")
    path.with_name(path.name + ".size").write_text("3")  # cut short (or grown)
    assert jvm_archive.jvm_options() == ""
    publish()
    path.chmod(0o666)  # others could have changed it
    assert jvm_archive.jvm_options() == ""


def test_a_path_options_cannot_carry_is_no_archive(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "with space"))
    assert jvm_archive.archive_path() is None
    assert jvm_archive.build() is None
    assert not (tmp_path / "with space").exists()


def test_a_failed_build_publishes_nothing_and_says_nothing(cache, monkeypatch, capfd):
    monkeypatch.setattr(jvm_archive, "_WORKLOAD", "kafka_direct.no_such_workload")
    assert jvm_archive.build() is None
    assert list((cache / "kafka-direct").iterdir()) == []
    monkeypatch.setenv("XDG_CACHE_HOME", "/proc/no-cache-here")
    assert jvm_archive.build() is None
    assert capfd.readouterr() == ("", "")


@pytest.mark.services  # a Spark JVM in a process of its own
def test_a_jvm_starts_quietly_from_an_unusable_archive(cache):
    publish(b"not an archive" * 100)
    assert jvm_archive.jvm_options()  # it would be used
    script = ("from kafka_direct.testing.spark import spark_context\n"
              "with spark_context('local[1]') as sc:\n"
              "    print('count', sc.parallelize([1, 2, 3]).count())\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=180, env={**os.environ, "XDG_CACHE_HOME": str(cache),
                                            jvm_archive.SWITCH: "on"})
    assert done.returncode == 0, done.stderr[-3000:]
    assert "count 3" in done.stdout
    for text in (done.stdout, done.stderr):
        assert "cds" not in text.lower() and "shared archive" not in text.lower(), text


def test_a_new_archive_replaces_those_of_earlier_installations(cache, monkeypatch):
    monkeypatch.setattr(jvm_archive, "_WORKLOAD", "tests.testing.fake_archive_workload")
    folder = cache / "kafka-direct"
    folder.mkdir(parents=True)
    (folder / "spark-4.2.0-0123456789abcdef.jsa").write_bytes(b"old")
    (folder / "spark-4.2.0-0123456789abcdef.jsa.size").write_text("3")
    (folder / "notes.txt").write_text("not ours to remove")
    path = jvm_archive.build()
    assert path is not None and path.read_bytes() == b"archive" * 10
    assert sorted(entry.name for entry in folder.iterdir()) == sorted(
        [path.name, path.name + ".size", "notes.txt"])
    assert jvm_archive.jvm_options()  # whole, ours, read-only: used
    assert jvm_archive.build() == path  # there already: not built again


def test_the_switch_decides_and_unset_the_callers_default_holds(cache, monkeypatch, capsys):
    path = publish()
    monkeypatch.delenv(jvm_archive.SWITCH)
    assert jvm_archive.jvm_options() == ""  # the tests' default: not without the switch
    assert f"-XX:SharedArchiveFile={path}" in jvm_archive.jvm_options(default=True)  # jobs'
    for value in ("off", " OFF"):
        monkeypatch.setenv(jvm_archive.SWITCH, value)
        assert jvm_archive.jvm_options() == jvm_archive.jvm_options(default=True) == ""
    monkeypatch.setenv(jvm_archive.SWITCH, "On")
    assert jvm_archive.jvm_options()
    monkeypatch.setenv(jvm_archive.SWITCH, "yes please")
    with pytest.raises(ConfigurationError, match=jvm_archive.SWITCH) as raised:
        jvm_archive.jvm_options(default=True)
    assert raised.value.setting == jvm_archive.SWITCH
    assert jvm_archive.main() == 2  # ./run's build step: one line, no traceback
    assert capsys.readouterr().err.count("\n") == 1


def _driver_options(monkeypatch, **given):
    """The driver JVM options spark_context would start a JVM with (none is started)."""
    seen = {}

    class Started(Exception):
        pass

    def start(conf, own_session):
        seen.update(conf.getAll())
        raise Started

    monkeypatch.setattr(spark, "_start", start)
    with pytest.raises(Started), spark.spark_context("local[1]", **given):
        pass
    return seen.get("spark.driver.extraJavaOptions", "")


def test_the_jobs_local_driver_starts_from_the_archive_unless_it_is_off(cache, monkeypatch):
    path = publish()
    monkeypatch.delenv(jvm_archive.SWITCH)
    assert f"-XX:SharedArchiveFile={path}" in _driver_options(monkeypatch, archive=True)
    assert "SharedArchiveFile" not in _driver_options(monkeypatch)  # the tests' contexts
    monkeypatch.setenv(jvm_archive.SWITCH, "off")
    assert "SharedArchiveFile" not in _driver_options(monkeypatch, archive=True)
    monkeypatch.delenv(jvm_archive.SWITCH)
    # Not a local master's settings (a cluster's driver): Spark's own options stay.
    assert "SharedArchiveFile" not in _driver_options(monkeypatch, archive=True,
                                                      test_conf=False)


@pytest.mark.parametrize("api", ["dstream", "structured"])
def test_both_ingest_apis_ask_for_the_archive(api, postgres, pg_schema, monkeypatch):
    from kafka_direct.app.ingest_job import run_ingest
    from kafka_direct.app.ingest_options import IngestOptions
    from kafka_direct.app.structured_ingest import run_structured_ingest

    asked = {}

    class Asked(Exception):
        pass

    def spark_context(*args, **kwargs):
        asked.update(kwargs)
        raise Asked

    monkeypatch.setattr(spark, "spark_context", spark_context)
    options = IngestOptions(api=api, topics=("t",), schema=pg_schema, master="local[1]")
    run = run_ingest if api == "dstream" else run_structured_ingest
    with pytest.raises(Asked):
        run(options, "127.0.0.1:1", postgres.dsn)
    assert asked["archive"] is True and asked["test_conf"] is True
