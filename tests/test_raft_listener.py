"""The application's view: committed batches exactly once and in order, leader changes, and
appends on the leader."""

import pytest
from raft_harness import Harness, RecordingListener, batch, log_with

from raftcore.error_codes import Errors
from raftcore.raft import FetchRequest, FetchResponse, LeaderAndEpoch, NotLeaderError


def committed_leader(listener=None):
    """A leader (1 of 3) with its LeaderChange committed."""
    h = Harness(listener=listener)
    h.become_leader()
    h.flush()
    h.fetch(2, 1, h.epoch)
    assert h.core.high_watermark == 1
    return h


def test_append_on_the_leader_returns_the_offsets():
    h = committed_leader()
    assert tuple(h.core.append([(b"k", b"a"), (b"k", b"b")], h.now)) == (1, 2)
    assert tuple(h.core.append([(b"k", b"c")], h.now)) == (3, 3)


def test_append_on_a_non_leader_raises_not_leader_with_the_known_leader():
    h = Harness()
    h.begin_quorum_epoch(3, 4)
    with pytest.raises(NotLeaderError) as info:
        h.core.append([(b"k", b"v")], h.now)
    assert info.value.leader == LeaderAndEpoch(3, 4)


def test_append_with_a_stale_epoch_raises_not_leader():
    h = committed_leader()
    with pytest.raises(NotLeaderError, match="epoch"):
        h.core.append([(b"k", b"v")], h.now, epoch=h.epoch - 1)


def test_the_listener_gets_each_committed_batch_once_in_order_up_to_the_high_watermark():
    listener = RecordingListener()
    h = committed_leader(listener)
    h.core.append([(b"k", b"a")], h.now)
    h.core.append([(b"k", b"b"), (b"k", b"c")], h.now)
    h.flush()
    assert listener.committed == []  # nothing of it committed yet
    h.fetch(2, 2, h.epoch)
    assert listener.committed == [(1, b"a")]
    h.fetch(2, 4, h.epoch)
    h.fetch(2, 4, h.epoch)
    h.poll()
    assert listener.committed == [(1, b"a"), (2, b"b"), (3, b"c")]
    assert [(b.base_offset, b.last_offset, b.epoch) for b in listener.batches] == [
        (1, 1, h.epoch),
        (2, 3, h.epoch),
    ]


def test_the_listener_never_sees_control_batches():
    listener = RecordingListener()
    committed_leader(listener)
    assert listener.batches == []  # the LeaderChange record at 0 is committed but not handed


def test_the_listener_replays_the_committed_log_after_a_restart():
    first = RecordingListener()
    h = committed_leader(first)
    h.core.append([(b"k", b"a")], h.now)
    h.flush()
    h.fetch(2, 2, h.epoch)
    assert first.committed == [(1, b"a")]
    # restart: a fresh listener gets everything again, once, once the hw is known
    second = RecordingListener()
    r = Harness(log=h.log, store=h.store, listener=second)
    r.become_leader()
    r.flush()
    r.fetch(2, r.log.end_offset, r.epoch)
    assert second.committed == [(1, b"a")]


def test_a_listener_can_start_after_what_it_already_applied():
    listener = RecordingListener()
    h = Harness(log=log_with(1, 1, 1), listener=listener, start=False)
    h.core.feed.next_offset = 2
    h._take(h.core.start(h.now))
    h.begin_quorum_epoch(2, 3)
    [out] = h.take(FetchRequest)
    h.respond(out, FetchResponse(Errors.NONE, 3, 0, LeaderAndEpoch(2, 3)))
    assert [o for o, _ in listener.committed] == [2]


def test_a_follower_hears_of_each_leader_once():
    listener = RecordingListener()
    h = Harness(listener=listener)
    h.begin_quorum_epoch(2, 3)
    h.begin_quorum_epoch(2, 3)
    h.poll()
    assert listener.leaders == [LeaderAndEpoch(2, 3)]


def test_the_leader_fires_leader_change_only_once_its_listener_reached_the_epoch_start():
    # KAFKA-15345: before writing as leader the application must have seen all committed data.
    listener = RecordingListener()
    log = log_with(1, 1, 1)
    h = Harness(log=log, listener=listener)
    h.become_leader()
    h.flush()
    assert LeaderAndEpoch(1, h.epoch) not in listener.leaders  # listener is at 0, start is 3
    h.fetch(2, 4, h.epoch)  # commits 0..3: the listener reads through the epoch start
    assert listener.leaders[-1] == LeaderAndEpoch(1, h.epoch)
    assert [o for o, _ in listener.committed] == [0, 1, 2]


def test_committed_batches_are_crc_checked_before_the_listener_sees_them():
    # KAFKA-14104
    listener = RecordingListener()
    h = Harness(listener=listener)
    h.begin_quorum_epoch(2, 5)
    [out] = h.take(FetchRequest)
    h.respond(out, FetchResponse(Errors.NONE, 2, 0, LeaderAndEpoch(2, 5), batch(0, 5, 2)))
    assert [o for o, _ in listener.committed] == [0, 1]
