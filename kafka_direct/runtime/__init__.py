"""The jobs' runtime: how the ingest job, the demo and the CLI start Spark on this machine.

A local SparkContext that starts quickly and quietly (:mod:`~.spark`), its driver JVM
launched ahead in a thread where the caller asks (:mod:`~.early_launch`) and let go at once
when the context stops (:mod:`~.spark_stop`), in a Spark home whose
Python processes import PySpark compiled (:mod:`~.spark_home`), its Python workers forked
from a daemon with their imports done (:mod:`~.warm_daemon`, :mod:`~.worker_daemon`), its
driver JVM mapped from an archive of Spark's classes (:mod:`~.jvm_archive`).

Above the RDD layer and below the app; the test services (``kafka_direct.testing``) start
their Spark through it too.
"""
