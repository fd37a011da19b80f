"""Builds the optional native columnar reader; the metadata lives in pyproject.toml.

The extension needs only a C compiler and Python's headers: librdkafka is loaded at run time
(the one confluent-kafka ships). Without a compiler the package installs without it and
reads with the pure-Python path.
"""

from setuptools import Extension, setup

setup(ext_modules=[
    Extension("kafka_direct.client._columnar", ["kafka_direct/client/_columnar.c"],
              depends=["kafka_direct/client/_rdkafka_abi.h"], libraries=["dl"],
              extra_compile_args=["-O2", "-std=c11", "-Wall"], optional=True),
])
