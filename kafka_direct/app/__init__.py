"""The application: the ingest job, the demo and the ``kafka-direct`` command line.

The only part of the project that imports :mod:`offsets` and :mod:`sinks`; the connector and
the engine below it know nothing of them.
"""

__all__: list[str] = []
