"""Orders pipeline: the Kafka topic -> `orders` (streaming table) -> `revenue_per_minute` (Parquet)."""
from pyspark import pipelines as dp
from pyspark.sql import functions as F

from kafka_bridge.spark import kafka_format

ORDER = "order_id STRING, customer STRING, amount DECIMAL(12,2), ts TIMESTAMP"

fmt = kafka_format(spark)        # noqa: F821 (spark is the pipeline's session) -- "kafka" or "pykafka"


@dp.table(comment="Orders parsed from the topic's JSON values; a duplicate order_id within the "
                  "10-minute watermark (a producer retry) is dropped.")
def orders():
    raw = (spark.readStream.format(fmt)  # noqa: F821
           .option("kafka.bootstrap.servers", spark.conf.get("rmq.bootstrap"))  # noqa: F821
           .option("subscribe", spark.conf.get("rmq.topic"))  # noqa: F821
           .option("startingOffsets", "earliest").load())
    parsed = raw.select(F.from_json(F.col("value").cast("string"), ORDER).alias("o"), "partition", "offset")
    return (parsed.select("o.*", "partition", "offset").where("order_id IS NOT NULL")
            .withWatermark("ts", "10 minutes").dropDuplicatesWithinWatermark(["order_id"]))


@dp.materialized_view(format="parquet", comment="Revenue and order count per 1-minute window.")
def revenue_per_minute():
    return (spark.read.table("orders")  # noqa: F821
            .groupBy(F.window("ts", "1 minute").alias("w"))
            .agg(F.sum("amount").alias("revenue"), F.count("*").alias("orders"))
            .select(F.col("w.start").alias("window_start"), F.col("w.end").alias("window_end"), "revenue", "orders")
            .orderBy("window_start"))
