import pytest

from tests.app.job_host import JobHost


@pytest.fixture(scope="session")
def job_host():
    """Runs ``kafka-direct`` command lines in one process that keeps Spark's JVM (see
    :mod:`tests.app.job_host`)."""
    host = JobHost()
    try:
        yield host
    finally:
        host.shutdown()
