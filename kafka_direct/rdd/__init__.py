"""KafkaRDD: offset ranges read on executors, placed by a location strategy, as a DataFrame.

Imports nothing of the streaming engine nor of the direct stream: ``KafkaUtils.createRDD``
and every batch of the stream build their RDDs here.
"""

__all__: list[str] = []
