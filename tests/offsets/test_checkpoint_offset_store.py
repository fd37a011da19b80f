"""CheckpointOffsetStore: the offset-store contract on files."""

import multiprocessing
import pickle

import pytest

from kafka_direct import CheckpointError, OffsetMismatchError, OffsetRange, TopicPartition
from offsets import CheckpointOffsetStore

T0, T1 = TopicPartition("events", 0), TopicPartition("events", 1)


def test_seed_load_commit_and_a_repeated_commit(tmp_path):
    store = CheckpointOffsetStore(tmp_path)
    assert store.load("g") == {}
    store.seed("g", {T0: 0, T1: 10})
    store.seed("g", {T0: 99})  # stored offsets stay
    ranges = [OffsetRange("events", 0, 0, 5), OffsetRange("events", 1, 10, 12)]
    store.commit("g", ranges)
    store.commit("g", ranges)  # a retried commit changes nothing
    assert store.load("g") == {T0: 5, T1: 12}
    assert CheckpointOffsetStore(tmp_path).load("g", ["events"]) == {T0: 5, T1: 12}
    assert store.load("g", ["other"]) == {} and store.load("h") == {}
    assert sorted(p.name for p in (tmp_path / "offsets").iterdir()) == ["g.json", "g.lock"]


def test_a_gap_or_an_overlap_commits_nothing(tmp_path):
    store = CheckpointOffsetStore(tmp_path)
    store.seed("g", {T0: 5, T1: 0})
    with pytest.raises(OffsetMismatchError) as info:
        store.commit("g", [OffsetRange("events", 1, 0, 3), OffsetRange("events", 0, 7, 9)])
    error = pickle.loads(pickle.dumps(info.value))
    assert (error.group, error.partition, error.stored, error.fromOffset) == ("g", 0, 5, 7)
    assert store.load("g") == {T0: 5, T1: 0}  # partition 1's valid range was not applied
    with pytest.raises(OffsetMismatchError):
        store.commit("g", [OffsetRange("other", 0, 0, 1)])  # never seeded


def test_group_names_map_to_distinct_files(tmp_path):
    store = CheckpointOffsetStore(tmp_path)
    store.seed("a/b", {T0: 1})
    store.seed("a_b", {T0: 2})
    assert store.load("a/b") == {T0: 1} and store.load("a_b") == {T0: 2}


def test_a_damaged_file_is_a_clear_error(tmp_path):
    store = CheckpointOffsetStore(tmp_path)
    store.seed("g", {T0: 1})
    (tmp_path / "offsets" / "g.json").write_text("{not json")
    with pytest.raises(CheckpointError, match="g.json is damaged"):
        store.load("g")


def _advance_own_partition(directory, partition):
    # Writers of different partitions share the group's file: without the lock, one
    # writer's read-modify-write would undo another's commit, and that writer's next
    # commit would find its partition behind (an OffsetMismatchError, exit code 1).
    store = CheckpointOffsetStore(directory)
    for offset in range(50):
        store.commit("g", [OffsetRange("events", partition, offset, offset + 1)])


def test_concurrent_writers_of_one_group_lose_no_commit(tmp_path):
    CheckpointOffsetStore(tmp_path).seed("g", {TopicPartition("events", p): 0 for p in range(4)})
    # Spawned: a child forked from a process with other threads (a test worker's JVM
    # gateway, librdkafka) can crash collecting what it inherited.
    processes = [multiprocessing.get_context("spawn").Process(target=_advance_own_partition,
                                                               args=(tmp_path, p))
                 for p in range(4)]
    for p in processes:
        p.start()
    for p in processes:
        p.join(60)
    assert [p.exitcode for p in processes] == [0] * 4
    assert CheckpointOffsetStore(tmp_path).load("g") == {
        TopicPartition("events", p): 50 for p in range(4)}
