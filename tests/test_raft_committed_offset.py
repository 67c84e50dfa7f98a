"""No leader makes a replica remove a record below its committed offset (raftcore.raft.committed):
the highest high watermark it knew, in memory or checkpointed before a restart. A leader that
asks was elected without the committed records (a majority of the voters lost their disks);
the core refuses before the log is touched, and the node stops with the error's line."""

import pytest
from raft_harness import Harness, batch, log_with

from raftcore.error_codes import Errors
from raftcore.errors import TruncationRefusedError
from raftcore.raft import FetchResponse, LeaderAndEpoch, OffsetAndEpoch
from raftcore.raft.committed import CommittedOffset
from raftcore.raft.messages import FetchRequest, FetchSnapshotRequest
from raftcore.raft.states import FollowerState, LeaderState

HISTORY = (1, 1, 1, 2, 2)  # one record per epoch listed: offsets 0..4, log end 5


def follower(history=HISTORY, *, leader=2, epoch=7, **kw):
    h = Harness(log=log_with(*history), **kw)
    h.begin_quorum_epoch(leader, epoch)
    return h


def answer(h, **fields):
    [out] = h.take(FetchRequest)
    leader = LeaderAndEpoch(out.destination, h.epoch)
    h.respond(out, FetchResponse(Errors.NONE, fields.pop("hw", -1), 0, leader, **fields))


def test_a_restarted_replica_refuses_a_divergence_below_its_checkpointed_committed_offset():
    # The survivor of a wiped majority: its high watermark was 5 before the restart; the new
    # leader's log is empty, so it answers with the end of epoch 0.
    h = follower(committed_offset=5)
    assert h.core.high_watermark is None and h.core.committed_offset == 5
    with pytest.raises(TruncationRefusedError) as refused:
        answer(h, diverging_epoch=OffsetAndEpoch(0, 0))
    line = str(refused.value)
    assert "asked by leader 2 in epoch 7 to truncate its log to offset 0" in line
    assert "below the committed offset 5" in line
    assert "a majority of the voters may have lost their disks" in line
    assert "docs/operations.md" in line and "\n" not in line
    assert (refused.value.leader, refused.value.epoch, refused.value.offset) == (2, 7, 0)
    assert h.log.end_offset == 5 and h.log.last_fetched_epoch == 2  # untouched


def test_a_divergence_from_the_committed_offset_on_truncates_as_before():
    h = follower(committed_offset=3)
    answer(h, diverging_epoch=OffsetAndEpoch(3, 1))
    assert h.log.end_offset == 3 and isinstance(h.state, FollowerState)


def test_the_refusal_counts_where_the_log_would_be_cut_not_only_what_the_leader_says():
    # The leader's epoch 1 ends at 5, but this log has no epoch 1 after offset 2 ... it has
    # epoch 2 from 3: the cut is at the end of our epoch 1 (3), below the committed 4.
    h = follower(committed_offset=4)
    with pytest.raises(TruncationRefusedError, match="to offset 3, below the committed offset 4"):
        answer(h, diverging_epoch=OffsetAndEpoch(5, 1))
    assert h.log.end_offset == 5


def test_the_committed_offset_at_start_is_capped_at_the_log_end():
    # A crash took an unflushed tail the checkpoint had counted: what is gone is not protected,
    # and the leader's records fill it again.
    h = follower(committed_offset=9)
    assert h.core.committed_offset == 5
    answer(h, diverging_epoch=OffsetAndEpoch(5, 2))
    assert h.log.end_offset == 5


def test_the_committed_offset_takes_in_the_high_watermark_and_never_moves_back():
    h = follower()
    answer(h, records=batch(5, 7, 2), hw=6)
    assert h.core.committed_offset == 6
    # it leads now: a new leader starts without a high watermark, the committed offset stays
    h.advance(1)  # past the fetch timeout with the next 2 s
    h.become_candidate()
    h.grant_votes(3)
    assert isinstance(h.state, LeaderState) and h.core.high_watermark is None
    assert h.core.committed_offset == 6


def test_a_committed_offset_is_never_negative():
    with pytest.raises(ValueError, match="-1"):
        CommittedOffset(-1)


def test_a_snapshot_that_would_start_the_log_below_the_committed_offset_is_refused_unfetched():
    # The new majority took a snapshot at 3 in epoch 7; this log's epoch at offset 2 is 1:
    # installing it would drop the committed 3 and 4.
    h = follower(committed_offset=5)
    with pytest.raises(TruncationRefusedError, match=r"install a snapshot .* to offset 3"):
        answer(h, snapshot_id=OffsetAndEpoch(3, 7))
    assert h.log.latest_snapshot_id() is None and h.log.end_offset == 5
    assert not h.take(FetchSnapshotRequest)


def test_a_snapshot_from_the_committed_offset_on_is_fetched():
    h = follower(committed_offset=5)
    answer(h, snapshot_id=OffsetAndEpoch(8, 7))
    assert h.take(FetchSnapshotRequest)


def test_a_snapshot_whose_prefix_the_log_holds_is_not_refused():
    # (3, 1): the record at 2 is of epoch 1 here too -- installing it truncates nothing
    h = follower(committed_offset=5)
    answer(h, snapshot_id=OffsetAndEpoch(3, 1))
    assert h.log.end_offset == 5
