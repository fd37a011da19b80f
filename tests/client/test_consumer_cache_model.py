"""The executor consumer cache against a model: random leases, failures, retries and hand-overs.

Invariants: a consumer is never held by two reads at once, never handed out closed, always
reads the partition it was leased for, a retried read never gets a consumer that read before,
and the cache keeps at most its capacity of consumers once none is in use.
"""

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from kafka_direct.client.cached_consumers import ConsumerCache
from tests.fakes.fake_kafka import FakeConsumer, FakeLog

PARAMS = ({"bootstrap.servers": "fake:1", "group.id": "a"},
          {"bootstrap.servers": "fake:1", "group.id": "b"})


class CacheModel(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.made = []
        self.capacity = 3

        def factory(params):
            self.made.append(FakeConsumer(FakeLog(range(10))))
            return self.made[-1]

        self.cache = ConsumerCache(capacity=self.capacity, factory=factory)
        self.held = []  # (consumer, release, partition) of reads under way
        self.read_before = set()  # ids of the clients that served a read

    @rule(partition=st.integers(0, 5), params=st.sampled_from(PARAMS),
          attempt=st.sampled_from([0, 0, 0, 1]))
    def lease(self, partition, params, attempt):
        before = len(self.made)
        consumer, release = self.cache.acquire("t", partition, params, attempt=attempt)
        assert not consumer.closed
        assert (consumer.topic, consumer.partition) == ("t", partition)
        assert all(consumer is not other for other, _, _ in self.held), "shared"
        if attempt > 0:
            assert len(self.made) == before + 1, "a retry got a consumer that read before"
        self.read_before.add(id(consumer._consumer))
        self.held.append((consumer, release, partition))

    @precondition(lambda self: self.held)
    @rule(index=st.integers(0, 10), fails=st.booleans())
    def finish(self, index, fails):
        consumer, release, partition = self.held.pop(index % len(self.held))
        assert not consumer.closed and consumer.partition == partition
        if fails:  # what lease() does when the read raises
            self.cache.discard("t", partition, consumer._params, consumer)
        release()

    @invariant()
    def bounded_when_idle(self):
        if not self.held:
            assert len(self.cache) <= self.capacity
        assert self.cache.created == len(self.made)


TestConsumerCacheModel = CacheModel.TestCase
TestConsumerCacheModel.settings = settings(max_examples=300, stateful_step_count=40,
                                           deadline=None)
