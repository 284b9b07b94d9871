"""Spark over the bridge (issue 12). Imported lazily: only this package imports pyspark.

`register(spark)` adds the Python data sources to a SparkSession: `pykafka` (kafka_source.py, any
Kafka-protocol broker) and `rocketmq` (rocketmq_source.py, RocketMQ topics through the remoting
protocol). `kafka_format(spark)` says which Kafka source a job should use: Spark's own `kafka` when
its connector jar is on the classpath, else `pykafka` (same options, same schema).
"""
from __future__ import annotations


FORMATS = ("pykafka", "rocketmq")
HIDE_TRACEBACK = "spark.sql.execution.pyspark.udf.hideTraceback.enabled"


def register(spark, short_errors: bool = True) -> None:
    """Register `pykafka` and `rocketmq` with the session, let their writers take the default save mode
    (see _patch_save_modes), and, unless the session says otherwise (short_errors=False, or its own
    setting of spark.sql.execution.pyspark.udf.hideTraceback.enabled), have Spark report a Python
    source's error as its message alone rather than under a Python traceback."""
    from .kafka_source import PyKafkaDataSource
    from .rocketmq_source import RocketMQDataSource
    spark.dataSource.register(PyKafkaDataSource)
    spark.dataSource.register(RocketMQDataSource)
    _patch_save_modes()
    if short_errors:
        try:
            if spark.conf.get(HIDE_TRACEBACK, None) in (None, "false") and not _user_set(spark, HIDE_TRACEBACK):
                spark.conf.set(HIDE_TRACEBACK, "true")
        except Exception:      # a session that refuses the setting: errors keep their traceback
            pass


def _user_set(spark, key: str) -> bool:
    try:
        return spark.sparkContext.getConf().contains(key)
    except Exception:           # Spark Connect: no SparkContext here
        return False


def _patch_save_modes() -> None:
    """Spark's Kafka sink takes the default save mode, ErrorIfExists (and Append), and refuses Overwrite
    and Ignore; Spark refuses ErrorIfExists for every Python data source (UNSUPPORTED_DATA_SOURCE_SAVE_MODE).
    So for the formats registered here a save without a mode, or with error/errorifexists, is written as
    Append, and overwrite/ignore raise Spark's Kafka sink's message. Other formats are untouched."""
    from pyspark.sql.readwriter import DataFrameWriter as Classic
    writers = [Classic]
    try:
        from pyspark.sql.connect.readwriter import DataFrameWriter as Connect
        writers.append(Connect)
    except Exception:           # pyspark without its connect extra
        pass
    for cls in writers:
        if getattr(cls, "_rmq_patched", False):
            continue
        orig_format, orig_mode, orig_save = cls.format, cls.mode, cls.save

        def format(self, source, _orig=orig_format):
            self._rmq_format = source
            return _orig(self, source)

        def mode(self, saveMode, _orig=orig_mode):
            self._rmq_mode = saveMode
            return _orig(self, saveMode)

        def save(self, path=None, format=None, mode=None, partitionBy=None, _orig=orig_save, **options):
            fmt = (format or getattr(self, "_rmq_format", None) or "").lower()
            if fmt in FORMATS:
                m = (mode or getattr(self, "_rmq_mode", None) or "errorifexists").lower()
                if m in ("overwrite", "ignore"):
                    from .common import SourceError
                    raise SourceError(f"Save mode {m.capitalize()} is not allowed for format {fmt}; allowed save "
                                      "modes are Append and ErrorIfExists (the default), as in Spark's Kafka sink")
                if m in ("error", "errorifexists", "default"):
                    mode = "append"
            return _orig(self, path, format, mode, partitionBy, **options)

        cls.format, cls.mode, cls.save = format, mode, save
        cls._rmq_patched = True


NOT_FOUND = ("DATA_SOURCE_NOT_FOUND", "KAFKA_DATA_SOURCE_NOT_ENABLED", "Failed to find data source", "ClassNotFoundException")


def official_kafka_available(spark) -> bool:
    """Is Spark's spark-sql-kafka-0-10 connector available to this session?

    Asked the way a query asks: Spark looks the format `kafka` up (DataSource lookup through the
    session's class loader, which holds jars given with spark.jars, --jars, --packages or ADD JAR) when
    it analyses `spark.read.format("kafka").load()`. Without options the connector refuses the read
    naming its options ("...must be specified for Kafka source..."), without the jar Spark answers
    DATA_SOURCE_NOT_FOUND. No broker is contacted. This works in a classic session and in a Spark
    Connect client (a pipeline), where there is no JVM to ask Class.forName (which misses jars added
    at session start, as they live in a child class loader)."""
    try:
        spark.read.format("kafka").load().schema
    except Exception as exc:        # the expected path: the connector refuses the option-less read
        text = str(exc)
        if any(w in text for w in NOT_FOUND):
            return False
        return "kafka" in text.lower()
    return True


def kafka_format(spark, log=print) -> str:
    """"kafka" when Spark's connector is present, else "pykafka" (registered on the way); says which."""
    if official_kafka_available(spark):
        log("Kafka source: Spark's spark-sql-kafka-0-10 connector (format kafka)")
        return "kafka"
    register(spark)
    log("Kafka source: kafka_bridge.spark's Python data source (format pykafka); Spark's connector jar "
        "is not on the classpath")
    return "pykafka"
