"""The ``kafka-direct`` command line."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable, Sequence

from kafka_direct.app.stops import INTERRUPTED, OTHER_ERROR, exit_code, first_line
from kafka_direct.errors import ConfigurationError, KafkaDirectError
from kafka_direct.redaction import RedactingFormatter

__all__ = ["main"]

logger = logging.getLogger(__name__)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kafka-direct",
        description="The Kafka direct stream for PySpark, with exactly-once delivery into "
                    "PostgreSQL.")
    parser.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    commands = parser.add_subparsers(dest="command", required=True)
    demo = commands.add_parser(
        "demo", help="exactly-once ingestion into PostgreSQL, shown under a kill -9",
        description="Produce sample events, ingest them into PostgreSQL with the direct "
                    "stream, kill the job hard at a random moment, restart it, and verify "
                    "that every event is in the table exactly once. Starts an embedded "
                    "broker and PostgreSQL unless --bootstrap-servers / --dsn are given.")
    demo.add_argument("--events", type=int, default=20_000, help="events to produce")
    demo.add_argument("--partitions", type=int, default=3, help="partitions of the topic")
    demo.add_argument("--batch-interval", type=float, default=1.0, help="seconds per batch")
    demo.add_argument("--max-rate-per-partition", type=int, default=1_000,
                      help="records per second per partition")
    demo.add_argument("--sink", choices=("transactional", "idempotent"),
                      default="transactional", help="how rows and offsets are written")
    demo.add_argument("--kills", type=int, default=1, help="how often to kill the job")
    demo.add_argument("--seed", type=int, default=None, help="seed of the kill moments")
    demo.add_argument("--topic", default="kafka-direct-demo",
                      help="topic name (deleted and re-created; on a cluster given with "
                           "--bootstrap-servers an existing topic is refused unless "
                           "--recreate-topic)")
    demo.add_argument("--recreate-topic", action="store_true",
                      help="allow deleting and re-creating an existing --topic on the "
                           "--bootstrap-servers cluster (its records are lost)")
    demo.add_argument("--bootstrap-servers", default=None,
                      help="an existing Kafka broker (default: start an embedded one)")
    demo.add_argument("--dsn", default=None,
                      help="an existing PostgreSQL (default: start an embedded one)")
    demo.add_argument("--master", default="local[2]", help="Spark master of the job")
    from kafka_direct.app.ingest_arguments import EPILOG, add_arguments

    ingest = commands.add_parser(
        "ingest", help="run a direct stream from Kafka into a PostgreSQL table, exactly once",
        formatter_class=argparse.RawDescriptionHelpFormatter, epilog=EPILOG,
        description="Read Kafka topics with a direct stream and write every record into a "
                    "PostgreSQL table exactly once (offsets in the same transactions). Stop it "
                    "any way you like; running it again resumes from the stored offsets. "
                    "Without --bootstrap-servers and --dsn it starts an embedded broker and "
                    "PostgreSQL and produces sample events.")
    add_arguments(ingest)
    return parser


def _guarded(command: str, run: Callable[[], int]) -> int:
    """Run a sub-command: a mistake or an unreachable service is one line, never a traceback.

    Exit codes: what ``run`` returns (a job that stopped on a typed error returns its
    code, :mod:`kafka_direct.app.stops`); the code of a kafka-direct error raised before
    the job ran (2 for a ConfigurationError, a mistake in the options); 1 for any other
    error; 130 for a second Ctrl-C (the job stopped at once). ``-v``: with the details.
    """
    try:
        return run()
    except KafkaDirectError as error:
        print(f"kafka-direct {command}: {type(error).__name__}: {first_line(error, 2000)}",
              file=sys.stderr)
        if logging.getLogger().isEnabledFor(logging.INFO):
            logger.error("%s failed", command, exc_info=True)
        return exit_code(error)
    except KeyboardInterrupt:
        print(f"kafka-direct {command}: stopped at once; a batch cut short is read again by "
              "the next run", file=sys.stderr)
        return INTERRUPTED
    except Exception as error:  # a defect of ours or a library's: the details only with -v
        print(f"kafka-direct {command}: unexpected {type(error).__name__}: "
              f"{first_line(error)} (-v shows the details)", file=sys.stderr)
        if logging.getLogger().isEnabledFor(logging.INFO):
            logger.error("%s failed", command, exc_info=True)
        return OTHER_ERROR


def _run_ingest(args: argparse.Namespace) -> int:
    from kafka_direct.app.ingest_command import run_ingest_command

    return run_ingest_command(args, sys.stdout, sys.stderr)


def _run_demo(args: argparse.Namespace) -> int:
    from kafka_direct.app.demo import DemoOptions, run_demo
    from kafka_direct.app.ingest_arguments import MAX_PARTITIONS, check_batch_interval
    from kafka_direct.app.ingest_options import check_master
    from kafka_direct.app.kafka_cluster import check_topic_name

    for name in ("events", "partitions", "max_rate_per_partition"):
        if getattr(args, name) <= 0:
            raise ConfigurationError(f"--{name.replace('_', '-')} must be > 0, got "
                                     f"{getattr(args, name)}")
    if args.kills < 0:
        raise ConfigurationError(f"--kills must be >= 0, got {args.kills}")
    check_batch_interval(args.batch_interval)
    if args.partitions > MAX_PARTITIONS:
        raise ConfigurationError(f"--partitions must be 1 to {MAX_PARTITIONS}, got "
                                 f"{args.partitions}")
    check_master(args.master, "--master")
    check_topic_name(args.topic)
    from kafka_direct.runtime.jvm_archive import wanted

    wanted(True)  # a wrong KAFKA_DIRECT_JVM_ARCHIVE: refused before anything starts
    result = run_demo(DemoOptions(
        events=args.events, partitions=args.partitions, batchInterval=args.batch_interval,
        maxRatePerPartition=args.max_rate_per_partition, sink=args.sink, kills=args.kills,
        seed=args.seed, topic=args.topic, bootstrapServers=args.bootstrap_servers,
        dsn=args.dsn, master=args.master, recreateTopic=args.recreate_topic), sys.stdout)
    # A run of the job that stopped: its block is shown, and the demo exits with its code.
    return 0 if result.ok else (result.jobExitCode or OTHER_ERROR)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code."""
    args = _parser().parse_args(argv)
    handler = logging.StreamHandler()
    handler.setFormatter(RedactingFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        handlers=[handler])
    if args.command == "ingest":
        return _guarded("ingest", lambda: _run_ingest(args))
    if args.command == "demo":
        return _guarded("demo", lambda: _run_demo(args))
    return 2


if __name__ == "__main__":
    sys.exit(main())
