"""Imports point down, folder by folder (checked on the source, every import counted).

From the bottom up: the vocabulary at the package's root (errors, their transport, the one
redaction, checked settings, TopicPartition, ConsumerRecord, OffsetRange, Arrow constants);
the engine (``streaming/``), the Kafka clients (``client/``) and PostgreSQL (``postgres/``),
which know nothing of each other; ``rdd/`` on the clients; ``dstream/`` on the RDD and the
engine; the face (``kafka_direct``, ``kafka_utils``) and ``compat/`` on the direct stream;
``sql/`` on the clients, the RDD and PostgreSQL; ``offsets/`` and ``sinks/`` on all of it;
the jobs' runtime (``runtime/``: starting Spark) on the RDD layer, under the test services
(``testing/``) and the app; the app on top.
"""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
PACKAGES = ("kafka_direct", "offsets", "sinks")

#: The vocabulary every layer speaks: root modules that import only each other.
VOCABULARY = {f"kafka_direct.{name}" for name in (
    "errors", "task_errors", "redaction", "conf_values", "topic_partition",
    "consumer_record", "offset_range", "arrow_values", "offsets_json", "heap")}
#: The face: the package itself, Spark's entry points, and a moved module's old path.
FACE = {"kafka_direct", "kafka_direct.kafka_utils", "kafka_direct.spark_support"}

ENGINE, CLIENT, POSTGRES = ("kafka_direct.streaming", "kafka_direct.client",
                            "kafka_direct.postgres")
RDD, DSTREAM, SQL = "kafka_direct.rdd", "kafka_direct.dstream", "kafka_direct.sql"
APP, TESTING, COMPAT = "kafka_direct.app", "kafka_direct.testing", "kafka_direct.compat"
RUNTIME = "kafka_direct.runtime"
OFFSETS, SINKS = "offsets", "sinks"

#: What each folder must never import: everything above it, and its siblings.
FORBIDDEN = {
    ENGINE: (CLIENT, POSTGRES, RDD, DSTREAM, SQL, APP, TESTING, RUNTIME, COMPAT, OFFSETS, SINKS,
             *FACE, "confluent_kafka"),
    CLIENT: (ENGINE, POSTGRES, RDD, DSTREAM, SQL, APP, TESTING, RUNTIME, COMPAT, OFFSETS, SINKS,
             *FACE),
    POSTGRES: (ENGINE, CLIENT, RDD, DSTREAM, SQL, APP, TESTING, RUNTIME, COMPAT, OFFSETS, SINKS,
               *FACE, "confluent_kafka"),
    RDD: (ENGINE, POSTGRES, DSTREAM, SQL, APP, TESTING, RUNTIME, COMPAT, OFFSETS, SINKS, *FACE),
    DSTREAM: (POSTGRES, SQL, APP, TESTING, RUNTIME, COMPAT, OFFSETS, SINKS, *FACE),
    COMPAT: (POSTGRES, SQL, APP, TESTING, RUNTIME, OFFSETS, SINKS),
    SQL: (ENGINE, DSTREAM, APP, TESTING, RUNTIME, COMPAT, OFFSETS, SINKS, *FACE),
    # The jobs' runtime starts Spark for the app and the test services; it knows neither.
    RUNTIME: (ENGINE, CLIENT, POSTGRES, DSTREAM, SQL, APP, TESTING, COMPAT, OFFSETS, SINKS,
              *FACE),
    TESTING: (ENGINE, DSTREAM, SQL, APP, COMPAT, OFFSETS, SINKS, *FACE),
    OFFSETS: (SQL, APP, TESTING, RUNTIME, SINKS),
    SINKS: (SQL, APP, TESTING, RUNTIME),
    APP: (),
}
#: Inside sql/: the offset link is below both sides; the sides stand apart; only the face
#: (sql/__init__.py) registers them.
SQL_FORBIDDEN = {
    "kafka_direct.sql.link": ("kafka_direct.sql.source", "kafka_direct.sql.sink",
                              "kafka_direct.sql.registration"),
    "kafka_direct.sql.source": ("kafka_direct.sql.sink", "kafka_direct.sql.registration"),
    "kafka_direct.sql.sink": ("kafka_direct.sql.source", "kafka_direct.sql.registration"),
}


def module_name(path):
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for package in PACKAGES for p in (ROOT / package).rglob("*.py")}


def imported_modules(path):
    """Every module ``path`` imports, anywhere in it (``from a import b``: ``a.b`` if a module)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                yield sub if sub in MODULES else node.module


def within(name, prefix):
    """Whether module ``name`` is ``prefix`` or inside it."""
    return name == prefix or name.startswith(prefix + ".")


def hits(name, forbidden):
    """Whether ``name`` is one of ``forbidden`` (a face module is itself only, not a folder)."""
    return any(name == f if f in FACE else within(name, f) for f in forbidden)


def offenders(modules, forbidden):
    found = []
    for name in sorted(modules):
        for imported in imported_modules(MODULES[name]):
            if hits(imported, forbidden):
                found.append(f"{MODULES[name].relative_to(ROOT)} imports {imported}")
    return found


def modules_of(prefix):
    return [name for name in MODULES if within(name, prefix)]


@pytest.mark.parametrize("folder", sorted(FORBIDDEN))
def test_each_folder_imports_only_what_lies_below_it(folder):
    assert offenders(modules_of(folder), FORBIDDEN[folder]) == []


@pytest.mark.parametrize("side", sorted(SQL_FORBIDDEN))
def test_the_sql_sides_stand_apart_on_the_link(side):
    assert offenders(modules_of(side), SQL_FORBIDDEN[side]) == []


def test_the_vocabulary_imports_only_itself():
    strays = []
    for name in sorted(VOCABULARY):
        for imported in imported_modules(MODULES[name]):
            if any(within(imported, p) for p in PACKAGES) and imported not in VOCABULARY:
                strays.append(f"{name} imports {imported}")
    assert strays == []


def test_the_face_imports_no_layer_above_the_direct_stream():
    assert offenders(FACE, (POSTGRES, SQL, APP, TESTING, RUNTIME, COMPAT, OFFSETS, SINKS)) == []


def test_only_the_app_imports_offsets_and_sinks():
    outside = [name for name in modules_of("kafka_direct") if not within(name, APP)]
    assert offenders(outside, (OFFSETS, SINKS, APP)) == []


def test_the_engine_knows_nothing_of_kafka():
    # The error tree, its transport, the one redaction and the long-lived heap's freeze
    # are below the engine.
    strays = [f"{name} imports {imported}" for name in modules_of(ENGINE)
              for imported in imported_modules(MODULES[name])
              if within(imported, "kafka_direct") and not within(imported, ENGINE)
              and imported not in {"kafka_direct.errors", "kafka_direct.task_errors",
                                   "kafka_direct.redaction", "kafka_direct.heap"}]
    assert strays == []


def test_the_two_ingest_jobs_stand_apart():
    # Both stand on the job's options and table; neither runs through the other.
    assert offenders(["kafka_direct.app.structured_ingest"], ("kafka_direct.app.ingest_job",)) == []
    assert offenders(["kafka_direct.app.ingest_job"], ("kafka_direct.app.structured_ingest",)) == []


def test_the_direct_stream_job_runs_without_structured_streaming():
    # Its typed path stages through postgres/ (the staging protocol lives there), so the
    # direct stream's job imports nothing of kafka_direct.sql: only the structured path may.
    direct = ["kafka_direct.app.ingest_job", "kafka_direct.app.typed.dstream",
              "kafka_direct.app.typed.stage", "kafka_direct.app.typed.commit",
              "kafka_direct.app.typed.rows"]
    assert offenders(direct, (SQL,)) == []


def test_the_app_starts_spark_through_the_runtime_not_the_test_services():
    # The test services stay the embedded default's (Kafka, PostgreSQL); Spark's start-up,
    # its Spark home, warm daemon and class archive are the runtime's.
    moved = ("kafka_direct.testing.spark", "kafka_direct.testing.spark_home",
             "kafka_direct.testing.warm_daemon", "kafka_direct.testing.worker_daemon",
             "kafka_direct.testing.jvm_archive")
    assert offenders(modules_of(APP), moved) == []
    assert not any(name in MODULES for name in moved)


def test_every_module_is_under_a_rule():
    ruled = [*FORBIDDEN, *FACE, *VOCABULARY]
    unruled = [name for name in MODULES if not hits(name, ruled)]
    assert unruled == []


def test_the_rule_finder_finds_arrows_and_reads_the_face_as_modules():
    assert offenders(["kafka_direct.kafka_utils"], (RDD,)) != []
    assert offenders(modules_of(SQL), (RDD,)) != []
    assert hits("kafka_direct", FACE) and not hits("kafka_direct.sql", FACE)
