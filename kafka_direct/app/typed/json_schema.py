"""JSON Schema for the ingest job's typed rows: which JSON types a schema allows, and columns.

:func:`json_schema_type` maps a property's schema to a PostgreSQL column type (the table in
docs/ingest.md), :func:`json_types` gives the JSON types a value may have (checked with
:data:`JSON_CHECKS`), and :func:`object_schema` finds the object whose ``properties`` are a
record's columns. Local ``$ref``s are followed; a schema that refers to itself allows any
value beyond a fixed depth. Decoding records is :mod:`kafka_direct.app.typed.formats`'s.
"""

from __future__ import annotations

from typing import Any

__all__ = ["JSON_CHECKS", "json_kind", "json_schema_type", "json_types", "object_schema"]

_TYPES = {"integer": "bigint", "number": "double precision", "string": "text",
          "boolean": "boolean", "object": "jsonb", "array": "jsonb", "null": "text"}
_FORMATS = {"date-time": "timestamptz", "date": "date", "time": "time", "uuid": "uuid"}
#: JSON Schema type -> what a decoded JSON value must be (bool is no integer or number).
JSON_CHECKS: dict[str, Any] = {
    "integer": lambda v: (isinstance(v, int) and not isinstance(v, bool))
    or (isinstance(v, float) and v.is_integer()),
    "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
    "string": lambda v: isinstance(v, str), "boolean": lambda v: isinstance(v, bool),
    "object": lambda v: isinstance(v, dict), "array": lambda v: isinstance(v, list),
    "null": lambda v: v is None}


def json_kind(value: Any) -> str:
    """The JSON type of a decoded value (``integer`` before ``number``)."""
    return next(kind for kind in ("null", "boolean", "integer", "number", "string",
                                  "object", "array") if JSON_CHECKS[kind](value))


def _resolve(schema: Any, root: Any) -> Any:
    """``schema`` with its local ``$ref`` (``#/$defs/...``) followed; None: unresolvable."""
    for _ in range(32):  # a loop of references resolves to nothing
        if not isinstance(schema, dict) or "$ref" not in schema:
            return schema
        ref = schema["$ref"]
        if not isinstance(ref, str) or not ref.startswith("#"):
            return None  # another document's: not followed (any value)
        node = root
        for piece in ref[1:].strip("/").split("/") if ref.strip("#/") else ():
            piece = piece.replace("~1", "/").replace("~0", "~")
            if not isinstance(node, dict) or piece not in node:
                return None
            node = node[piece]
        schema = node
    return None


#: How deep ``oneOf``/``anyOf`` branches are followed (a schema referring to itself
#: through them allows any value beyond).
_DEPTH = 32


def json_types(schema: Any, root: Any, depth: int = 0) -> tuple[str, ...] | None:
    """The JSON types a JSON Schema allows (None: any value)."""
    schema = _resolve(schema, root)
    if not isinstance(schema, dict) or depth > _DEPTH:
        return None  # true, or unresolvable
    kind = schema.get("type")
    if isinstance(kind, str):
        return (kind,)
    if isinstance(kind, list) and kind and all(isinstance(k, str) for k in kind):
        return tuple(kind)
    for key in ("oneOf", "anyOf"):
        branches = schema.get(key)
        if isinstance(branches, list) and branches:
            found: list[str] = []
            for branch in branches:
                types = json_types(branch, root, depth + 1)
                if types is None:
                    return None
                found.extend(k for k in types if k not in found)
            return tuple(found)
    values = schema["enum"] if isinstance(schema.get("enum"), list) else (
        [schema["const"]] if "const" in schema else None)
    if values:
        return tuple(dict.fromkeys(json_kind(v) for v in values))
    if "properties" in schema:
        return ("object",)
    if "items" in schema:
        return ("array",)
    return None


def _string_format(schema: Any, root: Any, depth: int = 0) -> Any:
    schema = _resolve(schema, root)
    if not isinstance(schema, dict) or depth > _DEPTH:
        return None
    if "format" in schema:
        return schema["format"]
    for key in ("oneOf", "anyOf"):
        for branch in schema.get(key) or ():
            found = _string_format(branch, root, depth + 1)
            if found is not None:
                return found
    return None


def object_schema(schema: Any, root: Any, depth: int = 0) -> dict[str, Any] | None:
    """The object schema (with ``properties``) a record's value follows, or None.

    The schema itself, or, through a local ``$ref``, a ``oneOf``/``anyOf`` of it and
    ``null``, or an ``allOf`` of it alone; ``null`` besides ``object`` is allowed.
    """
    schema = _resolve(schema, root)
    if not isinstance(schema, dict) or depth > _DEPTH:
        return None
    if isinstance(schema.get("properties"), dict):
        types = json_types(schema, root)
        return schema if types is None or set(types) <= {"object", "null"} else None
    for key in ("oneOf", "anyOf", "allOf"):
        branches = schema.get(key)
        if not isinstance(branches, list):
            continue
        solid = [b for b in branches if json_types(b, root) != ("null",)]
        if len(solid) == 1 and (key != "allOf" or len(branches) == 1):
            return object_schema(solid[0], root, depth + 1)
    return None


def json_schema_type(schema: Any, root: Any) -> str:
    """The PostgreSQL column type of a JSON Schema (a property's, or a whole value's).

    ``null`` besides one type is that type (nullable); ``integer`` ``bigint``, ``number``
    ``double precision`` (integers allowed), ``boolean``, ``string`` ``text`` (formats
    ``date-time`` ``timestamptz``, ``date``, ``time``, ``uuid``), ``object`` and ``array``
    ``jsonb``, as are several types and schemas that allow any value. Local ``$ref``s are
    followed.
    """
    types = json_types(schema, root)
    if types is None:
        return "jsonb"
    kinds = [k for k in types if k != "null"]
    if sorted(kinds) == ["integer", "number"]:
        return "double precision"
    if len(kinds) != 1:
        return "jsonb" if kinds else "text"
    if kinds[0] == "string":
        return _FORMATS.get(_string_format(schema, root), "text")
    return _TYPES.get(kinds[0], "jsonb")
