"""Arrow scalars built from their buffers, without pyarrow's conversion of Python values.

``pyarrow.scalar`` (and ``pyarrow.array`` of a Python list) first asks whether the value is
one of pandas' types, which imports pandas: most of a second of every Spark Python worker
that runs a task of the source or the sink, for a constant column or a separator. The
constants these tasks need are built here from their bytes instead.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

__all__ = ["constant"]

#: Zero bytes enough for one value of any type built here (a large string's two offsets).
_ZEROS = bytes(16)


def constant(value: str | int | None, arrow_type: Any) -> Any:
    """``pyarrow.scalar(value, arrow_type)`` for a string, large string or integer type.

    Args:
        value: The value (None: a null of the type).
        arrow_type: ``pa.string()``, ``pa.large_string()`` or a signed integer type.

    Raises:
        TypeError: Another type, or a value that does not fit it.
    """
    if value is None:
        buffers = [pa.py_buffer(b"\0")] + [pa.py_buffer(_ZEROS)] * (arrow_type.num_buffers - 1)
        return pa.Array.from_buffers(arrow_type, 1, buffers, null_count=1)[0]
    if pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type):
        if not isinstance(value, str):
            raise TypeError(f"a {arrow_type} constant needs a str, got {type(value).__name__}")
        data = value.encode("utf-8")
        width = 8 if pa.types.is_large_string(arrow_type) else 4
        offsets = bytes(width) + len(data).to_bytes(width, "little")
        return pa.Array.from_buffers(arrow_type, 1, [None, pa.py_buffer(offsets),
                                                     pa.py_buffer(data)])[0]
    if pa.types.is_signed_integer(arrow_type) and isinstance(value, int) \
            and not isinstance(value, bool):
        try:
            data = value.to_bytes(arrow_type.bit_width // 8, "little", signed=True)
        except OverflowError as error:
            raise TypeError(f"{value} does not fit {arrow_type}") from error
        return pa.Array.from_buffers(arrow_type, 1, [None, pa.py_buffer(data)])[0]
    raise TypeError(f"no constant of type {arrow_type} from {type(value).__name__}")
