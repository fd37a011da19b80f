"""Apache Kafka's jars, resolved by their coordinates into the user's cache, once per version.

The broker that :class:`~kafka_direct.testing.apache_kafka.ApacheKafka` starts is Apache
Kafka's own, from Maven Central: never committed, never a dependency of the package. Where
its jars come from, first match wins:

1. ``KAFKA_HOME``: a Kafka distribution (its ``libs`` folder) or a folder of jars the user
   names, for machines without a network. Used as it is, nothing copied.
2. The cache, the user's Maven, PySpark's Ivy: as for any set of jars
   (:mod:`kafka_direct.testing.maven`), into ``<cache>/kafka-direct/apache-kafka-<version>/``.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from kafka_direct.errors import ConfigurationError
from kafka_direct.testing.maven import JarSet, resolve_jars

__all__ = ["HOME_ENV", "KAFKA_VERSION", "VERSION_ENV", "artifacts", "jar_set",
           "kafka_jars"]

logger = logging.getLogger(__name__)

#: The Apache Kafka release the tests and the embedded default run.
KAFKA_VERSION = "4.4.0"
#: Another release (``4.3.1``...); its jars are cached beside the pinned one's.
VERSION_ENV = "KAFKA_DIRECT_KAFKA_VERSION"
#: A Kafka distribution, or a folder of its jars, to use instead of resolving any.
HOME_ENV = "KAFKA_HOME"

#: slf4j's binding to Log4j 2, whose Log4j Kafka itself brings: the broker's log lines then
#: reach its log file (a failed start shows why). Kafka's distributions ship it too.
_LOG_BINDING = "org.apache.logging.log4j:log4j-slf4j-impl:2.25.5"


def artifacts(version: str) -> tuple[str, ...]:
    """The coordinates resolved for ``version``: the broker, Kafka's tools, the log binding."""
    return (f"org.apache.kafka:kafka_2.13:{version}", f"org.apache.kafka:kafka-tools:{version}",
            _LOG_BINDING)


def kafka_version() -> str:
    """The release asked for: ``KAFKA_DIRECT_KAFKA_VERSION``, else :data:`KAFKA_VERSION`."""
    version = os.environ.get(VERSION_ENV, "").strip() or KAFKA_VERSION
    parts = version.split(".")
    if not (len(parts) == 3 and all(part.isdigit() for part in parts) and int(parts[0]) >= 4):
        raise ConfigurationError(
            f"{VERSION_ENV} must be an Apache Kafka release of 4.0.0 or later (KRaft), "
            f"such as {KAFKA_VERSION}; got {version!r}")
    return version


def _home_jars(home: str) -> Path:
    """The folder of jars in ``KAFKA_HOME`` (a distribution's ``libs``, or the folder)."""
    root = Path(home).expanduser()
    for folder in (root / "libs", root):
        if any(folder.glob("kafka-server-*.jar")) or any(folder.glob("kafka_2.13-*.jar")):
            return folder
    raise ConfigurationError(
        f"{HOME_ENV}={home} holds no Apache Kafka jars: point it at a Kafka distribution "
        f"(the folder with libs/) or a folder holding kafka_2.13-*.jar and its dependencies, "
        f"or unset it to resolve them from Maven Central")


def jar_set(version: str) -> JarSet:
    """Apache Kafka ``version``'s jars as a :class:`~kafka_direct.testing.maven.JarSet`."""
    return JarSet(f"apache-kafka-{version}", f"Apache Kafka {version}", artifacts(version),
                  marker=f"kafka_2.13-{version}.jar", size="about 60 MB",
                  offline=f"set {HOME_ENV} to a Kafka distribution or a folder of its jars. "
                          f"Or choose another broker with KAFKA_DIRECT_BROKER or "
                          f"KAFKA_DIRECT_BOOTSTRAP")


def kafka_jars(version: str | None = None) -> Path:
    """The folder of Apache Kafka ``version``'s jars, resolved and cached on first use.

    Args:
        version: A release (default: ``KAFKA_DIRECT_KAFKA_VERSION``, else the pinned one).

    Raises:
        ConfigurationError: ``KAFKA_HOME`` names no Kafka, or the version is not one.
        ServiceError: No resolver could fetch the jars (the message names the three ways).
    """
    home = os.environ.get(HOME_ENV, "").strip()
    if home:
        found = _home_jars(home)
        if version and not any(found.glob(f"kafka_2.13-{version}.jar")):
            logger.warning("%s=%s does not hold Apache Kafka %s; running the release it "
                           "holds", HOME_ENV, home, version)
        return found
    version = version or kafka_version()
    return resolve_jars(jar_set(version))
