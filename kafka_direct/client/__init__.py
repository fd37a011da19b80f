"""How the driver and the executors talk to Kafka: librdkafka lives here only.

* :mod:`~kafka_direct.client.params`: the Kafka settings, checked and made safe per side;
* :mod:`~kafka_direct.client.callbacks`: a user's librdkafka callbacks, called one at a
  time however many clients and threads serve them;
* :mod:`~kafka_direct.client.driver_consumer`: the driver's consumer and admin client
  (metadata, offsets, commits, group membership); :mod:`~kafka_direct.client.topic_metadata`:
  what its metadata answers say of topics; :mod:`~kafka_direct.client.asking_consumers`:
  the consumers asking its offset questions, a few at once, and their threads;
* :mod:`~kafka_direct.client.data_consumer`: the executors' reads of one range;
  :mod:`~kafka_direct.client.cached_consumers`: their consumers, cached per Python worker;
  :mod:`~kafka_direct.client.absent_partitions`: when a range's partition is gone;
  :mod:`~kafka_direct.client.columnar`: the same read into Arrow buffers by a small C
  extension (``_columnar``), with the pure-Python read as fallback;
* :mod:`~kafka_direct.client.retry`: retries of the driver's calls;
  :mod:`~kafka_direct.client.log_positions`: where a partition's log begins and ends.
"""

__all__: list[str] = []
