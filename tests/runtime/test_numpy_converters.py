"""PySpark's NumPy converters, asked only once NumPy is imported: no pandas in the driver."""

import json
import os
import subprocess
import sys

import pytest

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# A fresh interpreter: whether pandas gets imported is a fact about one process.
_ASK_THE_CONVERTERS = """
import json, sys
import pyspark.sql.types  # registers PySpark's converters
from py4j import protocol
if sys.argv[1] == "guarded":
    from kafka_direct.runtime.numpy_converters import defer_numpy_converters
    guarded = [defer_numpy_converters(), defer_numpy_converters()]
else:
    guarded = []
answers = [c.can_convert(arg) for c in protocol.INPUT_CONVERTER for arg in (1, 2.5, True)]
print(json.dumps({"guarded": guarded, "any": any(answers),
                  "pandas": "pandas" in sys.modules,
                  "testing": "pyspark.testing.utils" in sys.modules}))
"""


def _ask(mode):
    done = subprocess.run([sys.executable, "-c", _ASK_THE_CONVERTERS, mode],
                          capture_output=True, text=True, timeout=120, cwd=_ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_pysparks_converters_import_pandas_when_asked_about_any_argument():
    # What the guard is for: PySpark's own converters, asked about a plain int.
    pytest.importorskip("pandas")
    facts = _ask("plain")
    assert facts["testing"] and facts["pandas"]


def test_guarded_converters_ask_nothing_while_numpy_is_not_imported():
    facts = _ask("guarded")
    assert facts["guarded"] == [2, 0]  # both, once
    assert not facts["any"]
    assert not facts["testing"] and not facts["pandas"]


def test_once_numpy_is_imported_the_guard_answers_and_converts_as_pyspark():
    np = pytest.importorskip("numpy")
    from pyspark.sql.types import NumpyArrayConverter, NumpyScalarConverter

    from kafka_direct.runtime.numpy_converters import NumpyGuard

    array, scalar = NumpyGuard(NumpyArrayConverter()), NumpyGuard(NumpyScalarConverter())
    assert array.can_convert(np.array([1, 2]))
    assert not array.can_convert([1, 2]) and not array.can_convert(np.array([[1]]))
    assert scalar.can_convert(np.int64(3)) and not scalar.can_convert(3)
    assert scalar.convert(np.int64(3), None) == 3
    assert repr(array) == "NumpyGuard(NumpyArrayConverter)"


_CONTEXT_OF_ITS_OWN = """
import json, sys
from kafka_direct.runtime.spark import spark_context
with spark_context("local[1]", "numpy-converters-test") as sc:
    total = sc.parallelize(range(4), 1).sum()
print(json.dumps({"total": total, "pandas": "pandas" in sys.modules}))
"""


@pytest.mark.services
def test_a_context_is_made_without_importing_pandas():
    done = subprocess.run([sys.executable, "-c", _CONTEXT_OF_ITS_OWN], capture_output=True,
                          text=True, timeout=240, cwd=_ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    facts = json.loads(done.stdout.strip().splitlines()[-1])
    assert facts == {"total": 6, "pandas": False}
