"""The leader-epoch cache (KIP-595 fetch validation, KIP-279 truncation): Kafka's
LeaderEpochFileCache rules, the native search against a naive reference, and the checkpoint
file."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from reference.epoch_cache_ref import NaiveEpochCache

from raftcore.epoch_cache import (
    CHECKPOINT_FILE,
    EpochCache,
    EpochEndOffset,
    LeaderEpochFileCache,
    read_epoch_checkpoint,
)
from raftcore.errors import CorruptCheckpointError


def cache_of(*entries):
    c = EpochCache()
    for e, s in entries:
        c.assign(e, s)
    return c


# ---- assign -------------------------------------------------------------------------------


def test_assign_of_a_new_epoch_appends_an_entry():
    c = cache_of((1, 0), (3, 10))
    assert c.assign(5, 20)
    assert c.entries() == [(1, 0), (3, 10), (5, 20)]


def test_assign_of_the_latest_epoch_at_a_later_offset_changes_nothing():
    c = cache_of((1, 0), (3, 10))
    assert not c.assign(3, 15)
    assert c.entries() == [(1, 0), (3, 10)]


def test_assign_of_the_latest_epoch_at_an_earlier_offset_moves_its_start():
    c = cache_of((1, 0), (3, 10))
    assert c.assign(3, 7)
    assert c.entries() == [(1, 0), (3, 7)]


def test_assign_drops_entries_with_a_greater_or_equal_epoch_or_start():
    c = cache_of((1, 0), (3, 10), (5, 20), (7, 30))
    assert c.assign(4, 15)
    assert c.entries() == [(1, 0), (3, 10), (4, 15)]
    c = cache_of((1, 0), (3, 10), (5, 20))
    assert c.assign(6, 10)  # same start as epoch 3: epoch 3 had no records
    assert c.entries() == [(1, 0), (6, 10)]


def test_assign_refuses_negative_epochs_and_offsets():
    c = EpochCache()
    with pytest.raises(ValueError, match="-1"):
        c.assign(-1, 0)
    with pytest.raises(ValueError, match="-5"):
        c.assign(1, -5)
    assert len(c) == 0


# ---- end_offset_for: the KIP-595 / KIP-279 question ------------------------------------------


def test_end_offset_for_the_latest_epoch_is_the_log_end_offset():
    assert cache_of((1, 0), (3, 10)).end_offset_for(3, 42) == (3, 42)


def test_end_offset_for_epoch_between_entries_returns_floor_epoch_and_next_start_offset():
    c = cache_of((1, 0), (3, 10), (6, 25))
    assert c.end_offset_for(4, 40) == (3, 25)
    assert c.end_offset_for(3, 40) == (3, 25)
    assert c.end_offset_for(2, 40) == (1, 10)


def test_end_offset_for_epoch_below_every_entry_returns_it_with_the_first_start_offset():
    assert cache_of((4, 100), (6, 150)).end_offset_for(2, 200) == (2, 100)


def test_end_offset_for_epoch_above_every_entry_is_undefined():
    assert cache_of((1, 0), (3, 10)).end_offset_for(9, 40) == (-1, -1)


def test_end_offset_for_undefined_epoch_or_empty_cache_is_undefined():
    assert cache_of((1, 0)).end_offset_for(-1, 40) == (-1, -1)
    assert EpochCache().end_offset_for(3, 40) == (-1, -1)


def test_end_offset_for_returns_a_named_tuple():
    result = cache_of((1, 0), (3, 10)).end_offset_for(2, 40)
    assert isinstance(result, EpochEndOffset) and isinstance(result, tuple)
    assert (result.epoch, result.end_offset) == (1, 10)
    epoch, end = result
    assert (epoch, end) == (1, 10)


# ---- epoch_for_offset and truncation --------------------------------------------------------


def test_epoch_for_offset_is_the_epoch_of_the_greatest_start_at_or_below_it():
    c = cache_of((1, 0), (3, 10), (6, 25))
    assert [c.epoch_for_offset(o) for o in (0, 9, 10, 24, 25, 1000)] == [1, 1, 3, 3, 6, 6]
    assert cache_of((2, 5)).epoch_for_offset(4) == -1


def test_truncate_from_end_drops_entries_starting_at_or_after_the_offset():
    c = cache_of((1, 0), (3, 10), (6, 25))
    assert c.truncate_from_end(25)
    assert c.entries() == [(1, 0), (3, 10)]
    assert not c.truncate_from_end(11)
    assert c.truncate_from_end(10)
    assert c.entries() == [(1, 0)]


def test_truncate_from_end_with_a_negative_offset_changes_nothing():
    c = cache_of((1, 0), (3, 10))
    assert not c.truncate_from_end(-1)
    assert c.entries() == [(1, 0), (3, 10)]


def test_truncate_from_start_re_anchors_the_epoch_in_force_at_the_new_start():
    c = cache_of((1, 0), (3, 10), (6, 25))
    assert c.truncate_from_start(12)
    assert c.entries() == [(3, 12), (6, 25)]
    assert c.truncate_from_start(25)
    assert c.entries() == [(6, 25)]
    assert not c.truncate_from_start(25)
    assert not cache_of((4, 100)).truncate_from_start(50)


# ---- differential: native against naive ----------------------------------------------------

operations = st.lists(
    st.one_of(
        st.tuples(st.just("assign"), st.integers(0, 30), st.integers(0, 300)),
        st.tuples(st.just("truncate_from_end"), st.integers(-1, 320)),
        st.tuples(st.just("truncate_from_start"), st.integers(0, 320)),
    ),
    max_size=60,
)


@settings(max_examples=400, deadline=None)
@given(operations, st.lists(st.integers(-1, 35), max_size=20), st.integers(0, 400))
def test_native_cache_matches_the_naive_reference(ops, queries, log_end):
    native, naive = EpochCache(), NaiveEpochCache()
    for op, *args in ops:
        assert getattr(native, op)(*args) == getattr(naive, op)(*args), (op, args)
        assert native.entries() == naive.entries
    for q in queries:
        assert tuple(native.end_offset_for(q, log_end)) == naive.end_offset_for(q, log_end)
        assert native.epoch_for_offset(q * 10) == naive.epoch_for_offset(q * 10)


# ---- the checkpoint file ----------------------------------------------------------------------


def test_checkpoint_round_trips_in_kafkas_text_format(tmp_path):
    cache = LeaderEpochFileCache(tmp_path)
    cache.assign(1, 0)
    cache.assign(4, 120)
    assert (tmp_path / CHECKPOINT_FILE).read_text() == "0\n2\n1 0\n4 120\n"
    assert LeaderEpochFileCache(tmp_path).entries() == [(1, 0), (4, 120)]


def test_every_change_is_persisted_and_no_change_writes_nothing(tmp_path):
    cache = LeaderEpochFileCache(tmp_path)
    cache.assign(1, 0)
    cache.assign(2, 5)
    path = tmp_path / CHECKPOINT_FILE
    stamp = path.stat().st_mtime_ns
    assert not cache.assign(2, 9)
    assert path.stat().st_mtime_ns == stamp
    cache.truncate_from_end(5)
    assert read_epoch_checkpoint(path) == [(1, 0)]
    cache.truncate_from_start(3)
    assert read_epoch_checkpoint(path) == [(1, 3)]
    cache.clear()
    assert read_epoch_checkpoint(path) == []


def test_a_missing_checkpoint_is_an_empty_cache(tmp_path):
    assert len(LeaderEpochFileCache(tmp_path)) == 0


@pytest.mark.parametrize(
    ("content", "complaint"),
    [
        ("1\n0\n", "version"),
        ("0\n2\n1 0\n", "2 entries"),
        ("0\n1\n1 x\n", "line 3"),
        ("0\n1\n1 -4\n", "negative"),
        ("0\n2\n3 10\n2 20\n", "out of order"),
        ("0\n", "entry count"),
        ("0\nabc\n", "line 2"),
        ("", "empty"),
        ("0\n1\n1 2 3\n", "line 3"),
    ],
)
def test_a_corrupt_checkpoint_raises_naming_the_file_and_line(tmp_path, content, complaint):
    (tmp_path / CHECKPOINT_FILE).write_text(content)
    with pytest.raises(CorruptCheckpointError, match=complaint) as info:
        LeaderEpochFileCache(tmp_path)
    assert CHECKPOINT_FILE in str(info.value)


def test_a_leftover_temporary_file_does_not_disturb_loading(tmp_path):
    LeaderEpochFileCache(tmp_path).assign(2, 7)
    (tmp_path / (CHECKPOINT_FILE + ".tmp")).write_text("0\n1\n9 9")  # a crash mid-write
    assert LeaderEpochFileCache(tmp_path).entries() == [(2, 7)]


def test_a_failed_checkpoint_write_leaves_memory_as_the_file_says(tmp_path, monkeypatch):
    import raftcore.epoch_cache as module

    cache = LeaderEpochFileCache(tmp_path)
    cache.assign(1, 0)

    def fail(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(module, "write_epoch_checkpoint", fail)
    with pytest.raises(OSError):
        cache.assign(2, 10)
    with pytest.raises(OSError):
        cache.truncate_from_end(0)
    assert cache.entries() == [(1, 0)] == read_epoch_checkpoint(tmp_path / CHECKPOINT_FILE)


def test_the_native_cache_takes_no_constructor_arguments():
    with pytest.raises(TypeError):
        EpochCache([(1, 0)])
