"""The ``kafka-direct`` command line."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kafka-direct",
        description="The Kafka direct stream for PySpark, with exactly-once delivery into "
                    "PostgreSQL.")
    parser.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    commands = parser.add_subparsers(dest="command", required=True)
    demo = commands.add_parser(
        "demo", help="produce sample events and read them back in offset-range batches",
        description="Produce sample events into Kafka (the embedded broker unless "
                    "--bootstrap-servers is given) and read them back with "
                    "KafkaUtils.createRDD, one batch of offset ranges at a time.")
    demo.add_argument("--events", type=int, default=10_000, help="events to produce")
    demo.add_argument("--partitions", type=int, default=3, help="partitions of a new topic")
    demo.add_argument("--batch-size", type=int, default=1_000,
                      help="most offsets per partition in one batch")
    demo.add_argument("--topic", default="kafka-direct-demo", help="topic name")
    demo.add_argument("--bootstrap-servers", default=None,
                      help="an existing Kafka broker (default: start an embedded one)")
    demo.add_argument("--master", default="local[2,2]", help="Spark master")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code."""
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.command == "demo":
        from kafka_direct.demo import DemoOptions, run_demo

        for name in ("events", "partitions", "batch_size"):
            if getattr(args, name) <= 0:
                print(f"kafka-direct demo: --{name.replace('_', '-')} must be > 0",
                      file=sys.stderr)
                return 2
        result = run_demo(DemoOptions(
            events=args.events, partitions=args.partitions, batchSize=args.batch_size,
            topic=args.topic, bootstrapServers=args.bootstrap_servers, master=args.master),
            sys.stdout)
        ok = result.read == result.produced and result.duplicates == 0
        if not ok:
            print("kafka-direct demo: the batches did not cover the produced events exactly "
                  "once", file=sys.stderr)
        return 0 if ok else 1
    return 2


if __name__ == "__main__":
    sys.exit(main())
