"""df.write / df.writeStream .format("raftcore"): rows appended to a three-node cluster (node
processes on loopback), committed before the task reports success, and each row once -- also
when a task is killed mid-write and retried, when a job runs again with its writeId, and when a
stream runs a micro-batch again after a restart.

The session is local[2,4]: in local mode Spark retries a failed task only when told how often."""

from __future__ import annotations

import os
import shutil
import signal

import pytest
from spark_helpers import java_problem, spark_session

pytest.importorskip("pyarrow", reason="the Spark sink takes Arrow batches: pip install pyarrow")
datasource = pytest.importorskip(
    "pyspark.sql.datasource", reason="needs pyspark>=4.1: pip install 'raftcore[spark]'"
)
if (_problem := java_problem()) is not None:
    pytest.skip(_problem, allow_module_level=True)
if not hasattr(datasource, "DataSourceStreamArrowWriter"):
    pytest.skip("needs pyspark>=4.1 (Arrow stream writers)", allow_module_level=True)

from cluster_helpers import FAST, quorum, run  # noqa: E402
from pyspark.sql import functions as F  # noqa: E402

from raftcore.kafka.producer_ids import derived_producer_id  # noqa: E402
from raftcore.node.local_cluster import LocalCluster  # noqa: E402
from raftcore.spark import SparkSourceError, WriteOptions  # noqa: E402

pytestmark = [
    pytest.mark.slow,
    pytest.mark.spark,
    pytest.mark.cluster(3, node_args=FAST, shared=True),
]


@pytest.fixture(scope="module")
def spark(tmp_path_factory):  # type: ignore[no-untyped-def]
    yield from spark_session(tmp_path_factory.mktemp("spark-jvm"), master="local[2,4]")


def _rows(spark, tag: str, count: int, partitions: int = 2, through=None):  # type: ignore[no-untyped-def]
    ids = spark.range(0, count, 1, partitions)
    if through is not None:  # a Python UDF every id goes through
        ids = ids.select(F.udf(through, "long")("id").alias("id"))
    return ids.select(
        F.format_string(f"{tag}-%07d", "id").alias("key"),
        F.concat(F.lit("value-"), F.col("id").cast("string")).cast("binary").alias("value"),
    )


def _write(df, c: LocalCluster, **options: object) -> None:  # type: ignore[no-untyped-def]
    writer = df.write.format("raftcore").option("bootstrap", ",".join(c.bootstrap))
    for name, value in options.items():
        writer = writer.option(name, str(value))
    writer.mode("append").save()


def _committed(spark, c: LocalCluster, tag: str) -> list[tuple[str, bytes]]:  # type: ignore[no-untyped-def]
    """(key, value) of the committed records whose key starts with ``tag-``, in log order."""
    df = spark.read.format("raftcore").option("bootstrap", ",".join(c.bootstrap)).load()
    rows = (
        df.where(F.col("key").cast("string").startswith(f"{tag}-"))
        .orderBy("offset")
        .select(F.col("key").cast("string"), "value")
        .collect()
    )
    return [(r[0], bytes(r[1])) for r in rows]


def _expected(tag: str, count: int) -> list[tuple[str, bytes]]:
    return [(f"{tag}-{n:07d}", b"value-%d" % n) for n in range(count)]


def _assert_once(spark, c: LocalCluster, tag: str, count: int) -> None:  # type: ignore[no-untyped-def]
    got = _committed(spark, c, tag)
    keys = [k for k, _ in got]
    assert len(keys) == len(set(keys)), f"{len(keys) - len(set(keys))} rows written twice"
    assert sorted(got) == _expected(tag, count)


def test_written_rows_are_committed_when_the_write_returns(spark, cluster) -> None:  # type: ignore[no-untyped-def]
    hw_before = run(quorum(cluster)).high_watermark
    _write(_rows(spark, "plain", 20_000), cluster, batchRecords=500)
    # save() returned: the leader's high watermark covers every row.
    assert run(quorum(cluster)).high_watermark >= hw_before + 20_000
    _assert_once(spark, cluster, "plain", 20_000)


def test_a_task_killed_mid_write_is_retried_without_writing_a_row_twice(  # type: ignore[no-untyped-def]
    spark, cluster, tmp_path
) -> None:
    """The first attempt of partition 0 SIGKILLs its Python worker (upstream of the sink, in
    the same task) as soon as the leader's log holds some of its rows (the marker file records
    how many), with more in flight; Spark retries the task, which finds them and sends only
    the rest."""
    marker = tmp_path / "killed"
    bootstrap = cluster.bootstrap
    pid = derived_producer_id("raftcore-sink/kill-test/0/partition-0")  # task 0, to partition 0

    def explode(i: int) -> int:
        # Runs in Spark's Python workers: it imports raftcore only (the tests' modules are not
        # on the workers' path).
        import asyncio

        from pyspark import TaskContext

        from raftcore.client.cluster import ClusterClient
        from raftcore.client.resumable import last_sequence

        async def leader_last_sequence() -> int:
            client = ClusterClient(bootstrap)
            await client.start()
            try:
                return await last_sequence(client, "raftcore", pid, 10)
            finally:
                await client.close()

        if i >= 5_000 and i % 50 == 0 and TaskContext.get().attemptNumber() == 0:
            written = asyncio.run(leader_last_sequence()) + 1
            if written > 0:  # the sink, downstream, has sent rows and the leader has them
                marker.write_text(str(written))
                os.kill(os.getpid(), signal.SIGKILL)
        return i

    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "1000")
    try:
        df = _rows(spark, "killed", 60_000, through=explode)
        _write(df, cluster, batchRecords=200, writeId="kill-test")
    finally:
        spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")
    assert marker.exists(), "the first attempt was not killed"
    assert int(marker.read_text()) >= 200  # rows of the killed attempt were in the log
    _assert_once(spark, cluster, "killed", 60_000)


def test_a_job_run_again_with_its_write_id_adds_nothing(spark, cluster) -> None:  # type: ignore[no-untyped-def]
    df = _rows(spark, "again", 3_000, partitions=3)
    _write(df, cluster, writeId="nightly-2026-11-23", batchRecords=100)
    hw = run(quorum(cluster)).high_watermark
    _write(df, cluster, writeId="nightly-2026-11-23", batchRecords=100)
    assert run(quorum(cluster)).high_watermark <= hw + 10  # control records at most
    _assert_once(spark, cluster, "again", 3_000)


def test_a_stream_running_a_micro_batch_again_writes_it_once(spark, cluster, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A restarted query runs its last micro-batch again when its commit was not recorded
    (Spark's checkpoint/commits/N): the sink, keyed by query id and batch id, writes it once."""
    src, checkpoint = tmp_path / "in", tmp_path / "checkpoint"
    src.mkdir()
    for n in range(3):
        lines = "\n".join(
            f'{{"key": "stream-{i:07d}", "value": "value-{i}"}}'
            for i in range(n * 400, (n + 1) * 400)
        )
        (src / f"part-{n}.json").write_text(lines + "\n")

    def run_query() -> None:
        stream = (
            spark.readStream.schema("key string, value string")
            .option("maxFilesPerTrigger", 1)
            .json(str(src))
            .select("key", F.col("value").cast("binary").alias("value"))
        )
        query = (
            stream.writeStream.format("raftcore")
            .option("bootstrap", ",".join(cluster.bootstrap))
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(120)
        assert query.exception() is None

    run_query()
    _assert_once(spark, cluster, "stream", 1_200)
    last = max(int(p.name) for p in (checkpoint / "commits").iterdir() if p.name.isdigit())
    for name in (str(last), f".{last}.crc"):  # as if the query died before recording it
        (checkpoint / "commits" / name).unlink(missing_ok=True)
    run_query()  # runs batch `last` again
    assert (checkpoint / "commits" / str(last)).exists()
    _assert_once(spark, cluster, "stream", 1_200)


def test_what_the_sink_cannot_write_is_refused_naming_the_fix(spark, cluster) -> None:  # type: ignore[no-untyped-def]
    df = _rows(spark, "bad", 10)
    with pytest.raises(Exception, match="append-only"):
        df.write.format("raftcore").option("bootstrap", cluster.bootstrap[0]).mode(
            "overwrite"
        ).save()
    with pytest.raises(Exception, match="needs a 'value' column"):
        _write(df.select("key"), cluster)
    with pytest.raises(Exception, match="must be binary or string"):
        _write(df.select("key", F.lit(1).alias("value")), cluster)
    with pytest.raises(SparkSourceError, match="unknown sink option"):
        WriteOptions.parse({"bootstrap": "h:1", "batchrecord": "5"})
    with pytest.raises(SparkSourceError, match=r"needs \.option\('bootstrap'"):
        WriteOptions.parse({})


def test_the_java_check_names_what_is_missing(monkeypatch, tmp_path) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("JAVA_HOME", str(tmp_path))
    monkeypatch.setenv("PATH", str(tmp_path))
    assert "Spark needs Java 17+" in (java_problem() or "")
    assert shutil.which("java") is None
