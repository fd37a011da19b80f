"""confluent-kafka clients over a model cluster of many partitions, counting their requests.

For the driver consumer (:class:`kafka_direct.client.driver_consumer.DriverConsumer`) at
scale: topic listings and ListOffsets requests are recorded, so a test can assert what a
batch asks of Kafka (broker round trips), not how long it takes.
"""

from types import SimpleNamespace


class CountingCluster:
    """``topics`` topics of ``partitions`` partitions each, every log ending at ``end``.

    Attributes:
        requests: ``("metadata", topic or None)`` per listing, ``("offsets", n)`` per
            ListOffsets request of ``n`` partitions, in order.
    """

    def __init__(self, topics=10, partitions=100, end=5):
        self.topics = [f"t{i}" for i in range(topics)]
        self.partitions = partitions
        self.end = end
        self.requests = []

    def clients(self):
        """A consumer class and an admin client class for ``DriverConsumer``'s factories."""
        cluster = self

        class Consumer:
            def __init__(self, params):
                pass

            def list_topics(self, topic=None, timeout=None):
                cluster.requests.append(("metadata", topic))
                partitions = {p: SimpleNamespace(id=p) for p in range(cluster.partitions)}
                return SimpleNamespace(topics={
                    name: SimpleNamespace(error=None, partitions=partitions)
                    for name in cluster.topics if topic in (None, name)})

            def offsets_for_times(self, request, timeout):
                cluster.requests.append(("offsets", len(request)))
                return [SimpleNamespace(topic=tp.topic, partition=tp.partition,
                                        offset=cluster.end, error=None) for tp in request]

            def committed(self, request, timeout):
                return [SimpleNamespace(topic=tp.topic, partition=tp.partition, offset=-1001)
                        for tp in request]

            def poll(self, timeout):
                return None

            def close(self):
                pass

        class Admin:
            def __init__(self, params):
                pass

        return Consumer, Admin
