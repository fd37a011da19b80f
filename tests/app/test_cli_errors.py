"""`kafka-direct` answers every user mistake with one clear line, never a traceback.

One table, one row per case: argv, exit code, a phrase of the message; adding a case is
adding a row. Rows without a placeholder need no service and run in-process (they fail
before anything starts); rows naming ``{bootstrap}``, ``{dsn}`` or ``{schema}`` run the real
command in a subprocess against the test services. Every row also checks that no traceback
and no secret reaches the user, and that no environment variable nobody set is blamed.
"""

import subprocess
import sys

import pytest

from kafka_direct.app.cli import main

SECRET = "hunter2-not-shown"
NO_BROKER = "127.0.0.1:1"
QUICK = ["--kafka-param", "socket.timeout.ms=1000"]  # an unreachable broker fails in ~1 s
DEAD = ["--bootstrap-servers", NO_BROKER]
SERVICES = ["--bootstrap-servers", "{bootstrap}", "--dsn", "{dsn}"]  # the test services
SASL = ["--kafka-param", f"sasl.password={SECRET}", "--kafka-param",
        "security.protocol=SASL_PLAINTEXT", "--kafka-param", "sasl.mechanism=PLAIN",
        "--kafka-param", "sasl.username=u"]
UNSET = "KAFKA_DIRECT_TEST_UNSET"
NO_PG = "host=127.0.0.1 port=1 user=u connect_timeout=3"
ING, DEMO = "ingest", "demo"
SECONDS = "--batch-interval must be a number of seconds > 0"
NOT_A_TOPIC = "is not a valid Kafka topic name"
START = [ING, "--topic", "t", "--starting-offsets"]
WHOLE = "it must be an integer >= 0"

CASES = [  # (argv, exit code, phrase of the one line on stderr); {{ }} is a brace in argv
    ([ING, *DEAD, "--topic", "t", *QUICK], 1, "no Kafka broker answers at 127.0.0.1:1"),
    ([ING, *DEAD, *SASL, *QUICK], 1, "no Kafka broker answers"),
    ([ING, *SERVICES, "--topic", "no-such-topic-x1"], 1, "topic 'no-such-topic-x1' does not exist"),
    ([ING, *SERVICES, "--schema", "{schema}", "--pattern", "nothing-[0-9]+", "--batch-interval",
      "0.3", "--stop-after-idle", "2"], 0, "no topic matches the pattern 'nothing-[0-9]+' yet"),
    ([ING, "--topic", "t", "--pattern", "t.*"], 2, "give topics or a pattern"),
    ([ING, "--starting-offsets", "soon"], 2, "starting offsets must be earliest, latest or JSON"),
    ([ING, "--batch-interval", "0"], 2, SECONDS),
    ([ING, "--batch-interval", "-1"], 2, SECONDS),
    ([ING, "--batch-interval", "nan"], 2, SECONDS),
    ([ING, "--batch-interval", "inf"], 2, SECONDS),
    ([ING, "--batch-interval", "soon"], 2, "invalid float value"),
    ([ING, "--partitions", "0"], 2, "--partitions must be 1 to 100000"),
    ([ING, "--ui-port", "99999"], 2, "--ui-port must be 0 (any free port) to 65535"),
    ([ING, "--ui-port", "-1"], 2, "--ui-port must be 0 (any free port) to 65535"),
    ([ING, "--api", "structured", "--backpressure"], 2, "--backpressure is for --api dstream"),
    ([ING, "--api", "structured", "--sink", "idempotent"], 2,
     "--sink idempotent is for --api dstream"),
    ([ING, "--api", "structured", "--ui-port", "0"], 2, "--ui-port is for --api dstream"),
    ([ING, "--checkpoint-dir", "/tmp"], 2, "--checkpoint-dir is for --api structured"),
    ([ING, "--api", "rdd"], 2, "invalid choice: 'rdd'"),
    ([ING, "--max-rate-per-partition", "-5"], 2, "--max-rate-per-partition must be >= 0"),
    ([ING, "--stop-after-idle", "-1"], 2, "--stop-after-idle must be >= 0"),
    ([ING, "--sample-events", "-1"], 2, "--sample-events must be >= 0"),
    ([ING, "--topic", "bad topic!"], 2, f"'bad topic!' {NOT_A_TOPIC}"),
    ([ING, "--topic", ".."], 2, f"'..' {NOT_A_TOPIC}"),
    ([ING, "--topic", "t" * 250], 2, NOT_A_TOPIC),
    ([ING, "--pattern", "ev.*", "--sample-events", "10"], 2, "--sample-events needs --topic"),
    ([ING, "--pattern", "ev.*", "--create-topics"], 2, "--create-topics needs --topic"),
    ([ING, "--pattern", "ev(ents"], 2, "is not a valid regular expression"),
    ([ING, "--state-dir", "{file}"], 2, "is not a directory"),
    ([ING, "--state-dir", "{file}/below"], 2, "cannot be created: Not a directory"),
    ([ING, "--state-dir", "/proc/kafka-direct-state"], 2, "cannot be created"),
    ([ING, "--master", "spark://elsewhere:7077"], 2, "cannot reach the embedded services"),
    ([ING, *DEAD, "--master", "yarn"], 2, "cannot reach the embedded services"),
    ([ING, "--kafka-param", "no-equals-sign"], 2, "--kafka-param must look like key=value"),
    ([ING, "--kafka-param", f"sasl.password=env:{UNSET}"], 2, f"'{UNSET}', which is not set"),
    ([ING, "--kafka-param", "bootstrap.servers=b:9092"], 2, "set by --bootstrap-servers"),
    ([ING, *DEAD, "--kafka-param", "ssl.truststore.location=x"], 2, "properties are not accepted"),
    ([ING, "--kafka-properties", "{tmp}/missing.properties"], 2, "No such file or directory"),
    ([ING, "--kafka-properties", "{bad_properties}"], 2, "line 2: expected key=value"),
    ([ING, "--dsn", "x", "--dsn-file", "{file}"], 2, "give --dsn or --dsn-file, not both"),
    ([ING, "--dsn-file", "{tmp}/missing-dsn"], 2, "cannot be read: No such file or directory"),
    ([ING, "--dsn", f"env:{UNSET}"], 2, f"'{UNSET}', which is not set"),
    ([ING, "--dsn", f"host=db password {SECRET}"], 2, "not a valid libpq connection string"),
    ([ING, "--dsn", f"{NO_PG} password={SECRET}"], 72, "cannot connect to PostgreSQL"),
    ([ING, "--dsn", f"postgresql://u:{SECRET}@127.0.0.1:1/db"], 72, "cannot connect to PostgreSQL"),
    ([ING, "--master", "local[0]"], 2, "--master must be local, local[N]"),
    ([ING, "--master", "local[-1]"], 2, "--master must be local, local[N]"),
    ([ING, "--master", "garbage"], 2, "--master must be local, local[N]"),
    ([ING, "--batch-interval", "0.0001"], 2, "whole number of milliseconds, at least 1 ms"),
    ([*START, '{{"t": {{"0": 1.9}}}}'], 2, WHOLE),
    ([*START, '{{"t": {{"0": true}}}}'], 2, WHOLE),
    ([*START, '{{"t": {{"0": 1e30}}}}'], 2, WHOLE),
    ([*START, '{{"t": {{"0": 99999999999999999999}}}}'], 2,
     "it must be an integer >= 0 and at most 9223372036854775807"),
    ([*START, '{{"t": {{"-1": 3}}}}'], 2, "partition '-1' of topic 't' is not a partition number"),
    ([*START, '{{"t": {{"007": 3}}}}'], 2, "partition '007' of topic 't' is not a"),
    ([*START, '{{"t": {{"0": -3}}}}'], 2, "the offset of t-0 is -3; it must be an integer >= 0"),
    ([*START, '{{"u": {{"0": 3}}}}'], 2,
     "starting offsets name topics the job does not read: ['u']"),
    ([ING, "--pattern", "ev.*", "--starting-offsets", '{{"u": {{"0": 3}}}}'], 2,
     "topics the job does not read"),
    ([ING, *SERVICES, "--topic", "kd-cli-starting-partitions", "--create-topics", "--partitions",
      "1", "--starting-offsets", '{{"kd-cli-starting-partitions": {{"5": 0}}}}'], 2,
     "partitions that do not exist: ['kd-cli-starting-partitions-5']"),
    ([ING, "--pattern", ""], 2, "--pattern is empty"),
    ([ING, "--partitions", "100000000", "--create-topics"], 2, "--partitions must be 1 to 100000"),
    ([ING, "--dsn", f"{NO_PG} sslmode=bogus password={SECRET}"], 2,
     "--dsn has a parameter libpq refuses: invalid sslmode value"),
    ([ING, "--dsn-file", "{bad_dsn}"], 2, "bad.dsn has a parameter libpq refuses"),
    ([ING, "--dsn-file", "{unparsable_dsn}"], 2, "unparsable.dsn is not a valid libpq"),
    ([DEMO, *DEAD], 1, "no Kafka broker answers at 127.0.0.1:1"),
    ([DEMO, "--master", "local[0]"], 2, "--master must be local, local[N]"),
    ([DEMO, "--batch-interval", "0.0001"], 2, "whole number of milliseconds"),
    ([DEMO, "--partitions", "100000000"], 2, "--partitions must be 1 to 100000"),
    ([DEMO, "--events", "0"], 2, "--events must be > 0"),
    ([DEMO, "--kills", "-1"], 2, "--kills must be >= 0"),
    ([DEMO, "--batch-interval", "nan"], 2, SECONDS),
    ([DEMO, "--topic", "bad topic!"], 2, f"'bad topic!' {NOT_A_TOPIC}"),
]


def _fill(argv, values):
    return [arg.format(**values) for arg in argv]


def _case(argv, code, phrase):
    """A row; one that runs against the test services is marked ``services``."""
    needs_services = any("{bootstrap}" in arg or "{dsn}" in arg for arg in argv)
    return pytest.param(argv, code, phrase, id=" ".join(argv)[:60],
                        marks=[pytest.mark.services] if needs_services else [])


@pytest.mark.parametrize("argv, code, phrase", [_case(*case) for case in CASES])
def test_mistakes_get_one_line_and_an_exit_code(argv, code, phrase, tmp_path, request,
                                                         capsys, monkeypatch):
    file = tmp_path / "a-file"
    file.write_text("x")
    bad = tmp_path / "bad.properties"
    bad.write_text(f"# SASL\nsasl.password {SECRET}\n")
    bad_dsn = tmp_path / "bad.dsn"
    bad_dsn.write_text(f"{NO_PG} sslmode=bogus password={SECRET}\n")
    unparsable_dsn = tmp_path / "unparsable.dsn"
    unparsable_dsn.write_text(f"host=db password {SECRET}\n")
    values = {"tmp": tmp_path, "file": file, "bad_properties": bad, "bad_dsn": bad_dsn,
              "unparsable_dsn": unparsable_dsn}
    joined = " ".join(argv)
    for name in ("KAFKA_DIRECT_PG_DSN", "KAFKA_DIRECT_BOOTSTRAP", "KAFKA_DIRECT_TEST_UNSET"):
        monkeypatch.delenv(name, raising=False)
    if "{bootstrap}" in joined or "{dsn}" in joined:
        values["bootstrap"] = request.getfixturevalue("kafka").bootstrap_servers
        values["dsn"] = request.getfixturevalue("postgres").dsn
        values["schema"] = request.getfixturevalue("pg_schema") if "{schema}" in joined else ""
        done = subprocess.run([sys.executable, "-m", "kafka_direct.app.cli",
                               *_fill(argv, values)], capture_output=True, text=True,
                              timeout=300)
        returned, out, err = done.returncode, done.stdout, done.stderr
    else:
        try:
            returned = main(_fill(argv, values))
        except SystemExit as exit_:  # argparse's own usage errors
            returned = exit_.code
        out, err = capsys.readouterr()
    assert returned == code, out[-2000:] + err[-2000:]
    assert phrase in err, err
    # One line says it, headed by the command (argparse's own errors included).
    assert any(line.startswith(f"kafka-direct {argv[0]}") and phrase in line
               for line in err.splitlines()), err
    assert "Traceback" not in out + err
    assert SECRET not in out + err
    assert "KAFKA_DIRECT_BOOTSTRAP" not in err  # never blame a variable nobody set


def test_a_bad_dsn_from_the_environment_is_named_by_its_variable(monkeypatch, capsys):
    monkeypatch.setenv("KAFKA_DIRECT_PG_DSN", f"{NO_PG} sslmode=bogus password={SECRET}")
    assert main([ING]) == 2
    err = capsys.readouterr().err
    assert "the environment variable KAFKA_DIRECT_PG_DSN has a parameter libpq refuses" in err
    assert "--dsn " not in err and SECRET not in err


@pytest.mark.parametrize("command", [ING, DEMO])
def test_a_wrong_jvm_archive_switch_is_refused_before_anything_starts(command, monkeypatch,
                                                                     capsys):
    monkeypatch.setenv("KAFKA_DIRECT_JVM_ARCHIVE", "maybe")
    monkeypatch.delenv("KAFKA_DIRECT_BOOTSTRAP", raising=False)
    started = []
    from kafka_direct.app import demo, ingest_command

    for module in (ingest_command, demo):  # nothing may start: no broker, no PostgreSQL
        monkeypatch.setattr(module, "services", lambda *a, **k: started.append(1))
    assert main([command]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "KAFKA_DIRECT_JVM_ARCHIVE must be 'on' or 'off'" in err
    assert not started


def test_a_configuration_error_of_the_job_before_any_batch_is_exit_2(
        kafka, kafka_topic, postgres, pg_schema, monkeypatch, capsys):
    from kafka_direct.app import ingest_command
    from kafka_direct.errors import ConfigurationError

    topic = kafka_topic(partitions=1)
    argv = [ING, "--bootstrap-servers", kafka.bootstrap_servers, "--dsn", postgres.dsn,
            "--schema", pg_schema, "--topic", topic]
    batches = {"n": 0}

    def failing(*args, result, **kwargs):
        result.batches = batches["n"]
        raise ConfigurationError("a mistake the job found")

    monkeypatch.setattr(ingest_command, "run_ingest", failing)
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert "ConfigurationError: a mistake the job found" in err and "resume" not in out
    batches["n"] = 3  # after batches ran, it is a stop: its block, and the same exit code
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("kafka-direct ingest stopped: ConfigurationError: a mistake the job")
    assert "it resumes from the stored offsets" in err


def test_ingest_help_documents_the_real_cluster_options(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["ingest", "--help"])
    assert exit_.value.code == 0
    shown = capsys.readouterr().out
    for option in ("--bootstrap-servers", "--create-topics", "--kafka-properties FILE",
                   "--kafka-param KEY=VALUE", "--dsn-file FILE", "KAFKA_DIRECT_PG_DSN",
                   "--master", "spark.task.maxFailures", "SIGTERM", "real clusters:"):
        assert option in shown, option
