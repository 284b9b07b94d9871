"""Tags pipeline: a RocketMQ topic read with the broker applying the filter -> `tagged_events`."""
from pyspark import pipelines as dp
from pyspark.sql import functions as F

from kafka_bridge.spark import register

register(spark)  # noqa: F821 (spark is the pipeline's session)


@dp.table(comment="The messages the broker's filter let through, with their RocketMQ columns.")
def tagged_events():
    c = spark.conf  # noqa: F821
    return (spark.readStream.format("rocketmq")  # noqa: F821
            .option("namesrv", c.get("rmq.namesrv")).option("topic", c.get("rmq.topic"))
            .option("filter", c.get("rmq.filter")).option("filterType", c.get("rmq.filterType"))
            .option("consumerGroup", c.get("rmq.consumerGroup")).option("startingOffsets", "earliest").load()
            .select("topic", F.col("partition").alias("queue_id"), "offset", "tags", "keys",
                    F.col("value").cast("string").alias("body"), F.col("properties")["region"].alias("region"),
                    "storeTimestamp"))


@dp.materialized_view(format="parquet", comment="Messages per tag and region.")
def tagged_counts():
    return spark.read.table("tagged_events").groupBy("tags", "region").count().orderBy("tags", "region")  # noqa: F821
