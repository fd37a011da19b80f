"""Typed rows for the ingest job: record formats, column types, upserts, deletes, dead letters.

The ingest job writes raw bytes by default (``topic, kafka_partition, kafka_offset, key,
value``). With ``--value-format`` / ``--key-format json|avro|json-schema|protobuf``,
``--key-columns``, ``--on-tombstone`` or ``--on-bad-record dead-letter`` it writes through
this package, on both APIs:

* :mod:`.options`: the options, checked together (:class:`TypedOptions`);
* :mod:`.schema_registry`: where the Schema Registry is, how to log in, its client;
* :mod:`.formats`: decoding keys and values (raw, JSON, Avro, JSON Schema or Protobuf
  from a Schema Registry; Protobuf's messages in :mod:`.protobuf`);
* :mod:`.routing`: which table a topic's records go to (``--table '{topic}'``);
* :mod:`.metadata`: the record's timestamp and headers as columns;
* :mod:`.json_schema`: JSON Schema's types and the columns they give;
* :mod:`.keys`: keys of Kafka's primitive serializers (``string``, ``long`` ...) as one
  column;
* :mod:`.columns`: PostgreSQL column types, what fits where, and value conversion;
* :mod:`.rows`: a record as a staged row (a row, a delete, or a dead letter);
* :mod:`.stage`: executor tasks stage their rows in unlogged tables of their own;
* :mod:`.table`: the target and dead-letter tables: created, evolved, checked;
* :mod:`.commit`: the driver moves a batch's staged rows, in the batch's transaction;
* :mod:`.dstream` and :mod:`.structured`: the two APIs' writers around it.

Every batch is one PostgreSQL transaction on the driver: new columns, rows, upserts,
deletes, dead letters and the batch's offsets commit together or not at all.
"""

from __future__ import annotations

from kafka_direct.app.typed.options import TypedOptions
from kafka_direct.app.typed.schema_registry import RegistrySettings

__all__ = ["RegistrySettings", "TypedOptions"]
