"""Documented module paths that moved keep working: their old modules re-export the new."""

import kafka_direct.rdd.dataframe
import kafka_direct.rdd.kafka_rdd
import kafka_direct.rdd.record_reader
import kafka_direct.rdd.spark_support
import kafka_direct.spark_support
import kafka_direct.sql.dataframe


def test_the_spark_helpers_answer_at_their_old_path():
    for name in kafka_direct.rdd.spark_support.__all__:
        assert getattr(kafka_direct.spark_support, name) is getattr(
            kafka_direct.rdd.spark_support, name)


def test_the_dataframe_view_answers_at_its_old_path():
    for name in kafka_direct.rdd.dataframe.__all__:
        assert getattr(kafka_direct.sql.dataframe, name) is getattr(
            kafka_direct.rdd.dataframe, name)


def test_the_record_reader_answers_at_its_old_path():
    for name in kafka_direct.rdd.record_reader.__all__:
        assert name in kafka_direct.rdd.kafka_rdd.__all__
        assert getattr(kafka_direct.rdd.kafka_rdd, name) is getattr(
            kafka_direct.rdd.record_reader, name)
