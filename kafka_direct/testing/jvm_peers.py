"""The JVM connectors kafka-direct is measured and checked against, by Maven coordinates.

None of them is a dependency of the package: they are the benchmarks' baselines and the
conformance suites' references, resolved into the user's cache the first time they are
asked for (:func:`~kafka_direct.testing.maven.resolve_jars`):

- Spark's own Kafka connectors for the Spark release PySpark runs
  (``spark-sql-kafka-0-10``, the ``kafka`` source and sink; ``spark-streaming-kafka-0-10``,
  the Scala direct stream and ``KafkaUtils.createRDD``), as ``spark.jars.packages`` would
  add them;
- Kafka Connect's runtime (standalone worker, JSON converter, single message transforms);
- Debezium's JDBC sink connector, as its Connect plugin archive;
- the PostgreSQL JDBC driver.

Maven Central publishes Spark's connectors only for some releases: where PySpark's own
release has none, :func:`spark_kafka_jars` says which releases do, and the benchmarks run
the peers on such a PySpark in a virtual environment of their own.
"""

from __future__ import annotations

from pathlib import Path

from kafka_direct.errors import ConfigurationError
from kafka_direct.testing.kafka_jars import KAFKA_VERSION
from kafka_direct.testing.maven import JarSet, resolve_jars

__all__ = [
    "DEBEZIUM_POSTGRES_VERSION",
    "DEBEZIUM_VERSION",
    "POSTGRES_JDBC_VERSION",
    "SPARK_KAFKA_RELEASES",
    "debezium_jdbc_sink",
    "debezium_postgres_source",
    "kafka_connect_jars",
    "postgres_jdbc_driver",
    "spark_jars_option",
    "spark_kafka_jars",
]

#: Debezium's release of its JDBC sink: 3.6.1.Final's jar is not on Maven Central, so the
#: newest whole one.
DEBEZIUM_VERSION = "3.6.0.Final"
#: Debezium's PostgreSQL source connector (change data capture into Kafka, for the ingest
#: job's --envelope debezium).
DEBEZIUM_POSTGRES_VERSION = "3.6.1.Final"
#: The PostgreSQL JDBC driver the peers write with.
POSTGRES_JDBC_VERSION = "42.7.14"
#: Spark releases of 4.x whose Kafka connectors Maven Central serves (checked by
#: ``mvn dependency:get``), newest last.
SPARK_KAFKA_RELEASES = ("4.0.0", "4.1.1", "4.2.0")
_LOG_BINDING = "org.apache.logging.log4j:log4j-slf4j-impl:2.25.5"


def spark_kafka_jars(spark_version: str) -> Path:
    """Spark ``spark_version``'s Kafka connectors and their runtime dependencies.

    Raises:
        ConfigurationError: Maven Central has no connectors of that release (the message
            names the releases it has).
        ServiceError: They could not be resolved.
    """
    if spark_version not in SPARK_KAFKA_RELEASES:
        raise ConfigurationError(
            f"Maven Central serves no Kafka connectors of Spark {spark_version}: run the "
            f"JVM peers on a PySpark of one of {', '.join(SPARK_KAFKA_RELEASES)} "
            f"(the benchmarks make a virtual environment of the newest)")
    coordinates = tuple(f"org.apache.spark:{artifact}_2.13:{spark_version}" for artifact in
                        ("spark-sql-kafka-0-10", "spark-streaming-kafka-0-10"))
    return resolve_jars(JarSet(
        f"spark-kafka-{spark_version}", f"Spark {spark_version}'s Kafka connectors",
        coordinates, marker=f"spark-sql-kafka-0-10_2.13-{spark_version}.jar",
        size="about 15 MB"))


def spark_jars_option(spark_version: str, spark_home: Path) -> str:
    """``spark.jars`` for the connectors: their jars that Spark's own ``jars/`` lacks.

    ``spark.jars.packages`` adds the connectors' dependencies as well, Hadoop's and Kafka's
    clients included, which Spark already holds at other versions; only what is missing is
    put on the class path, so each class has one origin.
    """
    have = {_artifact(jar.name) for jar in (spark_home / "jars").glob("*.jar")}
    folder = spark_kafka_jars(spark_version)
    wanted = [str(jar) for jar in sorted(folder.glob("*.jar")) if _artifact(jar.name) not in have]
    return ",".join(wanted)


def _artifact(name: str) -> str:
    """A jar file's artifact name without its version (``kafka-clients-3.9.1.jar``)."""
    stem = name[:-4]
    parts = stem.split("-")
    for index, part in enumerate(parts):
        if part[:1].isdigit() and index > 0:
            return "-".join(parts[:index])
    return stem


def kafka_connect_jars(version: str = KAFKA_VERSION) -> Path:
    """Kafka Connect ``version``: the standalone worker, JSON converter and transforms."""
    coordinates = tuple(f"org.apache.kafka:{artifact}:{version}" for artifact in
                        ("connect-runtime", "connect-json", "connect-transforms"))
    return resolve_jars(JarSet(
        f"kafka-connect-{version}", f"Kafka Connect {version}", (*coordinates, _LOG_BINDING),
        marker=f"connect-runtime-{version}.jar", size="about 70 MB"))


def debezium_jdbc_sink(version: str = DEBEZIUM_VERSION) -> Path:
    """Debezium's JDBC sink connector, the jars of its Connect plugin archive."""
    return resolve_jars(JarSet(
        f"debezium-connector-jdbc-{version}", f"Debezium's JDBC sink connector {version}",
        (f"io.debezium:debezium-connector-jdbc:{version}:tar.gz:plugin",),
        marker=f"debezium-connector-jdbc-{version}.jar", size="about 58 MB"))


def debezium_postgres_source(version: str = DEBEZIUM_POSTGRES_VERSION) -> Path:
    """Debezium's PostgreSQL source connector, the jars of its Connect plugin archive."""
    return resolve_jars(JarSet(
        f"debezium-connector-postgres-{version}",
        f"Debezium's PostgreSQL connector {version}",
        (f"io.debezium:debezium-connector-postgres:{version}:tar.gz:plugin",),
        marker=f"debezium-connector-postgres-{version}.jar", size="about 20 MB"))


def postgres_jdbc_driver(version: str = POSTGRES_JDBC_VERSION) -> Path:
    """The PostgreSQL JDBC driver's jar."""
    folder = resolve_jars(JarSet(
        f"postgresql-jdbc-{version}", f"the PostgreSQL JDBC driver {version}",
        (f"org.postgresql:postgresql:{version}",), marker=f"postgresql-{version}.jar",
        size="about 1 MB"))
    return folder / f"postgresql-{version}.jar"
