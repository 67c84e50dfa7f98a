"""raftcore as a Spark data source (PySpark 4's Python Data Source API): ``register(spark)``,
then ``spark.read.format("raftcore")`` and ``df.write.format("raftcore")``; the export and
snapshot jobs. See :mod:`raftcore.spark.source` and docs/spark.md.

Needs ``pyspark>=4.0`` and ``pyarrow`` (``pip install 'raftcore[spark]'``), on the driver and
in the executors' Python."""

from raftcore.spark.export import export
from raftcore.spark.options import ReadOptions, SparkSourceError, WriteOptions
from raftcore.spark.snapshot_job import build_snapshot
from raftcore.spark.source import SCHEMA, RaftcoreDataSource, register

__all__ = [
    "SCHEMA",
    "RaftcoreDataSource",
    "ReadOptions",
    "SparkSourceError",
    "WriteOptions",
    "build_snapshot",
    "export",
    "register",
]
