"""The source's monitoring commits to its group, made by a thread: newest offsets, in order."""

import logging
import threading

from kafka_direct.sql.source.group_commits import GroupCommits
from kafka_direct.topic_partition import TopicPartition

T0 = TopicPartition("t", 0)


class Coordinator:
    """Records commits; holds each one until released when ``hold`` is set."""

    def __init__(self, hold=False):
        self.commits = []
        self.release = threading.Event()
        self.entered = threading.Event()
        self.hold = hold
        self.failing = False

    def commit(self, offsets):
        self.entered.set()
        if self.hold:
            self.release.wait(30)
        if self.failing:
            raise RuntimeError("the group coordinator is not available")
        self.commits.append(dict(offsets))


def test_offsets_given_while_a_commit_is_under_way_are_replaced_by_the_newest():
    coordinator = Coordinator(hold=True)
    commits = GroupCommits(coordinator.commit, "g")
    commits.submit({T0: 1})
    assert coordinator.entered.wait(10)
    for offset in (2, 3, 4):  # the coordinator has not answered the first one yet
        commits.submit({T0: offset})
    assert not commits.flush(0.05)
    coordinator.release.set()
    assert commits.flush(10)
    assert coordinator.commits == [{T0: 1}, {T0: 4}]
    commits.close()


def test_a_failed_commit_warns_and_later_offsets_still_reach_the_group(caplog):
    coordinator = Coordinator()
    coordinator.failing = True
    commits = GroupCommits(coordinator.commit, "monitor")
    with caplog.at_level(logging.WARNING):
        commits.submit({T0: 5})
        assert commits.flush(10)
    assert any("group monitor for monitoring failed" in r.getMessage() for r in caplog.records)
    coordinator.failing = False
    commits.submit({T0: 6})
    commits.close()
    assert coordinator.commits == [{T0: 6}]


def test_close_waits_for_the_last_offsets_and_later_ones_are_dropped():
    coordinator = Coordinator()
    commits = GroupCommits(coordinator.commit, "g")
    commits.submit({T0: 7})
    commits.close()
    assert coordinator.commits == [{T0: 7}]
    commits.submit({T0: 8})  # after the source stopped: nothing to commit with
    assert commits.flush(1)
    assert coordinator.commits == [{T0: 7}]


def test_nothing_submitted_starts_no_thread():
    commits = GroupCommits(Coordinator().commit, "g")
    before = threading.active_count()
    assert commits.flush(0)
    commits.close()
    assert threading.active_count() == before
