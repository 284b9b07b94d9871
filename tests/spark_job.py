"""A streaming job the Spark drills start as a child process: one of the Python sources to Parquet
with a checkpoint, or a batch read on a standalone cluster that reports where its tasks ran.

    python tests/spark_job.py stream FORMAT OUT CHECKPOINT key=value...
    python tests/spark_job.py cluster MASTER FORMAT key=value...   (prints JSON on the last line)
    python tests/spark_job.py official key=value...   (Spark's connector from $SPARK_KAFKA_JARS vs pykafka)
"""
from __future__ import annotations

import json
import os
import sys
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def session(master: str, ui: bool = False, jars: str | None = None):
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession
    b = SparkSession.builder
    if jars:
        b = b.config("spark.jars", ",".join(os.path.join(jars, f) for f in sorted(os.listdir(jars)) if f.endswith(".jar")))
    b = (b.master(master).appName("rmq-spark-drill")
         .config("spark.ui.enabled", "true" if ui else "false").config("spark.ui.port", "0")
         .config("spark.ui.showConsoleProgress", "false")
         .config("spark.driver.bindAddress", "127.0.0.1").config("spark.driver.host", "127.0.0.1")
         .config("spark.sql.shuffle.partitions", "2"))
    if master.startswith("spark://"):
        b = b.config("spark.executor.cores", "1").config("spark.cores.max", "1").config("spark.executor.memory", "1g")
        if os.environ.get("SPARK_DAEMON_JAVA_OPTS"):    # the executor as its worker (tests/conftest.py)
            b = b.config("spark.executor.extraJavaOptions", os.environ["SPARK_DAEMON_JAVA_OPTS"])
    s = b.getOrCreate()
    s.sparkContext.setLogLevel("ERROR")
    from kafka_bridge.spark import register
    register(s)
    return s


def options(pairs: list[str]) -> dict:
    return dict(p.split("=", 1) for p in pairs)


def stream(fmt: str, out: str, checkpoint: str, opts: dict) -> None:
    spark = session("local[2]")
    r = spark.readStream.format(fmt)
    for k, v in opts.items():
        r = r.option(k, v)
    q = (r.load().selectExpr("topic", "partition", "offset", "value").writeStream.format("parquet")
         .option("path", out).option("checkpointLocation", checkpoint).trigger(processingTime="300 milliseconds")
         .start())
    print("streaming", flush=True)
    q.awaitTermination()


def cluster(master: str, fmt: str, opts: dict) -> None:
    spark = session(master, ui=True)
    r = spark.read.format(fmt)
    for k, v in opts.items():
        r = r.option(k, v)
    df = r.load()
    n = df.count()
    parts = df.rdd.getNumPartitions()
    sc = spark.sparkContext
    base = sc.uiWebUrl
    app = sc.applicationId
    deadline = time.monotonic() + 30
    while True:         # the REST view of tasks lags the job's end a little
        with urllib.request.urlopen(f"{base}/api/v1/applications/{app}/stages?details=true&status=complete") as f:
            stages = json.load(f)
        tasks = [t for s in stages for t in s.get("tasks", {}).values()]
        if tasks or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    with urllib.request.urlopen(f"{base}/api/v1/applications/{app}/executors") as f:
        executors = [e["id"] for e in json.load(f)]
    print(json.dumps({"count": n, "partitions": parts, "task_executors": sorted({t["executorId"] for t in tasks}),
                      "tasks": len(tasks), "executors": executors, "master": sc.master}))
    spark.stop()


def official(opts: dict) -> None:
    """The same batch read through Spark's connector (jars from SPARK_KAFKA_JARS) and pykafka."""
    spark = session("local[2]", jars=os.environ["SPARK_KAFKA_JARS"])
    from kafka_bridge.spark import official_kafka_available
    out = {"official_available": official_kafka_available(spark)}
    for fmt in ("kafka", "pykafka"):
        r = spark.read.format(fmt)
        for k, v in opts.items():
            r = r.option(k, v)
        out[fmt] = sorted([x.topic, x.partition, x.offset, x.key.hex() if x.key else None, x.value.hex(),
                           x.timestampType] for x in r.load().collect())
    print(json.dumps(out))
    spark.stop()


if __name__ == "__main__":
    if sys.argv[1] == "stream":
        stream(sys.argv[2], sys.argv[3], sys.argv[4], options(sys.argv[5:]))
    elif sys.argv[1] == "official":
        official(options(sys.argv[2:]))
    elif sys.argv[1] == "cluster":
        cluster(sys.argv[2], sys.argv[3], options(sys.argv[4:]))
    else:
        raise SystemExit(f"unknown mode {sys.argv[1]!r}")
