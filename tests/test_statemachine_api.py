"""The state-machine contract (raftcore.statemachine.api), checked on every key/value state
machine alike -- the dict reference and LMDB -- and the in-memory snapshot writer and reader."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from record_strategies import example_count
from statemachine_helpers import batches_of, committed

from raftcore.statemachine import (
    DictStateMachine,
    LmdbStateMachine,
    MemorySnapshotReader,
    MemorySnapshotWriter,
    SnapshotReader,
    SnapshotWriter,
    StateMachine,
    StateMachineError,
)


@pytest.fixture(params=["dict", "lmdb"])
def make(request, tmp_path):
    """A factory of empty state machines of one kind."""
    opened = []

    def new():
        if request.param == "dict":
            return DictStateMachine()
        sm = LmdbStateMachine(tmp_path / f"state-{len(opened)}", map_size=64 << 20, sync=False)
        opened.append(sm)
        return sm

    yield new
    for sm in opened:
        sm.close()


def state_of(sm) -> dict:
    return dict(sm.items()) if isinstance(sm, LmdbStateMachine) else dict(sm.data)


def test_the_state_machines_and_snapshot_helpers_satisfy_the_protocols(make):
    assert isinstance(make(), StateMachine)
    assert isinstance(MemorySnapshotWriter(), SnapshotWriter)
    assert isinstance(MemorySnapshotReader([], 0), SnapshotReader)


def test_a_fresh_state_machine_has_applied_nothing(make):
    assert make().applied_offset == 0


def test_apply_sets_the_applied_offset_to_the_end_of_the_last_batch(make):
    sm = make()
    sm.apply([committed([(b"a", b"1")], 0), committed([(b"b", b"2"), (b"c", b"3")], 1)])
    assert sm.applied_offset == 3
    # a gap (a control batch at offset 3, never handed to state machines) is fine
    sm.apply([committed([(b"d", b"4")], 4)])
    assert sm.applied_offset == 5
    assert state_of(sm) == {b"a": b"1", b"b": b"2", b"c": b"3", b"d": b"4"}


def test_a_null_value_deletes_the_key(make):
    sm = make()
    sm.apply([committed([(b"a", b"1"), (b"b", b"2")], 0)])
    sm.apply([committed([(b"a", None), (b"zz", None)], 2)])  # deleting a missing key is a no-op
    assert state_of(sm) == {b"b": b"2"}
    assert sm.get(b"a") is None


def test_later_records_win_within_a_batch(make):
    sm = make()
    sm.apply([committed([(b"k", b"1"), (b"k", None), (b"k", b"3"), (b"j", b"x"), (b"j", None)], 0)])
    assert state_of(sm) == {b"k": b"3"}


@pytest.mark.parametrize("first", [0, 3, 4])
def test_a_batch_at_or_below_the_applied_offset_was_applied_already_and_is_refused(make, first):
    sm = make()
    sm.apply([committed([(b"a", b"1")] * 5, 0)])
    with pytest.raises(StateMachineError, match="applied already"):
        sm.apply([committed([(b"b", b"2")], first)])
    assert sm.applied_offset == 5
    assert state_of(sm) == {b"a": b"1"}


def test_overlapping_batches_in_one_call_are_refused_before_anything_is_applied(make):
    sm = make()
    with pytest.raises(StateMachineError, match="applied already"):
        sm.apply([committed([(b"a", b"1")] * 3, 0), committed([(b"b", b"2")], 2)])
    assert sm.applied_offset == 0
    assert state_of(sm) == {}


def test_a_batch_entered_in_the_middle_applies_only_the_records_from_there(make):
    """A node restarted at applied offset 3 inside batch 0..4 is handed the batch from 3."""
    sm = make()
    sm.apply([committed([(b"k%d" % i, b"v") for i in range(5)], 0, from_offset=3)])
    assert state_of(sm) == {b"k3": b"v", b"k4": b"v"}
    assert sm.applied_offset == 5


def test_records_whose_key_is_not_1_to_511_bytes_are_skipped_alike(make, caplog):
    sm = make()
    sm.apply([committed([(None, b"x"), (b"", b"y"), (b"k" * 512, b"z"), (b"ok", b"1")], 7)])
    assert state_of(sm) == {b"ok": b"1"}
    assert sm.applied_offset == 11
    assert sm.skipped_records == 3
    assert "skipping 3 record(s) of batch 7..10" in caplog.text
    assert "offset 7, a null key" in caplog.text


def test_snapshot_starts_the_writer_at_the_applied_offset_then_writes_every_pair_in_key_order(
    make,
):
    sm = make()
    sm.apply(batches_of([(b"%05d" % (i * 7919 % 10_000), b"v%d" % i) for i in range(10_000)], 999))
    writer = MemorySnapshotWriter()
    assert sm.snapshot(writer) == 10_000
    assert writer.end_offset == 10_000
    reader = writer.freeze()
    pairs = reader.pairs()
    assert [k for k, _ in pairs] == sorted(state_of(sm))
    assert dict(pairs) == state_of(sm)


def test_restore_replaces_the_whole_state(make):
    sm = make()
    sm.apply([committed([(b"old-%d" % i, b"x") for i in range(100)] + [(b"both", b"old")], 0)])
    reader = MemorySnapshotReader.from_pairs(
        [(b"both", b"new"), (b"new-1", b"y"), (b"new-2", b"z")], end_offset=50_000, chunk_pairs=2
    )
    sm.restore(reader)
    assert state_of(sm) == {b"both": b"new", b"new-1": b"y", b"new-2": b"z"}
    assert sm.applied_offset == 50_000
    # and applying goes on from the snapshot's end
    with pytest.raises(StateMachineError, match="applied already"):
        sm.apply([committed([(b"late", b"x")], 49_999)])
    sm.apply([committed([(b"late", b"x")], 50_000)])
    assert sm.get(b"late") == b"x"


def test_a_snapshot_restored_into_another_state_machine_gives_the_same_state_and_offset(make):
    source, target = make(), make()
    source.apply(batches_of([(b"k%d" % (i % 300), b"v%d" % i) for i in range(1000)], 64))
    target.apply([committed([(b"stale", b"x")], 0)])
    writer = MemorySnapshotWriter()
    source.snapshot(writer)
    target.restore(writer.freeze())
    assert state_of(target) == state_of(source)
    assert target.applied_offset == source.applied_offset == 1000


def test_memory_snapshot_writer_refuses_appends_before_start_and_after_freeze():
    writer = MemorySnapshotWriter()
    with pytest.raises(StateMachineError, match="before start"):
        writer.append([(b"k", b"v")])
    writer.start(5)
    with pytest.raises(StateMachineError, match="started twice"):
        writer.start(6)
    chunk = [(b"k", b"v")]
    writer.append(chunk)
    chunk.append((b"x", b"y"))  # the writer copied it
    reader = writer.freeze()
    with pytest.raises(StateMachineError, match="frozen"):
        writer.append([(b"j", b"v")])
    assert reader.end_offset == 5
    assert list(reader) == [[(b"k", b"v")]]
    assert list(reader) == [[(b"k", b"v")]]  # iterable again


ops = st.lists(
    st.tuples(
        st.sampled_from([b"a", b"b", b"c", b"dd", b"e" * 40]), st.none() | st.binary(max_size=8)
    ),
    max_size=60,
)


@settings(max_examples=example_count(60), deadline=None)
@given(ops=ops, batch_size=st.integers(1, 7), snapshot_at=st.integers(0, 10))
def test_lmdb_agrees_with_the_dict_reference_through_applies_snapshots_and_restores(
    tmp_path_factory, ops, batch_size, snapshot_at
):
    """Differential: the same batches give the same state and offset; so does a restore of
    either one's snapshot into the other, and applying on after it."""
    reference = DictStateMachine()
    with LmdbStateMachine(tmp_path_factory.mktemp("lmdb"), map_size=16 << 20, sync=False) as sm:
        batches = batches_of(ops, batch_size)
        cut = min(snapshot_at, len(batches))
        for machine in (reference, sm):
            machine.apply(batches[:cut])
        writer = MemorySnapshotWriter()
        sm.snapshot(writer)
        reference.restore(writer.freeze())
        for machine in (reference, sm):
            machine.apply(batches[cut:])
        assert dict(sm.items()) == reference.data
        assert sm.applied_offset == reference.applied_offset == len(ops)
