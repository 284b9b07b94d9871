"""Spark over the bridge (issue 12). Imported lazily: only this package imports pyspark.

`register(spark)` adds the Python data sources to a SparkSession: `pykafka` (kafka_source.py, any
Kafka-protocol broker) and `rocketmq` (rocketmq_source.py, RocketMQ topics through the remoting
protocol). `kafka_format(spark)` says which Kafka source a job should use: Spark's own `kafka` when
its connector jar is on the classpath, else `pykafka` (same options, same schema).
"""
from __future__ import annotations


def register(spark) -> None:
    from .kafka_source import PyKafkaDataSource
    from .rocketmq_source import RocketMQDataSource
    spark.dataSource.register(PyKafkaDataSource)
    spark.dataSource.register(RocketMQDataSource)


def official_kafka_available(spark) -> bool:
    """Is Spark's spark-sql-kafka-0-10 connector on this session's classpath?"""
    try:
        jvm = spark.sparkContext._jvm
        jvm.java.lang.Class.forName("org.apache.spark.sql.kafka010.KafkaSourceProvider")
        return True
    except Exception:   # not loadable, or a Spark Connect session without a JVM here
        return False


def kafka_format(spark, log=print) -> str:
    """"kafka" when Spark's connector is present, else "pykafka" (registered on the way); says which."""
    if official_kafka_available(spark):
        log("Kafka source: Spark's spark-sql-kafka-0-10 connector (format kafka)")
        return "kafka"
    register(spark)
    log("Kafka source: kafka_bridge.spark's Python data source (format pykafka); Spark's connector jar "
        "is not on the classpath")
    return "pykafka"
