"""Where the examples find Kafka and PostgreSQL: the environment, or embedded ones.

``KAFKA_DIRECT_BOOTSTRAP`` and ``KAFKA_DIRECT_PG_DSN`` name your services; without them the
examples start an embedded broker (Apache Kafka unless ``KAFKA_DIRECT_BROKER`` names
another) and PostgreSQL for the run.
"""

import contextlib
import os

from kafka_direct.testing import EmbeddedPostgres, ExternalKafka, local_kafka


@contextlib.contextmanager
def services():
    """Yield (kafka service, PostgreSQL DSN)."""
    with contextlib.ExitStack() as stack:
        bootstrap = os.environ.get("KAFKA_DIRECT_BOOTSTRAP")
        kafka = (ExternalKafka(bootstrap).start() if bootstrap
                 else stack.enter_context(local_kafka()))
        dsn = os.environ.get("KAFKA_DIRECT_PG_DSN") or stack.enter_context(EmbeddedPostgres()).dsn
        yield kafka, dsn
