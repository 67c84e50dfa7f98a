"""Disks that fail under node processes (docs/cluster.md, "When a disk fails").

- A leader whose disk is full resigns at the first append its log refuses: a voter that can
  write leads within the election timeout, the refused writes are answered
  NOT_LEADER_OR_FOLLOWER (the producer goes on at the new leader, no traceback, no closed
  connection), no acknowledged record is lost; the old leader exits at its first write as a
  follower and, given room again, rejoins.
- A follower whose disk is full exits, non-zero, within a second of the write that failed,
  with one CRITICAL line naming the cause.
- A committed batch that fails its CRC check when a restarted node's listener replays it is
  not fatal (protocol-aware recovery): the node fetches the leader's copy, writes it in place
  and goes on.

Each node's data directory is a small tmpfs the test mounts (root only; the test skips,
saying so, where it cannot mount) and always unmounts. Every process is ended by its pid
(LocalCluster.close); every wait has a deadline.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import errno
import os
import re
import shutil
import subprocess
import threading
import time
from pathlib import Path

import pytest
from cluster_helpers import FAST, consume_all, key, produce, quorum, run, wait_caught_up, wait_for

from raftcore.client import Producer
from raftcore.node.local_cluster import LocalCluster
from raftcore.records import iter_batches

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

# The hand-over test's election timeout: the rule is relative (a successor within half of
# it), and at 500 ms a CI machine's scheduling alone took half (478 ms once, with five groups
# per node); at 2 s the bug it guards against (a successor only after a whole election
# timeout) still fails it by a second. The simulation checks the rule itself
# (raftcore.sim.handover).
ELECTION_TIMEOUT_S = 2.0
HANDOVER_ARGS = ["--election-timeout-ms", "2000", "--fetch-timeout-ms", "4000"]
EXIT_WITHIN_S = 1.0
EXIT_FAILED = 1


# ---- small disks --------------------------------------------------------------------------------


@contextlib.contextmanager
def small_disks(paths: list[Path], size: str = "8m"):  # type: ignore[no-untyped-def]
    """A tmpfs of ``size`` mounted at each of ``paths``, unmounted on the way out whatever
    happens (the processes using them must be gone by then)."""
    mounted: list[Path] = []
    try:
        for path in paths:
            path.mkdir(parents=True, exist_ok=True)
            done = subprocess.run(
                ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                capture_output=True,
                text=True,
                check=False,
            )
            if done.returncode != 0:
                pytest.skip(f"cannot mount a tmpfs at {path}: {done.stderr.strip() or 'not root'}")
            mounted.append(path)
        yield
    finally:
        for path in reversed(mounted):
            if subprocess.run(["umount", str(path)], check=False).returncode != 0:
                subprocess.run(["umount", "-l", str(path)], check=False)


def fill(directory: Path) -> Path:
    """Write a file into ``directory`` until its file system is full; the file's path."""
    path = directory / "filler"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        for size in (1 << 20, 1 << 12, 1):
            chunk = b"\0" * size
            while True:
                try:
                    os.write(fd, chunk)
                except OSError as exc:
                    if exc.errno != errno.ENOSPC:
                        raise
                    break
    finally:
        os.close(fd)
    return path


# ---- node logs and exits ------------------------------------------------------------------------

_STAMPED = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) ([A-Z]+) (.*)$")


def log_lines(cluster: LocalCluster, node_id: int, since: int = 0) -> list[tuple[float, str, str]]:
    """(time, level, text) of each line the node logged, from byte ``since`` of its log file."""
    with open(cluster.log_file(node_id), "rb") as f:
        f.seek(since)
        text = f.read().decode(errors="replace")
    found = []
    for line in text.splitlines():
        m = _STAMPED.match(line)
        if m:
            stamp = datetime.datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
            found.append((stamp, m.group(2), m.group(3)))
    return found


def log_size(cluster: LocalCluster, node_id: int) -> int:
    try:
        return cluster.log_file(node_id).stat().st_size
    except FileNotFoundError:
        return 0


class ExitWatch:
    """The time a process exits, seen by a thread that waits for it (no polling delay)."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self.proc = proc
        self.exited_at: float | None = None
        self._thread = threading.Thread(target=self._wait, daemon=True)
        self._thread.start()

    def _wait(self) -> None:
        self.proc.wait()
        self.exited_at = time.time()

    def wait(self, timeout_s: float, what: str) -> int:
        self._thread.join(timeout_s)
        if self.exited_at is None:
            raise AssertionError(f"{what}: the process (pid {self.proc.pid}) is still running")
        return self.proc.returncode


def exited_after_one_critical_line(
    cluster: LocalCluster, node_id: int, watch: ExitWatch, since: int
) -> tuple[str, float]:
    """The node's one CRITICAL line (after byte ``since`` of its log) and how long after it
    the process exited."""
    criticals = [
        (t, text) for t, level, text in log_lines(cluster, node_id, since) if level == "CRITICAL"
    ]
    assert len(criticals) == 1, cluster.log_tail(node_id, 60)
    logged_at, text = criticals[0]
    assert watch.exited_at is not None
    return text, watch.exited_at - logged_at


def all_gone(cluster: LocalCluster) -> None:
    for pid in cluster.started_pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


# ---- a full disk on the leader ------------------------------------------------------------------


def test_a_leader_whose_disk_is_full_resigns_and_another_voter_leads_within_the_election_timeout(
    tmp_path,
):
    directory = tmp_path / "cluster"
    dirs = [directory / f"node-{i}" for i in (1, 2, 3)]
    with small_disks(dirs), LocalCluster(directory, 3, node_args=HANDOVER_ARGS) as cluster:
        for node_id in cluster.node_ids:  # each a new (mounted) disk
            cluster.format(node_id)
        cluster.start()
        run(produce(cluster.bootstrap, 0, 200))
        before = run(quorum(cluster))
        old = before.leader_id
        watch = ExitWatch(cluster.procs[old])
        since = {i: log_size(cluster, i) for i in (1, 2, 3)}
        filler = fill(cluster.data_dir(old))

        async def writes_go_on():
            writing = asyncio.ensure_future(produce(cluster.bootstrap, 200, 300))
            deadline = time.monotonic() + 20
            while True:  # a new leader, asked of the nodes that can answer
                with contextlib.suppress(Exception):
                    info = await quorum(cluster, timeout_s=2)
                    if info.leader_id != old and info.leader_epoch > before.leader_epoch:
                        break
                if time.monotonic() > deadline:
                    writing.cancel()
                    raise AssertionError(f"node {old} with a full disk still leads after 20 s")
                await asyncio.sleep(0.05)
            return info, await asyncio.wait_for(writing, 60)

        after, offsets = run(writes_go_on(), timeout_s=90)
        assert len(offsets) == 300  # every write after the disk filled was acknowledged
        new = after.leader_id
        # The old leader said why and resigned; the new one led soon after.
        [(refused_at, _, refused)] = [
            (t, lv, x)
            for t, lv, x in log_lines(cluster, old, since[old])
            if lv == "ERROR" and "the log cannot be written" in x
        ]
        assert "No space left on device" in refused, refused
        elected_at = min(
            t
            for t, _, x in log_lines(cluster, new, since[new])
            if re.search(rf"leader of epoch {after.leader_epoch}\b", x)
        )
        failover_s = elected_at - refused_at
        print(f"full disk on leader {old}: node {new} leads {failover_s * 1000:.0f} ms after")
        # well under an election timeout: the first successor stands at once, a follower that
        # has not yet heard the EndQuorumEpoch is asked again, and no fetch answer the old
        # leader gave before resigning puts the election off (docs/raft.md); 30-76 ms in five
        # runs on two shared cores, 478 ms once in CI
        assert 0 <= failover_s < ELECTION_TIMEOUT_S / 2
        # No traceback and no closed connection for the refused produce.
        assert "Traceback" not in cluster.log_file(old).read_text(errors="replace")
        # The old leader cannot follow on a full disk (its quorum-state, its records): it exits.
        status = watch.wait(10, f"node {old}, a resigned leader that cannot write")
        assert status == EXIT_FAILED
        text, exit_s = exited_after_one_critical_line(cluster, old, watch, since[old])
        print(f"the old leader {old} exited {exit_s * 1000:.0f} ms after: {text}")
        assert "No space left on device" in text and "cannot go on" in text, text
        assert exit_s < EXIT_WITHIN_S, exit_s
        # Room again: it comes back (as its supervisor would start it) and rejoins as a follower.
        filler.unlink()
        cluster.start_node(old)
        run(wait_caught_up(cluster, [1, 2, 3]))
        keys = run(consume_all(cluster.bootstrap, 500))
        assert keys == [key(n) for n in range(500)]  # no acknowledged record lost, in order
        cluster.close()
        all_gone(cluster)


# ---- a full disk on a follower ------------------------------------------------------------------


def test_a_follower_whose_disk_is_full_exits_non_zero_within_a_second_with_one_critical_line(
    tmp_path,
):
    directory = tmp_path / "cluster"
    dirs = [directory / f"node-{i}" for i in (1, 2, 3)]
    with small_disks(dirs), LocalCluster(directory, 3, node_args=FAST) as cluster:
        for node_id in cluster.node_ids:  # each a new (mounted) disk
            cluster.format(node_id)
        cluster.start()
        run(produce(cluster.bootstrap, 0, 100))
        leader = run(quorum(cluster)).leader_id
        follower = next(i for i in (1, 2, 3) if i != leader)
        watch = ExitWatch(cluster.procs[follower])
        since = log_size(cluster, follower)
        filler = fill(cluster.data_dir(follower))
        run(produce(cluster.bootstrap, 100, 400))  # two voters of three acknowledge these
        status = watch.wait(20, f"follower {follower} with a full disk")
        assert status == EXIT_FAILED
        text, exit_s = exited_after_one_critical_line(cluster, follower, watch, since)
        print(f"full disk on follower {follower}: exited {exit_s * 1000:.0f} ms after: {text}")
        assert f"[node {follower}] cannot go on" in text
        assert "No space left on device" in text and str(cluster.data_dir(follower)) in text
        assert exit_s < EXIT_WITHIN_S, exit_s
        # Room again: restarted, it catches up and holds every record.
        filler.unlink()
        cluster.start_node(follower)
        run(wait_caught_up(cluster, [1, 2, 3]))
        assert run(consume_all(cluster.bootstrap, 500)) == [key(n) for n in range(500)]
        cluster.close()
        all_gone(cluster)


# ---- a damaged batch found at replay ------------------------------------------------------------


def flip_a_byte_in_a_sealed_segment(log_dir: Path) -> tuple[Path, int]:
    """Flip the last byte of the first data batch in a sealed segment: its CRC no longer
    matches, its framing is intact. (the segment file, the batch's offset)"""
    segments = sorted(log_dir.glob("*.log"))
    for sealed in segments[:-1]:  # the last one is the active segment
        data = bytearray(sealed.read_bytes())
        batch = next((b for b in iter_batches(bytes(data)) if not b.is_control), None)
        if batch is not None:
            data[batch.position + batch.size_in_bytes - 1] ^= 0x01
            sealed.write_bytes(bytes(data))
            return sealed, batch.base_offset
    raise AssertionError(f"no data batch in a sealed segment of {log_dir}: {segments}")


async def produce_one_batch_at_a_time(bootstrap: list[str], first: int, count: int, size: int):  # type: ignore[no-untyped-def]
    async with Producer(bootstrap, request_timeout_ms=5000) as producer:
        for start in range(first, first + count, size):
            await producer.send([(key(n), b"v" * 20) for n in range(start, start + size)])


def test_a_batch_that_fails_its_crc_at_replay_is_repaired_from_the_leader_and_the_node_goes_on(
    tmp_path,
):
    """The node restarts with a state machine rebuilt from the log (its directory removed),
    so its listener replays every committed batch and meets the damaged one (its scrubber,
    which checks the sealed segments once the node starts, may find it first). The batch is
    not served; the node fetches the leader's copy, writes it in place, byte for byte, and
    goes on: no exit, no CRITICAL line."""
    args = [*FAST, "--state-machine", "lmdb", "--segment-bytes", "4096"]
    with LocalCluster(tmp_path / "cluster", 3, node_args=args) as cluster:
        cluster.start()
        run(produce_one_batch_at_a_time(cluster.bootstrap, 0, 300, 20))  # many segments
        run(wait_caught_up(cluster, [1, 2, 3]))
        victim = 3
        assert cluster.stop(victim) == 0
        log_dir = cluster.data_dir(victim) / "log"
        intact = {path: path.read_bytes() for path in log_dir.glob("*.log")}
        segment, offset = flip_a_byte_in_a_sealed_segment(log_dir)
        shutil.rmtree(cluster.data_dir(victim) / "state")
        since = log_size(cluster, victim)
        proc = cluster.start_node(victim)

        def repaired() -> bool:
            repair = f"repaired the damaged batch {offset}.."
            return any(repair in text for _, _, text in log_lines(cluster, victim, since))

        wait_for(repaired, 30, f"node {victim} repairing its damaged batch at offset {offset}")
        lines = log_lines(cluster, victim, since)
        found = [t for _, level, t in lines if level == "ERROR" and f"at offset {offset}" in t]
        print(f"CRC error at replay: {found}")
        assert found, cluster.log_tail(victim, 60)
        assert not [t for _, level, t in lines if level == "CRITICAL"], cluster.log_tail(victim)
        assert proc.poll() is None
        run(wait_caught_up(cluster, [1, 2, 3]))
        # The node goes on, and every record is there.
        run(produce(cluster.bootstrap, 300, 50, batch=10))
        assert run(consume_all(cluster.bootstrap, 350)) == [key(n) for n in range(350)]
        assert cluster.stop(victim) == 0
        assert segment.read_bytes() == intact[segment]  # the leader's copy: the same bytes
        cluster.close()
        all_gone(cluster)


def flip_a_byte_in_a_control_batch(log_dir: Path) -> tuple[Path, int]:
    """Flip the last byte of the first control batch (LeaderChange, KRaftVersion, Voters) in a
    sealed segment: its CRC no longer matches. (the segment file, the batch's offset)"""
    for sealed in sorted(log_dir.glob("*.log"))[:-1]:
        data = bytearray(sealed.read_bytes())
        batch = next((b for b in iter_batches(bytes(data)) if b.is_control), None)
        if batch is not None:
            data[batch.position + batch.size_in_bytes - 1] ^= 0x01
            sealed.write_bytes(bytes(data))
            return sealed, batch.base_offset
    raise AssertionError(f"no control batch in a sealed segment of {log_dir}")


def test_a_control_batch_that_fails_its_crc_at_replay_stops_the_node_with_one_critical_line(
    tmp_path,
):
    """The voter set is read from the control batches when the node starts; one that fails
    its CRC cannot be read, and counting votes by a guess could elect two leaders. The node
    refuses to start: exit 1 as soon as its log is open, with one line naming the way out (a
    new replica on an empty directory), no traceback; the others go on."""
    args = [*FAST, "--segment-bytes", "4096"]
    with LocalCluster(tmp_path / "cluster", 3, node_args=args) as cluster:
        cluster.start()
        run(produce_one_batch_at_a_time(cluster.bootstrap, 0, 300, 20))  # many segments
        run(wait_caught_up(cluster, [1, 2, 3]))
        victim = next(i for i in (1, 2, 3) if i != run(quorum(cluster)).leader_id)
        assert cluster.stop(victim) == 0
        _, offset = flip_a_byte_in_a_control_batch(cluster.data_dir(victim) / "log")
        since = log_size(cluster, victim)
        started = time.time()
        watch = ExitWatch(cluster.start_node(victim, wait=False))
        status = watch.wait(20, f"node {victim} with a damaged control batch at {offset}")
        assert status == EXIT_FAILED
        assert watch.exited_at is not None
        with open(cluster.log_file(victim), "rb") as f:
            f.seek(since)
            said = f.read().decode(errors="replace")
        lines = [ln for ln in said.splitlines() if "a control batch of the log is damaged" in ln]
        print(
            f"control batch {offset} damaged: exit {status} {watch.exited_at - started:.2f} s "
            f"after the start: {lines}"
        )
        assert len(lines) == 1 and "Traceback" not in said, said
        assert lines[0].startswith("raftcore node: ") and "on an empty one" in lines[0]
        run(produce(cluster.bootstrap, 300, 50, batch=10))  # the two others go on
        cluster.close()
        all_gone(cluster)
