"""Which table a topic's records go to: ``--table`` as a name, or a template of the topic.

``--table orders`` writes every topic into one table (the job's behaviour before
templates). ``--table '{topic}'`` (or ``kafka_{topic}``, ``${topic}`` as Kafka Connect's
``table.name.format`` spells it) writes each topic into a table of its own, named as
Kafka Connect's JDBC sinks name it (Debezium's default table naming strategy): the topic
with each ``.`` replaced by ``_``, put in place of the placeholder; the name is always
quoted (``quote.identifiers``), so ``Orders-EU`` stays ``"Orders-EU"``, its case and dash
kept.

Two topics that a template maps onto one table (``a.b`` and ``a_b`` both give ``a_b``) are
refused: for ``--topic`` when the job starts, for ``--pattern`` at the first batch that
sees both (nothing of it written). One table per topic keeps each table's columns, key and
dead letters the topic's own; a template without the placeholder is the way to put many
topics into one table on purpose.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from kafka_direct.app.typed.options import TypedOptions
from kafka_direct.errors import ConfigurationError
from kafka_direct.postgres.catalog import NAME_LIMIT

__all__ = ["PLACEHOLDER", "TableRoute"]

#: The topic's place in a ``--table`` template.
PLACEHOLDER = "{topic}"
_CONNECT_PLACEHOLDER = "${topic}"


@dataclass(frozen=True, slots=True)
class TableRoute:
    """The ``--table`` option: one table, or a template giving each topic its table.

    Attributes:
        template: The table name, or a template holding ``{topic}`` (``${topic}`` is
            taken as the same).
    """

    template: str

    def __post_init__(self) -> None:
        if not isinstance(self.template, str) or not self.template.strip():
            raise ConfigurationError("--table must be a table name or a template such as "
                                     "'{topic}' or 'kafka_{topic}'")
        rest = self.pattern.replace(PLACEHOLDER, "")
        if "{" in rest or "}" in rest:
            raise ConfigurationError(
                f"--table {self.template!r}: the only placeholder a table template takes is "
                "{topic} (the topic's name, dots replaced by underscores)")
        if "\x00" in rest:
            raise ConfigurationError("--table: a table name holds a NUL character")
        if len(rest.encode("utf-8")) + (self.perTopic and 1) > NAME_LIMIT:
            raise ConfigurationError(f"--table {self.template!r} is longer than PostgreSQL's "
                                     f"{NAME_LIMIT}-byte names")

    @property
    def pattern(self) -> str:
        """The template with Kafka Connect's ``${topic}`` spelled ``{topic}``."""
        return self.template.replace(_CONNECT_PLACEHOLDER, PLACEHOLDER)

    @property
    def perTopic(self) -> bool:
        """Whether each topic gets a table of its own."""
        return PLACEHOLDER in self.pattern

    def table(self, topic: str) -> str:
        """The table of ``topic``'s records.

        Raises:
            ConfigurationError: The name would be longer than PostgreSQL's 63 bytes (it
                would truncate it silently, and maybe onto another topic's table).
        """
        if not self.perTopic:
            return self.template
        name = self.pattern.replace(PLACEHOLDER, topic.replace(".", "_"))
        if len(name.encode("utf-8")) > NAME_LIMIT:
            raise ConfigurationError(
                f"--table {self.template!r} gives topic {topic!r} the table name {name!r}, "
                f"longer than PostgreSQL's {NAME_LIMIT}-byte names: use a shorter template "
                "or topic name")
        return name

    def tables(self, topics: Iterable[str], options: TypedOptions | None = None
               ) -> dict[str, str]:
        """Each topic's table, sorted by topic.

        Args:
            topics: The topics.
            options: The record options: with dead letters, no topic's dead-letter table
                may be a table the topics' rows go to (None: not checked).

        Raises:
            ConfigurationError: Two topics map to one table (a per-topic template), a
                topic's dead-letter table is a topic's table, or a name is too long.
        """
        mapped: dict[str, str] = {}
        owner: dict[str, str] = {}
        for topic in sorted(set(topics)):
            name = self.table(topic)
            if self.perTopic and name in owner:
                raise ConfigurationError(
                    f"--table {self.template!r} maps topics {owner[name]!r} and {topic!r} "
                    f"onto one table {name!r} (dots become underscores): each topic needs a "
                    "table of its own. Read them with separate jobs, or give a --table "
                    "without {topic} to put every topic into one table")
            owner[name] = topic
            mapped[topic] = name
        if options is not None:
            self._check_dead_letters(options, mapped, owner)
        return mapped

    def _check_dead_letters(self, options: TypedOptions, mapped: dict[str, str],
                            owner: dict[str, str]) -> None:
        """Refuse a topic's dead-letter table that is a table of the topics' rows."""
        for topic in mapped:
            deadLetter = self.dead_letter_table(options, topic)
            if deadLetter is None or deadLetter not in owner:
                continue
            other = owner[deadLetter]
            rows = f"topic {other!r}'s rows" if other != topic else "its own rows"
            raise ConfigurationError(
                f"--table {self.template!r} and --dead-letter-table "
                f"{options.deadLetterTable or '(default: <table>_dead_letter)'} make table "
                f"{deadLetter!r} both topic {topic!r}'s dead-letter table and the table of "
                f"{rows}: give --dead-letter-table a name no topic's table has (it may hold "
                "{topic}), or read those topics with separate jobs",
                setting="--dead-letter-table")

    def dead_letter(self, deadLetterTable: str, topic: str) -> str:
        """``--dead-letter-table``, its ``{topic}`` (if any) filled in for ``topic``."""
        if PLACEHOLDER not in deadLetterTable.replace(_CONNECT_PLACEHOLDER, PLACEHOLDER):
            return deadLetterTable
        return TableRoute(deadLetterTable).table(topic)


    def dead_letter_table(self, options: TypedOptions, topic: str) -> str | None:
        """The dead-letter table of ``topic``'s records (None without ``dead-letter``).

        ``--dead-letter-table`` as given (its ``{topic}`` filled in), else
        ``<topic's table>_dead_letter``.
        """
        if options.onBadRecord != "dead-letter":
            return None
        if options.deadLetterTable is not None:
            return self.dead_letter(options.deadLetterTable, topic)
        return options.dead_letter_table(self.table(topic))
