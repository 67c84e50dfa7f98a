"""ProspectiveState (KIP-996): the pre-vote election of one epoch, kept in memory only."""

from raftcore.raft.states import ProspectiveState
from raftcore.raft.values import ElectionState
from raftcore.raft.voters import ReplicaKey

VOTERS = frozenset({1, 2, 3, 4, 5})


def prospective(**kw):
    return ProspectiveState(7, VOTERS, 1, 2_000, **kw)


DIR4 = b"\x04" * 16


def test_it_counts_itself_as_granted():
    p = prospective()
    assert p.granted == {1} and p.unrecorded_voters() == {2, 3, 4, 5}
    assert not p.is_vote_granted() and not p.is_vote_rejected()


def test_a_majority_of_grants_including_itself_wins_the_pre_vote():
    p = prospective()
    p.record_granted(2)
    assert not p.is_vote_granted()
    p.record_granted(3)
    assert p.is_vote_granted()


def test_it_is_rejected_once_the_voters_not_heard_from_cannot_make_a_majority():
    p = prospective()
    p.record_rejected(2)
    p.record_rejected(3)
    assert not p.is_vote_rejected()
    p.record_rejected(4)
    assert p.is_vote_rejected()


def test_a_voter_cannot_flip_between_grant_and_rejection():
    p = prospective()
    p.record_granted(2)
    p.record_rejected(2)
    p.record_rejected(3)
    p.record_granted(3)
    assert p.granted == {1, 2} and p.rejected == {3}


def test_answers_from_non_voters_are_not_counted():
    p = prospective()
    p.record_granted(9)
    p.record_rejected(8)
    assert p.granted == {1} and p.rejected == set()


def test_its_election_times_out_at_its_deadline():
    p = prospective()
    assert not p.election_expired(1_999)
    assert p.election_expired(2_000)


def test_it_says_what_the_state_it_came_from_stored():
    """Kafka's transitionToProspective writes nothing: the stored state is unchanged."""
    assert prospective().election_state() == ElectionState(epoch=7, voters=VOTERS)
    assert prospective(leader=3).election_state() == ElectionState(
        epoch=7, leader_id=3, voters=VOTERS
    )
    assert prospective(voted=ReplicaKey(4, DIR4)).election_state() == ElectionState(
        epoch=7, voted_id=4, voters=VOTERS, voted_directory_id=DIR4
    )
    assert prospective(leader=3).leader_id == 3


def test_it_grants_pre_votes_to_any_up_to_date_log():
    p = prospective(leader=3, voted=None)
    assert p.can_grant_pre_vote(2, True) and p.can_grant_pre_vote(4, True)
    assert not p.can_grant_pre_vote(2, False)


def test_it_grants_a_real_vote_as_unattached_would():
    """Kafka's unattachedOrProspectiveCanGrantVote: the same candidate again if it voted,
    nobody if it knows the leader, else an up-to-date log."""
    two, four = ReplicaKey(2), ReplicaKey(4, DIR4)
    assert prospective().can_grant_vote(two, True)
    assert not prospective().can_grant_vote(two, False)
    assert not prospective(leader=3).can_grant_vote(two, True)
    voted = prospective(voted=four)
    assert voted.can_grant_vote(four, False) and not voted.can_grant_vote(two, True)
    # KIP-853: the same id from another directory is another replica
    assert not voted.can_grant_vote(ReplicaKey(4, b"\x09" * 16), True)
