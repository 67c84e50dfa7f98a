"""The fault harness (tests/faults) in CI: real node processes, each in its own network
namespace where the machine allows it (root, iproute2, nftables; otherwise loopback without
partitions, with the reason printed), writers using confluent-kafka and raftcore.client, a
seeded nemesis (SIGKILL, SIGSTOP, partitions), then the checks of every acknowledged write,
every replica's log and what consumers read.

CI runs short seeds; by hand, longer and more: ``python -m tests.faults --seed 1 --seeds 20
--duration 60 --nodes 5``. Every process a run starts is ended by its pid, and every namespace
and nft table removed, also when it fails (the run reports anything left as a violation).
"""

from __future__ import annotations

import os
import subprocess

import pytest
from faults.checker import NodeLog, check, merged_log
from faults.harness import RunConfig, format_result, run_once
from faults.history import History
from faults.scenarios import (
    PartitionsUnavailable,
    deposed_leader_acknowledgement,
    isolated_follower_heal_keeps_epoch,
)
from faults.state_check import NodeState, SnapshotFile

from raftcore.error_codes import Errors

pytestmark = pytest.mark.slow


def _namespaces_left() -> list[str]:
    """This process's namespaces still present (a run must remove all of its own)."""
    try:
        out = subprocess.run(
            ["ip", "netns", "list"], capture_output=True, text=True, timeout=10, check=False
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [line for line in out.split() if line.startswith(f"rcf-{os.getpid()}-")]


# ---- the seeded runs ---------------------------------------------------------------------------


# SSL: mutual TLS between the nodes (a restarted node proves itself again), the confluent-kafka
# and raftcore clients presenting a certificate; SASL_SSL: the clients log in with SCRAM over
# TLS, and the nodes run on uvloop's event loop.
SEEDED_RUNS = {
    "seed1-3nodes": {"seed": 1, "nodes": 3},
    "seed2-5nodes": {"seed": 2, "nodes": 5},
    "seed3-3nodes-no-partitions": {"seed": 3, "nodes": 3, "partitions": False},
    "seed7-3nodes-ssl": {"seed": 7, "nodes": 3, "duration_s": 15, "security": "SSL"},
    "seed7-3nodes-sasl-ssl-uvloop": {
        "seed": 7,
        "nodes": 3,
        "duration_s": 15,
        "security": "SASL_SSL",
        "event_loop": "uvloop",
    },
}


@pytest.mark.slow
@pytest.mark.timeout(240)
@pytest.mark.parametrize("run", SEEDED_RUNS.values(), ids=SEEDED_RUNS.keys())
def test_every_acknowledged_write_survives_a_seeded_nemesis(run, tmp_path):
    """Kills, pauses and partitions; the nodes must say they listened with the run's protocol on
    its event loop, so a TLS run cannot pass in plaintext or on the default loop by mistake."""
    config = RunConfig(**{"duration_s": 25, **run}, base_dir=str(tmp_path))
    if config.event_loop == "uvloop":
        pytest.importorskip("uvloop", reason="uvloop is in the test extra")
    result = run_once(config)
    report = format_result(result)
    print(report)
    assert not _namespaces_left()
    assert result.listeners == {config.security}, report
    assert result.event_loops == {config.event_loop}, report
    assert result.ok, report
    assert result.figures["acknowledged"] > 0, report


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_with_snapshots_every_acknowledged_write_is_in_every_state_machine(tmp_path):
    """KIP-630 on: the nodes take snapshots every 300 records and move their log start (a
    follower behind by more than 3 s installs a snapshot); every acknowledged value must still
    be in every replica's LMDB state, the states and applied offsets equal, every snapshot
    file sound, and the logs identical from their log starts on."""
    result = run_once(
        RunConfig(seed=5, duration_s=15, nodes=3, snapshots=300, base_dir=str(tmp_path))
    )
    report = format_result(result)
    print(report)
    assert not _namespaces_left()
    assert result.ok, report
    f = result.figures
    assert f["acknowledged"] > 0, report
    assert f["snapshots_taken"] > 0 and f["log_start_moves"] > 0, report
    assert f["log_start_min"] > 0 and f["snapshot_files"] > 0, report
    assert f["state_pairs"] >= f["acknowledged"], report


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_every_acknowledged_write_survives_the_membership_nemesis(tmp_path):
    """The voters changed while the faults run (``--membership``): a wiped voter replaced,
    grown to 5 and shrunk to 3, leadership handed over. Nothing acknowledged may be lost,
    duplicated or reordered, and the settled cluster's voter set must be the one the nemesis
    was told it made (no wiped disk's key a voter, every running node a voter)."""
    config = RunConfig(seed=1, duration_s=20, nodes=3, membership=True, base_dir=str(tmp_path))
    result = run_once(config)
    report = format_result(result)
    print(report)
    assert not _namespaces_left()
    assert result.ok, report
    assert result.figures["acknowledged"] > 0, report
    assert result.figures["membership_changes"] > 0, report


# ---- issue 9, the manual scenario --------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_a_deposed_leader_never_acknowledges_a_write_its_log_truncated(tmp_path):
    """A leader with paused followers takes an acks=all write, is paused, and is deposed; the
    new leader commits other records at the same offsets. When the old leader runs again and
    truncates (KIP-279), its answer to the waiting write is NOT_LEADER_OR_FOLLOWER (or nothing
    in time), never success with an offset that holds someone else's record."""
    out = deposed_leader_acknowledgement(tmp_path / "cluster")
    print(out.describe())
    assert not out.answered_before_pause, (
        "the scenario did not set up (the leader answered before it was paused): "
        + out.answered_before_pause
    )
    assert out.new_leader != out.old_leader and out.new_epoch > out.old_epoch, out.describe()
    assert not out.acknowledged_what_it_lost, out.describe()
    if out.error_code == Errors.NONE:
        assert out.found_at == [out.offset], out.describe()
    assert len(out.found_at) <= 1, out.describe()


# ---- pre-vote ----------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_healed_partition_of_one_follower_costs_no_election(tmp_path):
    """A follower cut off for ~5 s while the leader stays healthy: with pre-vote its failed
    elections never raise the epoch, so the heal leaves the leader and its epoch alone."""
    try:
        out = isolated_follower_heal_keeps_epoch(tmp_path / "cluster")
    except PartitionsUnavailable as exc:
        pytest.skip(f"partitions unavailable: {exc}")
    print(out.describe())
    assert not out.epoch_changed, out.describe()


# ---- the checker itself (no processes) ---------------------------------------------------------


def _history(values: dict[str, list[tuple[str, int]]]) -> History:
    """writer -> [(outcome, offset)] in sequence order."""
    h = History(0.0)
    for writer, outcomes in values.items():
        for seq, (outcome, offset) in enumerate(outcomes):
            a = h.invoke(writer, seq, session=1)
            h.complete(a, outcome, offset=offset)
    return h


def _log(node_id: int, values: list[bytes], epoch: int = 1) -> NodeLog:
    return NodeLog(
        node_id,
        len(values),
        [(o, o, epoch, 1000 + o) for o in range(len(values))],
        list(enumerate(values)),
    )


def test_the_checker_finds_each_kind_of_anomaly():
    h = _history({"w": [("ok", 0), ("ok", 1), ("ok", 2), ("info", -1), ("ok", 4), ("ok", 3)]})
    committed = [b"w:00000000", b"w:00000001", b"zz:1", b"w:00000001", b"w:00000004", b"x"]
    # w:2 acknowledged at 2 is lost (2 holds a phantom), w:1 twice, w:5 acknowledged at 3
    # before w:4 at 4 (out of order) and misplaced (3 holds w:1); node 2 diverges
    logs = {1: _log(1, committed), 2: _log(2, committed, epoch=2)}
    v = check(h, 6, logs, 1, {"consumer": [(0, b"w:00000000")]})
    assert v.figures["lost"] == 2  # w:2 and w:5
    assert v.figures["duplicated"] == 1
    assert v.figures["phantom"] == 2
    assert v.figures["out_of_order"] >= 1
    assert v.figures["divergent_nodes"] == 1
    assert v.figures["consumer_mismatch"] == 1
    assert set(v.violations) >= {
        "lost",
        "duplicated",
        "phantom",
        "out-of-order",
        "divergent",
        "consumer-mismatch",
    }


def test_the_checker_accepts_a_clean_history_with_indeterminate_writes():
    h = _history({"a": [("ok", 0), ("info", -1), ("ok", 2)], "b": [("info", -1), ("ok", 3)]})
    committed = [b"a:00000000", b"a:00000001", b"a:00000002", b"b:00000001"]
    logs = {i: _log(i, committed) for i in (1, 2, 3)}
    consumers = {"c": list(enumerate(committed))}
    v = check(h, 4, logs, 2, consumers)
    assert v.ok, v.violations
    assert v.figures["acknowledged"] == 3
    assert v.figures["indeterminate"] == 2
    assert v.figures["indeterminate_committed"] == 1


def test_the_checker_reports_a_log_that_stops_below_the_high_watermark():
    h = _history({"a": [("ok", 0), ("ok", 1)]})
    full = [b"a:00000000", b"a:00000001"]
    logs = {1: _log(1, full), 2: _log(2, full[:1])}
    v = check(h, 2, logs, 1, {})
    assert "divergent" in v.violations
    assert "node 2" in v.violations["divergent"][0]


# ---- the checker in snapshot mode -----------------------------------------------------------


def _started_log(node_id: int, values: list[bytes], start: int) -> NodeLog:
    """A log whose records below ``start`` are gone (KIP-630)."""
    full = _log(node_id, values)
    return NodeLog(
        node_id,
        full.end_offset,
        [b for b in full.batches if b[0] >= start],
        [r for r in full.records if r[0] >= start],
        start,
    )


def _state(node_id: int, values: list[bytes], snapshots=()) -> NodeState:
    return NodeState(node_id, len(values), {v: v for v in values}, list(snapshots))


def test_the_checker_reads_below_the_leaders_log_start_in_another_replica():
    values = [b"a:%08d" % i for i in range(6)]
    logs = {1: _started_log(1, values, 4), 2: _started_log(2, values, 2)}
    start, batches, records = merged_log(logs, 1)
    assert start == 2
    assert [b[0] for b in batches] == [2, 3, 4, 5]
    assert [o for o, _ in records] == [2, 3, 4, 5]


def test_the_checker_accepts_a_history_whose_prefix_lives_only_in_the_state_machines():
    h = _history({"a": [("ok", i) for i in range(6)]})
    values = [b"a:%08d" % i for i in range(6)]
    snap = SnapshotFile("4-1", 4, "frozen", pairs={v: v for v in values[:4]})
    logs = {1: _started_log(1, values, 4), 2: _started_log(2, values, 2)}
    logs[3] = _started_log(3, values, 4)
    states = {i: _state(i, values, [snap]) for i in (1, 2, 3)}
    # one consumer read from the leader's log start, one from before it moved (1)
    consumers = {"c": list(enumerate(values))[4:], "d": list(enumerate(values))[1:]}
    v = check(h, 6, logs, 1, consumers, states)
    assert v.ok, v.violations
    assert v.figures["checked_from"] == 2
    assert v.figures["acknowledged_below_log_start"] == 2
    assert v.figures["state_pairs"] == 6


def test_the_checker_finds_each_kind_of_state_anomaly():
    h = _history({"a": [("ok", i) for i in range(6)] + [("fail", -1)]})
    values = [b"a:%08d" % i for i in range(6)]
    logs = {i: _started_log(i, values, 4) for i in (1, 2, 3)}
    good = {v: v for v in values[:4]}
    states = {
        # node 1 lost a:1 (only below the log start) and holds a:6, which failed
        1: NodeState(1, 6, {v: v for v in [*values, b"a:00000006"] if v != values[1]}),
        # one snapshot damaged, one lacking a:3 acknowledged below its end offset
        2: _state(
            2,
            values,
            [
                SnapshotFile("4-1", 4, "frozen", error="bad CRC at byte 70"),
                SnapshotFile("5-1", 5, "frozen", pairs=good),
            ],
        ),
        # node 3 stopped applying before a:5, committed above the log start
        3: NodeState(3, 5, {v: v for v in values if v != values[5]}),
    }
    v = check(h, 6, logs, 1, {"c": [(0, values[2])]}, states)
    assert v.figures["state_lost"] == 2  # a:1 on node 1, a:5 on node 3
    assert v.figures["state_missing_committed"] == 1  # a:5 on node 3
    assert v.figures["state_phantom"] == 1  # a:6 failed yet applied
    assert v.figures["state_divergent_nodes"] == 2  # node 3's applied offset, node 1's pairs
    assert v.figures["corrupt_snapshots"] == 1
    assert v.figures["snapshot_state_wrong"] == 1
    assert v.figures["consumer_mismatch"] == 1  # a:2 read at offset 0
    assert set(v.violations) >= {
        "state-lost",
        "state-missing-committed",
        "state-phantom",
        "state-divergent",
        "corrupt-snapshot",
        "snapshot-state",
        "consumer-mismatch",
    }
