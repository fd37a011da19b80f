"""The driver consumer's view of its assignment under eager and cooperative rebalancing."""

import pytest

from kafka_direct import ConfigurationError, TopicPartition
from tests.fakes.fake_group import driver_with

COOPERATIVE = {"partition.assignment.strategy": "cooperative-sticky"}


def tps(*pairs):
    return {TopicPartition(t, p) for t, p in pairs}


def test_cooperative_increments_add_to_and_remove_from_the_assignment():
    driver, consumer = driver_with({"t": 4}, **COOPERATIVE)
    driver.subscribe(["t"])
    try:
        consumer.rebalance(assigned={("t", 0), ("t", 1)})
        assert driver.assignment() == tps(("t", 0), ("t", 1))
        consumer.rebalance(assigned={("t", 2)})  # a new partition: only it is delivered
        assert driver.assignment() == tps(("t", 0), ("t", 1), ("t", 2))
        consumer.rebalance(revoked={("t", 1)})  # another member takes one partition
        assert driver.assignment() == tps(("t", 0), ("t", 2))
        consumer.rebalance()  # a rebalance that changes nothing here
        assert driver.assignment() == tps(("t", 0), ("t", 2))
        consumer.lose()
        assert driver.assignment() == set()
    finally:
        driver.close()


def test_cooperative_callbacks_assign_incrementally_and_pause_what_they_get():
    driver, consumer = driver_with({"t": 4}, **COOPERATIVE)
    driver.subscribe(["t"])
    try:
        consumer.rebalance(assigned={("t", 0)})
        consumer.rebalance(assigned={("t", 3)})
        assert all(call != "assign" for call, _ in consumer.calls)
        assert consumer.assigned == {("t", 0), ("t", 3)}
        assert consumer.paused == {("t", 0), ("t", 3)}  # the driver never fetches records
    finally:
        driver.close()


def test_the_group_protocol_of_kip_848_is_incremental_too():
    driver, consumer = driver_with({"t": 2}, **{"group.protocol": "consumer"})
    consumer.params["partition.assignment.strategy"] = "cooperative-sticky"  # fake's switch
    driver.subscribe(["t"])
    try:
        consumer.rebalance(assigned={("t", 0)})
        consumer.rebalance(assigned={("t", 1)})
        assert driver.assignment() == tps(("t", 0), ("t", 1))
    finally:
        driver.close()


@pytest.mark.parametrize("strategy", ["range", "roundrobin", "range,roundrobin"])
def test_eager_rebalances_replace_the_assignment(strategy):
    driver, consumer = driver_with({"t": 4}, **{"partition.assignment.strategy": strategy})
    driver.subscribe(["t"])
    try:
        consumer.rebalance(assigned={("t", 0), ("t", 1)})
        assert driver.assignment() == tps(("t", 0), ("t", 1))
        consumer.rebalance(assigned={("t", 2)}, revoked={("t", 0)})
        assert driver.assignment() == tps(("t", 1), ("t", 2))
        assert all(not call.startswith("incremental") for call, _ in consumer.calls)
        assert consumer.paused >= {("t", 1), ("t", 2)}
    finally:
        driver.close()


def test_subscribing_again_changes_the_topics_without_a_second_keeper():
    driver, consumer = driver_with({"t": 1, "u": 1})
    try:
        driver.subscribe(["t"])
        keeper = driver._keeper
        driver.subscribe(["t", "u"])
        assert driver._keeper is keeper
        assert consumer.subscriptions == [["t"], ["t", "u"]]
    finally:
        driver.close()


def test_the_driver_subscribes_to_names_never_to_librdkafka_patterns():
    driver, _ = driver_with({"t": 1})
    try:
        with pytest.raises(ConfigurationError, match="pattern"):
            driver.subscribe(["^t.*"])
    finally:
        driver.close()
