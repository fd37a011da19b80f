from pathlib import Path

import pytest

from tests.app.job_host import JobHost, grouped_by_api


def _api(item):
    if item.get_closest_marker("cluster") is not None:  # one local cluster for both APIs
        return "local-cluster"
    callspec = getattr(item, "callspec", None)
    return callspec.params.get("api") if callspec is not None else None


def pytest_collection_modifyitems(config, items):
    """The job host's tests grouped by API within their module: one context switch, not one
    a test (:func:`tests.app.job_host.grouped_by_api`). Other tests keep their order."""
    here = Path(__file__).parent
    items[:] = grouped_by_api(
        items, lambda item: Path(item.path) if Path(item.path).parent == here else None,
        lambda item: _api(item) if "job_host" in getattr(item, "fixturenames", ()) else None)


@pytest.fixture(scope="session")
def job_host():
    """Runs ``kafka-direct`` command lines in one process that keeps Spark's JVM (see
    :mod:`tests.app.job_host`)."""
    host = JobHost()
    try:
        yield host
    finally:
        host.shutdown()
