"""SubscribePattern: one dialect (Python ``re``, whole topic names) with or without the group."""

import re

import pytest

from kafka_direct import ConfigurationError, ConsumerStrategies, TopicPartition
from tests.fakes.fake_group import driver_with

CLUSTER = {"a": 1, "b": 2, "a-archive": 1, "pat1": 1, "patd": 1, "__consumer_offsets": 3}
PARAMS = {"bootstrap.servers": "fake:9092", "group.id": "g"}


def strategy(pattern, groupManagement=True):
    return ConsumerStrategies.SubscribePattern(pattern, PARAMS, groupManagement=groupManagement)


def subscribed(pattern, cluster=CLUSTER):
    """The topics the driver joins the group for, and the consumer behind it."""
    driver, consumer = driver_with(cluster)
    strategy(pattern).onStart(driver)
    assert consumer.subscriptions, "the driver never subscribed"
    return consumer.subscriptions[-1], driver, consumer


def unmanaged_topics(pattern, cluster=CLUSTER):
    driver, _ = driver_with(cluster)
    s = strategy(pattern, groupManagement=False)
    s.onStart(driver)
    return sorted({tp.topic for tp in s.topicPartitions(driver)})


@pytest.mark.parametrize(("pattern", "topics"), [
    ("a|b", ["a", "b"]),          # not "a-archive": the whole name must match the alternation
    (r"pat\d", ["pat1"]),         # \d is a digit (Python re), not a literal d
    ("a.*", ["a", "a-archive"]),
    ("pat[0-9d]", ["pat1", "patd"]),
])
def test_group_subscription_is_the_list_of_topics_python_re_fullmatches(pattern, topics):
    subscription, _, _ = subscribed(pattern)
    assert sorted(subscription) == topics
    assert unmanaged_topics(pattern) == topics  # one dialect in both modes


def test_internal_topics_are_never_matched():
    subscription, _, _ = subscribed(".*")
    assert "__consumer_offsets" not in subscription
    assert "__consumer_offsets" not in unmanaged_topics(".*")


def test_flags_of_a_compiled_pattern_are_kept():
    subscription, _, _ = subscribed(re.compile("A|B", re.IGNORECASE))
    assert sorted(subscription) == ["a", "b"]


def test_a_new_matching_topic_is_subscribed_on_the_next_batch():
    driver, consumer = driver_with(CLUSTER)
    s = strategy(r"pat\d+")
    s.onStart(driver)
    assert consumer.subscriptions == [["pat1"]]
    consumer.rebalance(assigned={("pat1", 0)})
    assert s.topicPartitions(driver) == {TopicPartition("pat1", 0)}
    count = len(consumer.subscriptions)
    assert s.topicPartitions(driver) == {TopicPartition("pat1", 0)}
    assert len(consumer.subscriptions) == count  # no change, no new subscription (rebalance)
    consumer.topics["pat22"] = 2
    consumer.topics["pat2-old"] = 1
    s.topicPartitions(driver)
    assert sorted(consumer.subscriptions[-1]) == ["pat1", "pat22"]
    consumer.rebalance(assigned={("pat22", 0), ("pat22", 1)})
    assert s.topicPartitions(driver) == {TopicPartition("pat1", 0), TopicPartition("pat22", 0),
                                         TopicPartition("pat22", 1)}


def test_a_pattern_matching_nothing_yet_subscribes_once_a_topic_appears():
    driver, consumer = driver_with(CLUSTER)
    s = strategy("later-.*")
    s.onStart(driver)
    assert s.topicPartitions(driver) == set()
    consumer.topics["later-1"] = 1
    s.topicPartitions(driver)
    assert consumer.subscriptions[-1] == ["later-1"]


@pytest.mark.parametrize("pattern", ["(", "a[", "*x"])
def test_a_pattern_that_does_not_compile_is_rejected_naming_it(pattern):
    with pytest.raises(ConfigurationError, match=re.escape(repr(pattern))):
        strategy(pattern)


@pytest.mark.parametrize("pattern", ["", None, b"a|b", re.compile(b"a")])
def test_what_is_not_a_text_pattern_is_rejected(pattern):
    with pytest.raises(ConfigurationError, match="regular expression"):
        strategy(pattern)
