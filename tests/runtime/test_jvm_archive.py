"""The archive of Spark's classes: used by the tests where it is on and by the ingest job
unless it is off, only whole and ours, ignored quietly when unusable, built without leaving
anything behind when it cannot be."""

import contextlib
import os
import signal
import stat
import subprocess
import sys
import time

import pytest

from kafka_direct.errors import ConfigurationError
from kafka_direct.runtime import jvm_archive, spark, spark_home


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
    if path.exists():
        path.chmod(0o644)
    path.write_bytes(content)
    path.chmod(0o444)
    stamped(path)
    return path


def stamped(path):
    """Record ``path``'s stamp (its size, inode, change time) as a build does."""
    info = path.lstat()
    size = path.with_name(path.name + ".size")
    size.unlink(missing_ok=True)
    size.write_text(f"{info.st_size} {info.st_ino} {info.st_ctime_ns}")


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
    script = ("from kafka_direct.runtime.spark import spark_context\n"
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
    monkeypatch.setattr(jvm_archive, "_WORKLOAD", "tests.runtime.fake_archive_workload")
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


#: How spark_context works out a context's settings (before any test replaces it).
CONTEXT_CONF = spark._context_conf


def _driver_options(monkeypatch, **given):
    """The driver JVM options spark_context would start a JVM with (none is started)."""
    seen = {}

    class Started(Exception):
        pass

    def settled(*args):
        seen.update(CONTEXT_CONF(*args).getAll())
        raise Started

    monkeypatch.setattr(spark, "_context_conf", settled)
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
    # Not a local master's settings (a cluster's driver): Spark's own options stay, what
    # they are (a JVM this process started before may have set some).
    assert _driver_options(monkeypatch, archive=True, test_conf=False) == \
        _driver_options(monkeypatch, test_conf=False)


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


def _gone(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    # A zombie nobody reaped yet counts as gone.
    with open(f"/proc/{pid}/stat") as info:
        return info.read().rsplit(")", 1)[1].split()[0] == "Z"


def _wait_gone(pids, seconds=10.0):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not all(_gone(pid) for pid in pids):
        time.sleep(0.05)
    return all(_gone(pid) for pid in pids)


def test_a_folder_or_files_others_may_change_make_no_archive_usable(cache):
    path = publish()
    assert jvm_archive.jvm_options()
    path.parent.chmod(0o775)  # the group may swap the archive
    assert jvm_archive.jvm_options() == ""
    path.parent.chmod(0o755)
    assert jvm_archive.jvm_options()
    size = path.with_name(path.name + ".size")
    for linked in (path, size):  # a link may point anywhere, at any time
        real = linked.with_name(linked.name + ".real")
        linked.rename(real)
        linked.symlink_to(real)
        assert jvm_archive.jvm_options() == ""
        linked.unlink()
        real.rename(linked)
    # Put back, the archive is another file to its stamp (a rename changes its change
    # time): passed over until published again.
    assert jvm_archive.jvm_options() == ""
    stamped(path)
    assert jvm_archive.jvm_options()


def test_no_archive_in_a_relative_cache_or_a_path_with_a_colon(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_CACHE_HOME", "relative-cache")
    assert jvm_archive.archive_path() is None
    assert jvm_archive.build() is None
    assert not (tmp_path / "relative-cache").exists()
    # Java's option reads "a:b" as two archives, the first of them unchecked.
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "a:b"))
    assert jvm_archive.archive_path() is None


def test_an_archive_changed_in_place_is_passed_over(cache):
    # The JVM maps a damaged archive of the right size and crashes on it (its checksums
    # are checked only with -XX:+VerifySharedSpaces, which read the whole archive at every
    # start): any write, a change of mode or another file in its place changes its stamp.
    path = publish(b"archive" * 10)
    assert jvm_archive.jvm_options()
    path.chmod(0o644)
    path.chmod(0o444)  # its mode as it was, its change time not
    assert jvm_archive.jvm_options() == ""
    path = publish(b"archive" * 10)
    assert "-XX:+VerifySharedSpaces" not in jvm_archive.jvm_options().split()
    info = path.stat()
    path.chmod(0o644)
    with open(path, "r+b") as archive:  # damaged in place: its size stays
        archive.write(b"\xff" * 4)
    path.chmod(0o444)
    os.utime(path, ns=(info.st_atime_ns, info.st_mtime_ns))  # its times set back
    assert path.stat().st_size == info.st_size and path.stat().st_mtime_ns == info.st_mtime_ns
    assert jvm_archive.jvm_options() == ""


def test_a_build_writes_through_no_link_and_closes_what_it_makes(cache, monkeypatch):
    monkeypatch.setattr(jvm_archive, "_WORKLOAD", "tests.runtime.fake_archive_workload")
    path = jvm_archive.archive_path()
    path.parent.mkdir(parents=True)
    path.parent.chmod(0o775)  # as a umask of 002 makes it
    precious = cache / "precious"
    precious.write_text("keep me")
    path.with_name(path.name + ".size").symlink_to(precious)  # planted where the size goes
    previous = os.umask(0o002)  # would open new files and folders to the group
    try:
        assert jvm_archive.build() == path
    finally:
        os.umask(previous)
    assert precious.read_text() == "keep me"
    size = path.with_name(path.name + ".size")
    info = path.lstat()
    assert not size.is_symlink() and size.read_text() == \
        f"{len(b'archive' * 10)} {info.st_ino} {info.st_ctime_ns}"
    assert stat.S_IMODE(path.stat().st_mode) == 0o444
    assert not stat.S_IMODE(size.stat().st_mode) & 0o222
    assert not path.parent.stat().st_mode & 0o022
    assert jvm_archive.jvm_options()


def test_an_archive_of_another_installation_stays(cache, monkeypatch):
    monkeypatch.setattr(jvm_archive, "_WORKLOAD", "tests.runtime.fake_archive_workload")
    path = jvm_archive.archive_path()
    version, where = path.name.split("-")[1:3]
    folder = path.parent
    folder.mkdir(parents=True)
    elsewhere = folder / f"spark-{version}-{'0' * 8 if where != '0' * 8 else '1' * 8}-ab.jsa"
    older = folder / f"spark-{version}-{where}-0123456789abcdef.jsa"
    for archive in (elsewhere, older):
        archive.write_bytes(b"x")
        archive.with_name(archive.name + ".size").write_text("1")
    assert jvm_archive.build() == path
    assert elsewhere.exists() and elsewhere.with_name(elsewhere.name + ".size").exists()
    assert not older.exists() and not older.with_name(older.name + ".size").exists()


@pytest.mark.skipif(os.getuid() != 0, reason="gives files to another user: needs root")
def test_archives_of_another_user_are_neither_used_nor_removed(cache, monkeypatch):
    path = publish()
    os.chown(path, 4242, 4242)
    assert jvm_archive.jvm_options() == ""
    monkeypatch.setattr(jvm_archive, "_WORKLOAD", "tests.runtime.fake_archive_workload")
    path.unlink()
    theirs = path.with_name(path.name.rsplit("-", 1)[0] + "-0123456789abcdef.jsa")
    theirs.write_bytes(b"x")
    os.chown(theirs, 4242, 4242)
    assert jvm_archive.build() == path
    assert theirs.exists()


def test_a_failed_workload_leaves_no_partial_archive_even_late(cache, monkeypatch):
    monkeypatch.setattr(jvm_archive, "_WORKLOAD", "tests.runtime.slow_archive_workload")
    monkeypatch.setenv("KAFKA_DIRECT_TEST_WORKLOAD", "fail")
    assert jvm_archive.build() is None
    time.sleep(1.5)  # past the moment its straggler (a JVM still ending) would write
    assert list((cache / "kafka-direct").iterdir()) == []


@pytest.mark.parametrize("kind", ["link", "theirs"])
def test_no_build_into_a_folder_that_is_a_link_or_not_ours(cache, monkeypatch, tmp_path,
                                                            kind):
    if kind == "theirs" and os.getuid() != 0:
        pytest.skip("gives a folder to another user: needs root")
    monkeypatch.setattr(jvm_archive, "_WORKLOAD", "tests.runtime.fake_archive_workload")
    folder = jvm_archive.archive_path().parent
    folder.parent.mkdir(parents=True)
    if kind == "link":
        (tmp_path / "elsewhere").mkdir(mode=0o755)
        folder.symlink_to(tmp_path / "elsewhere")
    else:
        folder.mkdir(mode=0o755)
        os.chown(folder, 4242, 4242)
    assert jvm_archive.build() is None
    assert list(folder.iterdir()) == []
    assert jvm_archive.jvm_options() == ""


def _slow_builder(cache, pids):
    """``python -m kafka_direct.runtime.jvm_archive`` with a workload that never ends."""
    script = ("import sys\n"
              "from kafka_direct.runtime import jvm_archive\n"
              "jvm_archive._WORKLOAD = 'tests.runtime.slow_archive_workload'\n"
              "sys.exit(jvm_archive.main())\n")
    return subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "XDG_CACHE_HOME": str(cache),
                                 "KAFKA_DIRECT_TEST_PIDS": str(pids)})


def test_a_killed_builders_leftovers_go_with_the_next_build(cache, monkeypatch, tmp_path):
    pids = tmp_path / "pids"
    builder = _slow_builder(cache, pids)
    started = _started(pids)
    try:
        builder.kill()  # no handler runs
        builder.wait()
        assert _wait_gone(started[:1])  # the workload died with its builder
    finally:
        for pid in started:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    folder = cache / "kafka-direct"
    left = [entry for entry in folder.iterdir() if entry.name.endswith(".partial")]
    assert left  # what a killed builder leaves, until it is old enough to be sure
    monkeypatch.setattr(jvm_archive, "_WORKLOAD", "tests.runtime.fake_archive_workload")
    path = jvm_archive.build()
    assert path is not None and all(entry.exists() for entry in left)  # maybe still written
    for entry in left:
        os.utime(entry, (time.time() - 3600, time.time() - 3600))
    path.unlink()
    assert jvm_archive.build() == path
    assert sorted(entry.name for entry in folder.iterdir()) == sorted(
        [path.name, path.name + ".size"])


def _started(pids):
    deadline = time.monotonic() + 60
    while not pids.exists() or not pids.read_text().endswith("\n"):
        assert time.monotonic() < deadline, "the workload did not start"
        time.sleep(0.05)
    return [int(pid) for pid in pids.read_text().split()]


def _kill(pids):
    for pid in pids:  # a failed test leaves nothing running
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def test_a_workload_past_its_time_is_ended_with_its_children(cache, monkeypatch, tmp_path):
    monkeypatch.setattr(jvm_archive, "_WORKLOAD", "tests.runtime.slow_archive_workload")
    monkeypatch.setenv("KAFKA_DIRECT_TEST_PIDS", str(tmp_path / "pids"))
    try:
        assert jvm_archive.build(timeout=3) is None
        pids = _started(tmp_path / "pids")
        assert _wait_gone(pids)
    finally:
        if (tmp_path / "pids").exists():
            _kill(_started(tmp_path / "pids"))
    assert list((cache / "kafka-direct").iterdir()) == []


@pytest.mark.parametrize("how", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_an_interrupted_build_ends_its_workload_and_leaves_nothing(cache, tmp_path, how):
    pids = tmp_path / "pids"
    builder = _slow_builder(cache, pids)
    started = _started(pids)
    try:
        builder.send_signal(how)
        out, err = builder.communicate(timeout=30)
        assert builder.returncode == 130
        assert "Traceback" not in err and out == "on\n"
        assert _wait_gone(started)
    finally:
        _kill(started)
    assert list((cache / "kafka-direct").iterdir()) == []


@pytest.mark.slow  # builds a real archive (about 20 s) and runs the ingest job on it
def test_a_damaged_archive_of_the_right_size_is_passed_over_not_crashed_on(cache, tmp_path,
                                                                           monkeypatch):
    monkeypatch.delenv(spark_home.SWITCH)  # the JVMs as the job starts them
    monkeypatch.delenv(jvm_archive.SWITCH)  # the job's default: on
    path = jvm_archive.build()
    assert path is not None, "the archive could not be built"
    path.chmod(0o644)
    with open(path, "r+b") as archive:  # damaged in place, every 10 MB: its size stays
        for offset in range(1 << 20, path.stat().st_size, 10 << 20):
            archive.seek(offset)
            archive.write(b"\xff" * 4096)
    path.chmod(0o444)
    # Changed since it was published: passed over (the JVM does not check the archive's
    # checksums at each start; mapping this one crashed the job in most builds).
    assert jvm_archive.jvm_options(default=True) == ""
    done = subprocess.run(
        [sys.executable, "-m", "kafka_direct.app.cli", "ingest", "--api", "structured",
         "--stop-after-idle", "2", "--sample-events", "300"],
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
        env={**os.environ, "XDG_CACHE_HOME": str(cache)})
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert "300 rows, 0 duplicates" in done.stdout
    assert not list(tmp_path.glob("hs_err*"))
