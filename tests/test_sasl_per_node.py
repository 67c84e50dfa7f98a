"""Per-node credentials on SASL_PLAINTEXT, with ``raftcore node`` processes set up by the CLI as
docs/security.md says: a forged Vote or BeginQuorumEpoch logged in with any credential but
the claimed node's own is refused and the leader's epoch does not move; and a cluster set up
with one shared inter-node password moves to per-node credentials one node at a time while a
writer writes, keeping a leader and every acknowledged record. Every process is ended by its
pid (LocalCluster.close)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from sasl_helpers import (
    NODE_PASSWORD,
    USERS,
    Raw,
    begin_quorum_epoch_body,
    run,
    vote_body,
)

import raftcore
from raftcore.client import Consumer, Producer, describe_quorum
from raftcore.error_codes import Errors
from raftcore.node.local_cluster import LocalCluster
from raftcore.protocol.api import ApiKey
from raftcore.security.config import ClientSecurity
from raftcore.security.scram import ScramClient

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

# a little slower than the other process tests' 500 ms: no election of its own during a test
TIMEOUTS = ["--election-timeout-ms", "1000", "--fetch-timeout-ms", "2000"]
ALICE = ClientSecurity(
    protocol="SASL_PLAINTEXT",
    sasl_mechanism="SCRAM-SHA-512",
    sasl_username="alice",
    sasl_password=USERS["alice"],
)


def cli(directory: Path, *args: str, stdin: str = "") -> str:
    env = dict(os.environ, PYTHONPATH=str(Path(raftcore.__file__).parent.parent))
    out = subprocess.run(
        [sys.executable, "-m", "raftcore", *args],
        input=stdin,
        check=False,
        capture_output=True,
        text=True,
        cwd=directory,
        env=env,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    return out.stdout


def host_port(c: LocalCluster, node_id: int) -> tuple[str, int]:
    host, _, port = c.endpoint(node_id).rpartition(":")
    return host, int(port)


async def quorum(c: LocalCluster, timeout_s: float = 30) -> Any:
    return await describe_quorum(c.bootstrap, timeout_s=timeout_s, security=ALICE)


async def caught_up(c: LocalCluster, timeout_s: float = 30.0) -> Any:
    """Until every voter's log reaches the high watermark of a leader every node knows."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            info = await quorum(c, timeout_s=5)
            ends = [v.log_end_offset for v in info.voters]
            if len(ends) == 3 and min(ends) >= info.high_watermark >= 0:
                return info
        except Exception:  # a node restarting: ask again
            pass
        if time.monotonic() > deadline:
            raise AssertionError(f"the voters did not catch up within {timeout_s} s")
        await asyncio.sleep(0.1)


async def login(c: LocalCluster, node_id: int, mechanism: str, user: str, password: str) -> Any:
    """A raw connection to ``node_id`` after a login (PLAIN or SCRAM); (raw, error code)."""
    raw = await Raw.connect(*host_port(c, node_id))
    assert (await raw.handshake(mechanism)).error_code == Errors.NONE
    if mechanism == "PLAIN":
        answer = await raw.authenticate(b"\x00" + user.encode() + b"\x00" + password.encode())
        return raw, answer.error_code
    scram = ScramClient(mechanism, user, password)
    first = await raw.authenticate(scram.first())
    if first.error_code != Errors.NONE:
        return raw, first.error_code
    answer = await raw.authenticate(scram.final(bytes(first.auth_bytes)))
    return raw, answer.error_code


# ---- a cluster set up as the docs say ------------------------------------------------------------


@pytest.fixture(scope="module")
def per_node(tmp_path_factory):
    """Three nodes with their own credentials, made by ``raftcore users add-node``; the users
    file also keeps the password the nodes shared before (a migration's leftover)."""
    d = tmp_path_factory.mktemp("per-node")
    cli(d, "users", "add", "users.json", "alice", "--password-stdin", stdin=USERS["alice"] + "\n")
    cli(d, "users", "add-node", "users.json", "shared", "--password-stdin", stdin=NODE_PASSWORD)
    for i in (1, 2, 3):
        cli(d, "users", "add-node", "users.json", str(i), "--password-out", f"node-{i}.password")
    c = LocalCluster(d / "cluster", 3, node_args=[*TIMEOUTS, "--sasl-users", str(d / "users.json")])
    for i in (1, 2, 3):
        c.node_own_args[i] = ["--sasl-node-password-file", str(d / f"node-{i}.password")]
    c.passwords = {i: (d / f"node-{i}.password").read_text().strip() for i in (1, 2, 3)}  # type: ignore[attr-defined]
    try:
        c.start()
        run(caught_up(c))
        yield c
    finally:
        c.close()


def test_a_forged_vote_logged_in_with_any_credential_but_the_nodes_own_is_refused(per_node):
    """The attack: log in as some node and send a Vote (or BeginQuorumEpoch) at epoch + 40
    for another one, to depose the leader. With another node's password, a user's, the
    shared one, logging in as node-<candidate> is refused (SASL_AUTHENTICATION_FAILED); a
    connection that did log in (node 3 with its own, alice) and speaks for another node is
    answered CLUSTER_AUTHORIZATION_FAILED; the leader and its epoch stay."""
    c = per_node
    passwords = c.passwords  # type: ignore[attr-defined]

    async def main():
        before = await quorum(c)
        leader = before.leader_id
        victim = next(i for i in (1, 2, 3) if i != leader)  # the node the forger claims to be
        other = next(i for i in (1, 2, 3) if i not in (leader, victim))
        forged = before.leader_epoch + 40
        for password in (passwords[other], USERS["alice"], NODE_PASSWORD):
            for mechanism in ("PLAIN", "SCRAM-SHA-512"):
                raw, code = await login(c, leader, mechanism, f"node-{victim}", password)
                assert code == Errors.SASL_AUTHENTICATION_FAILED, (mechanism, password)
                assert await raw.closed()
        for user, password in ((f"node-{other}", passwords[other]), ("alice", USERS["alice"])):
            raw, code = await login(c, leader, "SCRAM-SHA-512", user, password)
            assert code == Errors.NONE, user
            vote = await raw.ask(ApiKey.VOTE, 1, vote_body(victim, c.cluster_id, forged))
            assert vote.error_code == Errors.CLUSTER_AUTHORIZATION_FAILED, user
            begin = await raw.ask(
                ApiKey.BEGIN_QUORUM_EPOCH, 1, begin_quorum_epoch_body(victim, c.cluster_id, forged)
            )
            assert begin.error_code == Errors.CLUSTER_AUTHORIZATION_FAILED, user
            raw.close()
        await asyncio.sleep(0.5)
        after = await quorum(c)
        assert after.leader_epoch < forged
        assert (after.leader_id, after.leader_epoch) == (leader, before.leader_epoch)

    run(main())


# ---- from one shared password to per-node credentials, one node at a time ---------------------


def test_a_shared_password_cluster_moves_to_per_node_credentials_one_node_at_a_time(tmp_path):
    """docs/security.md, "Moving to per-node credentials", step by step, while a writer
    writes: the shared password's credentials into the users file; then for each node, its
    own credentials (``raftcore users add-node N --password-out``) and a restart with its
    own password file; then the shared credentials out. A leader throughout (elections
    only when the leader restarts, each over within seconds), every acknowledged record
    kept, and at the end the shared password logs in as no node."""
    d = tmp_path
    cli(d, "users", "add", "users.json", "alice", "--password-stdin", stdin=USERS["alice"] + "\n")
    shared = d / "node-password"
    shared.write_text(NODE_PASSWORD + "\n")
    shared.chmod(0o600)
    c = LocalCluster(
        d / "cluster",
        3,
        node_args=[
            *TIMEOUTS,
            "--sasl-users",
            str(d / "users.json"),
            "--sasl-node-password-file",
            str(shared),
        ],
    )
    acked: list[bytes] = []
    failures: list[BaseException] = []
    leaders: list[tuple[float, int]] = []  # (when, leader id or -1)
    stop = asyncio.Event()

    async def writer() -> None:
        async with Producer(c.bootstrap, acks=-1, max_in_flight=5, security=ALICE) as producer:
            n = 0
            in_flight: set[asyncio.Future[Any]] = set()
            while not stop.is_set() or in_flight:
                while not stop.is_set() and len(in_flight) < 5:
                    keys = [b"k%07d" % (n + i) for i in range(20)]
                    n += 20
                    fut = producer.send_nowait([(k, b"v") for k in keys])
                    fut.add_done_callback(
                        lambda f, keys=keys: (
                            failures.append(f.exception())  # type: ignore[arg-type]
                            if f.exception() is not None
                            else acked.extend(keys)
                        )
                    )
                    in_flight.add(fut)
                    await asyncio.sleep(0.01)
                _, in_flight = await asyncio.wait(
                    in_flight, timeout=0.5, return_when=asyncio.FIRST_COMPLETED
                )

    async def watcher() -> None:
        while not stop.is_set():
            try:
                info = await quorum(c, timeout_s=2)
                leaders.append((time.monotonic(), info.leader_id))
            except Exception:
                leaders.append((time.monotonic(), -1))
            await asyncio.sleep(0.2)

    def restart(node_id: int, password_file: Path) -> int:
        """Restart with its own password file; where its log of the new run starts."""
        c.stop(node_id)
        offset = c.log_file(node_id).stat().st_size
        c.node_own_args[node_id] = ["--sasl-node-password-file", str(password_file)]
        c.start_node(node_id)
        return offset

    async def main() -> dict[int, int]:
        loop = asyncio.get_running_loop()
        await caught_up(c)
        tasks = [asyncio.ensure_future(writer()), asyncio.ensure_future(watcher())]
        await asyncio.sleep(1.0)
        # 1. the shared password's credentials into the users file
        cli(d, "users", "add-node", "users.json", "shared", "--password-stdin", stdin=NODE_PASSWORD)
        # 2. one node at a time: its own credentials, then a restart with its own password
        offsets = {}
        for node_id in (1, 2, 3):
            own = d / f"node-{node_id}.password"
            cli(d, "users", "add-node", "users.json", str(node_id), "--password-out", str(own))
            offsets[node_id] = await loop.run_in_executor(None, restart, node_id, own)
            await caught_up(c)
            # from now on the shared password is not node <node_id> anywhere
            for target in (1, 2, 3):
                raw, code = await login(c, target, "PLAIN", f"node-{node_id}", NODE_PASSWORD)
                assert code == Errors.SASL_AUTHENTICATION_FAILED, (target, node_id)
                raw.close()
            await asyncio.sleep(1.0)
        # 3. the shared credentials out
        cli(d, "users", "delete-node", "users.json", "shared")
        await asyncio.sleep(1.0)
        stop.set()
        await asyncio.gather(*tasks)
        # the shared password is nobody now
        for target in (1, 2, 3):
            for node_id in (1, 2, 3):
                raw, code = await login(c, target, "PLAIN", f"node-{node_id}", NODE_PASSWORD)
                assert code == Errors.SASL_AUTHENTICATION_FAILED, (target, node_id)
                raw.close()
        # every acknowledged record is there
        wanted = set(acked)
        got: set[bytes] = set()
        deadline = time.monotonic() + 30
        async with Consumer(c.bootstrap, start="earliest", max_wait_ms=200, security=ALICE) as co:
            while not wanted <= got and time.monotonic() < deadline:
                got.update(r.key for r in await co.poll())
        assert wanted <= got, f"{len(wanted - got)} acknowledged records lost"
        return offsets

    try:
        c.start()
        offsets = run_long(main())
    finally:
        c.close()
    assert not failures, failures[:3]
    assert len(acked) > 200
    # a leader throughout: every stretch without one is short (the leader's own restart)
    gaps, since = [], None
    for when, leader in leaders:
        if leader == -1 and since is None:
            since = when
        elif leader != -1 and since is not None:
            gaps.append(when - since)
            since = None
    assert since is None and all(g < 10 for g in gaps), gaps
    assert leaders and leaders[-1][1] in (1, 2, 3)
    # what each node said at start: before the move, all three shared the password; node 1
    # came back warning about the two still sharing it; node 3, last, about nobody
    for node_id in (1, 2, 3):
        first_run = c.log_file(node_id).read_text()[: offsets[node_id]]
        assert "node-1, node-2 and node-3 have no credentials of their own" in first_run
    last_runs = {i: c.log_file(i).read_text()[offsets[i] :] for i in (1, 2, 3)}
    assert "node-2 and node-3 have no credentials of their own" in last_runs[1]
    assert "shared inter-node password" not in last_runs[3]


def run_long(coro):  # type: ignore[no-untyped-def]
    return asyncio.run(asyncio.wait_for(coro, 200))
