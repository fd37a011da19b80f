"""The process-wide cache of range-frame heads stays within its stated bound.

``_MAX_HEADS`` says how many partitions' heads are kept at most (a pattern subscription's
topics come and go). A batch's new partitions were once added on top of a full cache: two
batches of 60,000 new partitions kept 120,000 heads (about 1 KB each with topic names of
Kafka's longest, 249 characters).
"""

from kafka_direct.rdd import spark_support


def test_the_kept_heads_never_pass_their_bound(monkeypatch):
    monkeypatch.setattr(spark_support, "_heads", {})
    for generation in range(2):
        elements = [(f"churn-{generation}-{i // 100}", i % 100, 0, 1) for i in range(60_000)]
        assert spark_support._range_frames(elements) is not None
        assert len(spark_support._heads) <= spark_support._MAX_HEADS, \
            len(spark_support._heads)
