"""The compiled Spark home: Spark's Python processes import PySpark from the installed
package (bytecode kept) instead of compiling it from Spark's zip at every start; where it
does not apply, or a directory there is not ours as made, Spark's home is left as it is."""

import os
import shutil
import sys

import pytest

from kafka_direct.runtime import spark_home as sh

LOCAL = "local[2]"


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("SPARK_HOME", raising=False)
    monkeypatch.delenv(sh.SWITCH, raising=False)
    monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
    monkeypatch.delenv("PYSPARK_DRIVER_PYTHON", raising=False)
    monkeypatch.delenv("PYSPARK_GATEWAY_PORT", raising=False)
    return tmp_path / "cache" / "kafka-direct"


def test_the_home_links_sparks_files_less_the_pyspark_zip(cache):
    home = sh.compiled_spark_home(LOCAL)
    assert home is not None and home.parent == cache
    pyspark = sh.pyspark_home()
    jars = sorted(jar.name for jar in (pyspark / "jars").glob("*.jar"))
    assert sorted(jar.name for jar in (home / "jars").iterdir()) == jars
    assert os.readlink(home / "jars" / "spark-core_2.13-" f"{_spark_version()}.jar") \
        == str(pyspark / "jars" / f"spark-core_2.13-{_spark_version()}.jar")
    assert os.readlink(home / "bin") == str(pyspark / "bin")
    assert (home / "bin" / "spark-submit").is_file()
    assert list((home / "python" / "lib").glob("py4j-*.zip"))
    assert not (home / "python" / "lib" / "pyspark.zip").exists()
    assert (home / "work").is_dir() and not (home / "work").is_symlink()
    assert sh.compiled_spark_home(LOCAL) == home  # made once, then reused
    assert sh.spark_home(LOCAL) == home


def _spark_version():
    import pyspark

    return pyspark.__version__


def test_signed_jars_are_there_unsigned_so_the_class_archive_holds_their_classes(cache):
    # PySpark ships Janino (Spark's code generator) signed; Java's class data sharing leaves
    # out every class of a signed jar, so each JVM loaded and checked them again.
    import zipfile

    pyspark = sh.pyspark_home()
    signed = [jar for jar in (pyspark / "jars").glob("*.jar") if sh._signed(jar)]
    if not signed:
        pytest.skip("this PySpark ships no signed jar")
    home = sh.compiled_spark_home(LOCAL)
    assert home is not None
    for jar in signed:
        copy = home / "jars" / jar.name
        assert copy.is_file() and not copy.is_symlink() and not sh._signed(copy)
        assert sh.closed(copy)
        with zipfile.ZipFile(jar) as original, zipfile.ZipFile(copy) as unsigned:
            kept = [name for name in original.namelist() if not sh._is_signature(name)]
            assert unsigned.namelist() == kept
            assert all(unsigned.read(name) == original.read(name) for name in kept)
    assert sh.compiled_spark_home(LOCAL) == home  # made once, then reused


def test_a_jar_changed_in_place_makes_another_home(cache, monkeypatch):
    home = sh.compiled_spark_home(LOCAL)
    stamps = sh._jar_stamps
    monkeypatch.setattr(sh, "_jar_stamps", lambda links: [*stamps(links), "jars/x.jar 1 2"])
    other = sh.compiled_spark_home(LOCAL)
    assert other is not None and other != home


def test_a_home_chosen_by_the_user_is_kept(cache, monkeypatch, tmp_path):
    monkeypatch.setenv("SPARK_HOME", str(tmp_path / "their-spark"))
    assert sh.spark_home(LOCAL) == tmp_path / "their-spark"
    with sh.using_spark_home(LOCAL):
        assert os.environ["SPARK_HOME"] == str(tmp_path / "their-spark")
    assert not cache.exists()


def test_the_block_sets_the_home_and_gives_the_environment_back(cache):
    with sh.using_spark_home(LOCAL):
        assert os.environ["SPARK_HOME"] == str(sh.compiled_spark_home(LOCAL))
    assert "SPARK_HOME" not in os.environ


@pytest.mark.parametrize("how", [
    "switched off", "switched 0", "switched false", "switched  No ", "yarn", "standalone",
    "k8s", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "spark.pyspark.python",
    "spark.pyspark.driver.python", "pyspark on a path added at run time",
    "a relative cache", "under spark-submit"])
def test_pysparks_own_home_where_it_does_not_apply(cache, monkeypatch, tmp_path, how):
    master, conf = LOCAL, {}
    other = "/usr/bin/python3"  # an interpreter that may not have PySpark installed
    if how.startswith("switched"):
        monkeypatch.setenv(sh.SWITCH, how.removeprefix("switched "))
    elif how in ("yarn", "standalone", "k8s"):
        # A cluster's executors have their own home; YARN ships pyspark.zip from this one.
        master = {"yarn": "yarn", "standalone": "spark://h:7077", "k8s": "k8s://h:443"}[how]
    elif how.startswith("PYSPARK"):
        monkeypatch.setenv(how, other)
    elif how.startswith("spark."):
        conf = {how: other}
    elif how == "pyspark on a path added at run time":  # a new process would not find it
        monkeypatch.setattr(sh.site, "getsitepackages", lambda: [str(tmp_path)])
        monkeypatch.setattr(sh.site, "getusersitepackages", lambda: str(tmp_path))
        monkeypatch.delenv("PYTHONPATH", raising=False)
    elif how == "a relative cache":
        monkeypatch.chdir(tmp_path)
        monkeypatch.setenv("XDG_CACHE_HOME", "relative-cache")
    else:
        monkeypatch.setenv("PYSPARK_GATEWAY_PORT", "1")
    if how != "under spark-submit":
        assert sh.compiled_spark_home(master, conf) is None
        assert sh.spark_home(master, conf) == sh.pyspark_home()
    with sh.using_spark_home(master, conf):
        assert "SPARK_HOME" not in os.environ
    assert not cache.exists() or how == "under spark-submit"
    assert not (tmp_path / "relative-cache").exists()


def test_a_umask_opening_directories_to_the_group_is_closed_again(cache):
    before = os.umask(0o002)
    try:
        home = sh.compiled_spark_home(LOCAL)
    finally:
        os.umask(before)
    assert home is not None
    for directory in (home.parent, home, home / "python", home / "python" / "lib"):
        assert not directory.stat().st_mode & 0o022, directory
    cache.chmod(0o775)  # made so before, by another program or an older version
    assert sh.compiled_spark_home(LOCAL) == home
    assert not cache.stat().st_mode & 0o022


def test_another_layout_of_pysparks_home_is_another_directory(cache, monkeypatch):
    home = sh.compiled_spark_home(LOCAL)
    wanted = sh._wanted_links(sh.pyspark_home())
    monkeypatch.setattr(sh, "_wanted_links",
                        lambda found: {**wanted, "conf": found / "conf-added-later"})
    other = sh.compiled_spark_home(LOCAL)
    assert other is not None and other != home
    assert os.readlink(other / "conf") == str(sh.pyspark_home() / "conf-added-later")


def test_a_venvs_python_is_not_its_base_interpreter(cache, monkeypatch):
    base = os.path.realpath(sys.executable)
    if base == os.path.abspath(sys.executable):
        pytest.skip("this interpreter is not a link into another")
    monkeypatch.setenv("PYSPARK_PYTHON", base)
    assert sh.compiled_spark_home(LOCAL) is None


@pytest.mark.parametrize("spoil", ["others may write", "the cache a link elsewhere",
                                   "a link elsewhere", "a jar linked elsewhere",
                                   "a copied jar others may write", "the zip back",
                                   "a plain file"])
def test_a_home_not_as_made_is_left_alone_and_not_used(cache, tmp_path, spoil):
    home = sh.compiled_spark_home(LOCAL)
    if spoil == "others may write":
        home.chmod(0o777)
    elif spoil == "the cache a link elsewhere":
        home.parent.rename(tmp_path / "moved")
        home.parent.symlink_to(tmp_path / "moved")
    elif spoil == "a link elsewhere":
        (home / "bin").unlink()
        (home / "bin").symlink_to(tmp_path)
    elif spoil == "a jar linked elsewhere":
        jar = next(jar for jar in (home / "jars").iterdir() if jar.is_symlink())
        jar.unlink()
        jar.symlink_to(tmp_path / jar.name)
    elif spoil == "a copied jar others may write":
        copy = next(jar for jar in (home / "jars").iterdir() if not jar.is_symlink())
        copy.chmod(0o666)
    elif spoil == "the zip back":
        (home / "python" / "lib" / "pyspark.zip").write_bytes(b"")
    else:
        shutil.rmtree(home)
        home.write_text("")
    assert sh.compiled_spark_home(LOCAL) is None
    assert sh.spark_home(LOCAL) == sh.pyspark_home()
    assert os.path.lexists(home)  # not removed: it may be someone else's


def test_no_cache_directory_is_pysparks_own_home(cache, tmp_path, monkeypatch):
    (tmp_path / "cache").write_text("")  # a file where the cache directory would be
    assert sh.compiled_spark_home(LOCAL) is None
    assert sh.spark_home(LOCAL) == sh.pyspark_home()
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "with space"))
    assert sh.compiled_spark_home(LOCAL) is None
    assert not (tmp_path / "with space").exists()


def test_python_workers_import_pyspark_compiled_not_from_the_zip(spark):
    """The suite's SparkContext starts in the compiled home: its workers' PySpark is the
    installed package, with bytecode."""
    if os.environ.get("SPARK_HOME"):
        pytest.skip("a Spark home chosen for the suite is kept")
    found = spark.parallelize([0], 1).map(
        lambda _: (__import__("pyspark").__file__, __import__("os").environ["SPARK_HOME"])
    ).collect()
    module, home = found[0]
    assert ".zip" not in module, module
    assert home == str(sh.compiled_spark_home(LOCAL))
