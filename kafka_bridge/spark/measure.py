"""The Spark half of `rmq bench spark` (kafka_bridge/bench/spark.py starts the broker and fills the
topic, then runs this module in its own process): read the same N records with every available
source, and the same rows from Parquet, in one SparkSession; print JSON on stdout.

Each run reads every source once (in the same order), forcing every value to be read:
`SELECT count(*), sum(length(value))`. A count must equal N or the run is refused.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(prog="python -m kafka_bridge.spark.measure")
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--namesrv", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--rows", type=int, required=True)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--master", default="local[2]")
    a = ap.parse_args(argv)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession
    b = (SparkSession.builder.master(a.master).appName("rmq-bench-spark").config("spark.ui.enabled", "false")
         .config("spark.driver.bindAddress", "127.0.0.1").config("spark.driver.host", "127.0.0.1")
         .config("spark.ui.showConsoleProgress", "false"))
    jars = os.environ.get("SPARK_KAFKA_JARS")
    if jars and os.path.isdir(jars):
        b = b.config("spark.jars", ",".join(os.path.join(jars, f) for f in sorted(os.listdir(jars)) if f.endswith(".jar")))
    spark = b.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    from kafka_bridge.spark import official_kafka_available, register
    register(spark)
    sources = {
        "pykafka": lambda: spark.read.format("pykafka").option("kafka.bootstrap.servers", a.bootstrap)
        .option("subscribe", a.topic).load(),
        "rocketmq": lambda: spark.read.format("rocketmq").option("namesrv", a.namesrv).option("topic", a.topic)
        .option("consumerGroup", "bench-spark").load(),
    }
    if official_kafka_available(spark):
        sources["kafka (Spark's connector)"] = lambda: (spark.read.format("kafka")
                                                        .option("kafka.bootstrap.servers", a.bootstrap)
                                                        .option("subscribe", a.topic).load())
    tmp = tempfile.mkdtemp(prefix="bench-spark-")
    try:
        pq = os.path.join(tmp, "copy.parquet")
        sources["pykafka"]().write.parquet(pq)
        sources["parquet (upper bound)"] = lambda: spark.read.parquet(pq)
        times: dict[str, list[float]] = {k: [] for k in sources}
        for run in range(a.runs):
            for name, make in sources.items():
                t0 = time.perf_counter()
                n, total = make().selectExpr("count(*)", "sum(length(value))").first()
                times[name].append(time.perf_counter() - t0)
                if n != a.rows:
                    raise SystemExit(f"{name} read {n} rows, expected {a.rows}")
                print(f"run {run + 1}: {name} {a.rows / times[name][-1]:,.0f} rows/s", file=sys.stderr, flush=True)
        print(json.dumps({"rows": a.rows, "seconds": times}))
    finally:
        spark.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
