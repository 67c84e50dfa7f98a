"""Every Spark example in docs/spark.md is a whole program that runs as written: each block
marked ``<!-- spark-doc-test: NAME -->`` is run here as it stands, its addresses and paths
pointed at a local cluster and a temporary directory (as the README test points the README's
ports at free ones), in one local Spark session (``getOrCreate`` in the block gets it)."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest
from spark_helpers import java_problem, spark_session

pytest.importorskip("pyarrow", reason="the Spark source yields Arrow batches: pip install pyarrow")
pytest.importorskip("pyspark.sql.datasource", reason="needs pyspark 4: raftcore[spark]")
if problem := java_problem():
    pytest.skip(problem, allow_module_level=True)

from cluster_helpers import FAST, produce, run, wait_caught_up

from raftcore.node.local_cluster import LocalCluster

pytestmark = [
    pytest.mark.spark,
    pytest.mark.slow,
    pytest.mark.timeout(300),
    pytest.mark.cluster(1, node_args=FAST),
]

SPARK_MD = Path(__file__).resolve().parent.parent / "docs" / "spark.md"
BLOCK = re.compile(r"<!-- spark-doc-test: (\w+) -->\n```python\n(.*?)```", re.S)
RECORDS = 1000
PUSHDOWN = "spark.sql.python.filterPushdown.enabled"


def blocks() -> dict[str, str]:
    return dict(BLOCK.findall(SPARK_MD.read_text(encoding="utf-8")))


@pytest.fixture(scope="module")
def spark(tmp_path_factory):  # type: ignore[no-untyped-def]
    yield from spark_session(tmp_path_factory.mktemp("spark-docs-jvm"))


@pytest.fixture(scope="module")
def written(shared_cluster: LocalCluster) -> tuple[LocalCluster, int]:
    """The module's one node holding RECORDS records, and its high watermark."""
    c = shared_cluster
    run(produce(c.bootstrap, 0, RECORDS))
    hw = run(wait_caught_up(c, c.node_ids))
    return c, hw


def as_written(name: str, cluster, tmp: Path) -> str:  # type: ignore[no-untyped-def]
    """Block ``name``, its addresses, offsets and paths pointed at the test's."""
    c, hw = cluster
    places = {
        "10.0.0.1:9091,10.0.0.2:9091": c.bootstrap[0],
        "10.0.0.1:9091": c.bootstrap[0],
        "host:9091": c.bootstrap[0],
        "/var/lib/raftcore/node-1": str(c.data_dir(1)),
        "/data/node-1": str(c.data_dir(1)),
        "120_000": str(hw),
        "123_456": str(hw),
        "hdfs:///reports/raftcore-keys": str(tmp / "reports"),
    }
    for path in ("/data/out", "/data/ckpt", "/chk/events", "/data/parquet", "/data/incoming"):
        places[path] = str(tmp / path.strip("/").replace("/", "-"))
    places["/tmp/snap"] = str(tmp / "snap")
    code = blocks()[name]
    for old in sorted(places, key=len, reverse=True):  # the longer addresses first
        code = code.replace(old, places[old])
    return code


def run_block(name: str, cluster, tmp: Path, argv: list[str] | None = None) -> None:  # type: ignore[no-untyped-def]
    code = as_written(name, cluster, tmp)
    saved = sys.argv
    sys.argv = argv or sys.argv
    try:
        exec(compile(code, f"{SPARK_MD}:{name}", "exec"), {"__name__": "spark_doc"})
    finally:
        sys.argv = saved


def test_every_python_block_of_the_spark_guide_is_one_of_these_tests():
    """A new example in docs/spark.md gets a marker, and with it a run here."""
    text = SPARK_MD.read_text(encoding="utf-8")
    assert text.count("```python") == len(blocks()) == 6


def test_the_read_example_reads_a_cluster_and_a_nodes_files(spark, written, tmp_path):
    run_block("read", written, tmp_path)


def test_the_pushdown_pitfall_is_as_the_guide_says(spark, written, tmp_path, capsys):
    """If a pyspark release fixes it, this fails: the guide must then say so."""
    try:
        run_block("pitfall", written, tmp_path)
    finally:
        spark.conf.unset(PUSHDOWN)
    filtered, reused, fresh = (int(n) for n in capsys.readouterr().out.split())
    assert filtered == reused < fresh


def test_the_streaming_example_writes_what_is_committed_to_parquet(spark, written, tmp_path):
    run_block("stream", written, tmp_path)
    out = spark.read.parquet(str(tmp_path / "data-out"))
    assert out.count() == RECORDS


def test_the_sink_example_appends_a_dataframe_and_a_stream(spark, written, tmp_path):
    incoming = tmp_path / "data-incoming"
    incoming.mkdir()
    rows = [{"key": f"e{i}", "value": f"event {i}"} for i in range(3)]
    (incoming / "events.json").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    c, _ = written
    before = spark.read.format("raftcore").option("bootstrap", c.bootstrap[0]).load()
    keys_before = before.count()
    run_block("sink", written, tmp_path)
    after = spark.read.format("raftcore").option("bootstrap", c.bootstrap[0]).load()
    values = {bytes(r.value) for r in after.select("value").collect()}
    assert after.count() == keys_before + 2 + 3
    assert {b"v1", b"v2", b"event 0", b"event 2"} <= values


def test_the_jobs_example_exports_to_parquet_and_builds_a_snapshot(spark, written, tmp_path):
    run_block("jobs", written, tmp_path)
    assert spark.read.parquet(str(tmp_path / "data-parquet")).count() >= RECORDS
    assert list((tmp_path / "snap").glob("*.checkpoint"))


def test_the_cluster_application_counts_keys_into_parquet(spark, written, tmp_path):
    c, _ = written
    run_block("app", written, tmp_path, argv=["app.py", c.bootstrap[0]])
    assert spark.read.parquet(str(tmp_path / "reports")).count() >= RECORDS
