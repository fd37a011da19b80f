import pytest

from kafka_direct.testing import EmbeddedKafka


@pytest.fixture
def params(kafka):
    return kafka.params(**{"group.id": "it"})


@pytest.fixture
def own_kafka():
    """A broker of the test's own, for tests that stop, pause or break it."""
    with EmbeddedKafka() as broker:
        yield broker
