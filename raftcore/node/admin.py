"""The voter RPCs an operator sends, served by the leader: AddRaftVoter (80) and
RemoveRaftVoter (81) of KIP-853, and raftcore's own TransferLeadership (10000, see its spec).

The node decides nothing: it hands each request to the core (:mod:`raftcore.raft.reconfig`
holds the rules) and answers with the core's verdict once it comes -- as Produce with acks=all
waits for its commit -- with Kafka's error code and the core's message:

- NONE: the new voter set is committed (add, remove), or the leader resigned in the target's
  favour (transfer);
- REQUEST_TIMED_OUT: refused for now (another change in flight, nothing committed in this
  epoch yet, a replica that has not caught up: nothing changed), or not committed within the
  timeout (the record stays in the log and may still commit: the message says so);
- NOT_LEADER_OR_FOLLOWER: this node does not lead (nothing changed), or its leadership ended
  before the change committed (it may still be);
- DUPLICATE_VOTER, VOTER_NOT_FOUND, UNSUPPORTED_VERSION (a static voter set), INVALID_REQUEST.

AddRaftVoter names the replica by id and directory id and says where it listens; a request
that leaves the directory id out (Kafka's zero uuid) or the listeners empty gets them from the
replica's own fetches: the leader knows both for every observer that fetches from it.

Auto-join (:mod:`raftcore.raft.auto_join` decides when): the node sends AddRaftVoter for itself
to its leader over its peer connection, as a node.

Who may send these is checked before (:func:`raftcore.security.authorization.refuse_unless_admin`).
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from raftcore.error_codes import Errors, error_name
from raftcore.node import reads
from raftcore.node.clock import now_ms
from raftcore.node.raft_wire import directory_id
from raftcore.protocol.api import ApiKey, request_spec, response_spec
from raftcore.raft.auto_join import AutoJoin
from raftcore.raft.leader_requests import NotLeaderError
from raftcore.raft.states import LeaderState
from raftcore.raft.values import LeaderAndEpoch
from raftcore.raft.voters import ReplicaKey, VoterEndpoint, directory_id_text

if TYPE_CHECKING:
    from raftcore.node.node import RaftNode

__all__ = ["ADMIN_APIS", "AutoJoiner", "handle"]

logger = logging.getLogger(__name__)

ADMIN_APIS = frozenset(
    {ApiKey.ADD_RAFT_VOTER, ApiKey.REMOVE_RAFT_VOTER, ApiKey.TRANSFER_LEADERSHIP, ApiKey.READ_INDEX}
)
GRACE_S = 5.0  # past the change's own timeout, the answer gives up waiting for the verdict


async def handle(node: RaftNode, header: Any, body: Any) -> Any:
    """The answer body to an admin request (the caller encodes it)."""
    key = header.request_api_key
    cls = response_spec(key).cls
    cluster_id = getattr(body, "cluster_id", None)
    if cluster_id is not None and cluster_id != node.config.cluster_id:
        this = node.config.cluster_id
        return _answer(cls, Errors.INCONSISTENT_CLUSTER_ID, f"this is cluster {this!r}")
    core = node.core
    if core is None:
        return _answer(cls, Errors.BROKER_NOT_AVAILABLE, "the node is not running")
    if key == ApiKey.READ_INDEX:
        return await reads.answer_read_index(node, body, cls)
    now = node.group.clock()  # the clock of the group whose core is asked
    try:
        if key == ApiKey.ADD_RAFT_VOTER:
            replica, endpoint = _addition(node, body)
            timeout_ms = body.timeout_ms if body.timeout_ms > 0 else node.config.request_timeout_ms
            token = core.add_voter(replica, endpoint, timeout_ms, now)
        elif key == ApiKey.REMOVE_RAFT_VOTER:
            timeout_ms = node.config.request_timeout_ms
            replica = ReplicaKey(body.voter_id, directory_id(body.voter_directory_id))
            token = core.remove_voter(replica, timeout_ms, now)
        else:
            timeout_ms = body.timeout_ms if body.timeout_ms > 0 else node.config.request_timeout_ms
            token = core.transfer_leadership(body.target_id, timeout_ms, now)
    except NotLeaderError as exc:
        return _answer(cls, Errors.NOT_LEADER_OR_FOLLOWER, _not_leader(node, exc.leader))
    except _Refused as exc:
        return _answer(cls, exc.error, exc.message)
    fut = node.voter_changes.wait_for(token)
    node.poke()  # the verdict may be in the next output already (a refusal)
    try:
        outcome = await asyncio.wait_for(fut, timeout_ms / 1000 + GRACE_S)
    except asyncio.TimeoutError:
        return _answer(
            cls, Errors.REQUEST_TIMED_OUT, "no verdict from the leader in time; it may still come"
        )
    finally:
        node.voter_changes.forget(token)
    message = outcome.message
    if outcome.error == Errors.NOT_LEADER_OR_FOLLOWER and outcome.leader is not None:
        message = f"{message}; {_not_leader(node, outcome.leader)}"
    return _answer(cls, outcome.error, message)


def _answer(cls: Any, error: int, message: str | None) -> Any:
    return cls(throttle_time_ms=0, error_code=error, error_message=message)


def _not_leader(node: RaftNode, leader: LeaderAndEpoch) -> str:
    if not leader.known or leader.leader_id == node.node_id:
        return f"node {node.node_id} does not lead; no leader is known in epoch {leader.epoch}"
    where = node.address_book.endpoint_of(leader.leader_id)  # type: ignore[arg-type]
    at = "" if where is None else f" at {where}"
    return (
        f"node {node.node_id} does not lead; node {leader.leader_id}{at} leads epoch {leader.epoch}"
    )


class _Refused(Exception):
    def __init__(self, error: int, message: str) -> None:
        super().__init__(message)
        self.error = error
        self.message = message


def _addition(node: RaftNode, body: Any) -> tuple[ReplicaKey, VoterEndpoint | None]:
    """(the replica to add, its endpoint or None) as the request says, completed from the
    leader's view of the replica's fetches; _Refused when that cannot be."""
    voter_id = body.voter_id
    directory = directory_id(body.voter_directory_id)
    listeners = body.listeners or []
    endpoint = None
    if listeners:
        first = listeners[0]
        endpoint = VoterEndpoint(first.name, first.host, first.port)
    core = node.core
    assert core is not None
    state = core.state
    if directory is None and isinstance(state, LeaderState) and voter_id not in core.voter_set:
        directory = _fetching_as(node, state, voter_id)
    return ReplicaKey(voter_id, directory), endpoint


def _fetching_as(node: RaftNode, state: LeaderState, voter_id: int) -> bytes:
    """The directory id of the one replica fetching from this leader as node ``voter_id``
    now (within the fetch timeout): a directory that fetched earlier (a disk since replaced)
    does not count."""
    now = node.group.clock()  # the clock of the group whose core is asked
    timeout = node.config.quorum.fetch_timeout_ms
    seen = [s for k, s in state.observer_states.items() if k.id == voter_id and k.directory_id]
    live = [s for s in seen if now - s.last_fetch_ms <= timeout]
    if len(live) > 1:
        names = ", ".join(directory_id_text(s.directory_id) for s in live)
        raise _Refused(
            Errors.INVALID_REQUEST,
            f"replicas of {len(live)} directories fetch as node {voter_id} ({names}): name "
            "the one to add by its directory id; nothing changed",
        )
    if not live:
        last = max((s.last_fetch_ms for s in seen), default=-1)
        when = "never" if last < 0 else f"last {now - last} ms ago"
        raise _Refused(
            Errors.REQUEST_TIMED_OUT,
            f"node {voter_id} does not fetch from the leader ({when}): start it with "
            "--bootstrap and wait until describe-quorum lists it as an observer; nothing "
            "changed",
        )
    return live[0].directory_id  # type: ignore[return-value]


# ---- auto-join: this node asks to be added ---------------------------------------------------


class AutoJoiner:
    """Sends AddRaftVoter for this node when :class:`~raftcore.raft.auto_join.AutoJoin` says
    so, and logs the answer (a new answer at INFO, a repeated one at DEBUG)."""

    def __init__(self, node: RaftNode) -> None:
        self.node = node
        self.decision = AutoJoin(node.config.quorum.fetch_timeout_ms)
        self._in_flight = False
        self._last: tuple[int, str | None] | None = None
        self._task: asyncio.Future[None] | None = None

    def check(self) -> None:
        node = self.node
        if node.core is None:
            return
        self._confirm(node.core)
        if self._in_flight:
            return
        request = self.decision.due(node.core, now_ms())
        if request is None:
            return
        self._in_flight = True
        self._task = asyncio.ensure_future(self._ask(request))

    async def _ask(self, request: Any) -> None:
        node = self.node
        cls = request_spec(ApiKey.ADD_RAFT_VOTER).cls
        ep = request.endpoint
        timeout_ms = node.config.request_timeout_ms
        body = cls(
            cluster_id=node.config.cluster_id,
            timeout_ms=timeout_ms,
            voter_id=request.key.id,
            voter_directory_id=request.key.directory_id,
            listeners=[cls.Listener(name=ep.name, host=ep.host, port=ep.port)],
        )
        try:
            answer = await node.request_peer(
                request.leader, ApiKey.ADD_RAFT_VOTER, 0, body, timeout_ms / 1000 + GRACE_S
            )
            outcome: tuple[int, str | None] = (answer.error_code, answer.error_message)
        except (OSError, asyncio.TimeoutError, ConnectionError) as exc:
            outcome = (Errors.REQUEST_TIMED_OUT, f"no answer from node {request.leader}: {exc}")
        finally:
            self._in_flight = False
        log = logger.info if outcome != self._last else logger.debug
        self._last = outcome
        if outcome[0] == Errors.NONE:
            log("%s auto-join: added as voter %s", node.prefix, request.key)
        else:
            log(
                "%s auto-join: node %d answered %s%s",
                node.prefix,
                request.leader,
                error_name(outcome[0]),
                "" if not outcome[1] else f": {outcome[1]}",
            )

    def _confirm(self, core: Any) -> None:
        """After an answer other than NONE (the leader changed, or the answer was lost), the
        change may still have committed, under the next leader: once this replica is a voter
        of the committed voter set, say so, once. Otherwise its log would end on the error."""
        last = self._last
        if last is None or last[0] == Errors.NONE:
            return
        hw = core.high_watermark
        if hw is None or core.history.uncommitted_change(hw):
            return
        if core.voter_set.is_voter(core.local_key):
            logger.info(
                "%s auto-join: added as voter %s: committed, though the answer was %s",
                self.node.prefix,
                core.local_key,
                error_name(last[0]),
            )
            self._last = (Errors.NONE, None)

    async def close(self) -> None:
        if self._task is not None and not self._task.done():
            self._task.cancel()
