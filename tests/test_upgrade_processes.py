"""Upgrading in place from the release before dynamic voters (KIP-853's kraft.version 0 -> 1),
with real node processes of both releases (tests/previous_release.py builds the previous one).

A cluster started with a static ``--voters`` by the previous release is upgraded one node at a
time while a writer writes with acks=all: each node is stopped (SIGTERM) and started again by
this release on the same data directory with the same command line. The releases work together
while both run: the previous release's leader leads this release's followers, this release's
leader a follower of the previous one, and with one node down the two others, one of each
release, elect one of them (each must vote for the other's candidate); a node of this release
can go back to the previous release on its data directory and forward again. The voter set
stays static (kraft.version 0) as long as one voter runs the previous release; once the last
one runs this release the leader writes the voter set into the log by itself (kraft.version 1,
every voter with its directory id) and the voters can change. And a data directory the
previous release wrote -- log, snapshots, LMDB state, quorum-state of data_version 0,
meta.properties without a directory id -- opens with this release, which reads back what was
written.

Every process a test starts is ended by its pid (LocalCluster.close); each test bounds its time.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from cluster_helpers import (
    FAST,
    LEADER_CHANGE,
    Writer,
    check_acknowledged,
    consume_all,
    key,
    produce,
    run,
    wait_for,
)
from previous_release import PreviousRelease, Unavailable, build_previous_release

from raftcore.client import Consumer, describe_quorum
from raftcore.client.admin import QuorumInfo
from raftcore.error_codes import error_name
from raftcore.errors import RaftcoreError
from raftcore.node.data_dir import read_directory_id
from raftcore.node.local_cluster import LocalCluster
from raftcore.raft.voters import directory_id_text
from raftcore.statemachine import LmdbStateMachine

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]  # the build of the previous release

PREVIOUS, THIS, DOWN = "previous", "this", "down"
MAP_SIZE = 64 << 20  # the LMDB state machines
UPDATE_PERIOD_S = 1.0  # FAST's fetch timeout: a voter of this release tells its leader that often


@pytest.fixture(scope="session")
def previous_release(tmp_path_factory, request) -> PreviousRelease:
    """The previous release, built once per session (about a minute on two cores)."""
    try:
        release = build_previous_release(tmp_path_factory.mktemp("previous-release"))
    except Unavailable as exc:
        pytest.skip(str(exc))
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        how = (
            f"built in {release.build_seconds:.0f} s"
            if release.build_seconds
            else "built by an earlier session"
        )
        reporter.write_line(
            f"previous release {release.commit[:7]} {how}, in {release.site} "
            "(RAFTCORE_PREVIOUS_RELEASE_SITE takes it)"
        )
    return release


def cluster_of_the_previous_release(
    directory, release: PreviousRelease, node_args: list[str]
) -> tuple[LocalCluster, dict[int, str]]:
    """Three static voters (``--voters``), each to be started by the previous release; and
    which release each node runs (what the test tells the cluster)."""
    cluster = LocalCluster(directory, 3, node_args=node_args)
    for node_id in cluster.node_ids:
        cluster.node_env[node_id] = release.env()
        cluster.unformatted.add(node_id)  # the previous release formats its own directory
    return cluster, dict.fromkeys(cluster.node_ids, PREVIOUS)


def restart(
    cluster: LocalCluster,
    releases: dict[int, str],
    node_id: int,
    release: PreviousRelease | None,
    meanwhile=None,  # type: ignore[no-untyped-def]
) -> float:
    """SIGTERM ``node_id`` and start it again on its data directory with its command line, by
    ``release`` (None: this one), after ``meanwhile()`` if given. Returns the wall-clock time
    (ms) from which it was down."""
    releases[node_id] = DOWN
    assert cluster.stop(node_id) == 0, cluster.log_tail(node_id)
    down_since = time.time() * 1000
    if meanwhile is not None:
        meanwhile()
    if release is None:
        cluster.node_env.pop(node_id, None)
    else:
        cluster.node_env[node_id] = release.env()
    releases[node_id] = THIS if release is None else PREVIOUS
    cluster.start_node(node_id)
    return down_since


def describe(cluster: LocalCluster) -> QuorumInfo:
    return run(describe_quorum(cluster.bootstrap, timeout_s=20), 30)


def wait_quorum(cluster: LocalCluster, predicate, what: str, timeout_s: float = 30) -> QuorumInfo:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while True:
        info = describe(cluster)
        if predicate(info):
            return info
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}: {info}")
        time.sleep(0.1)


def caught_up_since(node_id: int, since_ms: float):  # type: ignore[no-untyped-def]
    """A predicate: ``node_id`` reached the leader's log end after ``since_ms`` (wall clock)."""

    def check(info: QuorumInfo) -> bool:
        return any(
            r.replica_id == node_id and r.last_caught_up_ms >= since_ms for r in info.replicas
        )

    return check


def voters(info: QuorumInfo) -> dict[int, bytes | None]:
    return {v.replica_id: v.directory_id for v in info.voters}


def quorum_cli(cluster: LocalCluster, *args: str) -> subprocess.CompletedProcess:
    """``raftcore quorum ...`` of this release, through the nodes running now."""
    running = [
        cluster.endpoint(i) for i in [*cluster.node_ids, *cluster.joined] if cluster.alive(i)
    ]
    return subprocess.run(
        [sys.executable, "-m", "raftcore", "quorum", *args, "--bootstrap", ",".join(running)],
        cwd="/",  # never the source checkout
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )


@dataclass(frozen=True)
class Sample:
    releases: dict[int, str]  # each node's release while it was asked
    info: QuorumInfo


class QuorumWatch:
    """Asks the cluster to describe its quorum every ``interval_s`` on a thread of its own and
    keeps each answer with the release each node ran meanwhile (an answer given while a node
    changed is dropped: it could belong to either)."""

    def __init__(self, cluster: LocalCluster, releases: dict[int, str], interval_s: float = 0.2):
        self.cluster = cluster
        self.releases = releases
        self.interval_s = interval_s
        self.samples: list[Sample] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._main()), daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)
        assert not self._thread.is_alive(), "the quorum watch did not stop"

    async def _main(self) -> None:
        while not self._stop.is_set():
            before = dict(self.releases)
            try:
                info = await describe_quorum(self.cluster.bootstrap, timeout_s=3)
            except RaftcoreError:
                info = None  # no leader for a moment: the writer's errors say what it cost
            if info is not None and dict(self.releases) == before:
                self.samples.append(Sample(before, info))
            await asyncio.sleep(self.interval_s)


def node_logs(cluster: LocalCluster, node_ids: list[int]) -> dict[int, str]:
    return {i: cluster.log_file(i).read_text(errors="replace") for i in node_ids}


def _without_the_previous_release_stop_traceback(text: str, site: Path) -> str:
    """The log without the one traceback the previous release is known to print when it stops
    while serving a connection (asyncio's stream callback asks the cancelled serve() task for
    its exception: CI, 2026-11-27). Only that one, with its frames in the previous release's
    own files, is let be."""
    block = re.compile(
        # asyncio's ERROR line and its handle line, then the traceback
        r"(?:^[^\n]* ERROR asyncio: Exception in callback "
        r"StreamReaderProtocol\.connection_made[^\n]*\nhandle: [^\n]*\n)?"
        r"Traceback \(most recent call last\):\n(?: .*\n)*?"
        + r'  File "'
        + re.escape(str(site))
        + r'/raftcore/node/transport\.py", line \d+, in serve\n'
        + r"    await self\._ended\nasyncio\.exceptions\.CancelledError\n",
        re.M,
    )
    return block.sub("", text)


def test_a_static_cluster_of_the_previous_release_is_upgraded_one_node_at_a_time_under_load(
    previous_release, tmp_path
):
    """A static cluster's data directories, made by the previous release, are upgraded in
    place, one node at a time, while a writer writes with acks=all; the cluster becomes
    dynamic by itself once every voter runs this release."""
    cluster, releases = cluster_of_the_previous_release(
        tmp_path / "cluster", previous_release, FAST
    )
    watch = QuorumWatch(cluster, releases)
    writer = Writer(cluster.bootstrap)
    steps: list[tuple[str, float, int]] = []  # (what, seconds, records acknowledged meanwhile)
    logs: dict[int, str] = {}
    try:
        cluster.start()
        info = wait_quorum(cluster, lambda q: q.leader_id in releases, "a leader")
        assert info.kraft_version == -1  # the previous release does not say: it has none
        for node_id in cluster.node_ids:
            assert read_directory_id(cluster.data_dir(node_id)) is None
        watch.start()
        writer.start()
        wait_for(lambda: writer.count >= 500, 30, "the first 500 records")

        def step(what: str, node_id: int, release: PreviousRelease | None, meanwhile=None):  # type: ignore[no-untyped-def]
            started, written = time.monotonic(), writer.count
            since = restart(cluster, releases, node_id, release, meanwhile)
            wait_quorum(cluster, caught_up_since(node_id, since), f"node {node_id} to catch up")
            steps.append((what, time.monotonic() - started, writer.count - written))

        def new_leader_among(candidates: set[int]):  # type: ignore[no-untyped-def]
            return lambda: wait_quorum(
                cluster, lambda q: q.leader_id in candidates, f"one of {candidates} to lead"
            )

        first, second = sorted(i for i in cluster.node_ids if i != info.leader_id)
        last = info.leader_id

        # 1. A follower: this release follows the previous release's leader, and tells it who
        # it is every fetch timeout, in vain (the previous release has no UpdateRaftVoter).
        step(f"upgrade follower {first}", first, None)
        assert read_directory_id(cluster.data_dir(first)) is not None
        # The voters cannot change; this release's command says so at once (the previous
        # release would close the connection of a request it does not know).
        refused = quorum_cli(cluster, "remove-voter", "--id", str(second))
        assert (refused.returncode, refused.stdout) == (
            1,
            f"node {second} was not removed: UNSUPPORTED_VERSION: the leader, node {last}, runs "
            "a release without dynamic voters (it serves no UpdateRaftVoter): upgrade every "
            "voter first; nothing changed\n",
        ), refused
        time.sleep(3 * UPDATE_PERIOD_S)

        # 2. The leader restarts (no upgrade yet): the two others -- one of each release --
        # elect one of them, which takes both their votes.
        step(
            f"restart leader {last} (previous release)",
            last,
            previous_release,
            meanwhile=new_leader_among({first, second}),
        )

        # A node of this release goes back to the previous release on its data directory
        # (its quorum-state of data_version 1, its directory.id) and forward again: until the
        # last voter runs this release, an upgrade can be undone node by node.
        directory = read_directory_id(cluster.data_dir(first))

        def written_by_this_release() -> None:
            state = json.loads((cluster.data_dir(first) / "quorum-state").read_text())
            assert state["data_version"] == 1 and "currentVoters" not in state, state

        step(f"downgrade node {first}", first, previous_release, written_by_this_release)
        step(f"upgrade node {first} again", first, None)
        assert read_directory_id(cluster.data_dir(first)) == directory

        # 3. The other follower of the previous release (if it leads now, the two others -- one
        # of each release again -- elect one of them).
        step(f"upgrade node {second}", second, None, meanwhile=new_leader_among({first, last}))
        assert read_directory_id(cluster.data_dir(second)) is not None

        # 4. If the last node of the previous release leads, it restarts (no upgrade yet): a
        # node of this release takes over and leads it.
        if describe(cluster).leader_id == last:
            step(
                f"restart leader {last} (previous release)",
                last,
                previous_release,
                meanwhile=new_leader_among({first, second}),
            )
        time.sleep(3 * UPDATE_PERIOD_S)  # its followers of this release told it who they are
        info = describe(cluster)
        assert releases[info.leader_id] == THIS and info.kraft_version == 0, info
        assert sorted(voters(info)) == [1, 2, 3] and info.pending_change is None
        refused = quorum_cli(cluster, "remove-voter", "--id", str(last))
        assert refused.returncode == 1 and refused.stdout.startswith(
            f"node {last} was not removed: UNSUPPORTED_VERSION: the voter set is static "
            "(kraft.version 0) until every voter runs a release that speaks kraft.version 1"
        ), refused

        # 5. The last one: the leader moves the voter set into the log, nobody restarts.
        upgraded = time.monotonic()
        step(f"upgrade node {last}", last, None)
        info = wait_quorum(
            cluster,
            lambda q: q.kraft_version == 1 and q.pending_change is None,
            "kraft.version 1",
        )
        dynamic_after = time.monotonic() - upgraded
        directories = {i: read_directory_id(cluster.data_dir(i)) for i in cluster.node_ids}
        assert None not in directories.values()
        assert voters(info) == directories, (voters(info), directories)

        # The voters can change now: a node joins with --bootstrap and is added, and the voter
        # that ran the previous release longest is removed; the writer writes on.
        started, written = time.monotonic(), writer.count
        releases[4] = THIS
        cluster.join_node(4)
        directory = read_directory_id(cluster.data_dir(4))
        wait_quorum(
            cluster,
            lambda q: any(r.replica_id == 4 and r.lag == 0 for r in q.observers),
            "node 4 to catch up as an observer",
        )
        added = quorum_cli(cluster, "add-voter", "--id", "4")
        assert added.returncode == 0, added.stdout + added.stderr
        assert added.stdout.strip() == (
            f"added node 4 (directory id {directory_id_text(directory)}, "
            f"PLAINTEXT://{cluster.endpoint(4)}) to the voters; voters now 1, 2, 3, 4"
        )
        removed = quorum_cli(cluster, "remove-voter", "--id", str(last))
        assert removed.returncode == 0, removed.stdout + removed.stderr
        assert removed.stdout.startswith(
            f"removed node {last} (directory id {directory_id_text(directories[last])}) "
            "from the voters; voters now "
        ), removed.stdout
        releases[last] = DOWN
        assert cluster.stop(last) == 0
        steps.append((f"add node 4, remove node {last}", time.monotonic() - started, 0))
        steps[-1] = (*steps[-1][:2], writer.count - written)
        time.sleep(0.5)  # a few more writes on the new voter set
        writer.stop()
        watch.stop()
        info = describe(cluster)
        assert sorted(voters(info)) == sorted({1, 2, 3, 4} - {last})
        keys = run(consume_all(cluster.bootstrap, writer.count, timeout_s=60), 90)
    finally:
        writer.stop()
        watch.stop()
        logs = node_logs(cluster, [*cluster.node_ids, *cluster.joined])
        cluster.close()
        for pid in cluster.started_pids:  # every process started is gone
            with pytest.raises(ProcessLookupError):
                os.kill(pid, 0)
    print(
        "steps (what, seconds, records acknowledged meanwhile): "
        + "; ".join(f"{w}: {s:.1f} s, {n}" for w, s, n in steps)
        + f"; kraft.version 1 {dynamic_after:.1f} s after the last node was stopped"
        + f"; {writer.count} records in all; errors answered: "
        + (", ".join(f"{error_name(e)} x{c}" for e, c in writer.errors.items()) or "none")
        + f"; unanswered requests: {len(writer.lost)}; leaders seen: "
        + ", ".join(
            f"epoch {e} node {n} ({r})"
            for e, n, r in dict.fromkeys(
                (s.info.leader_epoch, s.info.leader_id, s.releases.get(s.info.leader_id))
                for s in watch.samples
            )
        )
    )

    # The writer saw only leader changes, and every acknowledged record is there once, in
    # order, at the offset it was acknowledged at.
    assert not writer.failures, writer.failures
    assert set(writer.errors) <= LEADER_CHANGE, writer.errors
    check_acknowledged(writer, keys)

    # Each release led the other's nodes while both ran, and the voter set stayed static while
    # any voter ran the previous release: its leaders say no kraft.version (-1), this
    # release's say 0. Once 1, it stays 1.
    mixed = [s for s in watch.samples if {PREVIOUS, THIS} <= set(s.releases.values())]
    led_by = {s.releases.get(s.info.leader_id) for s in mixed}
    assert {PREVIOUS, THIS} <= led_by, f"not led by both releases while both ran: {led_by}"
    for s in watch.samples:
        leader_release = s.releases.get(s.info.leader_id)
        if leader_release == PREVIOUS:
            assert s.info.kraft_version == -1, (s.releases, s.info)
        elif PREVIOUS in s.releases.values():
            assert s.info.kraft_version == 0, (s.releases, s.info)
    versions = [s.info.kraft_version for s in watch.samples]
    assert 1 in versions
    assert set(versions[versions.index(1) :]) == {1}, versions

    # Nothing went wrong in any node's log, in either release: in particular no request of
    # this release that the previous one does not know (it closes the connection, and the
    # fetches on it, with "unknown API key"); a voter of this release knows its leader cannot
    # take UpdateRaftVoter and says so once.
    for node_id, logged in logs.items():
        text = _without_the_previous_release_stop_traceback(logged, previous_release.site)
        for bad in ("Traceback", " ERROR ", " CRITICAL ", "unknown API key", "unparseable"):
            assert bad not in text, f"node {node_id}: {bad!r} in its log:\n{text[-3000:]}"
    told = f"node {last} runs a release without dynamic voters (no UpdateRaftVoter)"
    assert told in logs[first], logs[first][-3000:]


async def read_from_log_start(bootstrap: list[str], end: int, timeout_s: float = 30) -> list:  # type: ignore[type-arg]
    """Every committed data record from the log start up to offset ``end``: (offset, key)."""
    out = []
    deadline = time.monotonic() + timeout_s
    async with Consumer(bootstrap, start="earliest", max_wait_ms=200) as consumer:
        while not out or out[-1][0] < end - 1:
            assert time.monotonic() < deadline, f"read {len(out)} records up to {out[-1:]}"
            out.extend((r.offset, r.key) for r in await consumer.poll())
    return out


def state_keys(data_dir) -> dict[bytes, bytes]:  # type: ignore[no-untyped-def]
    """The LMDB state machine of a stopped node, read from its data directory."""
    with LmdbStateMachine(data_dir / "state", map_size=MAP_SIZE, sync=False) as state:
        return dict(state.items())


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "raftcore", *args],
        cwd="/",
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )


def test_a_data_directory_written_by_the_previous_release_opens_with_this_one(
    previous_release, tmp_path
):
    """The previous release's data directories -- a log, snapshots of an LMDB state machine, a
    quorum-state of data_version 0 that lists the voters, meta.properties without a directory
    id -- open with this release, which reads back every record: from the log, from the state
    machine, and from a snapshot the previous release wrote (a new node downloads it)."""
    node_args = [
        *FAST,
        "--state-machine", "lmdb", "--state-map-size", str(MAP_SIZE),
        "--snapshot-min-records", "300",
    ]  # fmt: skip
    cluster, releases = cluster_of_the_previous_release(
        tmp_path / "cluster", previous_release, node_args
    )
    expected = {key(n): b"v" * 20 for n in range(1200)}
    try:
        cluster.start()
        run(produce(cluster.bootstrap, 0, 1000, batch=50))
        wait_for(
            lambda: all(
                list((cluster.data_dir(i) / "log").glob("*.checkpoint")) for i in cluster.node_ids
            ),
            30,
            "a snapshot on every node",
        )
        epoch = describe(cluster).leader_epoch
        cluster.stop_all()

        # What the previous release left. The nodes stop together: a follower told by the
        # stopping leader that it resigned may stand before its own SIGTERM lands, and leave a
        # later epoch (a vote) in its quorum-state.
        metas = {}
        epochs = []
        for node_id in cluster.node_ids:
            directory = cluster.data_dir(node_id)
            metas[node_id] = (directory / "meta.properties").read_text()
            assert "directory.id" not in metas[node_id]
            state = json.loads((directory / "quorum-state").read_text())
            assert state["data_version"] == 0 and state["leaderEpoch"] >= epoch, state
            assert state["currentVoters"] == [{"voterId": i} for i in cluster.node_ids]
            epochs.append(state["leaderEpoch"])
        epoch = max(epochs)
        written_before = {  # (end offset, epoch) of every snapshot the previous release wrote
            tuple(str(int(n)) for n in path.name.split(".")[0].split("-"))
            for i in cluster.node_ids
            for path in (cluster.data_dir(i) / "log").glob("*.checkpoint")
        }
        # This release's offline tools read it
        verified = cli("snapshot", "verify", str(cluster.data_dir(1)))
        assert verified.returncode == 0 and "OK" in verified.stdout, verified
        checked = cli("verify-log", str(cluster.data_dir(1)))
        assert checked.returncode == 0 and checked.stdout.startswith("OK: "), checked

        # This release, on the same directories with the same command lines
        for node_id in cluster.node_ids:
            cluster.node_env.pop(node_id)
            releases[node_id] = THIS
        cluster.start()
        info = wait_quorum(
            cluster, lambda q: q.kraft_version == 1 and q.pending_change is None, "kraft 1"
        )
        assert info.leader_epoch > epoch  # it read the quorum-state: epochs go on from there
        for node_id in cluster.node_ids:
            meta = (cluster.data_dir(node_id) / "meta.properties").read_text()
            assert meta.startswith(metas[node_id]), meta  # the same, and a directory id
            assert voters(info)[node_id] == read_directory_id(cluster.data_dir(node_id))
        run(produce(cluster.bootstrap, 1000, 200, batch=50))
        records = run(read_from_log_start(cluster.bootstrap, describe(cluster).high_watermark))
        keys = [k for _, k in records]
        assert keys == list(expected)[-len(keys) :]  # the log from its start, which moved
        assert records[0][0] > 0, "the log start did not move past a snapshot"

        # A new node downloads the leader's latest snapshot -- the previous release's -- and
        # fetches the rest; its state then holds every record, as the voters' do.
        releases[4] = THIS
        cluster.join_node(4)
        wait_quorum(
            cluster,
            lambda q: any(r.replica_id == 4 and r.lag == 0 for r in q.observers),
            "node 4 to catch up",
        )
        cluster.stop_all()
        installed = re.findall(
            r"installed snapshot OffsetAndEpoch\(offset=(\d+), epoch=(\d+)\)",
            cluster.log_file(4).read_text(),
        )
        assert installed and set(installed) <= written_before, (installed, written_before)
        for node_id in [*cluster.node_ids, 4]:
            assert state_keys(cluster.data_dir(node_id)) == expected, node_id
            state = json.loads((cluster.data_dir(node_id) / "quorum-state").read_text())
            assert state["data_version"] == 1 and "currentVoters" not in state, state
    finally:
        cluster.close()
        for pid in cluster.started_pids:
            with pytest.raises(ProcessLookupError):
                os.kill(pid, 0)
