"""Imports point down: app -> sinks/offsets -> connector -> engine (checked on the source)."""

import ast
from pathlib import Path

ROOT = Path(__file__).parents[1]


def imported_modules(path):
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module


def sources(folder, exclude=()):
    for path in sorted((ROOT / folder).rglob("*.py")):
        if not any(part in exclude for part in path.relative_to(ROOT).parts):
            yield path


def offenders(folder, forbidden, exclude=()):
    found = []
    for path in sources(folder, exclude):
        for name in imported_modules(path):
            if any(name == f or name.startswith(f + ".") for f in forbidden):
                found.append(f"{path.relative_to(ROOT)} imports {name}")
    return found


def test_only_the_app_imports_offsets_and_sinks():
    assert offenders("kafka_direct", ("offsets", "sinks", "kafka_direct.app"),
                     exclude=("app",)) == []


def test_the_structured_sink_stands_beside_the_stores():
    # kafka_direct/sql's PostgreSQL sink is at the sinks' level: it may use the stores'
    # database helpers, never the DStream sinks or the app; the stores never import it.
    assert offenders("kafka_direct/sql", ("sinks", "kafka_direct.app")) == []
    assert offenders("offsets", ("kafka_direct.sql",)) == []


def test_the_engine_knows_nothing_of_kafka():
    # The error tree, its transport and the one redaction are core, below the engine.
    core = {"__init__", "errors", "task_errors", "redaction"}
    connector = [f"kafka_direct.{p.stem}" for p in (ROOT / "kafka_direct").glob("*.py")
                 if p.stem not in core]
    assert offenders("kafka_direct/streaming",
                     ("offsets", "sinks", "kafka_direct.app", "kafka_direct.sql",
                      "confluent_kafka", *connector)) == []


def test_stores_and_sinks_do_not_import_the_app():
    assert offenders("offsets", ("kafka_direct.app", "sinks")) == []
    assert offenders("sinks", ("kafka_direct.app",)) == []
