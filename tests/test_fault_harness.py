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
from faults.checker import NodeLog, check
from faults.harness import RunConfig, format_result, run_once
from faults.history import History
from faults.scenarios import (
    PartitionsUnavailable,
    deposed_leader_acknowledgement,
    isolated_follower_heal_keeps_epoch,
)

from raftcore.error_codes import Errors


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


@pytest.mark.slow
@pytest.mark.timeout(240)
@pytest.mark.parametrize(
    ("seed", "nodes", "partitions"),
    [(1, 3, True), (2, 5, True), (3, 3, False)],
    ids=["seed1-3nodes", "seed2-5nodes", "seed3-3nodes-no-partitions"],
)
def test_every_acknowledged_write_survives_a_seeded_nemesis(seed, nodes, partitions, tmp_path):
    result = run_once(
        RunConfig(
            seed=seed,
            duration_s=25,
            nodes=nodes,
            partitions=partitions,
            base_dir=str(tmp_path),
        )
    )
    report = format_result(result)
    print(report)
    assert not _namespaces_left()
    assert result.ok, report
    assert result.figures["acknowledged"] > 0, report


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
