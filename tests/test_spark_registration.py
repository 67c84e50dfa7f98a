"""PySpark 4 finds raftcore's data source by itself (``pyspark_raftcore``, a top-level module
whose ``DefaultSource`` Spark's lookup registers): a fresh session, in a process of its own
that never calls ``raftcore.spark.register``, reads ``format("raftcore")``. Spark's own Kafka
source needs nothing once installed; neither does raftcore's."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from spark_helpers import java_problem

pytest.importorskip("pyarrow", reason="the Spark source yields Arrow batches: pip install pyarrow")
pytest.importorskip(
    "pyspark.sql.datasource", reason="needs pyspark 4 (pip install 'raftcore[spark]')"
)
if problem := java_problem():
    pytest.skip(problem, allow_module_level=True)

import raftcore
from raftcore.log import SegmentedLog
from raftcore.records import encode_batch

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.timeout(240)]

PROGRAM = textwrap.dedent(
    """
    import sys
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[1]")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    rows = spark.read.format("raftcore").load(sys.argv[1]).select("offset", "value").collect()
    print("ROWS", [(r.offset, bytes(r.value)) for r in rows])
    spark.stop()
    """
)


def test_a_fresh_session_reads_format_raftcore_without_registering_it(tmp_path: Path) -> None:
    log_dir = tmp_path / "log"
    with SegmentedLog.open(log_dir) as log:
        for i in range(3):
            log.append_as_follower(
                encode_batch([(b"k", b"v%d" % i)], base_offset=i, leader_epoch=1)
            )
        log.flush()
    (log_dir / f"{3:020d}-{1:010d}.checkpoint").touch()  # what the files prove committed
    program = tmp_path / "program.py"
    program.write_text(PROGRAM)
    # the installed raftcore (a built checkout here), as a user's would be; run elsewhere
    root = str(Path(raftcore.__file__).resolve().parent.parent)
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, env.get("PYTHONPATH")]))
    result = subprocess.run(
        [sys.executable, str(program), str(log_dir)],
        check=False,
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=200,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "ROWS [(0, b'v0'), (1, b'v1'), (2, b'v2')]" in result.stdout
