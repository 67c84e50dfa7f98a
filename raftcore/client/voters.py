"""An operator's changes to the quorum, sent to the leader: AddRaftVoter and RemoveRaftVoter
(KIP-853) and raftcore's TransferLeadership. Each returns a :class:`ChangeResult` whose
``line`` says what was done, or why not, with Kafka's error name.

The leader is found through Metadata; a NOT_LEADER_OR_FOLLOWER answer (leadership moved) is
retried at the new leader until the timeout. A retried change may have been made by the
attempt that lost its leader (its record committed under the next one): an add answered
DUPLICATE_VOTER (a remove, VOTER_NOT_FOUND) after such a retry is checked against the voter
set, and reported done when the voter set says so.

AddRaftVoter names the replica's directory id and endpoint; unless the operator names the
directory, both are left for the leader to fill in: it knows them for every replica that
fetches from it (and refuses when two directories fetch under the same id now).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from raftcore.client.admin import QuorumInfo, ReplicaInfo, describe_quorum_with
from raftcore.client.cluster import ClusterClient, NoLeaderError
from raftcore.client.connection import ConnectionClosed
from raftcore.connect_errors import describe
from raftcore.error_codes import Errors, error_name
from raftcore.errors import RaftcoreError
from raftcore.protocol.api import ApiKey, request_spec, response_spec
from raftcore.raft.voters import directory_id_text
from raftcore.security.config import ClientSecurity

__all__ = ["ChangeResult", "add_voter", "remove_voter", "transfer_leadership"]

GRACE_S = 5.0  # the most the leader is given less than the caller's time to answer in


def _grace(timeout_s: float) -> float:
    """How much sooner than the caller's deadline the leader is told to give up on a change,
    so that its answer (done, or not in time) arrives before the deadline: 5% of it, at most
    GRACE_S. The caller's timeout holds; the leader's verdict comes within it."""
    return min(GRACE_S, 0.05 * timeout_s)


def _leader_timeout_ms(deadline: float, timeout_s: float) -> int:
    """The timeout_ms of a change request: what is left of the caller's time, less a grace."""
    return max(1, int((deadline - time.monotonic() - _grace(timeout_s)) * 1000))


@dataclass(frozen=True, slots=True)
class ChangeResult:
    ok: bool
    line: str
    error: int = Errors.NONE


def _cluster(bootstrap: list[Any], topic: str, timeout_s: float, sec: Any) -> ClusterClient:
    return ClusterClient(
        bootstrap,
        topic=topic,
        request_timeout_ms=int(timeout_s * 1000),
        security=sec,
    )


async def _ask_leader(
    cluster: ClusterClient, key: int, body: Any, deadline: float
) -> tuple[Any, int]:
    """(the leader's answer, how many leaders were asked): NOT_LEADER_OR_FOLLOWER is retried
    at the next leader while time is left."""
    asked = 0
    attempt = 0
    while True:
        await cluster.refresh_metadata(max(0.02, deadline - time.monotonic()))
        try:
            conn, _ = await cluster.leader_connection()
            asked += 1
            answer = await _refused_by_release(cluster, conn, key, deadline)
            if answer is None:
                answer = await conn.request(
                    key, 0, body, timeout_s=max(0.02, deadline - time.monotonic())
                )
        except (ConnectionClosed, OSError, asyncio.TimeoutError, NoLeaderError) as exc:
            if time.monotonic() >= deadline:
                raise RaftcoreError(
                    f"no answer from the leader in time ({describe(exc)}): the change may or "
                    "may not have been made (see describe-quorum)"
                ) from None
            answer = None
        if answer is not None and (
            answer.error_code != Errors.NOT_LEADER_OR_FOLLOWER or time.monotonic() >= deadline
        ):
            return answer, asked
        attempt += 1
        cluster.leader = None  # ask who leads now
        await asyncio.sleep(min(cluster.backoff_s(attempt), max(0.0, deadline - time.monotonic())))
        if time.monotonic() >= deadline and answer is None:
            raise RaftcoreError(
                "no leader answered in time: the change may or may not have been made (see "
                "describe-quorum)"
            )


async def _refused_by_release(
    cluster: ClusterClient, conn: Any, key: int, deadline: float
) -> Any | None:
    """UNSUPPORTED_VERSION, as the answer of API ``key``, when the leader runs the release
    before dynamic voters: its ApiVersions lists no AddRaftVoter (TransferLeadership is never
    listed, nor UpdateRaftVoter on a client listener: raftcore.node.listeners), and it would
    close the connection of a request it does not know, leaving the caller to wait out its
    timeout not knowing whether anything changed. None otherwise."""
    cls = request_spec(ApiKey.API_VERSIONS).cls
    versions = await conn.request(
        ApiKey.API_VERSIONS,
        3,
        cls(client_software_name="raftcore-quorum", client_software_version=""),
        timeout_s=max(0.02, deadline - time.monotonic()),
    )
    served = {k.api_key for k in versions.api_keys}
    if versions.error_code != Errors.NONE or ApiKey.ADD_RAFT_VOTER in served:
        return None
    leader = "?" if cluster.leader is None else cluster.leader.leader_id
    return response_spec(key).cls(
        throttle_time_ms=0,
        error_code=Errors.UNSUPPORTED_VERSION,
        error_message=(
            f"the leader, node {leader}, runs a release without dynamic voters (it serves no "
            "UpdateRaftVoter): upgrade every voter first; nothing changed"
        ),
    )


def _failure(what: str, answer: Any) -> ChangeResult:
    message = answer.error_message
    reason = error_name(answer.error_code) + ("" if not message else f": {message}")
    return ChangeResult(False, f"{what}: {reason}", answer.error_code)


async def _run(
    bootstrap: list[str],
    topic: str,
    timeout_s: float,
    security: ClientSecurity | None,
    change: Callable[[ClusterClient, float], Awaitable[ChangeResult]],
) -> ChangeResult:
    cluster = _cluster(bootstrap, topic, timeout_s, security)
    try:
        return await change(cluster, time.monotonic() + timeout_s)
    finally:
        await cluster.close()


async def _quorum(cluster: ClusterClient, topic: str, deadline: float) -> QuorumInfo | None:
    try:
        left = max(0.05, deadline - time.monotonic())  # a view of the result: not past it
        return await describe_quorum_with(cluster, topic=topic, timeout_s=left)
    except RaftcoreError:
        return None


def _voters_now(info: QuorumInfo | None) -> str:
    if info is None:
        return ""
    return f"; voters now {', '.join(str(v.replica_id) for v in info.voters)}"


# ---- add ----------------------------------------------------------------------------------------


async def add_voter(
    bootstrap: list[str],
    voter_id: int,
    directory_id: bytes | None = None,
    *,
    topic: str = "raftcore",
    timeout_s: float = 30.0,
    security: ClientSecurity | None = None,
) -> ChangeResult:
    """Add replica ``voter_id`` (of ``directory_id``; default: the one replica of that id
    fetching from the leader now, which the leader picks)."""

    async def change(cluster: ClusterClient, deadline: float) -> ChangeResult:
        await cluster.refresh_metadata(max(0.02, deadline - time.monotonic()))
        cls = request_spec(ApiKey.ADD_RAFT_VOTER).cls
        body = cls(
            cluster_id=cluster.cluster_id,
            timeout_ms=_leader_timeout_ms(deadline, timeout_s),
            voter_id=voter_id,
            voter_directory_id=directory_id or bytes(16),  # zero: the leader knows it
            listeners=[],  # the leader knows where it listens from its fetches
        )
        answer, asked = await _ask_leader(cluster, ApiKey.ADD_RAFT_VOTER, body, deadline)
        after = None
        if answer.error_code in (Errors.NONE, Errors.DUPLICATE_VOTER):
            after = await _quorum(cluster, topic, deadline)
        added = _voter(after, voter_id, directory_id)
        if answer.error_code != Errors.NONE and not (
            answer.error_code == Errors.DUPLICATE_VOTER and asked > 1 and added is not None
        ):  # a DUPLICATE_VOTER after a retry: the attempt that lost its leader did it
            return _failure(f"node {voter_id} was not added", answer)
        if added is None:
            return ChangeResult(True, f"added node {voter_id} to the voters")
        where = "" if added.endpoint is None else f", {added.endpoint}"
        return ChangeResult(
            True,
            f"added node {voter_id} (directory id {directory_id_text(added.directory_id)}"
            f"{where}) to the voters{_voters_now(after)}",
        )

    return await _run(bootstrap, topic, timeout_s, security, change)


def _voter(
    info: QuorumInfo | None, voter_id: int, directory_id: bytes | None
) -> ReplicaInfo | None:
    for v in [] if info is None else info.voters:
        if v.replica_id == voter_id and (directory_id is None or v.directory_id == directory_id):
            return v
    return None


# ---- remove -------------------------------------------------------------------------------------


async def remove_voter(
    bootstrap: list[str],
    voter_id: int,
    directory_id: bytes | None = None,
    *,
    topic: str = "raftcore",
    timeout_s: float = 30.0,
    security: ClientSecurity | None = None,
) -> ChangeResult:
    """Remove voter ``voter_id`` (only if its directory id is ``directory_id``, when given)."""

    async def change(cluster: ClusterClient, deadline: float) -> ChangeResult:
        before = await _quorum(cluster, topic, deadline)
        directory = directory_id
        if directory is None and before is not None:
            for v in before.voters:
                if v.replica_id == voter_id:
                    directory = v.directory_id
        cls = request_spec(ApiKey.REMOVE_RAFT_VOTER).cls
        body = cls(
            cluster_id=cluster.cluster_id,
            voter_id=voter_id,
            voter_directory_id=directory or bytes(16),
        )
        answer, asked = await _ask_leader(cluster, ApiKey.REMOVE_RAFT_VOTER, body, deadline)
        after = None
        if answer.error_code == Errors.VOTER_NOT_FOUND and asked > 1:
            after = await _quorum(cluster, topic, deadline)
            if after is None or any(v.replica_id == voter_id for v in after.voters):
                after = None
        if answer.error_code != Errors.NONE and after is None:
            return _failure(f"node {voter_id} was not removed", answer)
        after = after or await _quorum(cluster, topic, deadline)
        line = (
            f"removed node {voter_id} (directory id {directory_id_text(directory)}) from the "
            f"voters{_voters_now(after)}"
        )
        if before is not None and before.leader_id == voter_id and after is not None:
            line += f"; it led, node {after.leader_id} leads epoch {after.leader_epoch} now"
        return ChangeResult(True, line)

    return await _run(bootstrap, topic, timeout_s, security, change)


# ---- transfer -----------------------------------------------------------------------------------


async def transfer_leadership(
    bootstrap: list[str],
    target: int,
    *,
    topic: str = "raftcore",
    timeout_s: float = 30.0,
    security: ClientSecurity | None = None,
) -> ChangeResult:
    """Hand leadership to voter ``target``; done once ``target`` leads (or another voter won
    the election that followed: the line says so)."""

    async def change(cluster: ClusterClient, deadline: float) -> ChangeResult:
        await cluster.refresh_metadata(max(0.02, deadline - time.monotonic()))
        before = cluster.leader
        if before is not None and before.leader_id == target:
            return ChangeResult(True, f"node {target} leads epoch {before.epoch} already")
        cls = request_spec(ApiKey.TRANSFER_LEADERSHIP).cls
        body = cls(
            cluster_id=cluster.cluster_id,
            timeout_ms=_leader_timeout_ms(deadline, timeout_s),
            target_id=target,
        )
        answer, _ = await _ask_leader(cluster, ApiKey.TRANSFER_LEADERSHIP, body, deadline)
        if answer.error_code != Errors.NONE:
            return _failure(f"leadership was not handed to node {target}", answer)
        old = "?" if before is None else before.leader_id
        while True:  # the old leader resigned naming the target: who won?
            await cluster.refresh_metadata(max(0.02, deadline - time.monotonic()))
            now = cluster.leader
            if now is not None and (before is None or now.epoch > before.epoch):
                if now.leader_id == target:
                    return ChangeResult(
                        True, f"node {target} leads epoch {now.epoch} now (node {old} handed over)"
                    )
                return ChangeResult(
                    False,
                    f"node {old} resigned in favour of node {target}, but node {now.leader_id} "
                    f"won the election of epoch {now.epoch}",
                    Errors.NONE,
                )
            if time.monotonic() >= deadline:
                return ChangeResult(
                    False,
                    f"node {old} resigned in favour of node {target}; no new leader was known "
                    "within the timeout",
                    Errors.REQUEST_TIMED_OUT,
                )
            await asyncio.sleep(0.05)

    return await _run(bootstrap, topic, timeout_s, security, change)
