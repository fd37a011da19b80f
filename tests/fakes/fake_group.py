"""A fake confluent-kafka consumer for the driver's group membership, driven by the test.

It records what the driver asks (subscriptions, assignments, pauses) and lets a test play the
group coordinator: ``rebalance(assigned, revoked)`` calls the driver's callbacks as
librdkafka would under the consumer's rebalance protocol (eager: revoke everything, then
assign everything; cooperative: only the increments).
"""

from confluent_kafka import TopicPartition as KafkaTP


class _Partition:
    def __init__(self, leader=1):
        self.leader = leader
        self.error = None


class _Topic:
    def __init__(self, name, partitions):
        self.topic = name
        self.partitions = {p: _Partition() for p in range(partitions)}
        self.error = None


class _Metadata:
    def __init__(self, topics):
        self.topics = {name: _Topic(name, n) for name, n in topics.items()}
        self.brokers = {}


class FakeGroupConsumer:
    """Stands in for ``confluent_kafka.Consumer`` on the driver."""

    def __init__(self, params, topics=None):
        self.params = dict(params)
        # name -> partition count, the cluster's metadata: shared by the consumers of one
        # cluster (a dict given is kept, not copied)
        self.topics = topics if topics is not None else {}
        self.subscriptions = []  # every topic list given to subscribe()
        self.callbacks = None
        self.assigned = set()  # what librdkafka holds as the assignment
        self.paused = set()
        self.calls = []  # assign / incremental_assign / unassign / ... in order
        self.metadata_requests = 0
        self.closed = False

    @property
    def cooperative(self):
        strategy = str(self.params.get("partition.assignment.strategy", "range"))
        return "cooperative" in strategy

    # -- what the driver calls ------------------------------------------------------------

    def subscribe(self, topics, on_assign=None, on_revoke=None, on_lost=None):
        self.subscriptions.append(list(topics))
        self.callbacks = (on_assign, on_revoke, on_lost)

    def unsubscribe(self):
        self.subscriptions.append([])
        if self.callbacks is not None and self.assigned:
            self._call(self.callbacks[1], set(self.assigned))
        self.assigned = set()

    def list_topics(self, topic=None, timeout=None):
        self.metadata_requests += 1
        if topic is None:
            return _Metadata(self.topics)
        return _Metadata({topic: self.topics[topic]} if topic in self.topics else {})

    def poll(self, timeout=None):
        return None

    def pause(self, partitions):
        self.paused |= {(p.topic, p.partition) for p in partitions}

    def assign(self, partitions):
        self.calls.append(("assign", sorted((p.topic, p.partition) for p in partitions)))
        if self.cooperative:
            raise AssertionError("assign() under the cooperative protocol")
        self.assigned = {(p.topic, p.partition) for p in partitions}

    def unassign(self):
        self.calls.append(("unassign", []))
        self.assigned = set()

    def incremental_assign(self, partitions):
        self.calls.append(("incremental_assign",
                           sorted((p.topic, p.partition) for p in partitions)))
        if not self.cooperative:
            raise AssertionError("incremental_assign() under the eager protocol")
        self.assigned |= {(p.topic, p.partition) for p in partitions}

    def incremental_unassign(self, partitions):
        self.calls.append(("incremental_unassign",
                           sorted((p.topic, p.partition) for p in partitions)))
        if not self.cooperative:
            raise AssertionError("incremental_unassign() under the eager protocol")
        self.assigned -= {(p.topic, p.partition) for p in partitions}

    def assignment(self):
        return [KafkaTP(t, p) for t, p in sorted(self.assigned)]

    def close(self):
        self.closed = True

    # -- what the test calls: the coordinator's side ------------------------------------------

    def rebalance(self, assigned=(), revoked=()):
        """Deliver a rebalance of ``(topic, partition)`` pairs as librdkafka would."""
        on_assign, on_revoke, _ = self.callbacks
        assigned, revoked = set(assigned), set(revoked)
        if self.cooperative:
            if revoked:
                self._call(on_revoke, revoked)
                self.assigned -= revoked  # the library unassigns if the callback did not
            self._call(on_assign, assigned)  # called even when empty, as librdkafka does
            self.assigned |= assigned
        else:
            target = (self.assigned - revoked) | assigned
            self._call(on_revoke, set(self.assigned))
            self.assigned = set()
            self._call(on_assign, target)
            self.assigned = target

    def lose(self):
        """The session timed out: every partition is lost at once."""
        _, _, on_lost = self.callbacks
        self._call(on_lost, set(self.assigned))
        self.assigned = set()

    def _call(self, callback, pairs):
        callback(self, [KafkaTP(t, p) for t, p in sorted(pairs)])


class FakeAdmin:
    def __init__(self, params):
        self.params = params


def driver_with(topics, **params):
    """A DriverConsumer over a FakeGroupConsumer of a cluster with ``topics``."""
    from kafka_direct.client.driver_consumer import DriverConsumer

    made = {}
    cluster = dict(topics)

    def factory(config):
        # The driver makes its asking consumer first, then the group's member: the last one
        # made is the member, which the tests drive.
        made["consumer"] = FakeGroupConsumer(config, cluster)
        return made["consumer"]

    config = {"bootstrap.servers": "fake:9092", "group.id": "g", **params}
    driver = DriverConsumer(config, 1000, consumerFactory=factory, adminFactory=FakeAdmin)
    return driver, made["consumer"]
