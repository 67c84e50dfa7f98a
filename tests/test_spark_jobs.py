"""The Spark jobs (issue 11): ``export`` to Parquet by offset range, and ``build_snapshot``, a
KIP-630 snapshot of the key/value state at a committed offset that restores to exactly the
state an LMDB state machine reaches by applying the log up to that offset, and that a node
installs.

One node with an LMDB state machine on loopback, records that overwrite, delete and break the
key rule, written in two leader epochs. One Spark session (local[2], UI off) serves the module;
skipped when pyspark or Java is missing."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from spark_helpers import java_problem, spark_session

pq = pytest.importorskip("pyarrow.parquet", reason="the Spark source yields Arrow batches")
pytest.importorskip("pyspark.sql.datasource", reason="needs pyspark>=4.0")
if (_problem := java_problem()) is not None:
    pytest.skip(_problem, allow_module_level=True)

from cluster_helpers import FAST, quorum, run, wait_caught_up, wait_for  # noqa: E402

import raftcore  # noqa: E402
from raftcore.client import Producer  # noqa: E402
from raftcore.log.snapshots import LogSnapshotReader  # noqa: E402
from raftcore.node.local_cluster import LocalCluster  # noqa: E402
from raftcore.raft.listener import CommittedBatch  # noqa: E402
from raftcore.raft.values import OffsetAndEpoch  # noqa: E402
from raftcore.records import iter_batches  # noqa: E402
from raftcore.snapshot import (  # noqa: E402
    SnapshotReader,
    parse_snapshot_path,
    verify_snapshot_file,
)
from raftcore.spark import ReadOptions, SparkSourceError, build_snapshot, export  # noqa: E402
from raftcore.spark.files import LogFiles  # noqa: E402
from raftcore.spark.remote import committed_range  # noqa: E402
from raftcore.statemachine import LmdbStateMachine  # noqa: E402
from raftcore.statemachine.store_snapshots import StoreSnapshotReader  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.spark]

LMDB = ["--state-machine", "lmdb", "--state-map-size", str(64 << 20)]
MAP = 64 << 20
PART = 150  # offsets per Spark task: several tasks


def _records(phase: int, batch: int) -> list[tuple[bytes | None, bytes | None]]:
    """50 records over 40 keys: overwrites, a delete every 7th, a null key and a 600-byte key
    (both skipped by the state machine) in some batches."""
    out: list[tuple[bytes | None, bytes | None]] = []
    for i in range(50):
        n = phase * 10_000 + batch * 50 + i
        k = f"k{(n * 7) % 40:03d}".encode()
        out.append((k, None if n % 7 == 0 else f"v{n}".encode()))
    if batch % 3 == 0:
        out += [(None, b"null key"), (b"x" * 600, b"long key"), (b"", b"empty key")]
    return out


async def _write(bootstrap: list[str], phase: int, batches: int) -> list[tuple[int, int]]:
    # One send at a time: each is then a batch of its own (a producer packs sends queued
    # together into one batch), and the tests pick snapshot offsets at these boundaries.
    async with Producer(bootstrap, request_timeout_ms=5000) as producer:
        return [await producer.send(_records(phase, b)) for b in range(batches)]


def applied_state(data_dir: Path, n: int, scratch: Path) -> list[tuple[bytes, bytes]]:
    """The pairs of a fresh LMDB state machine that applied the log's data batches below
    ``n`` (from offset 0), as the node's applier hands them over."""
    files = LogFiles.open(str(data_dir))
    assert files.log_start() == 0
    batches = [
        CommittedBatch(b, 0)
        for data in files.read_range(0, n)
        for b in iter_batches(data)
        if not b.is_control and b.last_offset < n
    ]
    with LmdbStateMachine(scratch, map_size=MAP) as sm:
        sm.apply(batches)
        assert sm.applied_offset == max(b.last_offset for b in batches) + 1
        return sm.items()


def restored_state(snapshot: Path, scratch: Path) -> tuple[int, list[tuple[bytes, bytes]]]:
    """What LmdbStateMachine.restore makes of a snapshot file, read as the node reads it
    when it loads a snapshot: (applied offset, pairs)."""
    found = parse_snapshot_path(snapshot)
    assert found is not None
    sid = found.snapshot_id
    summary = verify_snapshot_file(snapshot, snapshot_id=sid)
    reader = LogSnapshotReader(
        OffsetAndEpoch(sid.end_offset, sid.epoch), SnapshotReader.open_file(snapshot, sid, summary)
    )
    with LmdbStateMachine(scratch, map_size=MAP) as sm:
        try:
            sm.restore(StoreSnapshotReader(reader))
        finally:
            reader.close()
        return sm.applied_offset, sm.items()


@dataclass
class Written:
    cluster: LocalCluster
    batches: list[tuple[int, int]]  # (first, last) offsets of each produced batch
    hw: int


@pytest.fixture(scope="module")
def spark(tmp_path_factory):  # type: ignore[no-untyped-def]
    yield from spark_session(tmp_path_factory.mktemp("spark-jvm"))


@pytest.fixture(scope="module")
def written(tmp_path_factory):  # type: ignore[no-untyped-def]
    with LocalCluster(tmp_path_factory.mktemp("jobs"), 1, node_args=[*FAST, *LMDB]) as c:
        c.start()
        batches = run(_write(c.bootstrap, 1, 8))
        c.stop(1)  # a new leader epoch for the second half
        c.start_node(1)
        batches += run(_write(c.bootstrap, 2, 8))
        hw = run(wait_caught_up(c, c.node_ids))
        yield Written(c, batches, hw)


def test_the_snapshot_job_restores_to_the_lmdb_state_at_the_high_watermark(
    spark, written, tmp_path
) -> None:  # type: ignore[no-untyped-def]
    """From a running cluster, at its high watermark: verified, the last batch's epoch, and
    restore gives exactly the pairs of a state machine that applied the log up to it."""
    c = written.cluster
    out = tmp_path / "out"
    out.mkdir()
    result = build_snapshot(spark, bootstrap=c.bootstrap, out_dir=out, partition_records=PART)
    epoch = run(quorum(c)).leader_epoch
    c.stop_all()
    assert result.snapshot_id.end_offset == written.hw
    assert result.snapshot_id.epoch == epoch > 1
    assert result.path == out / result.snapshot_id.file_name
    summary = verify_snapshot_file(result.path, snapshot_id=result.snapshot_id)
    expected = applied_state(c.data_dir(1), written.hw, tmp_path / "applied")
    applied, pairs = restored_state(result.path, tmp_path / "restored")
    assert (applied, pairs) == (written.hw, expected)
    assert summary.record_count >= result.pairs == len(expected) > 0
    with LmdbStateMachine(c.data_dir(1) / "state", map_size=MAP) as node:
        assert node.items() == expected  # the node's own state machine agrees


def test_an_earlier_batch_boundary_from_the_files_is_the_state_there(
    spark, written, tmp_path
) -> None:  # type: ignore[no-untyped-def]
    c = written.cluster
    c.stop_all()
    _, last = written.batches[5]  # in the first epoch
    n = last + 1
    result = build_snapshot(spark, path=str(c.data_dir(1)), offset=n, out_dir=tmp_path)
    assert result.snapshot_id.end_offset == n and result.snapshot_id.epoch == 1
    expected = applied_state(c.data_dir(1), n, tmp_path / "applied")
    assert restored_state(result.path, tmp_path / "restored") == (n, expected)
    with pytest.raises(SparkSourceError, match=f"offset {last} is not a batch boundary"):
        build_snapshot(spark, path=str(c.data_dir(1)), offset=last, out_dir=tmp_path)
    with pytest.raises(SparkSourceError, match="is not committed"):
        build_snapshot(spark, path=str(c.data_dir(1)), offset=10**9, out_dir=tmp_path)


def test_a_log_whose_start_moved_starts_from_its_snapshot(spark, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The log start is past 0 (snapshots every 200 records): from the data directory the job
    starts from the newest snapshot at or above it, and its result equals the node's own state
    machine; from the cluster it refuses, naming the log start."""
    args = [*FAST, *LMDB, "--snapshot-min-records", "200", "--max-replication-lag-ms", "500"]
    with LocalCluster(tmp_path / "cluster", 1, node_args=args) as c:
        c.start()
        batches = run(_write(c.bootstrap, 3, 12))
        hw = run(wait_caught_up(c, c.node_ids))
        wait_for(lambda: LogFiles.open(str(c.data_dir(1))).log_start() > 0, 30, "log start > 0")
        opts = ReadOptions.parse({"bootstrap": ",".join(c.bootstrap)})
        wait_for(lambda: committed_range(opts)[0] > 0, 30, "the cluster's log start > 0")
        with pytest.raises(SparkSourceError, match="starts at offset"):
            build_snapshot(spark, bootstrap=c.bootstrap, out_dir=tmp_path)
        c.stop_all()
    data = c.data_dir(1)
    log_start = LogFiles.open(str(data)).log_start()
    assert 0 < log_start <= hw and batches[-1][1] + 1 == hw
    result = build_snapshot(spark, path=str(data), offset=hw, out_dir=tmp_path)
    assert result.base is not None and log_start <= result.base.end_offset <= hw
    with LmdbStateMachine(data / "state", map_size=MAP) as node:
        assert node.applied_offset == hw
        expected = node.items()
    assert restored_state(result.path, tmp_path / "restored") == (hw, expected)


def test_export_writes_parquet_by_offset_range_with_every_committed_record(
    spark, written, tmp_path
) -> None:  # type: ignore[no-untyped-def]
    c = written.cluster
    c.stop_all()
    out = tmp_path / "parquet"
    summary = export(
        spark,
        path=str(c.data_dir(1)),
        end_offset=written.hw,
        out=str(out),
        range_records=300,
        partition_records=PART,
    )
    table = pq.read_table(out).sort_by("offset")
    offsets = table.column("offset").to_pylist()
    produced = [o for first, last in written.batches for o in range(first, last + 1)]
    assert offsets == produced  # the control records are left out
    assert summary.records == len(produced)
    ranges = sorted(p.name for p in out.glob("offset_range=*"))
    assert ranges == sorted({f"offset_range={o // 300 * 300}" for o in produced})
    assert summary.ranges == len(ranges) and summary.files >= len(ranges)
    for d in out.glob("offset_range=*"):
        lo = int(d.name.split("=")[1])
        got = pq.read_table(d).column("offset").to_pylist()
        assert all(lo <= o < lo + 300 for o in got)
    with pytest.raises(SparkSourceError, match="exists"):
        export(spark, path=str(c.data_dir(1)), end_offset=written.hw, out=str(out))


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    root = str(Path(raftcore.__file__).resolve().parent.parent)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYSPARK")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))
    return subprocess.run(
        [sys.executable, "-m", "raftcore", "spark", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["export", "--out", "x"], "give either --bootstrap"),
        (["export", "DIR", "--bootstrap", "h:1", "--out", "x"], "not both"),
        (["snapshot", "nowhere", "--out-dir", "."], "nowhere: no such directory"),
        (["export", "DIR", "--out", "x", "--start", "5", "--end", "2"], "below --start"),
        (["export", "DIR", "--out", "x", "--command-config", "c"], "is for a running cluster"),
    ],
)
def test_bad_arguments_exit_2_with_one_line(args: list[str], message: str, tmp_path) -> None:  # type: ignore[no-untyped-def]
    args = [str(tmp_path) if a == "DIR" else a for a in args]
    done = _cli(*args, cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert message in done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_the_export_command_shows_progress_and_a_summary(spark, written, tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    """In process, on the module's session (a new JVM would cost this module half a minute)."""
    from raftcore.cli import main

    c = written.cluster
    c.stop_all()
    out = tmp_path / "cli-parquet"
    argv = ["spark", "export", str(c.data_dir(1)), "--end", str(written.hw), "--out", str(out)]
    assert main([*argv, "--partition-records", str(PART), "--progress"]) == 0
    printed = capsys.readouterr()
    produced = sum(last - first + 1 for first, last in written.batches)
    assert printed.out.startswith(f"exported {produced} records to {out}")
    assert "exporting: 100.0%" in printed.err
    assert main(argv) == 2 and f"{out} exists" in capsys.readouterr().err
    assert not spark.sparkContext._jsc.sc().isStopped()  # the command left the session be


def test_a_node_with_the_snapshot_in_its_log_directory_installs_it(
    spark, written, tmp_path
) -> None:  # type: ignore[no-untyped-def]
    """A node whose log and state are gone, with only the job's snapshot in ``log/``, starts
    from it: its log starts at the snapshot's end, its state machine holds the snapshot.
    Last in the module: it replaces the log the other tests read."""
    c = written.cluster
    c.stop_all()
    data = c.data_dir(1)
    result = build_snapshot(spark, path=str(data), offset=written.hw, out_dir=tmp_path)
    expected = applied_state(data, written.hw, tmp_path / "applied")
    shutil.rmtree(data / "state")
    shutil.rmtree(data / "log")
    (data / "log").mkdir()
    shutil.copy(result.path, data / "log" / result.path.name)
    c.start_node(1)
    # A new leader has no high watermark (-1) until it commits in its own epoch (KIP-595): wait
    # for its LeaderChange record, after the snapshot, rather than read the first answer.
    wait_for(lambda: run(quorum(c)).high_watermark > written.hw, 30, "a high watermark past it")
    c.stop_all()
    assert LogFiles.open(str(data)).log_start() == written.hw
    with LmdbStateMachine(data / "state", map_size=MAP) as node:
        assert (node.applied_offset, node.items()) == (written.hw, expected)


def test_export_reads_a_mutual_tls_cluster_with_the_command_config(spark, tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    """issue 12: --command-config (security.protocol=SSL, a client certificate) reaches the
    source's options on the driver and on the executors."""
    from raftcore.cli import main
    from raftcore.security.certs import make_certs

    tls = make_certs(tmp_path / "tls", [1], clients=["spark"])
    config = tmp_path / "client.properties"
    cert, key = tls.clients["spark"]
    config.write_text(
        f"security.protocol=SSL\nssl.ca.location={tls.ca}\n"
        f"ssl.certificate.location={cert}\nssl.key.location={key}\n"
    )
    with LocalCluster(tmp_path / "cluster", 1, node_args=FAST, tls_dir=tls.directory) as c:
        c.start()

        async def produce() -> None:
            async with Producer(c.bootstrap, security=c.client_security("spark")) as p:
                await p.send([(b"k%d" % i, b"v") for i in range(10)])

        run(produce())
        out = tmp_path / "tls-parquet"
        boot = ",".join(c.bootstrap)
        argv = ["spark", "export", "--bootstrap", boot, "--out", str(out)]
        assert main([*argv, "--command-config", str(config)]) == 0
        assert capsys.readouterr().out.startswith(f"exported 10 records to {out}")
