"""Decoding a record's key or value: raw bytes, JSON, or Avro / JSON Schema / Protobuf.

A :class:`PartDecoder` turns one key or value into ``(fields, types, fromSchema)``:

* ``fields``: column name -> value. A JSON object or Avro record gives its top-level
  fields; anything else (a JSON array or number, an Avro string) one column named after
  the part (``key`` or ``value``); raw bytes the column ``key`` / ``value`` (bytea).
* ``types``: column name -> PostgreSQL type, where known: from the Avro writer schema
  (every field, null ones too) or the JSON Schema (its ``properties``), from ``--columns``
  for plain JSON; other JSON fields' types are inferred from their values
  (:func:`~kafka_direct.app.typed.columns.infer_type`).
* ``fromSchema``: True when the types come from a schema: a field whose type no longer
  fits its column is then a schema change, not a bad record.

Avro records are in Confluent's wire format (magic byte 0, the schema id in 4 bytes, Avro
binary). The writer schema comes from confluent-kafka's ``SchemaRegistryClient`` (one per
Python worker and settings, with its cache), and the bytes are read with fastavro's
``schemaless_reader``, the engine of confluent-kafka's ``AvroDeserializer``, called
directly: the deserializer's per-message work (subject lookup, rules, schema expansion)
costs about three times the decoding itself, and the job needs the writer schema anyway
for its column types. JSON Schema records (``json-schema``) are in the same wire format
with JSON text after the header: the columns are the schema's top-level ``properties``
(fields the schema does not declare are left out, as Kafka Connect's converter does), and
each value is checked against its property's type (a value the schema does not allow is a
bad record, as confluent-kafka's validating deserializer would have it). A record that
cannot be decoded raises :class:`DecodeError` (a bad record); a registry that fails raises
:class:`~kafka_direct.errors.SchemaRegistryError`.

Schemas travel with the tasks: the driver fetches the topics' registered schemas
(:func:`fetch_schemas`) and every schema a task had to ask the registry for comes back
with its result, so the next tasks get their texts in their closure. A task then neither
asks the registry nor imports its client (a few seconds of imports in a fresh Python
worker); only a schema id it has never been given makes it ask.

Protobuf records (``protobuf``) are in the same wire format with the message's indexes
after the schema id; their schema is fetched in its serialized form and read by
:mod:`~kafka_direct.app.typed.protobuf`.
"""

from __future__ import annotations

import io
import json
import logging
import re
import threading
from collections.abc import Iterable, Mapping
from typing import Any

from kafka_direct.app.typed.columns import JsonNumber
from kafka_direct.app.typed.json_schema import (
    JSON_CHECKS,
    json_kind,
    json_schema_type,
    json_types,
    object_schema,
)
from kafka_direct.app.typed.options import REGISTRY_FORMATS, TypedOptions
from kafka_direct.app.typed.schema_registry import RegistrySettings, registry_client
from kafka_direct.errors import SchemaRegistryError

__all__ = ["DecodeError", "PartDecoder", "SchemaTexts", "avro_type", "decoders",
           "fetch_schemas", "json_schema_type", "registry_client"]

Decoded = tuple[dict[str, Any], Mapping[str, str], bool]
#: A schema id -> its schema's text, after the texts of the schemas it references.
SchemaTexts = Mapping[int, tuple[str, ...]]

logger = logging.getLogger(__name__)

_schemas: dict[tuple[RegistrySettings, str, str, int], tuple[Any, dict[str, str], bool]] = {}
_mutex = threading.Lock()

_PRIMITIVES = {"boolean": "boolean", "int": "integer", "long": "bigint", "float": "real",
               "double": "double precision", "bytes": "bytea", "string": "text",
               "null": "text"}
_LOGICAL = {"uuid": "uuid", "date": "date", "time-millis": "time", "time-micros": "time",
            "timestamp-millis": "timestamptz", "timestamp-micros": "timestamptz",
            "timestamp-nanos": "timestamptz", "local-timestamp-millis": "timestamp",
            "local-timestamp-micros": "timestamp", "local-timestamp-nanos": "timestamp"}


_WIRE_TYPES = {"avro": "AVRO", "json-schema": "JSON", "protobuf": "PROTOBUF"}
_WIRE_NAMES = {"AVRO": "Avro", "JSON": "JSON Schema", "PROTOBUF": "Protobuf"}
#: A JSON escape of a UTF-16 surrogate (paired ones decode to one character).
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


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
        kind: ``raw``, ``json``, ``avro``, ``json-schema`` or ``protobuf``.
        declared: Column types declared with ``--columns`` (JSON).
        registry: The Schema Registry (Avro, JSON Schema, Protobuf).
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
        #: The writer schema (parsed) of the last Avro record decoded (Debezium's types).
        self.lastSchema: Any = None
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
            document = self._document(data)
            if isinstance(document, dict):
                return document, self._jsonTypes, False
            return {self.part: document}, self._jsonTypes, False
        if self.kind == "json-schema":
            return self._json_schema(data)
        if self.kind == "protobuf":
            return self._protobuf(data)
        return self._avro(data, topic)

    def _document(self, data: bytes) -> Any:
        try:
            # Fractions keep their text: a numeric column takes the digits as written.
            document = json.loads(data, parse_float=JsonNumber)
            if _SURROGATE_ESCAPE.search(data):
                # An escaped UTF-16 surrogate without its pair decodes to a str no
                # encoding holds (PostgreSQL would refuse the batch): a bad record here.
                json.dumps(document, ensure_ascii=False).encode("utf-8")
            return document
        except UnicodeDecodeError:
            raise DecodeError(f"the {self.part} is not JSON: not UTF-8 text") from None
        except UnicodeEncodeError:
            raise DecodeError(f"the {self.part} holds a lone UTF-16 surrogate escape (\\ud800 "
                              "to \\udfff without its pair): not text") from None
        except json.JSONDecodeError as error:
            raise DecodeError(f"the {self.part} is not JSON: {error.msg} at byte "
                              f"{error.pos}") from None
        except RecursionError:
            raise DecodeError(f"the {self.part} is not JSON the job reads: nested too "
                              "deeply") from None

    def _schema_id(self, data: bytes) -> int:
        if len(data) < 5 or data[0] != 0:
            name = {"avro": "Avro", "protobuf": "Protobuf"}.get(self.kind, "JSON Schema JSON")
            raise DecodeError(f"the {self.part} is not {name} in the Confluent wire format "
                              "(magic byte 0, then a 4-byte schema id)")
        return int.from_bytes(data[1:5], "big")

    def _json_schema(self, data: bytes) -> Decoded:
        schemaId = self._schema_id(data)
        (checks, required), types, isRecord = self._schema(schemaId)
        document = self._document(data[5:])
        if not isRecord:
            self._check(self.part, document, checks, schemaId)
            return {self.part: document}, types, True
        if not isinstance(document, dict):
            raise DecodeError(f"the {self.part} is a JSON {json_kind(document)}, but its "
                              f"schema (id {schemaId}) describes an object")
        missing = [name for name in required if name not in document]
        if missing:
            raise DecodeError(f"the {self.part} lacks field {missing[0]!r}, which its schema "
                              f"(id {schemaId}) requires")
        fields = {}
        for name, allowed in checks.items():
            if name in document:
                fields[name] = self._check(name, document[name], allowed, schemaId)
        return fields, types, True

    @staticmethod
    def _check(name: str, value: Any, allowed: tuple[str, ...] | None, schemaId: int) -> Any:
        """``value`` if its JSON type is one ``allowed`` (3.0 as 3 where only integers are)."""
        if allowed is None or any(JSON_CHECKS[kind](value) if kind in JSON_CHECKS else True
                                  for kind in allowed):
            kinds = allowed or ()
            if isinstance(value, float) and "integer" in kinds and "number" not in kinds \
                    and value.is_integer():
                return int(value)  # JSON Schema counts 3.0 an integer
            return value
        raise DecodeError(f"field {name!r} is a JSON {json_kind(value)}, but its schema "
                          f"(id {schemaId}) allows {' or '.join(allowed)}")

    def _avro(self, data: bytes, topic: str) -> Decoded:
        schemaId = self._schema_id(data)
        parsed, types, isRecord = self._schema(schemaId)
        self.lastSchema = parsed
        from fastavro import schemaless_reader

        try:
            decoded = schemaless_reader(io.BytesIO(data[5:]), parsed, None)
        except Exception as error:  # fastavro raises EOFError, ValueError, KeyError ...
            raise DecodeError(f"the {self.part} does not decode with its schema (id "
                              f"{schemaId}): {type(error).__name__}") from None
        if isRecord and isinstance(decoded, dict):
            return decoded, types, True
        return {self.part: decoded}, types, True

    def _protobuf(self, data: bytes) -> Decoded:
        from kafka_direct.app.typed.protobuf import message_indexes, read_fields

        schemaId = self._schema_id(data)
        schema = self._schema(schemaId)[0]
        try:
            indexes, start = message_indexes(data)
            kind, types, readers = schema.message(indexes)
            message = kind()
            message.ParseFromString(data[start:])
        except Exception as error:  # ValueError, protobuf's DecodeError
            raise DecodeError(f"the {self.part} does not decode with its Protobuf schema (id "
                              f"{schemaId}): {type(error).__name__}") from None
        try:
            return read_fields(message, readers), types, True
        except ValueError as error:  # a value no column holds: the record's, named
            raise DecodeError(f"the {self.part} (Protobuf schema id {schemaId}): "
                              f"{error}") from None

    def _schema(self, schemaId: int) -> tuple[Any, dict[str, str], bool]:
        assert self.registry is not None  # checked by TypedOptions
        # The part too: a schema that is not a record types the column named after it.
        key = (self.registry, self.kind, self.part, schemaId)
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
            texts = schema_texts(self.registry, schemaId, self.part, self.kind)
            self.fetched[schemaId] = texts
        if self.kind == "json-schema":
            return self._parse_json_schema(schemaId, texts)
        if self.kind == "protobuf":
            from kafka_direct.app.typed.protobuf import parse_schema

            try:
                return parse_schema(schemaId, texts), {}, True
            except ValueError as error:
                raise DecodeError(f"the {self.part}'s schema id {schemaId} is not a Protobuf "
                                  f"schema the job reads: {error}") from None
        return self._parse(schemaId, texts)

    def _parse_json_schema(self, schemaId: int, texts: tuple[str, ...]
                           ) -> tuple[Any, dict[str, str], bool]:
        """((checks, required), column types, is an object) of a JSON Schema's text."""
        try:
            root = json.loads(texts[-1])
        except (ValueError, RecursionError):
            raise DecodeError(f"the {self.part}'s schema id {schemaId} is not a valid JSON "
                              "Schema: not JSON") from None
        resolved = object_schema(root, root)
        if resolved is not None:
            properties = resolved["properties"]
            checks = {str(name): json_types(sub, root) for name, sub in properties.items()}
            types = {str(name): json_schema_type(sub, root)
                     for name, sub in properties.items()}
            required = tuple(str(n) for n in resolved.get("required") or ()
                             if str(n) in properties) if isinstance(
                resolved.get("required"), list) else ()
            return (checks, required), types, True
        return (json_types(root, root), ()), {self.part: json_schema_type(root, root)}, False

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


def schema_texts(registry: RegistrySettings, schemaId: int, part: str = "value",
                 kind: str = "avro") -> tuple[str, ...]:
    """Schema ``schemaId``'s text from the registry, after those of its references.

    Raises:
        DecodeError: The registry has no such id (or reference), or it is not a schema of
            ``kind`` (``avro`` or ``json-schema``).
        SchemaRegistryError: The registry failed.
    """
    client = registry_client(registry)
    serialized = "serialized" if kind == "protobuf" else None  # descriptors, not .proto text
    try:
        schema = client.get_schema(schemaId, fmt=serialized)
    except Exception as error:
        if _not_found(error):
            raise DecodeError(f"the {part}'s schema id {schemaId} is not in the Schema "
                              "Registry") from None
        raise _registry_failure(error, f"to give schema id {schemaId}") from None
    wanted = _WIRE_TYPES.get(kind, "AVRO")
    if (schema.schema_type or "AVRO").upper() != wanted:
        raise DecodeError(f"the {part}'s schema id {schemaId} is a {schema.schema_type} "
                          f"schema, not {_WIRE_NAMES[wanted]}")
    texts: list[str] = []
    for reference in schema.references or ():
        _reference(client, reference, texts, part, serialized)
    return (*texts, schema.schema_str)


def _reference(client: Any, reference: Any, texts: list[str], part: str,
               fmt: str | None = None) -> None:
    """Append a referenced schema's text after those of its own references."""
    try:
        found = client.get_version(reference.subject, reference.version, fmt=fmt)
    except Exception as error:
        if _not_found(error):
            raise DecodeError(f"the {part}'s schema references {reference.subject} version "
                              f"{reference.version}, which is not in the registry") from None
        raise _registry_failure(error, f"to give {reference.subject} version "
                                       f"{reference.version}") from None
    for inner in found.schema.references or ():
        _reference(client, inner, texts, part, fmt)
    if found.schema.schema_str not in texts:
        texts.append(found.schema.schema_str)


def fetch_schemas(options: TypedOptions, topics: Iterable[str]) -> dict[int, tuple[str, ...]]:
    """The schemas registered under the topics' subjects (``<topic>-key``/``-value``).

    For the driver to hand to tasks. Best effort: a subject the registry lacks is skipped,
    and a registry that fails is logged (the tasks then ask it themselves).
    """
    if options.registry is None:
        return {}
    parts = [(p, kind) for p, kind in (("key", options.keyFormat),
                                       ("value", options.valueFormat))
             if kind in REGISTRY_FORMATS]
    found: dict[int, tuple[str, ...]] = {}
    client = registry_client(options.registry)
    for topic in topics:
        for part, kind in parts:
            subject = f"{topic}-{part}"
            try:
                for version in client.get_versions(subject):
                    schemaId = client.get_version(subject, version).schema_id
                    if schemaId not in found:
                        found[schemaId] = schema_texts(options.registry, schemaId, part,
                                                       kind)
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
