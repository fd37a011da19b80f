"""Arrow constants from their bytes: the values pyarrow.scalar gives, without pandas."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

import kafka_direct.arrow_values
from kafka_direct.arrow_values import constant

#: The package under test first on the child's path (not another installed copy).
_SOURCE_ROOT = str(Path(kafka_direct.arrow_values.__file__).parents[1])


@pytest.mark.parametrize(("value", "arrow_type"), [
    ("kafka-direct-events", pa.string()), ("", pa.string()), ("é\u20ac", pa.string()),
    ("\\x", pa.large_string()), ("", pa.large_string()), (None, pa.large_string()),
    (None, pa.string()), (0, pa.int32()), (2**31 - 1, pa.int32()), (-(2**31), pa.int32()),
    (-3, pa.int64()), (None, pa.int64()),
])
def test_a_constant_is_the_scalar_pyarrow_makes(value, arrow_type):
    made = constant(value, arrow_type)
    assert made.type == arrow_type
    assert made.equals(pa.scalar(value, arrow_type))
    assert pa.repeat(made, 3).to_pylist() == [value] * 3


@pytest.mark.parametrize(("value", "arrow_type"), [
    (2**31, pa.int32()), (1, pa.string()), ("1", pa.int64()), (True, pa.int64()),
    (1.5, pa.float64()),
])
def test_a_constant_of_another_type_or_out_of_range_is_refused(value, arrow_type):
    with pytest.raises(TypeError):
        constant(value, arrow_type)


def test_the_tasks_constants_import_no_pandas():
    # A task of the source builds its constant columns, one of the sink hexes bytea (or
    # sends printable bytes as text): all in a fresh interpreter, as in a Spark worker,
    # without importing pandas.
    code = (
        "import sys\n"
        "import pyarrow as pa\n"
        "from kafka_direct.postgres.copy_csv import encode_batch\n"
        "from kafka_direct.rdd.arrow_rows import RecordBatchBuilder\n"
        "RecordBatchBuilder('t', 0, False)\n"
        "def encoded(data):\n"
        "    values = pa.Array.from_buffers(pa.binary(), 2, [pa.py_buffer(b'\\x01'),\n"
        "        pa.py_buffer(bytes([0, 0, 0, 0, 2, 0, 0, 0, 2, 0, 0, 0])),\n"
        "        pa.py_buffer(data)], null_count=1)\n"
        "    return encode_batch(pa.RecordBatch.from_arrays([values], names=['v']),\n"
        "                        bytea_columns={0})\n"
        "csv = encoded(b'\\x01b')\n"
        "assert csv == b'\"\\\\x0162\"\\n\\n', csv\n"
        "csv = encoded(b'ab')\n"
        "assert csv == b'\"ab\"\\n\\n', csv\n"
        "print('pandas' in sys.modules)\n")
    path = os.pathsep.join(p for p in (_SOURCE_ROOT, os.environ.get("PYTHONPATH")) if p)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True, env={**os.environ, "PYTHONPATH": path})
    assert done.stdout.strip() == "False"
