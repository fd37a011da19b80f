"""Spark's JVM log is off while a job runs quietly, and given back afterwards."""

from types import SimpleNamespace

from kafka_direct.runtime.spark_log import quiet_spark_log


class FakeLog4j:
    """Just enough of log4j 2 through py4j: levels per logger name."""

    def __init__(self):
        self.levels = {"": "ERROR", "org.apache.spark.sql.execution.streaming": "WARN"}
        fake = self

        class Logger:
            def __init__(self, name):
                self.name = name

            def getLevel(self):
                return fake.levels[self.name]

        class Configurator:
            @staticmethod
            def setLevel(name, level):
                fake.levels[name] = level

        class LogManager:
            @staticmethod
            def getLogger(name):
                return Logger(name)

        class Level:
            OFF = "OFF"

        class Core:
            class config:  # the Java package's name
                pass

        Core.config.Configurator = Configurator
        self.core, self.LogManager, self.Level = Core, LogManager, Level


def test_spark_is_quiet_only_while_the_job_runs():
    log4j = FakeLog4j()
    sc = SimpleNamespace(_jvm=SimpleNamespace(org=SimpleNamespace(apache=SimpleNamespace(
        logging=SimpleNamespace(log4j=log4j)))))
    with quiet_spark_log(sc):
        assert log4j.levels == {"": "OFF", "org.apache.spark.sql.execution.streaming": "OFF"}
    # The application's own later work keeps Spark's reports.
    assert log4j.levels == {"": "ERROR", "org.apache.spark.sql.execution.streaming": "WARN"}
    with quiet_spark_log(SimpleNamespace(_jvm=None)):  # no log4j 2: nothing to do
        pass
