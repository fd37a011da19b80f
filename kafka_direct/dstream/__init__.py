"""The direct stream on the engine: DirectKafkaInputDStream and what it decides per batch.

The stream's lifecycle (:mod:`~.direct_kafka_input_dstream`) and how it makes each batch
(:mod:`~.direct_kafka_batches`).

Its consumer strategies, partition discovery, starting offsets, rate limits (per-partition
configuration, backpressure, the split by lag), commit queue and settings; each batch is a
KafkaRDD (:mod:`kafka_direct.rdd`).
"""

__all__: list[str] = []
