"""The raftcore command line: dump-log, verify-log and demo (read-only tools never modify a
log directory)."""

import hashlib
import subprocess
import sys
from pathlib import Path

import pytest
from cluster_helpers import formatted

from raftcore.cli import main
from raftcore.log import SegmentedLog
from raftcore.records import ControlRecordType, control_record_key

pytestmark = pytest.mark.slow


def make_log(path):
    with SegmentedLog.open(path, segment_bytes=2048) as log:
        log.append_as_leader(
            [(control_record_key(ControlRecordType.LEADER_CHANGE), b"")], 1, control=True
        )
        for i in range(30):
            log.append_as_leader(
                [(b"k%d" % i, b"value-%d" % i)] * 3,
                1 + i // 10,
                compression=("none", "zstd")[i % 2],
            )


def fingerprint(path):
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(path.iterdir())}


def test_dump_log_prints_one_line_per_batch_with_its_fields(tmp_path, capsys):
    make_log(tmp_path)
    assert main(["dump-log", str(tmp_path)]) == 0
    lines = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("baseOffset")]
    assert len(lines) == 31
    assert "controlType: LEADER_CHANGE" in lines[0] and "isControl: true" in lines[0]
    assert "baseOffset: 1 lastOffset: 3 count: 3 epoch: 1" in lines[1]
    assert "compression: zstd" in lines[2] and "isValid: true" in lines[2]


def test_dump_log_with_records_prints_every_record(tmp_path, capsys):
    make_log(tmp_path)
    main(["dump-log", str(tmp_path), "--records"])
    out = capsys.readouterr().out
    assert out.count("| offset:") == 91
    assert "| offset: 4 " in out and "key: b'k1'" in out


def test_dump_log_reports_a_corrupt_batch_and_goes_on(tmp_path, capsys):
    make_log(tmp_path)
    seg = sorted(tmp_path.glob("*.log"))[0]
    data = bytearray(seg.read_bytes())
    data[100] ^= 0xFF
    seg.write_bytes(bytes(data))
    main(["dump-log", str(tmp_path)])
    out = capsys.readouterr().out
    assert "isValid: false" in out


def test_verify_log_accepts_a_sound_log_and_changes_nothing(tmp_path, capsys):
    make_log(tmp_path)
    before = fingerprint(tmp_path)
    assert main(["verify-log", str(tmp_path)]) == 0
    assert "OK:" in capsys.readouterr().out
    assert fingerprint(tmp_path) == before


def test_verify_log_exits_1_naming_the_file_and_position(tmp_path, capsys):
    make_log(tmp_path)
    seg = sorted(tmp_path.glob("*.log"))[1]
    data = bytearray(seg.read_bytes())
    data[-3] ^= 0x01
    seg.write_bytes(bytes(data))
    before = fingerprint(tmp_path)
    assert main(["verify-log", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert "CORRUPT" in out and seg.name in out and "CRC" in out
    assert out.count("byte position") == 1, out  # named once, not again in the reason
    assert fingerprint(tmp_path) == before


def test_a_missing_directory_is_a_clear_error(tmp_path, capsys):
    assert main(["verify-log", str(tmp_path / "nope")]) == 1
    assert "not a directory" in capsys.readouterr().err


def test_the_storage_demo_builds_tears_recovers_and_verifies_a_log(tmp_path):
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "raftcore.cli",
            "storage-demo",
            "--dir",
            str(tmp_path / "demo"),
            "--records",
            "6000",
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    assert "verify-log: OK" in result.stdout
    assert "recovered: end offset" in result.stdout


def test_the_cluster_demo_survives_a_leader_kill_and_checks_every_record(tmp_path):
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "raftcore",
            "demo",
            "--dir",
            str(tmp_path / "demo"),
            "--records",
            "20000",
            "--batch",
            "500",
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=180,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SIGKILL node" in result.stdout
    assert "records acknowledged:     20,000 of 20,000" in result.stdout
    assert "every acknowledged record exactly once, in order, on all three nodes" in result.stdout


def _node_args(tmp_path, *extra):
    if not (tmp_path / "n1").exists():
        formatted(tmp_path / "n1")
    return [
        "node",
        "--id=1",
        "--voters=1@127.0.0.1:19091",
        f"--data-dir={tmp_path / 'n1'}",
        "--cluster-id=c",
        *extra,
    ]


def test_node_snapshot_flags_reach_the_quorum_config(tmp_path, monkeypatch):
    import raftcore.node.runner

    seen = {}

    def fake_run_node(config, **kw):
        seen.update(config=config, **kw)
        return 0

    monkeypatch.setattr(raftcore.node.runner, "run_node", fake_run_node)
    assert main(_node_args(tmp_path)) == 0
    assert not seen["config"].quorum.snapshots_enabled  # off unless asked
    assert seen["state_machine"] == "none"
    argv = _node_args(
        tmp_path,
        "--state-machine=lmdb",
        "--snapshot-min-records=5000",
        "--snapshot-min-bytes=1048576",
        "--snapshot-interval-ms=60000",
        "--max-replication-lag-ms=1500",
    )
    assert main(argv) == 0
    quorum = seen["config"].quorum
    assert (quorum.snapshot_min_records, quorum.snapshot_min_bytes) == (5000, 1 << 20)
    assert (quorum.snapshot_interval_ms, quorum.max_replication_lag_ms) == (60000, 1500)
    assert seen["state_machine"] == "lmdb"


def test_node_retention_flags_reach_the_node_config_with_kafkas_names(tmp_path, monkeypatch):
    import raftcore.node.runner

    seen = {}
    monkeypatch.setattr(
        raftcore.node.runner, "run_node", lambda config, **kw: seen.update(config=config) or 0
    )
    assert main(_node_args(tmp_path)) == 0
    assert not seen["config"].retention.enabled  # the log is kept whole unless asked
    assert not seen["config"].quorum.snapshots_on_request  # and no DeleteRecords either
    argv = _node_args(
        tmp_path,
        "--retention-ms=604800000",
        "--retention-bytes=1073741824",
        "--segment-ms=3600000",
        "--log-retention-check-interval-ms=1000",
    )
    assert main(argv) == 0
    r = seen["config"].retention
    assert (r.retention_ms, r.retention_bytes, r.segment_ms) == (604_800_000, 1 << 30, 3_600_000)
    assert r.check_interval_ms == 1000
    assert seen["config"].quorum.snapshots_on_request  # the log start may move


def test_node_retention_of_zero_is_a_one_line_error(tmp_path, capsys):
    with pytest.raises(SystemExit) as exited:
        main(_node_args(tmp_path, "--retention-bytes=0"))
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "--retention-bytes" in err and "-1 (off) or >= 1" in err


def test_node_snapshots_without_a_state_machine_are_a_clear_error(tmp_path, capsys):
    assert main(_node_args(tmp_path, "--snapshot-min-records=10")) == 2
    assert "--state-machine lmdb" in capsys.readouterr().err


def test_produce_says_when_its_offset_span_holds_other_records():
    """After a failover the span of a run's offsets holds the new leader's LeaderChange
    record: '300000 records at offsets 251005..551005' read as 300,001. The line says how many
    records in the span are not the run's; a run alone in its span says nothing more."""
    from raftcore.cli.app import produced_line

    line = produced_line(300_000, 251_005, 551_005, 2.0)
    assert line.startswith(
        "produced 300000 records at offsets 251005..551005, 1 other record between them ("
    )
    assert produced_line(3, 0, 2, 1.0) == "produced 3 records at offsets 0..2 (3 records/s)"


# ---- the log tools on a live log (issue 24) ----------------------------------------------------


def test_the_log_tools_warn_that_a_live_log_may_change_while_read(tmp_path, capsys):
    """A node running on the directory holds its log's .lock: dump-log and verify-log read
    on, and say on stderr that the figures may move (they said nothing)."""
    import os

    make_log(tmp_path / "log")
    with SegmentedLog.open(tmp_path / "log", segment_bytes=2048):  # as a running node does
        for command in ("verify-log", "dump-log"):
            assert main([command, str(tmp_path)]) == 0
            captured = capsys.readouterr()
            assert captured.err.splitlines() == [
                f"raftcore {command}: warning: the log is live (node running, pid "
                f"{os.getpid()}): figures may change while read"
            ]
            assert "baseOffset" in captured.out or "OK:" in captured.out
    for command in ("verify-log", "dump-log"):  # closed: no warning
        assert main([command, str(tmp_path)]) == 0
        assert capsys.readouterr().err == ""


# ---- consume stops at the high watermark; --follow waits (issue 24) ------------------------------


def _consume_argv(bootstrap, *args):
    return [sys.executable, "-m", "raftcore", "consume", "--bootstrap", bootstrap, *args]


def _env():
    import os

    import raftcore

    return {**os.environ, "PYTHONPATH": str(Path(raftcore.__file__).parent.parent)}


def _consume(bootstrap, *args, timeout=30):
    return subprocess.run(
        _consume_argv(bootstrap, *args),
        env=_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def test_consume_stops_at_the_high_watermark_saying_how_many_and_follows_with_follow(tmp_path):
    """`consume --max 10` on a log of 5 records waited forever (and with no --max too);
    now it stops at the high watermark, as kcat -e does, and --follow waits for more."""
    import asyncio
    import time

    from raftcore.client import Producer
    from raftcore.node.local_cluster import LocalCluster

    async def write(bootstrap, values):
        async with Producer(bootstrap) as producer:
            await producer.send([(None, v.encode()) for v in values])

    with LocalCluster(tmp_path / "cluster", 1) as cluster:
        cluster.start()
        boot = cluster.endpoint(1)
        asyncio.run(asyncio.wait_for(write(cluster.bootstrap, ["a", "b", "c", "d", "e"]), 30))
        for extra in ([], ["--max", "10"]):
            started = time.monotonic()
            done = _consume(boot, *extra)
            assert done.returncode == 0, done.stderr
            assert done.stdout.splitlines() == ["a", "b", "c", "d", "e"]
            last = done.stderr.strip().splitlines()[-1]
            assert last.startswith("consumed 5 records, up to the high watermark (offset ")
            assert time.monotonic() - started < 10
        done = _consume(boot, "--max", "2")
        assert done.stdout.splitlines() == ["a", "b"]
        assert done.stderr.strip().splitlines()[-1] == "consumed 2 records"
        done = _consume(boot, "--from", "latest")
        assert done.stdout == "" and "consumed 0 records, up to the high" in done.stderr

        # --follow: what is committed after it started, too, until --max
        follower = subprocess.Popen(
            _consume_argv(boot, "--follow", "--max", "7"),
            env=_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        try:
            assert follower.stdout is not None
            assert [follower.stdout.readline() for _ in range(5)] == [f"{v}\n" for v in "abcde"]
            asyncio.run(asyncio.wait_for(write(cluster.bootstrap, ["f", "g"]), 30))
            out, _ = follower.communicate(timeout=30)
            assert out.splitlines() == ["f", "g"] and follower.returncode == 0
        finally:
            if follower.poll() is None:
                follower.kill()
                follower.wait(10)


def _timeout_help(command):
    import argparse

    from raftcore.cli import build_parser

    (sub,) = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    (action,) = [a for a in sub.choices[command]._actions if "--timeout-ms" in a.option_strings]
    return action.help


def test_the_timeout_help_of_consume_and_describe_quorum_describes_their_own_waits():
    """Both once described produce's: a record's verdict, what was not written."""
    for command in ("consume", "describe-quorum"):
        text = _timeout_help(command)
        assert "verdict" not in text and "written" not in text and "produce" not in text, text
    assert "serve a fetch" in _timeout_help("consume")
    assert "the leader's answer" in _timeout_help("describe-quorum")
    assert "verdict" in _timeout_help("produce")
