"""The connector's modules import each other without a cycle, at module or function level.

A function-level import only hides a cycle (``kafka_utils`` <-> ``direct_kafka_input_dstream``
once did): every import counts, ``TYPE_CHECKING`` ones included.
"""

import ast
from pathlib import Path

PACKAGE = Path(__file__).parents[2] / "kafka_direct"


def connector_imports():
    """{module: connector modules it imports anywhere in its source}, top level only."""
    modules = {p.stem: p for p in PACKAGE.glob("*.py") if p.stem != "__init__"}
    graph = {}
    for name, path in modules.items():
        found = set()
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.ImportFrom) and node.module == "kafka_direct":
                found |= {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module:
                found.add(node.module.removeprefix("kafka_direct."))
            elif isinstance(node, ast.Import):
                found |= {alias.name.removeprefix("kafka_direct.") for alias in node.names}
        graph[name] = {m for m in found if m in modules and m != name}
    return graph


def cycles(graph):
    """Every import cycle found by depth-first search, as module lists."""
    found, state = [], {}

    def visit(node, path):
        state[node] = "open"
        for nxt in sorted(graph[node]):
            if state.get(nxt) == "open":
                found.append([*path[path.index(nxt):], nxt])
            elif nxt not in state:
                visit(nxt, [*path, nxt])
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    return found


def test_the_cycle_finder_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"a"}}) == [["a", "b", "a"]]


def test_no_connector_module_imports_itself_back():
    assert cycles(connector_imports()) == []


def test_kafka_utils_and_the_stream_do_not_import_each_other_both_ways():
    graph = connector_imports()
    assert "kafka_utils" not in graph["direct_kafka_input_dstream"]
