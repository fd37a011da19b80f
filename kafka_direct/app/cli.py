"""The ``kafka-direct`` command line."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from kafka_direct.errors import ConfigurationError, KafkaDirectError
from kafka_direct.redaction import RedactingFormatter, redact_text

__all__ = ["main"]


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
    demo.add_argument("--topic", default="kafka-direct-demo", help="topic name (re-created)")
    demo.add_argument("--bootstrap-servers", default=None,
                      help="an existing Kafka broker (default: start an embedded one)")
    demo.add_argument("--dsn", default=None,
                      help="an existing PostgreSQL (default: start an embedded one)")
    demo.add_argument("--master", default="local[2]", help="Spark master of the job")
    from kafka_direct.app.ingest_command import add_arguments

    ingest = commands.add_parser(
        "ingest", help="run a direct stream from Kafka into a PostgreSQL table, exactly once",
        description="Read Kafka topics with a direct stream and write every record into a "
                    "PostgreSQL table exactly once (offsets in the same transactions). Stop it "
                    "any way you like; running it again resumes from the stored offsets. "
                    "Without --bootstrap-servers and --dsn it starts an embedded broker and "
                    "PostgreSQL and produces sample events.")
    add_arguments(ingest)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code."""
    args = _parser().parse_args(argv)
    handler = logging.StreamHandler()
    handler.setFormatter(RedactingFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        handlers=[handler])
    if args.command == "ingest":
        from kafka_direct.app.ingest_command import run_ingest_command

        try:
            return run_ingest_command(args, sys.stdout)
        except KafkaDirectError as error:
            # A user's mistake or an unreachable service: say what, never a stack trace.
            print(f"kafka-direct ingest: {type(error).__name__}: {redact_text(str(error))}",
                  file=sys.stderr)
            return 2 if isinstance(error, ConfigurationError) else 1
    if args.command == "demo":
        from kafka_direct.app.demo import DemoOptions, run_demo

        for name in ("events", "partitions", "max_rate_per_partition"):
            if getattr(args, name) <= 0:
                print(f"kafka-direct demo: --{name.replace('_', '-')} must be > 0",
                      file=sys.stderr)
                return 2
        if args.kills < 0 or args.batch_interval <= 0:
            print("kafka-direct demo: --kills must be >= 0 and --batch-interval > 0",
                  file=sys.stderr)
            return 2
        result = run_demo(DemoOptions(
            events=args.events, partitions=args.partitions, batchInterval=args.batch_interval,
            maxRatePerPartition=args.max_rate_per_partition, sink=args.sink, kills=args.kills,
            seed=args.seed, topic=args.topic, bootstrapServers=args.bootstrap_servers,
            dsn=args.dsn, master=args.master), sys.stdout)
        return 0 if result.ok else 1
    return 2


if __name__ == "__main__":
    sys.exit(main())
