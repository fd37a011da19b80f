"""The suite's order under pytest-xdist's worksteal (tests/schedule.py): long tests first."""

from tests.schedule import arrange, slice_sizes


def test_the_slices_are_the_ones_worksteal_sends_first():
    # WorkStealingScheduling.check_schedule: len(pending) // nodes_remaining, node by node.
    assert slice_sizes(10, 3) == [3, 3, 4]
    assert slice_sizes(2257, 3) == [752, 752, 753]
    assert slice_sizes(7, 1) == [7]


def _arranged(tests, workers=3, shared=None):
    """``tests``: (module, seconds) pairs; returns (module, index) in the new order."""
    items = [(module, index) for index, (module, _) in enumerate(tests)]
    cost = {item: seconds for item, (_, seconds) in zip(items, tests, strict=True)}
    return arrange(items, workers, module=lambda item: item[0], seconds=cost.__getitem__,
                   shares=lambda item: frozenset((shared or {}).get(item[0], ())))


def _slices(order, workers=3):
    sizes = slice_sizes(len(order), workers)
    starts = [sum(sizes[:i]) for i in range(workers)]
    return [order[start:start + size] for start, size in zip(starts, sizes, strict=True)]


def test_each_slice_starts_with_its_longest_module_and_every_test_runs_once():
    tests = ([("quick", 0.1)] * 30 + [("long_a", 40.0)] * 2 + [("mid", 3.0)] * 6
             + [("long_b", 30.0)] + [("long_c", 25.0)] * 3)
    order = _arranged(tests)
    assert sorted(order) == sorted((m, i) for i, (m, _) in enumerate(tests))
    heads = [chunk[0][0] for chunk in _slices(order)]
    assert sorted(heads) == ["long_a", "long_b", "long_c"]
    # A module's tests stay together and in their order.
    for module in ("long_a", "mid", "long_c"):
        places = [i for i, (m, _) in enumerate(order) if m == module]
        assert places == list(range(places[0], places[0] + len(places)))
        assert [order[i][1] for i in places] == sorted(order[i][1] for i in places)


def test_modules_sharing_a_costly_fixture_go_to_one_slice():
    tests = ([("host_a", 20.0)] * 2 + [("other", 30.0)] * 2 + [("host_b", 20.0)] * 2
             + [("quick", 0.1)] * 30)
    order = _arranged(tests, shared={"host_a": {"job_host"}, "host_b": {"job_host"}})
    holding = [{m for m, _ in chunk} for chunk in _slices(order)]
    assert [("host_a" in s, "host_b" in s) for s in holding].count((True, True)) == 1


def test_one_worker_or_few_tests_keep_the_collection_order():
    tests = [("a", 1.0), ("b", 50.0)] * 4
    assert _arranged(tests, workers=1) == [(m, i) for i, (m, _) in enumerate(tests)]
    assert _arranged(tests[:3]) == [(m, i) for i, (m, _) in enumerate(tests[:3])]
