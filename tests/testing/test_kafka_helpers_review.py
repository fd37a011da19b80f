"""The broker helpers' kept clients and the embedded PostgreSQL's SCRAM rounds, attacked.

On the real services: keyed records after partitions were added spread as a new
producer's would, and a user's password gets PostgreSQL's default rounds (only the
embedded superuser's random one has few).
"""

from confluent_kafka import Producer


def test_keyed_records_after_partitions_were_added_spread_as_a_new_producer_spreads_them(
        kafka):
    topic = kafka.create_topic("review-grown", 1)
    kafka.produce(topic, [b"x"], partition=0)  # the kept producer knows 1 partition
    kafka.add_partitions(topic, 4)
    keys = [f"key-{n}".encode() for n in range(200)]
    kafka.produce(topic, [b"v"] * len(keys), keys=keys)
    kept = kafka.end_offsets(topic, range(4))
    # What a producer made now (as every produce() made before) does with the same keys.
    fresh = Producer(kafka.params())
    spread: dict[int, int] = {}

    def count(error, message):
        assert error is None
        spread[message.partition()] = spread.get(message.partition(), 0) + 1

    for key in keys:
        fresh.produce(topic, value=b"v", key=key, on_delivery=count)
    assert fresh.flush(30) == 0
    after = kafka.end_offsets(topic, range(4))
    by_kept = {p: kept[p][1] - (1 if p == 0 else 0) for p in range(4)}
    by_fresh = {p: after[p][1] - kept[p][1] for p in range(4)}
    assert by_kept == by_fresh, f"kept producer: {by_kept}, a new one: {by_fresh}"


def test_a_topic_made_again_takes_records_at_once(kafka):
    topic = kafka.create_topic("review-again", 2)
    kafka.produce(topic, [b"x"], partition=1)
    kafka.delete_topic(topic)
    kafka.create_topic(topic, 2)
    kafka.produce(topic, [b"y"] * 3, partition=1)
    assert kafka.end_offsets(topic, [1]) == {1: (0, 3)}
    kafka.delete_topic(topic)


def test_a_users_password_on_the_embedded_server_gets_postgresqls_default_rounds(postgres):
    # SCRAM_ITERATIONS is meant for the random superuser password only; set as the
    # server's default, it also hashes any role a user of the embedded server makes.
    connection = postgres.connect()
    try:
        with connection, connection.cursor() as cursor:
            cursor.execute("DROP ROLE IF EXISTS review_user")
            cursor.execute("CREATE ROLE review_user LOGIN PASSWORD 'correct horse'")
            cursor.execute("SELECT rolpassword FROM pg_authid WHERE rolname = 'review_user'")
            verifier = cursor.fetchone()[0]
            cursor.execute("DROP ROLE review_user")
    finally:
        connection.close()
    assert int(verifier.split("$")[1].split(":")[0]) == 4096, verifier.split("$")[1]
