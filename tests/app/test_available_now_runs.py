

def test_a_bad_record_under_available_now_stops_with_its_typed_error(
        kafka, kafka_topic, postgres, pg_schema, job_host):
    # The sink's error this time (the typed rows' decoding, in the write tasks).
    topic = kafka_topic()
    kafka.produce(topic, [b'{"id": 1}', b'{"id": 2}', b"not json", b'{"id": 4}'])
    done = job_host.run(
        ["ingest", "--bootstrap-servers", kafka.bootstrap_servers, "--dsn", postgres.dsn,
         "--topic", topic, "--schema", pg_schema, "--table", "typed", "--api", "structured",
         "--available-now", "--value-format", "json", "--on-bad-record", "fail"],
        process=True)
    assert done.returncode == 65, done.stdout[-3000:] + done.stderr[-3000:]
    assert "kafka-direct ingest stopped: BadRecordError: " in done.stderr, done.stderr[-3000:]
    assert f"topic {topic}, partition 0, offset 2" in done.stderr
    assert "Traceback" not in done.stderr
