"""Taking a consumer group's lock with PostgreSQL down names the group and the fix.

No service: the DSN points at a port nothing listens on.
"""

import pytest

from kafka_direct.errors import OffsetStoreError
from offsets.postgres_offset_store import PostgresOffsetStore

DOWN = "host=127.0.0.1 port=1 user=u dbname=d connect_timeout=3 password=not-shown"


@pytest.mark.parametrize("ready", [False, True])
def test_the_group_lock_with_postgresql_down_names_the_group_and_the_fix(ready):
    store = PostgresOffsetStore(DOWN, schema="s")
    store._ready = ready  # True: the schema was made by an earlier call; only the lock asks
    with pytest.raises(OffsetStoreError) as raised, store.lockGroup("orders-ingest"):
        pytest.fail("the lock was taken with PostgreSQL down")
    message = str(raised.value)
    assert "consumer group 'orders-ingest'" in message, message
    assert "check that PostgreSQL answers" in message, message
    assert raised.value.context["group"] == "orders-ingest"
    assert "not-shown" not in message
