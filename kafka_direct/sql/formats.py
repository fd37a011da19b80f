"""Names Spark and this package agree on across the source and the sink.

The local properties Spark sets on every task of a streaming micro-batch: the sink stages
and commits under them, and a source linked to an offset store binds its batch's plan to
them.
"""

__all__ = ["BATCH_ID_PROPERTY", "QUERY_ID_PROPERTY"]

#: The running query's id (stable across restarts from one checkpoint).
QUERY_ID_PROPERTY = "sql.streaming.queryId"
#: The running micro-batch's id.
BATCH_ID_PROPERTY = "streaming.sql.batchId"
