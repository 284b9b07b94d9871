"""Read one topic with both Python data sources: `pykafka` (Spark's Kafka source options and schema)
and `rocketmq` (broker-side tag filter, RocketMQ columns). docs/spark.md runs it:

    python configs/spark/read_demo.py --bootstrap HOST:PORT --namesrv HOST:PORT --topic T [--tag TAG]
"""
import argparse
import os
import sys

ap = argparse.ArgumentParser()
ap.add_argument("--bootstrap", required=True, help="the broker's Kafka listener")
ap.add_argument("--namesrv", required=True, help="the NameServer")
ap.add_argument("--topic", required=True)
ap.add_argument("--tag", default="*", help="RocketMQ tag expression for the rocketmq source")
a = ap.parse_args()

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)      # the Python workers need this project
from pyspark.sql import SparkSession  # noqa: E402

from kafka_bridge.spark import kafka_format, register  # noqa: E402

spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
         .config("spark.ui.showConsoleProgress", "false").getOrCreate())
spark.sparkContext.setLogLevel("ERROR")
register(spark)

fmt = kafka_format(spark)        # "kafka" with Spark's connector jar on the classpath, else "pykafka"
kafka = (spark.read.format(fmt).option("kafka.bootstrap.servers", a.bootstrap)
         .option("subscribe", a.topic).option("startingOffsets", "earliest").load())
kafka.selectExpr("partition", "offset", "CAST(value AS STRING) AS value").orderBy("offset").show(truncate=False)

rocket = (spark.read.format("rocketmq").option("namesrv", a.namesrv).option("topic", a.topic)
          .option("filter", a.tag).load())
rocket.select("partition", "offset", "tags", "keys", rocket.value.cast("string").alias("value")) \
    .orderBy("offset").show(truncate=False)
spark.stop()
