"""The documentation against the code: README examples run, option tables match, links resolve.

* Every fenced ``python`` block of README.md runs, in a fresh namespace, against the session's
  broker, PostgreSQL and Spark (``KAFKA_DIRECT_BOOTSTRAP`` and ``KAFKA_DIRECT_PG_DSN`` point the
  examples at them), each with a database of its own; it must end, and leave a table holding
  every record of its topic once.
* docs/configuration.md has one table per component, marked ``<!-- option-table: NAME -->``.
  Every option the code knows is in its table, and every row names an option the code knows.
  The option names come from the code: the parsers' known-option sets, the setting constants,
  the argparse parsers, and the string literals of the package.
* Relative links in README.md and docs/*.md resolve, anchors included.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import re
import unicodedata
import uuid
from pathlib import Path

import pytest

# Where the code keeps its option names. Modules that move only need this block updated.
import kafka_direct
import kafka_direct.streaming as engine
import offsets
import sinks
from kafka_direct.app import cli
from kafka_direct.app.ingest_arguments import add_arguments as add_ingest_arguments
from kafka_direct.dstream import per_partition_config, stream_settings
from kafka_direct.sql.kafka_options import KAFKA_PREFIX
from kafka_direct.sql.link.tables import LINK_OPTIONS
from kafka_direct.sql.sink.options import KNOWN_OPTIONS as SINK_OPTIONS
from kafka_direct.sql.source.options import KNOWN_OPTIONS as SOURCE_OPTIONS

ROOT = Path(__file__).parents[2]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
CONFIGURATION = DOCS / "configuration.md"
#: The packages whose string literals name Spark settings and environment variables.
PACKAGES = [Path(module.__file__).parent for module in (kafka_direct, offsets, sinks)]
#: The engine's package: every Spark setting read there belongs in the engine's table.
ENGINE = Path(engine.__file__).parent
#: The modules whose ``*_CONF`` constants are the direct stream's settings.
DIRECT_STREAM_MODULES = (stream_settings, per_partition_config)

SPARK_SETTING = re.compile(r"spark\.streaming\.[A-Za-z][\w.]*")
ENVIRONMENT_VARIABLE = re.compile(r"[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+")
OUR_VARIABLE = re.compile(r"KAFKA_DIRECT_[A-Z0-9_]+")
FENCE = re.compile(r"^(```|~~~)")


# -- reading Markdown -----------------------------------------------------------------------

def prose_lines(text):
    """(line number, line) of the text outside fenced code blocks."""
    fenced = False
    for number, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line.strip()):
            fenced = not fenced
            continue
        if not fenced:
            yield number, line


def python_blocks(text):
    """The fenced ``python`` blocks of a Markdown text, in order."""
    return [match.group(1) for match in
            re.finditer(r"^```python\n(.*?)^```\s*$", text, re.MULTILINE | re.DOTALL)]


def slug(heading):
    """The anchor GitHub gives a heading."""
    text = heading.strip().lower()
    text = "".join(ch for ch in text if ch in " -_" or unicodedata.category(ch)[0] in "LN")
    return text.replace(" ", "-")


def anchors(path):
    """The anchors of a Markdown file's headings (repeated headings get -1, -2 ...)."""
    seen = {}
    found = set()
    for _, line in prose_lines(path.read_text(encoding="utf-8")):
        heading = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if heading:
            base = slug(heading.group(1))
            count = seen.get(base, 0)
            seen[base] = count + 1
            found.add(base if count == 0 else f"{base}-{count}")
    return found


def option_tables():
    """{table name: [row names, one tuple per row]} of docs/configuration.md."""
    lines = CONFIGURATION.read_text(encoding="utf-8").splitlines()
    tables = {}
    for index, line in enumerate(lines):
        marker = re.fullmatch(r"\s*<!--\s*option-table:\s*([\w-]+)\s*-->\s*", line)
        if not marker:
            continue
        name = marker.group(1)
        assert name not in tables, f"two option tables named {name!r} in {CONFIGURATION}"
        rows = []
        body = lines[index + 1:]
        while body and not body[0].strip():
            body = body[1:]
        assert body and body[0].startswith("|"), f"option-table {name}: no table follows"
        for row in body[2:]:  # after the header and its separator
            if not row.startswith("|"):
                break
            first_cell = row.strip().strip("|").split("|")[0]
            names = tuple(code.split()[0] for code in re.findall(r"`([^`]+)`", first_cell))
            assert names, f"option-table {name}: a row names nothing in its first cell: {row}"
            rows.append(names)
        tables[name] = rows
    return tables


def table_names(tables, name):
    return [option for row in tables[name] for option in row]


# -- reading the code -----------------------------------------------------------------------

def string_literals(folders):
    """Every string constant of the Python files under ``folders`` but their docstrings and
    the pieces of f-strings (a setting is read under its whole name, so it can be found)."""
    literals, pieces = set(), set()
    for folder in folders:
        for path in sorted(folder.rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
            docstrings = set()
            for node in ast.walk(tree):
                if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef,
                                     ast.AsyncFunctionDef)) and node.body:
                    first = node.body[0]
                    if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                        docstrings.add(id(first.value))
            for node in ast.walk(tree):
                if isinstance(node, ast.JoinedStr):
                    pieces.update(part.value for part in node.values
                                  if isinstance(part, ast.Constant))
                elif (isinstance(node, ast.Constant) and isinstance(node.value, str)
                      and id(node) not in docstrings):
                    literals.add(node.value)
    # An f-string's pieces are Constants too (in messages): they are not names of their own.
    return literals - pieces


def spark_settings(folders):
    """The ``spark.streaming.*`` settings the code under ``folders`` names."""
    return {s for s in string_literals(folders)
            if SPARK_SETTING.fullmatch(s) and ".internal." not in s}


def direct_stream_constants():
    return {value for module in DIRECT_STREAM_MODULES for key, value in vars(module).items()
            if key.endswith("_CONF") and isinstance(value, str)}


def parser_flags(parser):
    return {flag for action in parser._actions for flag in action.option_strings
            if flag not in ("-h", "--help")}


def ingest_flags():
    parser = argparse.ArgumentParser()
    add_ingest_arguments(parser)
    return parser_flags(parser)


def demo_flags():
    commands = next(action for action in cli._parser()._actions
                    if isinstance(action, argparse._SubParsersAction))
    return parser_flags(commands.choices["demo"])


def assert_same(documented, known, table):
    """Every option the code knows is in the table, and every row is one the code knows."""
    missing = sorted(set(known) - set(documented))
    unknown = sorted(set(documented) - set(known))
    assert not missing, f"options the code knows but the {table} table lacks: {missing}"
    assert not unknown, f"rows of the {table} table the code does not know: {unknown}"


# -- option tables --------------------------------------------------------------------------

def test_the_tables_are_there_once_each():
    assert set(option_tables()) == {"direct-stream", "engine", "source", "sink", "ingest",
                                    "demo", "environment"}


def test_no_option_is_listed_twice():
    for name, rows in option_tables().items():
        names = [option.lower() for row in rows for option in row]
        doubled = sorted({n for n in names if names.count(n) > 1})
        assert not doubled, f"{name} table lists {doubled} more than once"


def test_direct_stream_and_engine_settings():
    tables = option_tables()
    direct = set(table_names(tables, "direct-stream"))
    engine = set(table_names(tables, "engine"))
    known = spark_settings(PACKAGES)
    in_engine = spark_settings([ENGINE])
    constants = direct_stream_constants()
    assert not direct & engine, f"settings in both tables: {sorted(direct & engine)}"
    assert not constants - direct, (
        f"direct stream settings missing from its table: {sorted(constants - direct)}")
    assert not in_engine - engine, (
        f"engine settings missing from its table: {sorted(in_engine - engine)}")
    assert_same(direct | engine, known | constants, "direct-stream and engine")


def test_source_options():
    rows = [name.lower() for name in table_names(option_tables(), "source")]
    assert_same(rows, SOURCE_OPTIONS | LINK_OPTIONS | {KAFKA_PREFIX + "*"}, "source")


def test_sink_options():
    rows = [name.lower() for name in table_names(option_tables(), "sink")]
    assert_same(rows, SINK_OPTIONS | {KAFKA_PREFIX + "*"}, "sink")


def test_ingest_flags():
    assert_same(table_names(option_tables(), "ingest"), ingest_flags(), "ingest")


def test_demo_flags():
    assert_same(table_names(option_tables(), "demo"), demo_flags(), "demo")


def test_environment_variables():
    literals = string_literals(PACKAGES)
    ours = {s for s in literals if OUR_VARIABLE.fullmatch(s)}
    rows = table_names(option_tables(), "environment")
    missing = sorted(ours - set(rows))
    assert not missing, f"environment variables the code reads but the table lacks: {missing}"
    unknown = sorted(r for r in rows if not ENVIRONMENT_VARIABLE.fullmatch(r)
                     or r not in literals)
    assert not unknown, f"environment variables in the table the code never names: {unknown}"


# -- links ----------------------------------------------------------------------------------

def markdown_files():
    return [README, *sorted(DOCS.glob("*.md"))]


def test_relative_links_resolve():
    link = re.compile(r"\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
    broken = []
    for path in markdown_files():
        for number, line in prose_lines(path.read_text(encoding="utf-8")):
            for target in link.findall(re.sub(r"`[^`]*`", "", line)):
                if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto: ...
                    continue
                file_part, _, anchor = target.partition("#")
                linked = (path.parent / file_part).resolve() if file_part else path
                where = f"{path.relative_to(ROOT)}:{number}: {target}"
                if not linked.exists():
                    broken.append(f"{where} (no such file)")
                elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
                    broken.append(f"{where} (no such heading)")
    assert not broken, "broken links:\n" + "\n".join(broken)


def test_every_doc_is_reachable_from_the_readme():
    readme = README.read_text(encoding="utf-8")
    unlinked = [p.name for p in DOCS.glob("*.md") if f"(docs/{p.name}" not in readme]
    assert not unlinked, f"docs/ pages the README's map does not link: {unlinked}"


# -- the README's examples ------------------------------------------------------------------

EXAMPLES = python_blocks(README.read_text(encoding="utf-8"))
TOPIC = "events"


def test_the_readme_has_examples():
    assert len(EXAMPLES) >= 2


@pytest.fixture(scope="module")
def example_topic(kafka):
    """The topic the examples read (``events``), with records; returns how many it holds."""
    admin = kafka.admin()
    if TOPIC not in admin.list_topics(timeout=10).topics:
        kafka.create_topic(TOPIC, partitions=2)
    kafka.produce(TOPIC, [f"event {i}".encode() for i in range(40)],
                  keys=[f"k{i % 5}".encode() for i in range(40)])
    partitions = admin.list_topics(TOPIC, timeout=10).topics[TOPIC].partitions
    ends = kafka.end_offsets(TOPIC, partitions)
    return sum(end - start for start, end in ends.values())


@pytest.fixture
def example_database(postgres):
    """A database of the example's own (the examples create tables under fixed names)."""
    from psycopg2.extensions import make_dsn

    name = f"docs_{uuid.uuid4().hex[:10]}"
    with autocommit_cursor(postgres) as cursor:
        cursor.execute(f'CREATE DATABASE "{name}"')
    yield make_dsn(postgres.dsn, dbname=name)
    with autocommit_cursor(postgres) as cursor:
        cursor.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@contextlib.contextmanager
def autocommit_cursor(postgres):
    connection = postgres.connect()
    connection.autocommit = True
    try:
        with connection.cursor() as cursor:
            yield cursor
    finally:
        connection.close()


def stop_what_an_example_left_running():
    """A failed example may leave a streaming context or query behind: stop them, not Spark."""
    from kafka_direct import StreamingContext

    context = StreamingContext.getActive()
    if context is not None:
        context.stop(stopSparkContext=False)
    from pyspark.sql import SparkSession

    session = SparkSession.getActiveSession()
    if session is not None:
        for query in session.streams.active:
            query.stop()


def tables_holding_the_topic(dsn):
    """{table: (rows, distinct (topic, partition, offset))} of tables with Kafka positions."""
    import psycopg2

    with psycopg2.connect(dsn) as connection, connection.cursor() as cursor:
        cursor.execute("SELECT table_schema, table_name FROM information_schema.columns "
                       "WHERE column_name = 'kafka_offset' AND table_schema NOT IN "
                       "('pg_catalog', 'information_schema')")
        found = {}
        for schema, table in cursor.fetchall():
            cursor.execute(f'SELECT count(*), count(DISTINCT (topic, kafka_partition, '
                           f'kafka_offset)) FROM "{schema}"."{table}" WHERE topic = %s',
                           (TOPIC,))
            found[f"{schema}.{table}"] = cursor.fetchone()
    connection.close()
    return found


@pytest.mark.parametrize("number", range(1, len(EXAMPLES) + 1))
def test_readme_example_runs(number, example_topic, example_database, spark, kafka,
                             monkeypatch):
    code = EXAMPLES[number - 1]
    if "kafka_direct.sql" in code:
        from kafka_direct.sql import check_structured_support

        try:
            check_structured_support()
        except Exception as error:
            pytest.skip(f"Structured Streaming unavailable here: {error}")
    # The examples find the services where the README says; their SparkContext.getOrCreate()
    # and SparkSession.builder.getOrCreate() return the session's Spark (the spark fixture).
    monkeypatch.setenv("KAFKA_DIRECT_BOOTSTRAP", kafka.bootstrap_servers)
    monkeypatch.setenv("KAFKA_DIRECT_PG_DSN", example_database)
    try:
        exec(compile(code, f"README.md python block {number}", "exec"),
             {"__name__": f"readme_example_{number}"})
    finally:
        stop_what_an_example_left_running()
    tables = tables_holding_the_topic(example_database)
    assert tables, f"example {number} wrote no table with the topic's records"
    for table, (rows, distinct) in tables.items():
        assert (rows, distinct) == (example_topic, example_topic), (
            f"example {number}: {table} holds {rows} rows ({distinct} distinct records) of "
            f"the {example_topic} records in topic {TOPIC}")
