"""raftcore's Spark data source, found by PySpark itself: PySpark 4 registers the
``DefaultSource`` of every top-level module named ``pyspark_<name>`` on the Python path
(``pyspark.sql.worker.lookup_data_sources``), so that ``spark.read.format("raftcore")``,
``spark.readStream.format("raftcore")`` and ``df.write.format("raftcore")`` work in any
session once raftcore is installed, without ``raftcore.spark.register(spark)``."""

from raftcore.spark.source import RaftcoreDataSource as DefaultSource

__all__ = ["DefaultSource"]
