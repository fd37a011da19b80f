"""The structured job's per-batch counts (BatchCounts) against the table, on real services.

The source hands on offset ranges, so the job counts each batch's records from its plan in
the offset link and its rows from the sink's commit row. On a transactional topic the two
differ (markers and aborted records are offsets without a row).
"""

import psycopg2
from confluent_kafka import Producer

from kafka_direct.app.ingest_options import IngestOptions
from kafka_direct.app.structured_ingest import BatchCounts
from kafka_direct.postgres.staging import COMMITS_TABLE


def _transactions(kafka, topic, count, size):
    """``count`` transactions of ``size`` records on partition 0, every second one aborted."""
    producer = Producer({"bootstrap.servers": kafka.bootstrap_servers,
                         "transactional.id": f"tx-{topic}"})
    producer.init_transactions(30)
    for t in range(count):
        producer.begin_transaction()
        for i in range(size):
            producer.produce(topic, f"{t}:{i}".encode(), partition=0)
        producer.flush(30)
        if t % 2:
            producer.abort_transaction(30)
        else:
            producer.commit_transaction(30)


def test_a_batch_counted_after_the_next_commit_still_counts_its_rows(
        kafka, kafka_topic, postgres, pg_schema, job_host):
    topic = kafka_topic(partitions=1)
    _transactions(kafka, topic, 4, 4)  # 20 offsets: 8 records, 8 aborted, 4 markers
    done = job_host.run(["ingest", "--bootstrap-servers", kafka.bootstrap_servers,
                         "--dsn", postgres.dsn, "--topic", topic, "--schema", pg_schema,
                         "--group", "tx", "--api", "structured", "--available-now",
                         "--batch-interval", "1", "--max-rate-per-partition", "10",
                         "--first-batch-records", "0"])
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    connection = psycopg2.connect(postgres.dsn)
    with connection, connection.cursor() as cursor:
        cursor.execute(f'SELECT query_id, batch_id FROM "{pg_schema}".{COMMITS_TABLE}')
        queryId, last = cursor.fetchone()
    connection.close()
    assert last == 1
    counts = BatchCounts(postgres.dsn, IngestOptions(api="structured", topics=(topic,),
                                                     schema=pg_schema, group="tx"), queryId,
                         rowsAtOffsets=True)
    assert counts(1) == (10, 4)
    # Batch 0, asked once batch 1 committed (a poll that missed it): offsets [0, 10) hold
    # 4 records, a marker, 4 aborted records and a marker.
    assert counts(0) == (10, 4)
