"""The order of the suite's tests under pytest-xdist's ``worksteal``: long ones first.

``worksteal`` gives each of its N workers a contiguous slice of the collected tests (by
count: ``n // N``, then ``(n - n // N) // (N - 1)``...) and, when one runs dry, moves the
tail half of the longest queue to it. A 40-60 s test that starts last stretches the run by
that much while the other workers idle. The tests are arranged here so that each slice holds
about the same seconds, its longest modules first and its quick tests last: what is moved
then, and what runs at the end, is short.

Only the order changes, never which tests run. A module stays together (its module fixtures
start once), and modules that share a costly session fixture (the job host, the schema
registry, the three-broker cluster, the Spark Connect server) go to one slice, where one
instance serves them all. The seconds are measured costs (``--durations``) of the slowest
modules; any other module counts a small default per test: a module missing from the table
only starts later than it could.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pytest

__all__ = ["COSTLY_SESSION_FIXTURES", "MODULE_SECONDS", "arrange",
           "pytest_collection_modifyitems", "pytest_configure_node", "slice_sizes"]

T = TypeVar("T")

#: Measured seconds of the slowest modules (path below tests/), on 3 workers of 2 cores.
MODULE_SECONDS = {
    "app/test_ingest_command.py": 141,
    "conformance/test_dstream.py": 124,
    "conformance/test_kafka_microbatch_source.py": 99,
    "app/test_ingest_typed.py": 94,
    "app/test_cluster_faults.py": 80,  # its set-up starts three brokers
    "offsets/test_offset_store_contract.py": 31,  # stores keep their connection
    "runtime/test_jvm_archive.py": 36,
    "testing/test_services.py": 30,
    "streaming/test_windows_and_state.py": 29,
    "sql/source/test_source_batch.py": 29,
    "app/test_ingest_tables.py": 27,
    "app/test_ingest_signals.py": 22,
    "app/test_clean_stops.py": 22,
    "app/test_ingest_debezium.py": 21,
    "runtime/test_spark_home.py": 20,
    "conformance/test_kafka_dont_fail_on_data_loss.py": 19,
    "sql/link/test_sink_kafka.py": 18,
    "rdd/test_kafka_rdd.py": 17,
    "runtime/test_numpy_converters.py": 16,
    "runtime/test_driver_launch.py": 15,
    "dstream/test_checkpoint_code_changes.py": 15,
    "sql/test_connect.py": 14,
    "sql/sink/test_sink_direct.py": 13,
    "examples/test_examples.py": 12,
    "client/test_columnar_reader.py": 12,
    "rdd/test_cluster.py": 12,
    "architecture/test_code_quality.py": 11,
    "app/test_ingest_schema_evolution.py": 11,
    "dstream/test_direct_stream.py": 10,
    "client/test_missing_topic_on_broker.py": 10,
    "streaming/test_stop_lifecycle.py": 10,
    "sql/link/test_structured_link_model.py": 8,  # one session for the model's statements
    "sql/sink/test_sink_model.py": 6,  # the same
}
#: The default cost of a test of a module not in the table: one that uses services, one
#: that does not.
SERVICES_TEST_SECONDS = 0.4
UNIT_TEST_SECONDS = 0.02


def slice_sizes(count: int, workers: int) -> list[int]:
    """How many of ``count`` tests ``worksteal`` first sends each of ``workers`` workers."""
    sizes = []
    left = count
    for index in range(workers):
        size = left // (workers - index)
        sizes.append(size)
        left -= size
    return sizes


@dataclass(slots=True)
class _Unit:
    """Tests that stay together (a module, or modules sharing a costly fixture)."""

    seconds: float
    items: list = field(default_factory=list)  # type: ignore[type-arg]


@dataclass(slots=True)
class _Slice:
    capacity: int
    seconds: float = 0.0
    units: list[_Unit] = field(default_factory=list)

    def add(self, unit: _Unit) -> None:
        self.units.append(unit)
        self.capacity -= len(unit.items)
        self.seconds += unit.seconds


def arrange(items: Sequence[T], workers: int, module: Callable[[T], str],
            seconds: Callable[[T], float], shares: Callable[[T], frozenset[str]]) -> list[T]:
    """``items`` reordered for ``workers`` worksteal workers (the same items, once each).

    Args:
        items: The collected tests, in collection order.
        workers: How many workers the run has (fewer than 2: the order is kept).
        module: A test's module (the tests of a module stay together, in their order).
        seconds: A test's expected cost.
        shares: The costly session fixtures a test uses: modules sharing one go together.
    """
    if workers < 2 or len(items) < 2 * workers:
        return list(items)
    modules: dict[str, _Unit] = {}
    fixtures: dict[str, set[str]] = {}
    for item in items:
        name = module(item)
        unit = modules.setdefault(name, _Unit(0.0))
        unit.items.append(item)
        unit.seconds += seconds(item)
        fixtures.setdefault(name, set()).update(shares(item))
    # Modules joined through the costly fixtures they share, in collection order.
    owner: dict[str, _Unit] = {}
    units: list[_Unit] = []
    for name, unit in modules.items():
        joined = next((owner[f] for f in sorted(fixtures[name]) if f in owner), None)
        if joined is None:
            units.append(unit)
            joined = unit
        else:
            joined.items.extend(unit.items)
            joined.seconds += unit.seconds
        for fixture in fixtures[name]:
            owner.setdefault(fixture, joined)
    slices = [_Slice(size) for size in slice_sizes(len(items), workers)]
    for unit in sorted(units, key=lambda u: -u.seconds):
        fits = [s for s in slices if s.capacity >= len(unit.items)]
        if fits:
            min(fits, key=lambda s: s.seconds).add(unit)
            continue
        # Too many tests for any slice's room left: split, the lightest slices first.
        rest = list(unit.items)
        share = unit.seconds / len(rest)
        for target in sorted(slices, key=lambda s: s.seconds):
            taken, rest = rest[:target.capacity], rest[target.capacity:]
            if taken:
                target.add(_Unit(share * len(taken), taken))
    ordered: list[T] = []
    for target in slices:
        for unit in sorted(target.units, key=lambda u: -u.seconds):
            ordered.extend(unit.items)
    return ordered


#: Session fixtures that cost seconds to start on each worker that uses them.
COSTLY_SESSION_FIXTURES = frozenset({"job_host", "schema_registry", "kafka_cluster",
                                     "spark_connect"})


#: The controller's ``--dist`` mode, as its workers learn it (a worker's own is "no").
_DIST = "kafka_direct_dist"


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """On the controller: tell each worker the run's ``--dist`` mode."""
    node.workerinput[_DIST] = node.config.getoption("dist", "no")


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under pytest-xdist's worksteal, the long tests first on each worker."""
    workerinput = getattr(config, "workerinput", None)
    if workerinput is None or workerinput.get(_DIST) != "worksteal":
        return
    root = Path(__file__).parent

    def module(item: pytest.Item) -> str:
        path = Path(item.path)
        return path.relative_to(root).as_posix() if path.is_relative_to(root) else str(path)

    counts: dict[str, int] = {}
    for item in items:
        counts[module(item)] = counts.get(module(item), 0) + 1

    def seconds(item: pytest.Item) -> float:
        name = module(item)
        if name in MODULE_SECONDS:
            return MODULE_SECONDS[name] / counts[name]
        if item.get_closest_marker("services") is not None:
            return SERVICES_TEST_SECONDS
        return UNIT_TEST_SECONDS

    def shares(item: pytest.Item) -> frozenset[str]:
        return COSTLY_SESSION_FIXTURES.intersection(getattr(item, "fixturenames", ()))

    items[:] = arrange(items, int(workerinput["workercount"]), module, seconds, shares)
