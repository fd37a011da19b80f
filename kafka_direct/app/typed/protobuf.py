"""Protobuf keys and values in Confluent's wire format: their message, columns and values.

A record is the magic byte 0, the schema's 4-byte id, the message's indexes in the schema's
file (a zigzag varint count, then each index; a single 0 byte for the first message), then
the message (confluent-kafka's ``ProtobufSerializer``). The schema is a file descriptor,
fetched from the registry in its serialized form (``format=serialized``: base64 of a
``FileDescriptorProto``; its references' files first), so no ``protoc`` is needed.

Columns are the message's top-level fields:

* scalars: ``int32``/``sint32``/``sfixed32`` ``integer``; ``int64``/``sint64``/
  ``sfixed64``/``uint32``/``fixed32`` ``bigint``; ``uint64``/``fixed64``
  ``numeric(20,0)``; ``float`` ``real``; ``double`` ``double precision``; ``bool``
  ``boolean``; ``string`` ``text``; ``bytes`` ``bytea``; an enum ``text`` (the value's
  name; an unknown number as its digits);
* well-known types: ``google.protobuf.Timestamp`` ``timestamptz``, ``Duration``
  ``interval``, the wrappers (``Int64Value``...) their value's column (NULL when unset),
  ``Struct``/``Value``/``ListValue`` ``jsonb``, ``google.type.Date`` ``date``,
  ``confluent.type.Decimal`` ``numeric``;
* other messages, repeated fields and maps ``jsonb`` (protobuf's JSON mapping, field names
  as in the schema).

A field with presence (``optional``, a message, a oneof member) that is unset is NULL; a
proto3 scalar without presence holds its default (0, ``""``), as protobuf cannot tell it
from unset. A value no column can hold (a Timestamp outside years 1 to 9999, an ``Any`` of
a type the schema's pool does not know) raises ValueError naming the field: a bad record.

The files confluent-kafka's serializer counts as built in (``google/protobuf/*``,
``google/type/*``, ``confluent/*``) are never registered as references, so the schema's
pool holds them beforehand: every installed ``google.protobuf``/``google.type`` module's
file, and confluent-kafka's own files when the schema imports one (importing
confluent-kafka costs a Python worker a second or two, so only then).
"""

from __future__ import annotations

import base64
import datetime
import decimal
import importlib
import logging
import pkgutil
from collections.abc import Callable, Iterable, Sequence
from typing import Any

__all__ = ["ProtobufSchema", "message_indexes", "parse_schema", "read_fields",
           "require_protobuf"]

logger = logging.getLogger(__name__)

# FieldDescriptor.TYPE_* numbers (descriptor.proto).
_SCALARS = {1: "double precision", 2: "real", 3: "bigint", 4: "numeric(20,0)",
            5: "integer", 6: "numeric(20,0)", 7: "bigint", 8: "boolean", 9: "text",
            12: "bytea", 13: "bigint", 15: "integer", 16: "bigint", 17: "integer",
            18: "bigint"}
_ENUM, _MESSAGE = 14, 11
_REPEATED = 3
_WRAPPERS = {"google.protobuf.DoubleValue": "double precision",
             "google.protobuf.FloatValue": "real", "google.protobuf.Int64Value": "bigint",
             "google.protobuf.UInt64Value": "numeric(20,0)",
             "google.protobuf.Int32Value": "integer", "google.protobuf.UInt32Value": "bigint",
             "google.protobuf.BoolValue": "boolean", "google.protobuf.StringValue": "text",
             "google.protobuf.BytesValue": "bytea"}
#: The packages of the files confluent-kafka's serializer counts as built in.
_BUILTIN_PACKAGES = ("google.protobuf", "google.protobuf.compiler", "google.type")
_CONFLUENT_PACKAGES = ("confluent_kafka.schema_registry.confluent",
                       "confluent_kafka.schema_registry.confluent.type",
                       "confluent_kafka.schema_registry.confluent.types")
#: (file name, serialized file) of those packages' files, their dependencies first.
_builtins: dict[tuple[str, ...], list[tuple[str, bytes]]] = {}


def require_protobuf(flag: str) -> None:
    """Raise ConfigurationError, naming ``flag``, unless the ``protobuf`` package imports."""
    try:
        import google.protobuf  # type: ignore[import-untyped,unused-ignore]  # noqa: F401
    except ImportError:
        from kafka_direct.errors import ConfigurationError

        raise ConfigurationError(f"{flag} protobuf needs the protobuf package: pip install "
                                 "'confluent-kafka[avro,protobuf]'", setting=flag) from None


def message_indexes(data: bytes, start: int = 5) -> tuple[list[int], int]:
    """(the message indexes, where the message starts) of a record after its schema id.

    Raises:
        ValueError: The indexes are cut short or absurd.
    """
    def varint(position: int) -> tuple[int, int]:
        result = shift = 0
        while True:
            if position >= len(data) or shift > 63:
                raise ValueError("the message indexes are cut short")
            byte = data[position]
            result |= (byte & 0x7F) << shift
            position += 1
            if not byte & 0x80:
                return (result >> 1) ^ -(result & 1), position  # zigzag
            shift += 7

    count, position = varint(start)
    if count == 0:
        return [0], position  # the first message, in one byte
    if not 0 < count <= 100:
        raise ValueError(f"{count} message indexes")
    indexes = []
    for _ in range(count):
        index, position = varint(position)
        if index < 0:
            raise ValueError("a negative message index")
        indexes.append(index)
    return indexes, position


class ProtobufSchema:
    """A registered Protobuf schema: its file, resolved in a pool of its own.

    Args:
        schemaId: The registry's id (for messages).
        texts: Base64 serialized ``FileDescriptorProto`` messages: the references' first,
            the schema's own last.

    Raises:
        ValueError: A text is not a serialized file descriptor, or the files do not
            resolve (a missing import).
    """

    def __init__(self, schemaId: int, texts: Sequence[str]) -> None:
        from google.protobuf import (  # type: ignore[import-untyped,unused-ignore]
            descriptor_pb2,
            descriptor_pool,
        )

        self.schemaId = schemaId
        protos = []
        for text in texts:
            proto = descriptor_pb2.FileDescriptorProto()
            try:
                proto.ParseFromString(base64.b64decode(text.encode("ascii"), validate=True))
            except Exception:
                raise ValueError("not a serialized Protobuf file descriptor (the registry "
                                 "must answer format=serialized)") from None
            if not proto.name:
                proto.name = f"kafka_direct_schema_{schemaId}_{len(text)}.proto"
            protos.append(proto)
        pool = descriptor_pool.DescriptorPool()
        _add_well_known(pool, any(dependency.startswith("confluent/")
                                  for proto in protos for dependency in proto.dependency))
        self.pool = pool
        last = None
        for proto in protos:
            try:
                last = pool.FindFileByName(proto.name)
            except KeyError:
                try:
                    last = pool.Add(proto)
                except Exception as error:
                    raise ValueError(f"its file {proto.name} does not resolve "
                                     f"({type(error).__name__})") from None
        if last is None:
            raise ValueError("no file descriptor")
        self.file = last
        self._messages: dict[tuple[int, ...], tuple[Any, dict[str, str],
                                                    list[tuple[str, Callable[[Any], Any]]]]] = {}

    def message(self, indexes: Sequence[int]) -> tuple[Any, dict[str, str],
                                                        list[tuple[str, Callable[[Any], Any]]]]:
        """(message class, column types, (field, value reader) pairs) of a message.

        Raises:
            ValueError: No message at those indexes.
        """
        key = tuple(indexes)
        found = self._messages.get(key)
        if found is not None:
            return found
        from google.protobuf import (  # type: ignore[import-untyped,unused-ignore]
            message_factory,
        )

        try:
            descriptor = list(self.file.message_types_by_name.values())[indexes[0]]
            for index in indexes[1:]:
                descriptor = descriptor.nested_types[index]
        except IndexError:
            raise ValueError(f"schema id {self.schemaId} has no message at indexes "
                             f"{list(indexes)}") from None
        types: dict[str, str] = {}
        readers: list[tuple[str, Callable[[Any], Any]]] = []
        for field in descriptor.fields:
            types[field.name], reader = _column(field, self.pool)
            readers.append((field.name, reader))
        found = (message_factory.GetMessageClass(descriptor), types, readers)
        self._messages[key] = found
        return found


def parse_schema(schemaId: int, texts: Sequence[str]) -> ProtobufSchema:
    """The schema of ``texts`` (see :class:`ProtobufSchema`)."""
    return ProtobufSchema(schemaId, texts)


def read_fields(message: Any, readers: Iterable[tuple[str, Callable[[Any], Any]]]
                ) -> dict[str, Any]:
    """Field name -> column value of a parsed message.

    Raises:
        ValueError: A field's value no column can hold (named in the message).
    """
    from google.protobuf import (  # type: ignore[import-untyped,unused-ignore]
        json_format,
    )

    fields = {}
    for name, read in readers:
        try:
            fields[name] = read(message)
        except (ArithmeticError, ValueError, TypeError, KeyError, json_format.Error) as error:
            # A Timestamp past 9999 (OverflowError), a Date of month 0, an Any of a type
            # nobody knows (TypeError): the producer's value, not the job's fault.
            raise ValueError(f"field {name!r} holds a value the job cannot write "
                             f"({type(error).__name__})") from None
    return fields


def _add_well_known(pool: Any, confluent: bool) -> None:
    """Add the built-in files (see the module) to ``pool``; confluent-kafka's if asked."""
    for packages in (_BUILTIN_PACKAGES, *((_CONFLUENT_PACKAGES,) if confluent else ())):
        for name, serialized in _builtin_files(packages):
            try:
                pool.FindFileByName(name)
            except KeyError:
                pool.AddSerializedFile(serialized)


def _builtin_files(packages: tuple[str, ...]) -> list[tuple[str, bytes]]:
    """(name, serialized file) of the ``*_pb2`` modules of ``packages``, dependencies first."""
    found = _builtins.get(packages)
    if found is not None:
        return found
    ordered: list[tuple[str, bytes]] = []
    seen: set[str] = set()

    def visit(file: Any) -> None:
        if file.name in seen:
            return
        seen.add(file.name)
        for dependency in file.dependencies:
            visit(dependency)
        ordered.append((file.name, file.serialized_pb))

    for package in packages:
        try:
            path = importlib.import_module(package).__path__
        except ImportError:  # googleapis-common-protos or confluent-kafka absent
            continue
        for info in sorted(pkgutil.iter_modules(path), key=lambda i: i.name):
            if not info.name.endswith("_pb2"):
                continue
            try:
                module = importlib.import_module(f"{package}.{info.name}")
            except Exception as error:  # built for another protobuf: its file is left out
                logger.debug("built-in Protobuf module %s.%s not loaded: %s", package,
                             info.name, error)
                continue
            visit(module.DESCRIPTOR)
    _builtins[packages] = ordered
    return ordered


_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)


def _as_json(message: Any, pool: Any) -> Any:
    from google.protobuf import (  # type: ignore[import-untyped,unused-ignore]
        json_format,
    )

    # The schema's pool resolves an Any's type (protobuf's default pool never has it).
    return json_format.MessageToDict(message, preserving_proto_field_name=True,
                                     descriptor_pool=pool)


def _decimal(message: Any) -> decimal.Decimal:
    """A ``confluent.type.Decimal``: its big-endian two's-complement unscaled value, scaled."""
    unscaled = int.from_bytes(message.value, "big", signed=True)
    return decimal.Decimal(f"{unscaled}E{-int(message.scale)}")  # exact: no context applies


def _column(field: Any, pool: Any) -> tuple[str, Callable[[Any], Any]]:
    """(column type, message -> the field's value) of one field."""
    name = field.name
    present = bool(getattr(field, "has_presence", False))
    # protobuf 6+ says is_repeated (7 has no label); older ones only label.
    repeated = getattr(field, "is_repeated", None)
    if repeated is None:
        repeated = field.label == _REPEATED
    if repeated:  # repeated fields and maps: JSON, as protobuf's JSON mapping writes them
        def whole(message: Any) -> Any:
            value = _as_json(message, pool).get(name)
            return value if value is not None else ([] if not _is_map(field) else {})
        return "jsonb", whole
    kind, read = _value(field, pool)
    if not present:
        return kind, lambda message: read(getattr(message, name))
    return kind, lambda message: (read(getattr(message, name)) if message.HasField(name)
                                  else None)


def _is_map(field: Any) -> bool:
    message = field.message_type
    return message is not None and message.GetOptions().map_entry


def _value(field: Any, pool: Any) -> tuple[str, Callable[[Any], Any]]:
    """(column type, field value -> column value) of a singular field."""
    if field.type == _ENUM:
        names = {v.number: v.name for v in field.enum_type.values}
        return "text", lambda number: names.get(number, str(number))
    if field.type != _MESSAGE:
        kind = _SCALARS.get(field.type, "text")
        if kind == "numeric(20,0)":
            return kind, decimal.Decimal
        return kind, _identity
    full = field.message_type.full_name
    if full == "google.protobuf.Timestamp":
        return "timestamptz", lambda m: _EPOCH + datetime.timedelta(
            seconds=m.seconds, microseconds=m.nanos // 1000)
    if full == "google.protobuf.Duration":
        return "interval", lambda m: f"{m.seconds + m.nanos / 1e9:.9f} seconds"
    if full in _WRAPPERS:
        kind = _WRAPPERS[full]
        return kind, (lambda m: decimal.Decimal(m.value)) if kind == "numeric(20,0)" else (
            lambda m: m.value)
    if full == "google.type.Date":
        return "date", lambda m: datetime.date(m.year, m.month, m.day).isoformat()
    if full == "confluent.type.Decimal":
        return "numeric", _decimal
    return "jsonb", lambda m: _as_json(m, pool)  # Struct, Value, ListValue, other messages


def _identity(value: Any) -> Any:
    return value
