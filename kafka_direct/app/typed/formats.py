"""Decoding a record's key or value: raw bytes, JSON, or Avro from a Schema Registry.

A :class:`PartDecoder` turns one key or value into ``(fields, types, fromSchema)``:

* ``fields``: column name -> value. A JSON object or Avro record gives its top-level
  fields; anything else (a JSON array or number, an Avro string) one column named after
  the part (``key`` or ``value``); raw bytes the column ``key`` / ``value`` (bytea).
* ``types``: column name -> PostgreSQL type, where known: from the Avro writer schema
  (every field, null ones too), from ``--columns`` for JSON; other JSON fields' types are
  inferred from their values (:func:`~kafka_direct.app.typed.columns.infer_type`).
* ``fromSchema``: True when the types come from a schema: a field whose type no longer
  fits its column is then a schema change, not a bad record.

Avro records are in Confluent's wire format (magic byte 0, the schema id in 4 bytes, Avro
binary). The writer schema comes from confluent-kafka's ``SchemaRegistryClient`` (one per
Python worker and settings, with its cache), and the bytes are read with fastavro's
``schemaless_reader``, the engine of confluent-kafka's ``AvroDeserializer``, called
directly: the deserializer's per-message work (subject lookup, rules, schema expansion)
costs about three times the decoding itself, and the job needs the writer schema anyway
for its column types. A record that cannot be decoded raises :class:`DecodeError` (a bad
record); a registry that fails raises :class:`~kafka_direct.errors.SchemaRegistryError`.

Schemas travel with the tasks: the driver fetches the topics' registered schemas
(:func:`fetch_schemas`) and every schema a task had to ask the registry for comes back
with its result, so the next tasks get their texts in their closure. A task then neither
asks the registry nor imports its client (a few seconds of imports in a fresh Python
worker); only a schema id it has never been given makes it ask.
"""

from __future__ import annotations

import io
import json
import logging
import threading
from collections.abc import Iterable, Mapping
from typing import Any

from kafka_direct.app.typed.options import RegistrySettings, TypedOptions, registry_client
from kafka_direct.errors import SchemaRegistryError

__all__ = ["DecodeError", "PartDecoder", "SchemaTexts", "avro_type", "decoders",
           "fetch_schemas", "registry_client"]

Decoded = tuple[dict[str, Any], Mapping[str, str], bool]
#: A schema id -> its schema's text, after the texts of the schemas it references.
SchemaTexts = Mapping[int, tuple[str, ...]]

logger = logging.getLogger(__name__)

_schemas: dict[tuple[RegistrySettings, int], tuple[Any, dict[str, str], bool]] = {}
_mutex = threading.Lock()

_PRIMITIVES = {"boolean": "boolean", "int": "integer", "long": "bigint", "float": "real",
               "double": "double precision", "bytes": "bytea", "string": "text",
               "null": "text"}
_LOGICAL = {"uuid": "uuid", "date": "date", "time-millis": "time", "time-micros": "time",
            "timestamp-millis": "timestamptz", "timestamp-micros": "timestamptz",
            "timestamp-nanos": "timestamptz", "local-timestamp-millis": "timestamp",
            "local-timestamp-micros": "timestamp", "local-timestamp-nanos": "timestamp"}


class DecodeError(ValueError):
    """A key or value that cannot be decoded; its message is the reason (no record bytes)."""




def _registry_failure(error: BaseException, doing: str) -> SchemaRegistryError:
    from kafka_direct.redaction import redact_text

    status = getattr(error, "http_status_code", None)
    cause = " ".join(redact_text(str(getattr(error, "error_message", None) or error)).split())
    hint = (": check --schema-registry-auth" if status in (401, 403) else
            ": is the registry up, and --schema-registry its URL?")
    return SchemaRegistryError(f"the Schema Registry failed {doing} (HTTP "
                               f"{status if status and status > 0 else 'no answer'}: "
                               f"{cause[:300]}){hint}",
                               status=status if isinstance(status, int) and status > 0
                               else None, cause=cause[:300])


def _not_found(error: BaseException) -> bool:
    return getattr(error, "http_status_code", None) == 404


def avro_type(schema: Any, named: Mapping[str, Any]) -> str:
    """The PostgreSQL column type of a (parsed) Avro schema.

    ``[null, T]`` is T (nullable); other unions, records, arrays and maps are ``jsonb``;
    enums ``text``; fixed ``bytea``; logical types their own (decimal ``numeric(p,s)``,
    timestamps ``timestamptz``, local timestamps ``timestamp``, uuid, date, time).
    """
    if isinstance(schema, list):
        branches = [b for b in schema if b != "null"
                    and not (isinstance(b, dict) and b.get("type") == "null")]
        return avro_type(branches[0], named) if len(branches) == 1 else "jsonb"
    if isinstance(schema, str):
        if schema in _PRIMITIVES:
            return _PRIMITIVES[schema]
        return avro_type(named[schema], named) if schema in named else "jsonb"
    if not isinstance(schema, dict):
        return "jsonb"
    logical = schema.get("logicalType")
    if logical == "decimal" and "precision" in schema:
        return f"numeric({int(schema['precision'])},{int(schema.get('scale', 0))})"
    if logical in _LOGICAL:
        return _LOGICAL[logical]
    kind = schema.get("type")
    if kind == "enum":
        return "text"
    if kind == "fixed":
        return "bytea"
    if kind in ("record", "error", "array", "map"):
        return "jsonb"
    return avro_type(kind, named)


class PartDecoder:
    """Decodes one part (key or value) of records in one format (see the module).

    Args:
        part: ``key`` or ``value``: the column name of a part that is not an object.
        kind: ``raw``, ``json`` or ``avro``.
        declared: Column types declared with ``--columns`` (JSON).
        registry: The Schema Registry (Avro).
    """

    def __init__(self, part: str, kind: str, declared: Mapping[str, str],
                 registry: RegistrySettings | None, known: SchemaTexts | None = None) -> None:
        self.part = part
        self.kind = kind
        self.declared = dict(declared)
        self.registry = registry
        self.known = dict(known or {})
        #: Schemas this decoder had to ask the registry for (their texts).
        self.fetched: dict[int, tuple[str, ...]] = {}
        self._rawTypes = {part: "bytea"}
        self._jsonTypes = dict(declared)

    def __repr__(self) -> str:
        return f"PartDecoder({self.part}, {self.kind})"

    def decode(self, data: bytes | None, topic: str) -> Decoded:
        """``(fields, types, fromSchema)`` of one key or value (None: no fields).

        Raises:
            DecodeError: The bytes are not in the part's format.
            SchemaRegistryError: The registry failed (not: did not know the id).
        """
        if self.kind == "raw":
            return {self.part: data}, self._rawTypes, True
        if data is None:
            return {}, self._jsonTypes, False
        if self.kind == "json":
            return self._json(data)
        return self._avro(data, topic)

    def _json(self, data: bytes) -> Decoded:
        try:
            document = json.loads(data)
        except UnicodeDecodeError:
            raise DecodeError(f"the {self.part} is not JSON: not UTF-8 text") from None
        except json.JSONDecodeError as error:
            raise DecodeError(f"the {self.part} is not JSON: {error.msg} at byte "
                              f"{error.pos}") from None
        except RecursionError:
            raise DecodeError(f"the {self.part} is not JSON the job reads: nested too "
                              "deeply") from None
        if isinstance(document, dict):
            return document, self._jsonTypes, False
        return {self.part: document}, self._jsonTypes, False

    def _avro(self, data: bytes, topic: str) -> Decoded:
        if len(data) < 5 or data[0] != 0:
            raise DecodeError(f"the {self.part} is not Avro in the Confluent wire format "
                              "(magic byte 0, then a 4-byte schema id)")
        schemaId = int.from_bytes(data[1:5], "big")
        parsed, types, isRecord = self._schema(schemaId)
        from fastavro import schemaless_reader

        try:
            decoded = schemaless_reader(io.BytesIO(data[5:]), parsed, None)
        except Exception as error:  # fastavro raises EOFError, ValueError, KeyError ...
            raise DecodeError(f"the {self.part} does not decode with its schema (id "
                              f"{schemaId}): {type(error).__name__}") from None
        if isRecord and isinstance(decoded, dict):
            return decoded, types, True
        return {self.part: decoded}, types, True

    def _schema(self, schemaId: int) -> tuple[Any, dict[str, str], bool]:
        assert self.registry is not None  # checked by TypedOptions
        key = (self.registry, schemaId)
        with _mutex:
            cached = _schemas.get(key)
        if cached is not None:
            return cached
        loaded = self._load(schemaId)
        with _mutex:
            _schemas[key] = loaded
        return loaded

    def _load(self, schemaId: int) -> tuple[Any, dict[str, str], bool]:
        texts = self.known.get(schemaId)
        if texts is None:
            assert self.registry is not None
            texts = schema_texts(self.registry, schemaId, self.part)
            self.fetched[schemaId] = texts
        return self._parse(schemaId, texts)

    def _parse(self, schemaId: int, texts: tuple[str, ...]) -> tuple[Any, dict[str, str], bool]:
        from fastavro import parse_schema

        named: dict[str, Any] = {}
        try:
            for text in texts[:-1]:
                parse_schema(json.loads(text), named_schemas=named)
            parsed = parse_schema(json.loads(texts[-1]), named_schemas=named)
        except Exception as error:
            raise DecodeError(f"the {self.part}'s schema id {schemaId} is not a valid Avro "
                              f"schema: {type(error).__name__}") from None
        if isinstance(parsed, dict) and parsed.get("type") in ("record", "error"):
            types = {f["name"]: avro_type(f["type"], named) for f in parsed["fields"]}
            return parsed, types, True
        return parsed, {self.part: avro_type(parsed, named)}, False


def schema_texts(registry: RegistrySettings, schemaId: int, part: str = "value"
                 ) -> tuple[str, ...]:
    """Schema ``schemaId``'s text from the registry, after those of its references.

    Raises:
        DecodeError: The registry has no such id (or reference), or it is not Avro.
        SchemaRegistryError: The registry failed.
    """
    client = registry_client(registry)
    try:
        schema = client.get_schema(schemaId)
    except Exception as error:
        if _not_found(error):
            raise DecodeError(f"the {part}'s schema id {schemaId} is not in the Schema "
                              "Registry") from None
        raise _registry_failure(error, f"to give schema id {schemaId}") from None
    if (schema.schema_type or "AVRO").upper() != "AVRO":
        raise DecodeError(f"the {part}'s schema id {schemaId} is a {schema.schema_type} "
                          "schema, not Avro")
    texts: list[str] = []
    for reference in schema.references or ():
        _reference(client, reference, texts, part)
    return (*texts, schema.schema_str)


def _reference(client: Any, reference: Any, texts: list[str], part: str) -> None:
    """Append a referenced schema's text after those of its own references."""
    try:
        found = client.get_version(reference.subject, reference.version)
    except Exception as error:
        if _not_found(error):
            raise DecodeError(f"the {part}'s schema references {reference.subject} version "
                              f"{reference.version}, which is not in the registry") from None
        raise _registry_failure(error, f"to give {reference.subject} version "
                                       f"{reference.version}") from None
    for inner in found.schema.references or ():
        _reference(client, inner, texts, part)
    if found.schema.schema_str not in texts:
        texts.append(found.schema.schema_str)


def fetch_schemas(options: TypedOptions, topics: Iterable[str]) -> dict[int, tuple[str, ...]]:
    """The schemas registered under the topics' subjects (``<topic>-key``/``-value``).

    For the driver to hand to tasks. Best effort: a subject the registry lacks is skipped,
    and a registry that fails is logged (the tasks then ask it themselves).
    """
    if options.registry is None:
        return {}
    parts = [p for p, kind in (("key", options.keyFormat), ("value", options.valueFormat))
             if kind == "avro"]
    found: dict[int, tuple[str, ...]] = {}
    client = registry_client(options.registry)
    for topic in topics:
        for part in parts:
            subject = f"{topic}-{part}"
            try:
                for version in client.get_versions(subject):
                    schemaId = client.get_version(subject, version).schema_id
                    if schemaId not in found:
                        found[schemaId] = schema_texts(options.registry, schemaId, part)
            except DecodeError:
                continue
            except SchemaRegistryError as error:
                logger.warning("fetching the schemas of %s failed (tasks ask the registry "
                               "themselves): %s", subject, error)
            except Exception as error:
                if not _not_found(error):
                    logger.warning("fetching the schemas of %s failed (tasks ask the "
                                   "registry themselves): %s", subject,
                                   _registry_failure(error, f"to list {subject}"))
    return found


def decoders(options: TypedOptions, known: SchemaTexts | None = None
             ) -> tuple[PartDecoder, PartDecoder]:
    """The (key, value) decoders of the options (``known``: schema texts given)."""
    declared = dict(options.columns)
    return (PartDecoder("key", options.keyFormat, declared, options.registry, known),
            PartDecoder("value", options.valueFormat, declared, options.registry, known))
