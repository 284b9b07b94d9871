"""DLQ audit pipeline: every %DLQ%<group> topic -> `dead_letters` -> `dead_letter_summary`."""
from pyspark import pipelines as dp
from pyspark.sql import functions as F

from kafka_bridge.spark import register

register(spark)  # noqa: F821 (spark is the pipeline's session)


@dp.materialized_view(format="parquet", comment="One row per dead letter: the group, the topic it was "
                                                "consumed from, how often it was retried, its keys.")
def dead_letters():
    return (spark.read.format("rocketmq").option("namesrv", spark.conf.get("rmq.namesrv"))  # noqa: F821
            .option("subscribePattern", "%DLQ%.*").load()
            .select(F.regexp_replace("topic", "^%DLQ%", "").alias("consumer_group"),
                    F.col("retryTopic").alias("original_topic"),
                    "reconsumeTimes", "keys", "tags", "msgId",
                    F.col("originMsgId").alias("origin_msg_id"),
                    F.col("value").cast("string").alias("body"), "storeTimestamp"))


@dp.materialized_view(format="parquet", comment="Dead letters per group and original topic.")
def dead_letter_summary():
    return (spark.read.table("dead_letters").groupBy("consumer_group", "original_topic")  # noqa: F821
            .agg(F.count("*").alias("dead_letters"), F.max("reconsumeTimes").alias("max_reconsume_times"))
            .orderBy("consumer_group"))
