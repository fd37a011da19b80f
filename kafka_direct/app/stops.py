"""How ``kafka-direct`` ends on a typed stop: one short block on stderr and an exit code.

A job that stops on one of kafka-direct's errors shows what happened (the error's class and
message), where (topic, partition, offset, group, table, as the error knows them), what to
do, and where the dead letters are when the job sets bad records aside; then it exits with
the code of that kind of stop (:data:`EXIT_CODES`, drawn in :data:`EXIT_CODES_HELP` for the
command's ``--help`` and in ``docs/ingest.md``). Spark's own report of the failure (a Java
stack, a Python traceback, the marker an error crosses from an executor with) stays off
the terminal unless ``--verbose``
(:func:`kafka_direct.runtime.spark_log.quiet_spark_log`).
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from kafka_direct.errors import KafkaDirectError
from kafka_direct.redaction import redact_text

__all__ = ["EXIT_CODES", "EXIT_CODES_HELP", "INTERRUPTED", "OTHER_ERROR", "REPORTING_LOGGERS",
           "StopKind", "exit_code", "first_line", "reported_once", "stop_block"]

#: Any other failure: a service that does not answer, a topic that does not exist, a defect.
OTHER_ERROR = 1
#: A second Ctrl-C (or SIGTERM) stopped the job at once.
INTERRUPTED = 130


@dataclass(frozen=True, slots=True)
class StopKind:
    """One kind of stop: its exit code, what it means and what to do about it.

    Attributes:
        code: The process's exit code.
        meaning: A few words for the table of exit codes.
        todo: What to do, shown under the error.
    """

    code: int
    meaning: str
    todo: str

    def __post_init__(self) -> None:
        if not 1 <= self.code <= 125 or not self.meaning or not self.todo:
            raise ValueError(f"a stop needs an exit code from 1 to 125, a meaning and what "
                             f"to do, got {self.code!r}, {self.meaning!r}, {self.todo!r}")


_RESUME = "then run the job again: it resumes from the stored offsets"

#: The kinds of stop by error class name, looked up along the error's class hierarchy
#: (DataLossError is a KafkaReadError). Codes 64-78 follow the spirit of BSD's sysexits.
KINDS: dict[str, StopKind] = {
    "ConfigurationError": StopKind(
        2, "a mistake in the options",
        f"fix the option the message names; {_RESUME}"),
    "BadRecordError": StopKind(
        65, "a bad record, with --on-bad-record fail",
        "fix the record's producer, or run with --on-bad-record dead-letter to set such "
        f"records aside in a table; {_RESUME} (nothing of the batch was written)"),
    "SchemaChangeError": StopKind(
        66, "a schema change the table cannot hold",
        "change the column (ALTER TABLE ... ALTER COLUMN ... TYPE ...) or the producer's "
        f"schema; {_RESUME}"),
    "SchemaRegistryError": StopKind(
        67, "the Schema Registry failed",
        "check that the Schema Registry answers at --schema-registry and accepts the "
        f"job's login; {_RESUME}"),
    "OffsetMismatchError": StopKind(
        68, "stored offsets moved under the job",
        "make sure only this job writes under its --group (the stored offsets are neither "
        f"the batch's start nor its end); {_RESUME}"),
    "GroupBusyError": StopKind(
        69, "another job holds the group",
        "stop the other job of this --group, or give this one another --group"),
    "SinkWriteError": StopKind(
        71, "writing into PostgreSQL failed",
        f"fix what the database said (the cause above); {_RESUME}"),
    "OffsetStoreError": StopKind(
        72, "the offset store failed",
        f"check that PostgreSQL answers at --dsn; {_RESUME}"),
    "KafkaReadError": StopKind(
        73, "records could not be read from Kafka",
        "see why above (records deleted by retention, a range past the log end, no "
        f"progress in time); {_RESUME}"),
    "StreamingQueryFailedError": StopKind(
        74, "the Structured Streaming query failed",
        f"--verbose shows Spark's report; fix its cause, {_RESUME}"),
}

#: Classes whose stop is another's: a record the source cannot make a row of is a bad record.
_ALIASES = {"RecordError": "BadRecordError"}

#: Exit code by error class name (the same table as :data:`KINDS`).
EXIT_CODES: dict[str, int] = {**{name: kind.code for name, kind in KINDS.items()},
                              **{alias: KINDS[name].code for alias, name in _ALIASES.items()}}

_OTHER = StopKind(OTHER_ERROR, "any other error (a service that does not answer, a "
                  "missing topic)", f"--verbose shows the details; {_RESUME}")


def _kind(error: BaseException | type[BaseException]) -> StopKind:
    for cls in (error if isinstance(error, type) else type(error)).__mro__:
        name = _ALIASES.get(cls.__name__, cls.__name__)
        if name in KINDS and issubclass(cls, KafkaDirectError):
            return KINDS[name]
    return _OTHER


def exit_code(error: BaseException | type[BaseException]) -> int:
    """The exit code of a stop on ``error``, or on an error of that class.

    :data:`OTHER_ERROR` for an error without a kind of its own.
    """
    return _kind(error).code


#: The first line of a stack under a message: a Java frame, or a Python traceback.
_STACK = re.compile(r"\s*(?:at [\w$.<>/]+\(.*\)\s*$|\.\.\. \d+ more\s*$)")
_TRACEBACK = "Traceback (most recent call last)"
#: The marker an error crosses from an executor with (:mod:`kafka_direct.task_errors`).
_MARKER = re.compile(r"\s*\[kafka-direct-error:[A-Za-z0-9+/=]*\]")


def first_line(error: BaseException, limit: int = 500) -> str:
    """``error``'s message, redacted, on one line, without a Java stack under it.

    An error from py4j or Spark carries the JVM's stack in its text: only what comes
    before the stack's first frame (or a Python traceback) is kept, without the marker an
    error crosses from an executor with.
    """
    kept = []
    for line in redact_text(str(error)).splitlines():
        if _STACK.match(line):
            break
        before, traceback, _ = line.partition(_TRACEBACK)
        kept.append(before.strip())
        if traceback:  # a Python traceback inside Spark's text: what comes before it
            break
    text = " ".join(_MARKER.sub("", " ".join(kept)).split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _where(context: Mapping[str, object]) -> str:
    parts = []
    for key, label in (("group", "group"), ("table", "table"), ("field", "field"),
                       ("topic", "topic"), ("partition", "partition")):
        value = context.get(key)
        if value is not None and value != "":
            parts.append(f"{label} {value}")
    offset = context.get("offset")
    begin, end = context.get("fromOffset"), context.get("untilOffset")
    if offset is not None:
        parts.append(f"offset {offset}")
    elif begin is not None and end is not None:
        parts.append(f"offsets {begin} to {end} (exclusive)")
    if context.get("stored") is not None:
        parts.append(f"stored offset {context['stored']}")
    return redact_text(", ".join(parts))


def stop_block(command: str, error: BaseException, deadLetters: str | None = None) -> str:
    """The block a stop on ``error`` shows on stderr (lines ending in a newline).

    Args:
        command: The sub-command (``ingest``).
        error: Why the job stopped.
        deadLetters: The dead-letter table (schema-qualified) when the job sets bad
            records aside, else None.
    """
    kind = _kind(error)
    context = error.context if isinstance(error, KafkaDirectError) else {}
    lines = [f"kafka-direct {command} stopped: {type(error).__name__}: {first_line(error)}"]
    where = _where(context)
    if where:
        lines.append(f"where: {where}")
    lines.append(f"what to do: {kind.todo}")
    if deadLetters:
        lines.append(f"dead letters: {deadLetters}")
    lines.append(f"exit code {kind.code}: {kind.meaning} (--help lists the codes)")
    return "".join(f"{line}\n" for line in lines)


def _help_table() -> str:
    rows = [(0, "done"), (OTHER_ERROR, _OTHER.meaning),
            (INTERRUPTED, "stopped at once by a second Ctrl-C")]
    rows += [(kind.code, f"{kind.meaning} ({name})") for name, kind in KINDS.items()]
    return "\n".join(f"  {code:>3}  {meaning}" for code, meaning in sorted(rows))


#: The table of exit codes, for ``--help``.
EXIT_CODES_HELP = "exit codes:\n" + _help_table()


#: Loggers that report a failed batch's error before the job ends on it: the engine's
#: scheduler logs it as Spark's JobScheduler does, with its traceback.
REPORTING_LOGGERS = ("kafka_direct.streaming.job_scheduler",)


class _TypedErrorFilter(logging.Filter):
    """Drops records that carry one of kafka-direct's errors: the job's block shows it."""

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        return not isinstance(error, KafkaDirectError)


@contextlib.contextmanager
def reported_once(loggers: tuple[str, ...] = REPORTING_LOGGERS) -> Iterator[None]:
    """For the block: a typed error the job stops on is shown once, by :func:`stop_block`.

    The engine's report of it (a traceback on stderr) is left out; any other error it
    logs stays. Not entered with ``--verbose``, which shows both.
    """
    only = _TypedErrorFilter()
    for name in loggers:
        logging.getLogger(name).addFilter(only)
    try:
        yield
    finally:
        for name in loggers:
            logging.getLogger(name).removeFilter(only)
