"""One partition of ``__consumer_offsets`` on a node: the Raft group's listener, and the group
coordinator of the consumer groups that hash to it while this node leads it.

- Every replica applies the committed records of its partition (offset commits and group
  metadata, :mod:`raftcore.groups.records`) to a map from record key to the latest value, a
  tombstone removing the key: the state of a compacted topic. The listener reads the log
  from its start at every start, so this is rebuilt by replay.
- When this replica becomes leader, the core tells the listener only once it has read
  everything committed before the epoch began (KAFKA-15345): the coordinator is then built
  from the map (:meth:`GroupCoordinator.replay`) and serves. When another replica leads, the
  coordinator is dropped and every request waiting on it hears NOT_COORDINATOR.
- OffsetFetch reads the committed offsets from that map, not the coordinator's state, which
  runs ahead of the log while a commit replicates: an offset is never shown before it is
  committed in Raft, so no failover takes a shown offset back. A commit's own answer comes
  after its records were applied here, so a client reads its own commits.
- A request runs the pure coordinator at once; what it must persist is appended to the
  partition, and its answers (and the answers of the requests its step completes) go out only
  once the records are committed in Raft (:mod:`raftcore.groups.step`). An append that fails
  (leadership lost) drops the coordinator: its state was ahead of the log, and the next
  leader rebuilds it from what was committed.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from raftcore.error_codes import Errors
from raftcore.errors import CorruptRecordError, RaftcoreError
from raftcore.groups.config import GroupConfig
from raftcore.groups.coordinator import GroupCoordinator
from raftcore.groups.messages import FetchedOffset, OffsetFetchResponse
from raftcore.groups.records import OffsetCommitRecord, Record, decode
from raftcore.groups.step import Output
from raftcore.raft import LeaderAndEpoch, NotLeaderError
from raftcore.topic_partition import TopicPartition

if TYPE_CHECKING:
    from raftcore.node.group import RaftGroup
    from raftcore.raft.listener import CommittedBatch

__all__ = ["CoordinatorShard"]

logger = logging.getLogger(__name__)

# A call into the pure coordinator: (coordinator, the answer's ref, now in ms) -> its Output.
Call = Callable[[GroupCoordinator, object, int], Output]


class CoordinatorShard:
    def __init__(
        self,
        node_id: int,
        partition: int,
        config: GroupConfig,
        *,
        clock: Callable[[], int],
        rng: random.Random,
        prefix: str,
        changed: Callable[[], None],
    ) -> None:
        """``clock``: the coordinator's time in ms; ``changed``: called after every step, so
        that the node's one ticker looks at the deadlines again."""
        self.node_id = node_id
        self.partition = partition
        self.config = config
        self.prefix = prefix
        self._clock = clock
        self._rng = rng
        self._changed = changed
        self.group: RaftGroup | None = None  # set once the node made the Raft group
        self.state: dict[bytes, bytes] = {}  # committed record key -> latest value
        # group id -> the offset commits committed for it, by partition (from ``state``)
        self._committed: dict[str, dict[TopicPartition, OffsetCommitRecord]] = {}
        self.coordinator: GroupCoordinator | None = None  # while this replica leads
        self.leader = LeaderAndEpoch(None, 0)
        self.load_error: str | None = None  # a committed record the coordinator cannot read
        self._waiting: set[asyncio.Future[Any]] = set()
        self._persisting: set[asyncio.Task[None]] = set()  # appends whose answers wait

    # ---- the Raft listener -----------------------------------------------------------------

    def handle_commit(self, batches: list[CommittedBatch]) -> None:
        state = self.state
        for batch in batches:
            for record in batch.records:
                key = record.key
                if key is None:
                    continue  # never written by a coordinator
                if record.value is None:
                    state.pop(key, None)
                else:
                    state[key] = record.value
                self._index(key, record.value)

    def _index(self, key: bytes, value: bytes | None) -> None:
        try:
            decoded = decode(Record(key, value))
        except CorruptRecordError:
            return  # not served: the replay at the next load says so
        if not isinstance(decoded, OffsetCommitRecord):
            return
        offsets = self._committed.setdefault(decoded.group_id, {})
        if decoded.value is None:
            offsets.pop(decoded.partition, None)
            if not offsets:
                del self._committed[decoded.group_id]
        else:
            offsets[decoded.partition] = decoded

    def committed_offsets(
        self, group_id: str, partitions: tuple[TopicPartition, ...] | None
    ) -> OffsetFetchResponse:
        """OffsetFetch from what is committed in Raft (``partitions`` None: all the group
        has); -1 for a partition with no committed offset."""
        offsets = self._committed.get(group_id, {})
        if partitions is None:
            partitions = tuple(sorted(offsets, key=lambda tp: (tp.topic, tp.partition)))
        answers = []
        for tp in partitions:
            found = offsets.get(tp)
            if found is None or found.value is None:
                answers.append(FetchedOffset(tp, -1))
            else:
                v = found.value
                answers.append(FetchedOffset(tp, v.offset, v.leader_epoch, v.metadata))
        return OffsetFetchResponse(group_id, Errors.NONE, tuple(answers))

    def handle_leader_change(self, leader: LeaderAndEpoch) -> None:
        self.leader = leader
        self._unload()
        # The listener hears of this replica's leadership once it has read everything
        # committed before the epoch (KAFKA-15345) -- but also, at a restart, the leader its
        # quorum-state names: itself, in an epoch it led before it stopped and leads no more
        # (it resigned). Only a replica that leads now coordinates.
        group = self.group
        if leader.leader_id == self.node_id and (group is None or group.is_leader()):
            self._load()

    def _load(self) -> None:
        coordinator = GroupCoordinator(self.config, self._rng)
        try:
            coordinator.replay((Record(k, v) for k, v in self.state.items()), self._clock())
        except CorruptRecordError as exc:
            # not served: every request hears COORDINATOR_NOT_AVAILABLE, the line says why
            self.load_error = str(exc)
            logger.error("%s not coordinating: %s", self.prefix, exc)
            return
        self.load_error = None
        self.coordinator = coordinator
        logger.info(
            "%s coordinating the groups of __consumer_offsets-%d (epoch %d, %d groups)",
            self.prefix,
            self.partition,
            self.leader.epoch,
            len(coordinator.list_groups()),
        )
        self._changed()

    def _unload(self) -> None:
        self.coordinator = None
        for waiter in list(self._waiting):
            if not waiter.done():
                waiter.set_result(Errors.NOT_COORDINATOR)
        self._waiting.clear()

    # ---- requests ----------------------------------------------------------------------------

    def error(self) -> Errors | None:
        """None when this replica coordinates the partition's groups, else the error a group
        request hears: NOT_COORDINATOR where another replica leads or may lead, and
        COORDINATOR_NOT_AVAILABLE where this one leads and cannot serve."""
        if self.coordinator is not None:
            return None
        if self.load_error is not None and self.leader.leader_id == self.node_id:
            return Errors.COORDINATOR_NOT_AVAILABLE
        group = self.group
        if group is not None and group.is_leader():
            return Errors.COORDINATOR_LOAD_IN_PROGRESS  # the listener has not caught up yet
        return Errors.NOT_COORDINATOR

    async def call(self, call: Call) -> Any:
        """Run ``call`` on the coordinator and wait for its answer: the response, or an
        :class:`Errors` (NOT_COORDINATOR when leadership went before it was answered)."""
        coordinator = self.coordinator
        if coordinator is None:
            return self.error() or Errors.NOT_COORDINATOR
        waiter: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._waiting.add(waiter)
        try:
            self.carry_out(call(coordinator, waiter, self._clock()))
            return await waiter
        finally:
            self._waiting.discard(waiter)

    def poll(self) -> None:
        """The coordinator's deadlines that passed (sessions, joins, syncs)."""
        coordinator = self.coordinator
        if coordinator is not None:
            self.carry_out(coordinator.poll(self._clock()))

    def next_deadline(self) -> int | None:
        coordinator = self.coordinator
        return None if coordinator is None else coordinator.next_deadline()

    def carry_out(self, out: Output) -> None:
        """Answers now when nothing is to be persisted; else once the records are committed."""
        self._changed()
        if not out.records:
            _deliver(out)
            return
        task = asyncio.ensure_future(self._persist(out, self.coordinator))
        self._persisting.add(task)
        task.add_done_callback(self._persisting.discard)

    async def _persist(self, out: Output, coordinator: GroupCoordinator | None) -> None:
        group = self.group
        try:
            if group is None or coordinator is None:
                raise NotLeaderError(self.leader, f"{self.prefix} not coordinating")
            await group.appends().append([(r.key, r.value) for r in out.records], True)
        except (NotLeaderError, RaftcoreError) as exc:
            # The coordinator's state went past what is committed: dropped, rebuilt from the
            # log by whoever leads next (this replica too, at its next epoch).
            if self.coordinator is coordinator:
                logger.info("%s stops coordinating: %s", self.prefix, exc)
                self._unload()
            for reply in out.replies:
                _answer(reply.ref, Errors.NOT_COORDINATOR)
            return
        _deliver(out)

    def close(self) -> None:
        for task in list(self._persisting):
            task.cancel()
        self._unload()


def _deliver(out: Output) -> None:
    for reply in out.replies:
        _answer(reply.ref, reply.response)


def _answer(ref: object, response: object) -> None:
    if isinstance(ref, asyncio.Future) and not ref.done():
        ref.set_result(response)
