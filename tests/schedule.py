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

#: Measured seconds of the slowest modules (path below tests/): one run's ``--durations`` on 4
#: workers of 2 cores, the last test's share of its worker's session teardown left out,
#: divided by 2.75 (that run was at a load of 20-70, other work on the machine: the earlier
#: table's modules took 2.75 times their seconds there), the scale of the defaults below.
MODULE_SECONDS = {
    "app/test_ingest_typed.py": 121,
    "conformance/test_kafka_microbatch_source.py": 112,
    "app/test_ingest_command.py": 99,
    "app/test_available_now_runs.py": 27,
    "conformance/test_dstream.py": 77,
    "sql/source/test_source_batch.py": 44,
    "rdd/test_kafka_rdd.py": 39,
    "app/test_cluster_faults.py": 37,  # its set-up starts three brokers
    "app/test_ingest_tables.py": 35,
    "runtime/test_driver_launch.py": 34,
    "testing/test_services.py": 28,
    "streaming/test_windows_and_state.py": 26,
    "sql/source/test_source_stream.py": 25,
    "sql/test_connect.py": 24,
    "dstream/test_checkpoint_code_changes.py": 23,
    "app/test_ingest_debezium.py": 22,
    "conformance/test_kafka_relation.py": 22,
    "streaming/test_pyspark_compat.py": 21,
    "offsets/test_offset_store_contract.py": 21,  # stores keep their connection
    "runtime/test_jvm_archive.py": 20,
    "rdd/test_cluster.py": 20,
    "sql/sink/test_sink_foreach_batch.py": 20,
    "sql/sink/test_sink_stream.py": 19,
    "sql/link/test_sink_kafka.py": 18,
    "dstream/test_direct_stream.py": 18,
    "sql/link/test_structured_link_model.py": 18,  # one session for the model's statements
    "testing/test_embedded_postgres_security.py": 17,
    "dstream/test_graceful_stop.py": 16,
    "dstream/test_many_partitions_on_broker.py": 15,
    "app/test_ingest_signals.py": 14,
    "streaming/test_streaming_recovery_state.py": 14,
    "streaming/test_operators.py": 13,
    "rdd/test_kafka_rdd_planning_cost.py": 13,
    "conformance/test_own_process.py": 13,
    "client/test_missing_topic_on_broker.py": 13,
    "app/test_structured_ingest_options.py": 13,
    "dstream/test_kept_parent_review.py": 13,
    "runtime/test_spark_stop.py": 13,
    "sinks/test_transactional_sink.py": 13,
    "examples/test_examples.py": 13,
    "runtime/test_spark_submit_settings.py": 13,
    "app/test_ingest_metadata.py": 13,
    "architecture/test_code_quality.py": 12,
    "sinks/test_grouped_sinks.py": 12,
    "conformance/test_kafka_dont_fail_on_data_loss.py": 12,
    "postgres/test_least_privilege.py": 11,
    "app/test_ingest_schema_evolution.py": 11,
    "sinks/test_transactional_sink_columnar.py": 11,
    "runtime/test_spark_home.py": 10,
    "app/test_ingest_protobuf.py": 10,
    "dstream/test_exactly_once_faults.py": 10,
    "runtime/test_warm_daemon.py": 10,
    "sql/source/test_source_lifecycle_on_broker.py": 10,
    "sinks/test_idempotent_sink.py": 9,
    "streaming/test_checkpoint.py": 9,
    "app/test_cli_errors.py": 9,
    "architecture/test_docs.py": 9,
    "streaming/test_stop_lifecycle.py": 9,
    "client/test_kept_offset_requests_on_broker.py": 8,
    "sql/sink/test_sink_direct.py": 8,
    "app/test_clean_stops.py": 8,
    "client/test_columnar_reader.py": 8,
    "sql/source/test_source_planning.py": 8,
    "runtime/test_numpy_converters.py": 7,
    "sql/sink/test_sink_model.py": 6,  # one session for the model's statements
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
