"""The archive of Spark's classes: used when it exists, silently ignored when it is unusable."""

import os
import subprocess
import sys

import pytest

from kafka_direct.testing import jvm_archive


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv(jvm_archive.SWITCH, raising=False)
    return tmp_path


def test_options_only_once_the_archive_exists(cache):
    path = jvm_archive.archive_path()
    assert path is not None and path.parent == cache / "kafka-direct"
    assert jvm_archive.jvm_options() == ""
    path.parent.mkdir(parents=True)
    path.write_bytes(b"x")
    assert f"-XX:SharedArchiveFile={path}" in jvm_archive.jvm_options()


def test_the_switch_turns_it_off(cache, monkeypatch):
    monkeypatch.setenv(jvm_archive.SWITCH, "off")
    assert jvm_archive.archive_path() is None and jvm_archive.jvm_options() == ""
    assert jvm_archive.build() is None


@pytest.mark.services  # a Spark JVM in a process of its own
def test_a_jvm_starts_quietly_from_an_unusable_archive(cache):
    path = jvm_archive.archive_path()
    path.parent.mkdir(parents=True)
    path.write_bytes(b"not an archive" * 100)
    script = ("from kafka_direct.testing.spark import spark_context\n"
              "with spark_context('local[1]') as sc:\n"
              "    print('count', sc.parallelize([1, 2, 3]).count())\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=180, env={**os.environ, "XDG_CACHE_HOME": str(cache)})
    assert done.returncode == 0, done.stderr[-3000:]
    assert "count 3" in done.stdout
    for text in (done.stdout, done.stderr):
        assert "cds" not in text.lower() and "shared archive" not in text.lower(), text
