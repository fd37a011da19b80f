"""The ``ingest`` sub-command's options, checked before anything starts.

:func:`add_arguments` declares them and :func:`settings_from_args` turns the parsed
arguments into :class:`IngestSettings` (the job's
:class:`~kafka_direct.app.ingest_options.IngestOptions` and what the command sets up around
it: the services, the topics, the secrets resolved), raising :class:`ConfigurationError`
for every mistake it can see without a broker or a database (a bad topic name, a port out
of range, an unusable state directory...), so a typo costs a second, not a started Spark.
"""

from __future__ import annotations

import argparse
import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from kafka_direct.app.ingest_options import TASK_ATTEMPTS, IngestOptions, check_master
from kafka_direct.app.kafka_cluster import check_topic_name
from kafka_direct.app.kafka_properties import ENV_PREFIX, kafka_params
from kafka_direct.app.stops import EXIT_CODES_HELP
from kafka_direct.app.typed.options import TypedOptions, options_from_args
from kafka_direct.app.typed.options import add_arguments as add_record_arguments
from kafka_direct.errors import ConfigurationError

__all__ = ["DEFAULT_TOPIC", "DSN_ENV", "EPILOG", "MAX_PARTITIONS", "IngestSettings",
           "add_arguments", "check_batch_interval", "describe", "settings_from_args",
           "spark_master"]


DEFAULT_TOPIC = "kafka-direct-events"
DSN_ENV = "KAFKA_DIRECT_PG_DSN"

#: The most partitions a topic the job creates may have.
MAX_PARTITIONS = 100_000

EPILOG = f"""\
real clusters:
  Topics must exist unless --create-topics is given (a typo fails, it creates nothing).
  SASL/SSL and other librdkafka properties come from --kafka-properties FILE (key=value
  lines, # comments) and --kafka-param key=value (repeatable, wins over the file); they
  apply to the stream and to every client the job creates. A value env:NAME is read from
  the environment variable NAME.

secrets:
  The command line is visible to other users of the machine (ps, /proc). Keep passwords
  off it: the DSN from ${DSN_ENV}, --dsn-file or --dsn env:NAME (or libpq's PGPASSWORD
  and ~/.pgpass); Kafka secrets from --kafka-properties or env:NAME values. Errors, logs
  and the summary never show them.

spark:
  --master local[N] runs N task slots with {TASK_ATTEMPTS} attempts per task (local[N,F] chooses
  F). A cluster master (spark://, yarn, k8s://) keeps Spark's defaults and spark-submit's
  settings, with spark.task.maxFailures={TASK_ATTEMPTS} unless set there; it needs
  --bootstrap-servers and --dsn reachable from the executors. The driver binds to
  127.0.0.1 only while the job runs an embedded broker or PostgreSQL.

stopping:
  Ctrl-C or SIGTERM stops after the running batch: it finishes and commits, no batch
  starts after it (one queued behind it reads and writes nothing: the next run reads
  it), and the summary is printed (exit 0). A second signal stops at once
  (exit 130); the cancelled batch is read again by the next run.
  A job that stops on an error prints one short block on stderr: what happened, where
  (topic, partition, offset), what to do, where the dead letters are; --verbose adds
  Spark's report and the traceback. Running it again resumes from the stored offsets.

{EXIT_CODES_HELP}
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``ingest`` sub-command's options."""
    kafka = parser.add_argument_group("Kafka")
    kafka.add_argument("--bootstrap-servers", default=None,
                       help="Kafka brokers (default: start an embedded broker)")
    kafka.add_argument("--topic", action="append", dest="topics", default=None,
                       help=f"topic to read (repeatable; default {DEFAULT_TOPIC} with the "
                            "embedded broker); it must exist unless --create-topics")
    kafka.add_argument("--pattern", default=None,
                       help="read every topic whose whole name matches this Python regular "
                            "expression instead (topics created later too)")
    kafka.add_argument("--create-topics", "--create-topic", action="store_true",
                       help="create missing --topic topics with --partitions partitions "
                            "(always done with the embedded broker)")
    kafka.add_argument("--partitions", type=int, default=3,
                       help="partitions of a topic the job creates (default 3)")
    kafka.add_argument("--kafka-properties", metavar="FILE", default=None,
                       help="librdkafka client properties (security.protocol, sasl.*, ssl.*) "
                            "from a key=value file")
    kafka.add_argument("--kafka-param", metavar="KEY=VALUE", action="append", default=[],
                       help="one librdkafka property (repeatable; wins over the file); "
                            "VALUE env:NAME reads the environment variable NAME")
    kafka.add_argument("--group", default="kafka-direct-ingest",
                       help="consumer group the offsets are stored under; each batch's end offsets "
                       "are also committed to this Kafka consumer group after the batch "
                       "commits, so Kafka's group tools show the job's lag (monitoring only: "
                       "the job resumes from the offsets in PostgreSQL)")
    kafka.add_argument("--starting-offsets", default="earliest",
                       help='where partitions without stored offsets start: earliest, latest '
                            'or JSON {"topic": {"0": 42}}')
    pg = parser.add_argument_group("PostgreSQL")
    pg.add_argument("--dsn", default=None,
                    help=f"libpq connection string (env:NAME reads a variable); default "
                         f"${DSN_ENV}, else an embedded PostgreSQL. Visible to other users "
                         "on the command line: prefer the variable or --dsn-file")
    pg.add_argument("--dsn-file", metavar="FILE", default=None,
                    help="read the connection string from this file")
    pg.add_argument("--table", default="kafka_events",
                    help="target table, or a template with {topic} for a table per topic "
                         "(e.g. '{topic}' or 'kafka_{topic}'; dots in the topic become "
                         "underscores)")
    pg.add_argument("--schema", default="public", help="schema of the tables")
    job = parser.add_argument_group("job")
    job.add_argument("--batch-interval", type=float, default=2.0, help="seconds per batch")
    job.add_argument("--max-rate-per-partition", type=int, default=0,
                     help="records per second per partition (0: no limit)")
    job.add_argument("--backpressure", action="store_true", help="PID backpressure")
    job.add_argument("--api", choices=("dstream", "structured"), default="dstream",
                     help="dstream: the direct stream (default); structured: a Structured "
                          "Streaming query, kafka-direct source -> kafka-direct-postgres sink "
                          "(needs PySpark 4.2+)")
    job.add_argument("--checkpoint-dir", default=None,
                     help="with --api structured: the query's checkpoint location (default: "
                          "a fresh one each run; the query resumes from PostgreSQL)")
    job.add_argument("--first-batch-records", type=int, default=None,
                     help="with --api structured: the most records the first batch of a run "
                          "reads, so its rows commit while the query warms up (default "
                          "10000; 0: capped as every batch)")
    job.add_argument("--available-now", action="store_true",
                     help="with --api structured: read what the topics hold when the query "
                          "starts, in batches one after another (each capped as "
                          "--max-rate-per-partition says), then end (Trigger.AvailableNow)")
    job.add_argument("--sink", choices=("transactional", "idempotent"),
                     default="transactional", help="how rows and offsets are written")
    job.add_argument("--stop-after-idle", type=int, default=None,
                     help="stop after this many batches in a row read nothing (default: "
                          "never, 1 with the embedded broker)")
    job.add_argument("--sample-events", type=int, default=None,
                     help="produce this many sample events into the first --topic first "
                          "(default 10000 with the embedded broker, else 0)")
    job.add_argument("--state-dir", default=None,
                     help="keep the embedded services' data here (a rerun resumes)")
    job.add_argument("--master", default="local[2]",
                     help=f"Spark master (default local[2]; a plain local[N] gets "
                          f"{TASK_ATTEMPTS} attempts per task)")
    job.add_argument("--ui-port", type=int, default=None,
                     help="serve the streaming statistics page and /metrics on 127.0.0.1 "
                          "at this port (0: any free port)")
    add_record_arguments(parser)


@dataclass(frozen=True, slots=True)
class IngestSettings:
    """Everything the ingest command needs, checked.

    Attributes:
        options: The job's options.
        bootstrapServers: The given cluster, or None for the embedded broker.
        dsn: The given database, or None for the embedded PostgreSQL.
        kafkaParams: librdkafka properties for every client (secrets resolved).
        createTopics: Create missing topics.
        partitions: Partitions of a created topic.
        sampleEvents: Sample events to produce into the first topic.
        stateDir: Where the embedded services keep their data (None: temporary).
        dsnSource: Where the DSN came from (``--dsn``, ``--dsn-file FILE``, an environment
            variable), for errors about it.
        records: How records become rows (None or raw: today's raw bytes).

    Its repr shows no secret: the DSN and the Kafka properties are redacted.
    """

    options: IngestOptions
    bootstrapServers: str | None
    dsn: str | None = field(repr=False)
    kafkaParams: dict[str, str] = field(repr=False)
    createTopics: bool
    partitions: int
    sampleEvents: int
    stateDir: Path | None
    dsnSource: str = "--dsn"
    checkpointDir: Path | None = None
    records: TypedOptions | None = None

    def __repr__(self) -> str:
        from kafka_direct.app.dsn_check import scrub
        from kafka_direct.redaction import redact_params

        shown = {f.name: repr(getattr(self, f.name)) for f in fields(self)}
        shown["dsn"] = "None" if self.dsn is None else repr(scrub(self.dsn, self.dsn))
        shown["kafkaParams"] = repr(redact_params(self.kafkaParams))
        return f"IngestSettings({', '.join(f'{k}={v}' for k, v in shown.items())})"

    @property
    def embedded(self) -> bool:
        """Whether any embedded service runs (then everything runs on this machine)."""
        return self.bootstrapServers is None or self.dsn is None


_LOCAL = re.compile(r"local(?:\[(?P<threads>\*|\d+)\])?")


def spark_master(master: str) -> str:
    """``master`` with task retries: a plain ``local``/``local[N]`` gets TASK_ATTEMPTS.

    Local mode gives a task a single attempt (it ignores spark.task.maxFailures), so one
    flaky read would fail the whole batch; ``local[N,F]``, ``local-cluster[...]`` and
    cluster masters are taken as given.
    """
    match = _LOCAL.fullmatch(master.strip())
    if match is None:
        return master
    return f"local[{match.group('threads') or 1},{TASK_ATTEMPTS}]"


def _dsn(args: argparse.Namespace, environ: Mapping[str, str]) -> tuple[str | None, str]:
    """(the DSN or None, where it came from)."""
    if args.dsn is not None and args.dsn_file is not None:
        raise ConfigurationError("give --dsn or --dsn-file, not both")
    if args.dsn_file is not None:
        source = f"--dsn-file {args.dsn_file}"
        try:
            text = Path(args.dsn_file).read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError) as error:
            reason = error.strerror if isinstance(error, OSError) else "not UTF-8 text"
            raise ConfigurationError(f"{source} cannot be read: {reason}") from error
        if not text:
            raise ConfigurationError(f"{source} is empty")
        return text, source
    if args.dsn is not None:
        dsn: str | None = args.dsn
        source = "--dsn"
    else:
        dsn = environ.get(DSN_ENV) or None
        source = f"the environment variable {DSN_ENV}"
    if dsn is not None and dsn.startswith(ENV_PREFIX):
        name = dsn[len(ENV_PREFIX):]
        dsn = environ.get(name) or None
        if dsn is None:
            raise ConfigurationError(f"{source} is taken from the environment variable "
                                     f"{name!r}, which is not set or empty")
        source = f"the environment variable {name} ({source})"
    if dsn is not None and not dsn.strip():
        raise ConfigurationError(f"{source} is empty")
    return dsn, source


def _state_dir(text: str | None) -> Path | None:
    if text is None:
        return None
    path = Path(text)
    if path.exists() and not path.is_dir():
        raise ConfigurationError(f"--state-dir {text} is not a directory")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise ConfigurationError(f"--state-dir {text} cannot be created: "
                                 f"{error.strerror}") from error
    if not os.access(path, os.R_OK | os.W_OK | os.X_OK):
        raise ConfigurationError(f"--state-dir {text} is not writable by this user")
    return path


def check_batch_interval(seconds: float) -> None:
    """Raise ConfigurationError unless ``seconds`` is a batch interval a stream accepts."""
    if not (math.isfinite(seconds) and seconds > 0):
        raise ConfigurationError(f"--batch-interval must be a number of seconds > 0, got "
                                 f"{seconds}")
    millis = seconds * 1000
    if round(millis) < 1 or abs(round(millis) - millis) > 1e-6:
        raise ConfigurationError(f"--batch-interval must be a whole number of milliseconds, "
                                 f"at least 1 ms (in seconds: 0.5, 2, 10), got {seconds}")


def _check_numbers(args: argparse.Namespace) -> None:
    check_batch_interval(args.batch_interval)
    if not 1 <= args.partitions <= MAX_PARTITIONS:
        raise ConfigurationError(f"--partitions must be 1 to {MAX_PARTITIONS}, got "
                                 f"{args.partitions}")
    if args.ui_port is not None and not 0 <= args.ui_port <= 65535:
        raise ConfigurationError(f"--ui-port must be 0 (any free port) to 65535, got "
                                 f"{args.ui_port}")
    for name in ("max_rate_per_partition", "stop_after_idle", "sample_events",
                 "first_batch_records"):
        value = getattr(args, name)
        if value is not None and value < 0:
            raise ConfigurationError(f"--{name.replace('_', '-')} must be >= 0, got {value}")


def _check_structured(args: argparse.Namespace) -> None:
    """Refuse what the Structured Streaming path does not do, naming the option."""
    api = getattr(args, "api", "dstream")
    if api != "structured":
        if getattr(args, "checkpoint_dir", None) is not None:
            raise ConfigurationError("--checkpoint-dir is for --api structured (the direct "
                                     "stream keeps its offsets in PostgreSQL only)")
        if getattr(args, "first_batch_records", None) is not None:
            raise ConfigurationError("--first-batch-records is for --api structured (the "
                                     "direct stream's batches follow "
                                     "--max-rate-per-partition from the first)")
        if getattr(args, "available_now", False):
            raise ConfigurationError("--available-now is for --api structured (the direct "
                                     "stream's batches follow its interval; end a run with "
                                     "--stop-after-idle)")
        return
    if getattr(args, "available_now", False) and args.stop_after_idle:  # 0: never, as it is
        raise ConfigurationError("--stop-after-idle is for a query that runs on: with "
                                 "--available-now the query ends by itself at the log ends "
                                 "of its start; drop one of them")
    from kafka_direct.sql.formats import check_structured_support

    check_structured_support()
    if args.sink != "transactional":
        raise ConfigurationError(f"--sink {args.sink} is for --api dstream; --api structured "
                                 "writes through the kafka-direct-postgres sink")
    if args.backpressure:
        raise ConfigurationError("--backpressure is for --api dstream; with --api structured "
                                 "use --max-rate-per-partition (a cap per trigger)")
    if args.ui_port is not None:
        raise ConfigurationError("--ui-port is for --api dstream; a structured query shows "
                                 "in Spark's own UI")


def settings_from_args(args: argparse.Namespace,
                       environ: Mapping[str, str] | None = None) -> IngestSettings:
    """Check the parsed options and resolve their secrets; nothing is started.

    Raises:
        ConfigurationError: The first mistake found, named with its option.
    """
    environ = os.environ if environ is None else environ
    from kafka_direct.runtime.jvm_archive import wanted

    wanted(True, environ)  # a wrong KAFKA_DIRECT_JVM_ARCHIVE: refused before anything starts
    _check_numbers(args)
    _check_structured(args)
    if args.topics and args.pattern:
        raise ConfigurationError("give topics or a pattern (one of them): --topic and "
                                 "--pattern exclude each other")
    for topic in args.topics or ():
        check_topic_name(topic)
    if args.pattern is not None and not args.pattern:
        raise ConfigurationError("--pattern is empty: give a regular expression of topic names "
                                 "(or --topic)")
    if args.pattern is not None:
        try:
            re.compile(args.pattern)
        except re.error as error:
            raise ConfigurationError(f"--pattern {args.pattern!r} is not a valid regular "
                                     f"expression: {error}") from error
        if args.sample_events:
            raise ConfigurationError("--sample-events needs --topic (the samples go into the "
                                     "first topic); --pattern names no topic to produce into")
        if args.create_topics:
            raise ConfigurationError("--create-topics needs --topic; --pattern names no "
                                     "topic to create")
    bootstrap = args.bootstrap_servers
    if bootstrap is not None and not bootstrap.strip():
        raise ConfigurationError("--bootstrap-servers is empty")
    dsn, dsnSource = _dsn(args, environ)
    embeddedKafka = bootstrap is None
    check_master(args.master.strip(), "--master")
    master = spark_master(args.master)
    if (embeddedKafka or dsn is None) and not master.startswith("local"):
        raise ConfigurationError(
            f"--master {args.master} runs executors elsewhere, which cannot reach the embedded "
            "services (they listen on 127.0.0.1): give --bootstrap-servers and --dsn")
    params = kafka_params(args.kafka_properties, args.kafka_param, environ)
    records = options_from_args(args, environ)
    topics = tuple(args.topics or (() if args.pattern else (DEFAULT_TOPIC,)))
    availableNow = bool(getattr(args, "available_now", False))
    options = IngestOptions(
        topics=topics, pattern=args.pattern, group=args.group, table=args.table,
        schema=args.schema, batchInterval=args.batch_interval,
        maxRatePerPartition=args.max_rate_per_partition, backpressure=args.backpressure,
        sink=args.sink, startingOffsets=args.starting_offsets,
        stopAfterIdleBatches=(args.stop_after_idle if args.stop_after_idle is not None
                              else 0 if availableNow else 1 if embeddedKafka else 0),
        master=master, uiPort=args.ui_port, api=getattr(args, "api", "dstream"),
        firstBatchRecords=getattr(args, "first_batch_records", None),
        availableNow=availableNow,
        # The embedded services listen on 127.0.0.1 only: then, and only then, the driver too.
        loopbackDriver=embeddedKafka or dsn is None)
    samples = args.sample_events if args.sample_events is not None else (
        10_000 if embeddedKafka and topics else 0)
    stateDir = _state_dir(args.state_dir) if embeddedKafka or dsn is None else None
    return IngestSettings(options=options, bootstrapServers=bootstrap, dsn=dsn,
                          kafkaParams=params, createTopics=args.create_topics or embeddedKafka,
                          partitions=args.partitions, sampleEvents=samples,
                          stateDir=stateDir, dsnSource=dsnSource,
                          checkpointDir=_state_dir(getattr(args, "checkpoint_dir", None)),
                          records=records)


def describe(settings: IngestSettings) -> dict[str, Any]:
    """The settings fit for a log line (secrets redacted)."""
    from kafka_direct.redaction import redact_params

    return {"bootstrap": settings.bootstrapServers or "embedded",
            "dsn": "given" if settings.dsn else "embedded",
            "kafkaParams": redact_params(settings.kafkaParams),
            "master": settings.options.master, "topics": settings.options.topics,
            "pattern": settings.options.pattern}
