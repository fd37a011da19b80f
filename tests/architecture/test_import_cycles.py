"""No module of kafka_direct, offsets or sinks imports itself back, at module or function level.

A function-level import only hides a cycle (``kafka_utils`` <-> ``direct_kafka_input_dstream``
once did): every import counts, ``TYPE_CHECKING`` ones included. ``from a import b`` is an
arrow to module ``a.b`` when ``b`` is a module, else to ``a`` (the package's own file).

One circle is known and pinned: the engine's ``StreamingContext`` and ``DStream`` family
refer to each other as Spark's own classes do (a DStream belongs to its context, the context
builds DStreams). No other module may join it, and no other circle may form.
"""

import ast
from pathlib import Path

ROOT = Path(__file__).parents[2]
PACKAGES = ("kafka_direct", "offsets", "sinks")

#: Spark's StreamingContext <-> DStream shape, kept by the engine (kafka_direct/streaming).
ENGINE_CIRCLE = {f"kafka_direct.streaming.{name}" for name in (
    "context", "dstream", "dstream_graph", "file_input_dstream", "foreach_dstream",
    "input_dstream", "job_generator", "job_scheduler", "operators", "state_dstream",
    "transformed_dstream", "ui.server", "windowed_dstream", "windowed_operators")}


def module_name(path):
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def package_imports():
    """{module: modules of the three packages it imports anywhere in its source}."""
    modules = {module_name(p): p for package in PACKAGES for p in (ROOT / package).rglob("*.py")}
    graph = {}
    for name, path in modules.items():
        found = set()
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                for alias in node.names:
                    sub = f"{node.module}.{alias.name}"
                    found.add(sub if sub in modules else node.module)
            elif isinstance(node, ast.Import):
                found |= {alias.name for alias in node.names}
        graph[name] = {m for m in found if m in modules and m != name}
    return graph


def circles(graph):
    """The strongly connected components of more than one module: each a set of modules."""
    reach = {node: set() for node in graph}
    for start in graph:
        pending = [start]
        while pending:
            for nxt in graph[pending.pop()]:
                if nxt not in reach[start]:
                    reach[start].add(nxt)
                    pending.append(nxt)
    components = {frozenset({start} | {n for n in reach[start] if start in reach[n]})
                  for start in graph}
    return [set(c) for c in components if len(c) > 1]


def test_the_cycle_finder_finds_a_cycle():
    assert circles({"a": {"b"}, "b": {"a"}}) == [{"a", "b"}]
    assert circles({"a": {"b"}, "b": {"a", "c"}, "c": set()}) == [{"a", "b"}]


def test_the_graph_covers_every_package():
    graph = package_imports()
    for module in ("kafka_direct", "kafka_direct.client.driver_consumer",
                   "kafka_direct.sql.link.source_side", "offsets.group_lock",
                   "sinks.postgres_writer", "kafka_direct.app.cli"):
        assert module in graph, module
    assert "offsets.postgres_offset_store" in graph["sinks.transactional_postgres_sink"]


def test_no_module_imports_itself_back():
    assert circles(package_imports()) == [ENGINE_CIRCLE]


def test_the_offset_store_and_its_lock_do_not_import_each_other_both_ways():
    graph = package_imports()
    assert "offsets.postgres_offset_store" not in graph["offsets.group_lock"]


def test_kafka_utils_and_the_stream_do_not_import_each_other_both_ways():
    graph = package_imports()
    assert "kafka_direct.kafka_utils" not in graph[
        "kafka_direct.dstream.direct_kafka_input_dstream"]
