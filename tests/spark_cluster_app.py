"""A Spark application for ``spark-submit`` against a Spark cluster: it reads a running raftcore
cluster with the bootstrap mode (the executors fetch over the network; they need none of the
driver's files) and, where ``raftcore.spark`` has a sink, writes to it. What it saw goes to a
JSON file for tests/test_spark_standalone.py to check; docs/spark.md shows the command.

    spark-submit --master spark://HOST:7077 spark_cluster_app.py \\
        --bootstrap 10.0.0.1:9091,10.0.0.2:9091 --out result.json [--write 100]
"""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

import raftcore.spark

GROUPS = 4  # the group-by: offset % GROUPS


def read_step(spark: Any, bootstrap: str, partition_records: int) -> dict[str, Any]:
    """The committed records (offset, key, value), their count, and a group-by on the cluster."""
    df = (
        spark.read.format("raftcore")
        .option("bootstrap", bootstrap)
        .option("partitionRecords", partition_records)
        .load()
    )
    rows = df.select("offset", "key", "value").orderBy("offset").collect()
    groups = df.groupBy((F.col("offset") % GROUPS).alias("g")).count().collect()
    return {
        "partitions": df.rdd.getNumPartitions(),
        "count": df.count(),
        "rows": [[r[0], bytes(r[1]).hex(), bytes(r[2]).hex()] for r in rows],
        "groups": {str(r["g"]): r["count"] for r in groups},
    }


def write_step(spark: Any, bootstrap: str, count: int) -> dict[str, Any]:
    """Append ``count`` records (key ``w%07d``) with ``df.write.format("raftcore")``; skipped,
    with the reason, when this raftcore has no sink yet."""
    try:
        import raftcore.spark.sink  # noqa: F401
    except ImportError as exc:
        return {"skipped": f"raftcore.spark has no sink here ({exc})"}
    keys = [b"w%07d" % n for n in range(count)]
    df = spark.createDataFrame([(k, b"x" * 20) for k in keys], "key binary, value binary")
    df.write.format("raftcore").option("bootstrap", bootstrap).mode("append").save()
    return {"written": [k.hex() for k in keys]}


def executor_directories(spark: Any) -> list[str]:
    """Where the executors' Python workers run: the Spark worker's work directory, not the
    driver's."""
    sc = spark.sparkContext
    parallel = max(2, sc.defaultParallelism)
    return sorted(
        set(sc.parallelize(range(parallel), parallel).map(lambda _: os.getcwd()).collect())
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--bootstrap", required=True, help="host:port[,host:port...]")
    parser.add_argument("--out", required=True, help="the JSON file this run writes")
    parser.add_argument("--partition-records", type=int, default=1_000_000)
    parser.add_argument("--write", type=int, default=0, help="records to append (0: none)")
    args = parser.parse_args(argv)

    spark = SparkSession.builder.appName("raftcore-on-a-spark-cluster").getOrCreate()
    try:
        raftcore.spark.register(spark)
        result: dict[str, Any] = {
            "master": spark.sparkContext.master,
            "driver_directory": os.getcwd(),
            "executor_directories": executor_directories(spark),
            "read": read_step(spark, args.bootstrap, args.partition_records),
        }
        if args.write:
            result["write"] = write_step(spark, args.bootstrap, args.write)
    finally:
        spark.stop()
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main()
