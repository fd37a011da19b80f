"""The driver JVM's command built without Spark's launcher: equal to the launcher's, or not used."""

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from kafka_direct.runtime import driver_launch
from kafka_direct.runtime.driver_launch import (
    READ_ENVIRONMENT,
    READ_SETTINGS,
    SWITCH,
    DriverCommand,
    direct_command,
)
from kafka_direct.runtime.spark_home import compiled_spark_home

#: Variables a shell sets for itself; not part of what is compared.
SHELL_OWN = {"_", "SHLVL", "PWD", "OLDPWD"}

# An archive that does not exist: only the option's shape matters to the launcher.
ARCHIVE_LIKE = ("-XX:+UseSerialGC -XX:TieredStopAtLevel=1 "
                f"-XX:SharedArchiveFile={Path(tempfile.gettempdir()) / 'kd-none.jsa'} "
                "-Xlog:cds=off -Xlog:cds+dynamic=off")

SETTINGS = {
    "defaults": [("spark.master", "local[2]"), ("spark.app.name", "kafka-direct")],
    "the ingest job's": [
        ("spark.master", "local[2,4]"), ("spark.app.name", "kafka-direct ingest"),
        ("spark.driver.extraJavaOptions", ARCHIVE_LIKE),
        ("spark.python.unix.domain.socket.enabled", "true"), ("spark.ui.enabled", "false"),
        ("spark.sql.shuffle.partitions", "4"), ("spark.driver.host", "127.0.0.1"),
        ("spark.python.daemon.module", "kafka_direct.runtime.worker_daemon"),
        ("spark.kdtest.spaces", "a value with spaces = and more")],
    "memory and options": [
        ("spark.master", "local"), ("spark.driver.memory", "2g"),
        ("spark.driver.extraJavaOptions", "  -Dkdtest.one=1\t-XX:+UseSerialGC  ")],
}


def clean_environment(**extra):
    env = {key: value for key, value in os.environ.items()
           if key not in READ_ENVIRONMENT and key not in (
               "SPARK_HOME", "JAVA_HOME", SWITCH, "PYSPARK_GATEWAY_PORT",
               "PYSPARK_GATEWAY_SECRET", "SPARK_SCALA_VERSION")}
    return {**env, **extra}


@pytest.fixture(scope="module")
def home():
    found = compiled_spark_home("local[2]")
    if found is None or shutil.which("java") is None:
        pytest.skip("no compiled Spark home or no java here")
    return found


def built(pairs, home, env):
    command = direct_command(pairs, home, env)
    assert isinstance(command, DriverCommand), command
    return command


def normalised(argv):
    """``argv`` with its ``--conf`` pairs sorted: Spark's launcher writes them from a hash map."""
    argv = list(argv)
    start = argv.index("org.apache.spark.deploy.SparkSubmit") + 1
    pairs = sorted(zip(argv[start:-1:2], argv[start + 1:-1:2], strict=True))
    assert all(flag == "--conf" for flag, _ in pairs)
    return argv[:start] + [text for pair in pairs for text in pair] + argv[-1:]


def launcher_command(home, pairs, env):
    """What Spark's launcher prints for spark-submit's ``pyspark-shell`` (see bin/spark-class)."""
    java = shutil.which("java", path=env.get("PATH"))
    args = [arg for key, value in pairs for arg in ("--conf", f"{key}={value}")]
    done = subprocess.run(
        [java, "-Xmx128m", "-cp", f"{home}/jars/*", "org.apache.spark.launcher.Main",
         "org.apache.spark.deploy.SparkSubmit", *args, "pyspark-shell"],
        env={**env, "SPARK_HOME": str(home), "SPARK_SCALA_VERSION": "2.13"},
        capture_output=True, timeout=60, check=True)
    printed = done.stdout.split(b"\0\n", 1)[1].split(b"\0")
    assert printed[-1] == b""
    return [arg.decode() for arg in printed[:-1]]


@pytest.mark.parametrize("case", SETTINGS)
def test_the_command_is_what_sparks_launcher_builds(home, case):
    pairs = SETTINGS[case]
    env = clean_environment()
    ours = built(pairs, home, env).argv
    theirs = launcher_command(home, pairs, env)
    # Every option in the launcher's order (the class path too: the class archive maps
    # only for the class path it was made with), the settings in any order.
    assert normalised(ours) == normalised(theirs)


def test_the_scripts_run_the_same_command_in_the_same_environment(home, tmp_path):
    # spark-submit, spark-class and Spark's launcher run as PySpark runs them, up to the
    # driver JVM, which a stand-in java records (argument by argument, its environment).
    java = Path(shutil.which("java")).resolve()
    stand_in = tmp_path / "jdk" / "bin" / "java"
    stand_in.parent.mkdir(parents=True)
    stand_in.write_text(
        "#!/bin/sh\n"
        "for arg in \"$@\"; do\n"
        f"  [ \"$arg\" = org.apache.spark.launcher.Main ] && exec {java} \"$@\"\n"
        "done\n"
        f"env -0 > {tmp_path}/env\n"
        f"printf '%s\\0' \"$0\" \"$@\" > {tmp_path}/argv\n")
    stand_in.chmod(0o755)
    pairs = SETTINGS["the ingest job's"]
    env = clean_environment(JAVA_HOME=str(tmp_path / "jdk"), PYTHONHASHSEED="123")
    connection = {"SPARK_CONNECT_MODE": "0", "_PYSPARK_DRIVER_CONN_INFO_PATH": "/nowhere"}
    args = [arg for key, value in pairs for arg in ("--conf", f"{key}={value}")]
    subprocess.run([f"{home}/bin/spark-submit", *args, "pyspark-shell"],
                   env={**env, "SPARK_HOME": str(home), **connection}, stdin=subprocess.PIPE,
                   check=True, timeout=60)
    ran = (tmp_path / "argv").read_bytes().decode().split("\0")[:-1]
    ran_env = dict(entry.split("=", 1) for entry in
                   (tmp_path / "env").read_bytes().decode().split("\0")[:-1])

    ours = built(pairs, home, env)
    assert normalised(ours.argv) == normalised(ran)
    expected = {**env, **ours.environment, **connection}
    assert {k: v for k, v in ran_env.items() if k not in SHELL_OWN} == {
        k: v for k, v in expected.items() if k not in SHELL_OWN}


def test_the_gateway_imports_are_pysparks():
    from pyspark import java_gateway

    source = Path(java_gateway.__file__).read_text()
    assert tuple(re.findall(r'java_import\(gateway\.jvm, "([^"]+)"\)', source)) == \
        driver_launch._JAVA_IMPORTS


def fake_home(tmp_path, launcher="spark-launcher_2.13-4.3.0.jar",
              slf4j=("slf4j-api-2.0.17.jar",)):
    jars = tmp_path / "home" / "jars"
    jars.mkdir(parents=True)
    for name in (launcher, *slf4j, "spark-core_2.13-4.3.0.jar"):
        (jars / name).write_bytes(b"")
    return tmp_path / "home"


LOCAL = [("spark.master", "local[2]")]


def test_a_fake_home_is_launched_directly(tmp_path):
    # The cases below differ from this one by the one thing named.
    assert isinstance(direct_command(LOCAL, fake_home(tmp_path), clean_environment()),
                      DriverCommand)


@pytest.mark.parametrize("name", READ_ENVIRONMENT)
def test_each_environment_variable_the_launcher_reads_keeps_its_launch(tmp_path, name):
    reason = direct_command(LOCAL, fake_home(tmp_path), clean_environment(**{name: "x"}))
    assert reason == f"{name} is set"


@pytest.mark.parametrize("key", [*READ_SETTINGS, "SPARK.JARS.PACKAGES"])
def test_each_setting_the_launcher_reads_keeps_its_launch(tmp_path, key):
    reason = direct_command([*LOCAL, (key, "x")], fake_home(tmp_path), clean_environment())
    assert reason == f"{key} is set"


@pytest.mark.parametrize(("pairs", "env", "reason"), [
    ([("spark.master", "local-cluster[2,1,1024]")], {}, "the master is not local"),
    ([("spark.master", "spark://host:7077")], {}, "the master is not local"),
    ([], {}, "the master is not local"),
    (LOCAL, {"SPARK_HOME": "/opt/spark"}, "SPARK_HOME is set"),
    (LOCAL, {SWITCH: "off"}, f"{SWITCH} turns it off"),
    (LOCAL, {"JAVA_HOME": "/nonexistent"}, "no java to run"),
    ([*LOCAL, ("spark.driver.memory", "2 g")], {}, "spark.driver.memory is not a plain size"),
    ([*LOCAL, ("spark.driver.extraJavaOptions", "-Dx='a b'")], {},
     "spark.driver.extraJavaOptions holds quotes"),
    ([*LOCAL, ("spark.driver.extraJavaOptions", "-Dx=a\\ b")], {},
     "spark.driver.extraJavaOptions holds quotes"),
    ([*LOCAL, ("spark.driver.extraJavaOptions", "-Xmx2g")], {},
     "spark.driver.extraJavaOptions sets -Xmx"),
    ([*LOCAL, ("spark.kdtest", "a\rb")], {}, "a setting holds a carriage return"),
])
def test_what_is_not_handled_here_keeps_sparks_launch(tmp_path, pairs, env, reason):
    found = direct_command(pairs, fake_home(tmp_path), clean_environment(**env))
    assert isinstance(found, str) and found.startswith(reason), found


def path_with_java(tmp_path, script):
    """A PATH whose ``java`` is ``script`` (a version manager's shim, as jenv's or asdf's)."""
    shims = tmp_path / "manager" / "shims"
    shims.mkdir(parents=True)
    shim = shims / "java"
    shim.write_text(script)
    shim.chmod(0o755)
    return f"{shims}:{os.environ.get('PATH', '')}"


@pytest.mark.skipif(shutil.which("java") is None, reason="no java here")
def test_a_java_shim_on_the_path_keeps_sparks_launch(tmp_path):
    # Spark's scripts run the shim and its launcher names the runtime the shim ran; the
    # folder above the shim's is no runtime, whose bin/java does not exist.
    path = path_with_java(tmp_path, f'#!/bin/sh\nexec "{shutil.which("java")}" "$@"\n')
    found = direct_command(LOCAL, fake_home(tmp_path), clean_environment(PATH=path))
    assert found == "no java to run"


def test_a_java_linked_to_another_program_keeps_sparks_launch(tmp_path):
    # A shim that is a link to the manager's own binary (as mise's): resolved, no runtime.
    manager = tmp_path / "manager" / "bin"
    manager.mkdir(parents=True)
    (manager / "mise").write_text("#!/bin/sh\n")
    (manager / "mise").chmod(0o755)
    shims = tmp_path / "shims"
    shims.mkdir()
    (shims / "java").symlink_to(manager / "mise")
    found = direct_command(LOCAL, fake_home(tmp_path),
                           clean_environment(PATH=f"{shims}:{os.environ.get('PATH', '')}"))
    assert found == "no java to run"


@pytest.mark.skipif(shutil.which("java") is None, reason="no java here")
def test_the_paths_java_names_its_runtimes_binary(tmp_path):
    found = direct_command(LOCAL, fake_home(tmp_path), clean_environment())
    assert isinstance(found, DriverCommand)
    runtime = Path(shutil.which("java")).resolve().parent.parent
    assert found.argv[0] == str(runtime / "bin" / "java")


def test_a_home_with_a_conf_folder_keeps_sparks_launch(tmp_path):
    home = fake_home(tmp_path)
    (home / "conf").mkdir()
    assert direct_command(LOCAL, home, clean_environment()) == \
        "the Spark home has a conf folder"


def test_no_compiled_home_keeps_sparks_launch():
    assert direct_command(LOCAL, None, clean_environment()) == \
        "the compiled Spark home does not apply"


@pytest.mark.parametrize(("launcher", "slf4j", "reason"), [
    ("spark-launcher_2.13-3.5.1.jar", ("slf4j-api-2.0.7.jar",), "Spark's launcher rules"),
    ("spark-launcher_2.13-5.0.0.jar", ("slf4j-api-2.0.7.jar",), "Spark's launcher rules"),
    ("spark-launcher_2.13-4.3.0.jar", (), "the jars folder has no single slf4j-api jar"),
    ("spark-launcher_2.13-4.3.0.jar", ("slf4j-api-1.jar", "slf4j-api-2.jar"),
     "the jars folder has no single slf4j-api jar"),
])
def test_a_spark_whose_launcher_is_not_known_keeps_its_launch(tmp_path, launcher, slf4j,
                                                              reason):
    found = direct_command(LOCAL, fake_home(tmp_path, launcher, slf4j), clean_environment())
    assert isinstance(found, str) and found.startswith(reason), found


APP = """
import logging, os, sys, time
logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
logging.getLogger("kafka_direct").setLevel(logging.DEBUG)  # py4j's own logs its protocol
from kafka_direct.runtime.spark import spark_context
with spark_context("local[2]", own_session=OWN) as sc:
    pid = sc._gateway.proc.pid
    params = getattr(sc._gateway, "java_parameters", None) or sc._gateway.gateway_parameters
    secret = params.auth_token
    cmdline = open(f"/proc/{pid}/cmdline", "rb").read()
    environ = open(f"/proc/{pid}/environ", "rb").read()
    total = sc.parallelize(range(1000), 4).map(lambda x: x * 2).sum()
    print("JVM", pid, total, os.path.basename(cmdline.split(b"\\0")[0].decode()),
          "secret-in-cmdline" if secret.encode() in cmdline else "-",
          "secret-in-environ" if secret.encode() in environ else "-", flush=True)
    print("SECRET", secret, file=open(os.environ["KDTEST_SECRET_FILE"], "w"))
    if os.environ.get("KDTEST_HANG"):
        print("HANGING", flush=True)
        time.sleep(600)
print("STOPPED", flush=True)
"""


def run_app(tmp_path, own_session=False, **env):
    script = tmp_path / "app.py"
    script.write_text(APP.replace("OWN", str(own_session)))
    return subprocess.Popen(
        [sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, env={**clean_environment(), "KDTEST_SECRET_FILE": str(tmp_path / "secret"),
                        **env})


def gone(pid, seconds):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.1)
    return False


@pytest.mark.parametrize("own_session", [False, True])
def test_a_context_launched_directly_works_and_leaves_no_jvm(tmp_path, own_session):
    app = run_app(tmp_path, own_session)
    out, err = app.communicate(timeout=180)
    assert app.returncode == 0, out + err[-3000:]
    words = next(line for line in out.splitlines() if line.startswith("JVM")).split()
    pid = int(words[1])
    assert words[2:] == ["999000", "java", "-", "-"]
    assert "STOPPED" in out
    assert "its command built here" in err
    # The secret only in the gateway's client: not in any log line, nor the output.
    secret = (tmp_path / "secret").read_text().split()[1]
    assert secret not in out and secret not in err
    assert gone(pid, 30), "the driver JVM outlived the interpreter"


def test_the_jvm_dies_with_a_killed_python(tmp_path):
    app = run_app(tmp_path, own_session=True, KDTEST_HANG="1")
    pid = None
    assert app.stdout is not None
    for line in app.stdout:
        if line.startswith("JVM"):
            pid = int(line.split()[1])
        if line.startswith("HANGING"):
            break
    assert pid is not None
    app.send_signal(signal.SIGKILL)
    app.wait(timeout=30)
    # The JVM reads its input pipe, which closed with the killed interpreter.
    assert gone(pid, 30), "the driver JVM outlived a killed interpreter"


def test_what_the_launcher_reads_starts_the_jvm_through_it(tmp_path):
    app = run_app(tmp_path, SPARK_SUBMIT_OPTS="-Dkdtest.submit=1")
    out, err = app.communicate(timeout=180)
    assert app.returncode == 0, out + err[-3000:]
    assert "through spark-submit: SPARK_SUBMIT_OPTS is set" in err
    pid = int(next(line for line in out.splitlines() if line.startswith("JVM")).split()[1])
    assert gone(pid, 30)


DIES = """
from kafka_direct.runtime import spark
try:
    spark._make_context("local[1]", "x", {"spark.driver.extraJavaOptions": "-Xss1k"},
                        own_session=True)
except Exception as error:
    print("RAISED", type(error).__name__, flush=True)
"""


def test_a_jvm_that_dies_at_start_raises_as_pysparks_launch_and_shows_its_words(home):
    done = subprocess.run([sys.executable, "-c", DIES], env=clean_environment(),
                          capture_output=True, text=True, timeout=120)
    assert "RAISED PySparkRuntimeError" in done.stdout, done.stdout + done.stderr
    assert "Could not create the Java Virtual Machine" in done.stderr


def _jvm_facts(command):
    """The launched JVM's system properties, and the main class it runs."""
    gateway = driver_launch.launch_gateway(command)
    try:
        properties = gateway.jvm.System.getProperties()
        facts = {str(key): str(properties.get(key)) for key in properties.keySet()}
    finally:
        gateway.shutdown()
        gateway.proc.stdin.close()
        gateway.proc.wait(timeout=30)
    return facts


@pytest.mark.services
@pytest.mark.parametrize("case", SETTINGS)
def test_the_gateway_runs_without_sparksubmit_with_the_properties_it_would_set(
        home, monkeypatch, case):
    # SparkSubmit only sets system properties before it runs PySpark's gateway for a local
    # pyspark-shell: the JVM runs the gateway itself with the same ones, and starts sooner.
    pairs = SETTINGS[case]
    command = built(pairs, home, clean_environment())
    direct = _jvm_facts(command)
    monkeypatch.setattr(driver_launch, "gateway_argv", lambda argv, _: tuple(argv))
    submitted = _jvm_facts(command)
    assert submitted["sun.java.command"].startswith("org.apache.spark.deploy.SparkSubmit ")
    assert direct["sun.java.command"] == driver_launch.GATEWAY_CLASS
    for facts in (direct, submitted):
        del facts["sun.java.command"]
        assert abs(int(facts.pop("spark.app.submitTime")) - time.time() * 1000) < 120_000
    assert direct == submitted
    assert all(direct[key] == value for key, value in pairs
               if key != "spark.driver.extraJavaOptions")


@pytest.mark.parametrize("argv", [
    ("java", "org.apache.spark.deploy.SparkSubmit", "--conf", "a=b"),
    ("java", "org.apache.spark.deploy.SparkSubmit", "--jars", "x.jar", "pyspark-shell"),
    ("java", "Other", "pyspark-shell"),
])
def test_only_a_command_of_conf_settings_becomes_the_gateways(argv):
    with pytest.raises(ValueError):
        driver_launch.gateway_argv(argv, 0)


def test_what_is_given_wins_over_what_sparksubmit_adds():
    argv = driver_launch.gateway_argv(
        ("java", "-Xmx1g", "org.apache.spark.deploy.SparkSubmit", "--conf",
         "spark.app.submitTime=5", "--conf", "k=a=b", "pyspark-shell"), 7)
    assert argv == ("java", "-Xmx1g", "-Dspark.app.submitTime=5", "-Dk=a=b",
                    "-Dspark.app.name=pyspark-shell", "-Dspark.submit.deployMode=client",
                    "-Dspark.submit.pyFiles=", "-Dspark.ui.showConsoleProgress=true",
                    "-DSPARK_SUBMIT=true", driver_launch.GATEWAY_CLASS)
