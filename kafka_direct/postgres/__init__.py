"""PostgreSQL plumbing for the offset stores, the sinks and the structured sink and link.

* :mod:`~kafka_direct.postgres.errors`: driver errors fit to show, COMMIT outcomes, fixes;
* :mod:`~kafka_direct.postgres.connection`: where to connect, the one connection per
  database in each process, transactions on it;
* :mod:`~kafka_direct.postgres.catalog`: what exists, asked before anything is created, and
  whether an upsert has its unique key;
* :mod:`~kafka_direct.postgres.copy_csv`: Arrow record batches as COPY's CSV;
* :mod:`~kafka_direct.postgres.staging`: a write task's rows staged in an unlogged table of
  its own until a commit moves them (the structured sink's and the typed ingest's);
* :mod:`~kafka_direct.postgres.direct_write`: a write task's rows COPYed straight into the
  target, claimed by their Kafka offsets; :mod:`~kafka_direct.postgres.row_offsets`: the
  offsets those rows hold, and the rows and claims left beside others' claims;
  :mod:`~kafka_direct.postgres.sink_claims`: those claims, their table, and the commit's
  check and release of them.

It imports only the package's root (errors, redaction): ``offsets/``, ``sinks/`` and
``kafka_direct.sql`` stand on it, never the other way.
"""

__all__: list[str] = []
