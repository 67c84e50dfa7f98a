"""Acknowledged means committed (issue 9): the leader's pending appends live in the core.

An append succeeds only when the high watermark passes its last offset while the replica still
leads the epoch that appended it; it fails with NOT_LEADER_OR_FOLLOWER, naming the leader known
then (KIP-951), the moment that leadership ends -- never later, and never as a success because
a later high watermark passed its old offsets.
"""

from raft_harness import CLUSTER, Harness, batch

from raftcore.error_codes import Errors
from raftcore.raft import (
    Appended,
    AppendOutcome,
    BeginQuorumEpochRequest,
    EndQuorumEpochRequest,
    FetchRequest,
    FetchResponse,
    LeaderAndEpoch,
    NotLeaderError,
    OffsetAndEpoch,
)
from raftcore.raft.states import FollowerState, LeaderState


class Outcomes:
    """Collects the verdicts a harnessed core gives."""

    def __init__(self, h: Harness) -> None:
        self.h = h
        self.seen: list[AppendOutcome] = []
        take = h._take

        def taking(out):  # type: ignore[no-untyped-def]
            self.seen.extend(out.completions)
            take(out)

        h._take = taking  # type: ignore[method-assign]

    def of(self, appended: Appended) -> list[AppendOutcome]:
        return [o for o in self.seen if o.appended.token == appended.token]


def leader_with_followers_at(h: Harness, offset: int) -> None:
    for replica in (2, 3):
        h.fetch(replica, offset, h.epoch)


def test_an_append_is_acknowledged_once_the_high_watermark_passes_it_in_its_epoch():
    h = Harness()
    seen = Outcomes(h)
    h.become_leader()
    h.flush()
    appended = h.core.append([(b"k", b"a"), (b"k", b"b")], h.now)
    assert (appended.first_offset, appended.last_offset, appended.epoch) == (1, 2, h.epoch)
    h.flush()
    h.fetch(2, 2, h.epoch)  # the majority has offsets 0..1: not enough
    assert seen.of(appended) == []
    h.fetch(2, 3, h.epoch)
    [outcome] = seen.of(appended)
    assert outcome.committed and outcome.error == Errors.NONE
    assert outcome.leader.leader_id == 1 and outcome.leader.epoch == h.epoch


def test_an_append_unpacks_as_its_first_and_last_offset():
    h = Harness()
    h.become_leader()
    first, last = h.core.append([(b"k", b"v")] * 3, h.now)
    assert (first, last) == (1, 3)


def test_a_verdict_is_given_once():
    h = Harness()
    seen = Outcomes(h)
    h.become_leader()
    h.flush()
    appended = h.core.append([(b"k", b"v")], h.now)
    h.flush()
    leader_with_followers_at(h, 2)
    leader_with_followers_at(h, 2)
    h.advance(10)
    assert len(seen.of(appended)) == 1


def test_an_untracked_append_has_no_verdict():
    h = Harness()
    seen = Outcomes(h)
    h.become_leader()
    h.flush()
    appended = h.core.append([(b"k", b"v")], h.now, track=False)
    assert appended.token is None
    h.flush()
    leader_with_followers_at(h, 2)
    assert seen.seen == []


def test_a_deposed_leader_fails_its_pending_append_at_once_with_the_new_leader():
    h = Harness()
    seen = Outcomes(h)
    h.become_leader()
    epoch = h.epoch
    h.flush()
    appended = h.core.append([(b"k", b"unreplicated")], h.now)
    h.flush()
    # node 2 won epoch+1 meanwhile and tells us
    h.begin_quorum_epoch(2, epoch + 1)
    assert isinstance(h.state, FollowerState)
    [outcome] = seen.of(appended)
    assert not outcome.committed and outcome.error == Errors.NOT_LEADER_OR_FOLLOWER
    assert (outcome.leader.leader_id, outcome.leader.epoch) == (2, epoch + 1)


def test_a_deposed_leader_never_acknowledges_records_that_replaced_its_append():
    """The issue's scenario: the leader appends and cannot replicate; it loses leadership,
    truncates the append away (KIP-279), fetches the new leader's records into the same offsets,
    and its high watermark passes them. The append failed at the leader change and is never
    reported committed."""
    h = Harness()
    seen = Outcomes(h)
    h.become_leader()
    old_epoch = h.epoch
    h.flush()
    leader_with_followers_at(h, 1)  # the LeaderChange record at 0 is committed
    appended = h.core.append([(b"k", b"lost")], h.now)
    h.flush()
    assert appended.first_offset == 1
    # deposed: node 2 leads epoch+1 and never had offset 1 of our epoch
    h.begin_quorum_epoch(2, old_epoch + 1)
    [fetch] = h.take(FetchRequest, 2)
    assert fetch.message.fetch_offset == 2
    h.respond(
        fetch,
        FetchResponse(
            Errors.NONE,
            1,
            0,
            LeaderAndEpoch(2, old_epoch + 1),
            diverging_epoch=OffsetAndEpoch(1, old_epoch),
        ),
    )
    assert h.log.end_offset == 1  # truncated away
    h.flush()
    [fetch] = h.take(FetchRequest, 2)
    assert fetch.message.fetch_offset == 1
    replacement = batch(1, old_epoch + 1, n=2, value=b"other")
    h.respond(
        fetch,
        FetchResponse(Errors.NONE, 3, 0, LeaderAndEpoch(2, old_epoch + 1), records=replacement),
    )
    h.flush()
    assert h.core.high_watermark == 3  # past the old offsets
    outcomes = seen.of(appended)
    assert [o.error for o in outcomes] == [Errors.NOT_LEADER_OR_FOLLOWER]


def test_a_resigning_leader_fails_its_pending_appends():
    h = Harness()
    seen = Outcomes(h)
    h.become_leader()
    h.flush()
    appended = h.core.append([(b"k", b"v")], h.now)
    h._take(h.core.resign(h.now))
    assert h.take(EndQuorumEpochRequest)
    [outcome] = seen.of(appended)
    assert outcome.error == Errors.NOT_LEADER_OR_FOLLOWER


def test_a_leader_that_loses_its_quorum_fails_its_pending_appends():
    h = Harness()
    seen = Outcomes(h)
    h.become_leader()
    h.flush()
    appended = h.core.append([(b"k", b"v")], h.now)
    h.advance(int(h.config.check_quorum_timeout_ms * 1.5) + 1)
    assert not isinstance(h.state, LeaderState)
    [outcome] = seen.of(appended)
    assert outcome.error == Errors.NOT_LEADER_OR_FOLLOWER


def test_a_shutting_down_leader_refuses_appends_and_fails_the_pending_ones():
    h = Harness()
    seen = Outcomes(h)
    h.become_leader()
    h.flush()
    appended = h.core.append([(b"k", b"v")], h.now)
    h._take(h.core.begin_shutdown(h.now))
    [outcome] = seen.of(appended)
    assert outcome.error == Errors.NOT_LEADER_OR_FOLLOWER
    try:
        h.core.append([(b"k", b"v")], h.now)
    except NotLeaderError:
        pass
    else:
        raise AssertionError("a shutting-down replica took an append")


def test_begin_quorum_epoch_of_the_same_leader_keeps_pending_appends():
    # Only a change of leadership fails them; our own epoch's messages do not.
    h = Harness()
    seen = Outcomes(h)
    h.become_leader()
    h.flush()
    appended = h.core.append([(b"k", b"v")], h.now)
    h.request(2, BeginQuorumEpochRequest(CLUSTER, 1, h.epoch, 2))
    assert isinstance(h.state, LeaderState)
    assert seen.of(appended) == []
    h.flush()
    leader_with_followers_at(h, 2)
    assert seen.of(appended)[0].committed
