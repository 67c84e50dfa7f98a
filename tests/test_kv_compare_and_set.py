"""Compare-and-set on the replicated key/value store: a record carrying ``raftcore.if-value``
(the expected value) or ``raftcore.if-absent`` is applied only if its key's value is the
expected one (or the key does not exist), decided when it is applied, so every replica -- and
every replay of the same log -- decides the same."""

from __future__ import annotations

import asyncio
import logging
import random
import re
import shutil
from collections import Counter
from pathlib import Path

import pytest
from statemachine_helpers import committed
from test_embedding import followers, stores
from test_node import run

from raftcore.embed import KeyValueStore
from raftcore.statemachine import (
    DamagedValueError,
    DictStateMachine,
    LmdbStateMachine,
    StateMachineError,
)
from raftcore.statemachine.checksums import seal_value
from raftcore.statemachine.conditions import IF_ABSENT, IF_VALUE, Outcomes, condition_headers

pytestmark = pytest.mark.timeout(60)


def cas(key: bytes, expected: bytes | None, new: bytes | None) -> tuple:
    return (key, new, condition_headers(expected))


@pytest.fixture(params=["lmdb", "dict"])
def sm(request, tmp_path):  # type: ignore[no-untyped-def]
    """Both key/value state machines: the dict one is the reference the LMDB one matches."""
    if request.param == "dict":
        yield DictStateMachine()
        return
    lmdb_sm = LmdbStateMachine(tmp_path / "state", map_size=64 << 20, sync=False)
    yield lmdb_sm
    lmdb_sm.close()


def items(sm) -> list[tuple[bytes, bytes]]:  # type: ignore[no-untyped-def]
    return sm.items() if isinstance(sm, LmdbStateMachine) else sorted(sm.data.items())


def apply_expecting(sm, batches) -> dict[int, bool]:  # type: ignore[no-untyped-def]
    """Apply ``batches`` as a writer waiting for their verdicts; the verdicts by offset."""
    first = batches[0].base_offset
    last = batches[-1].last_offset
    with sm.outcomes.waiting(sm.applied_offset):
        sm.apply(batches)
        verdicts = {o: sm.outcomes.get(o) for o in range(first, last + 1)}
    return {o: v for o, v in verdicts.items() if v is not None}


# ---- the rule, on each state machine ---------------------------------------------------------


def test_a_write_expecting_the_keys_value_is_applied_and_one_expecting_another_is_left_out(sm):
    sm.apply([committed([(b"n", b"1")], 0)])
    verdicts = apply_expecting(sm, [committed([cas(b"n", b"1", b"2"), cas(b"n", b"1", b"3")], 1)])
    # the second is decided on the state the first left: n is 2 by then
    assert verdicts == {1: True, 2: False}
    assert items(sm) == [(b"n", b"2")]
    assert sm.applied_offset == 3


def test_a_write_expecting_no_key_creates_it_only_if_absent(sm):
    verdicts = apply_expecting(
        sm, [committed([cas(b"lock", None, b"a"), cas(b"lock", None, b"b")], 0)]
    )
    assert verdicts == {0: True, 1: False}
    assert items(sm) == [(b"lock", b"a")]


def test_a_delete_expecting_the_keys_value_removes_it_and_one_expecting_another_does_not(sm):
    sm.apply([committed([(b"a", b"1"), (b"b", b"1")], 0)])
    verdicts = apply_expecting(sm, [committed([cas(b"a", b"1", None), cas(b"b", b"2", None)], 2)])
    assert verdicts == {2: True, 3: False}
    assert items(sm) == [(b"b", b"1")]


def test_an_absent_key_never_equals_an_expected_value_not_even_an_empty_one(sm):
    verdicts = apply_expecting(sm, [committed([cas(b"k", b"", b"x")], 0)])
    assert verdicts == {0: False}
    sm.apply([committed([(b"k", b"")], 1)])
    assert apply_expecting(sm, [committed([cas(b"k", b"", b"x")], 2)]) == {2: True}
    assert items(sm) == [(b"k", b"x")]


def test_a_condition_in_a_compressed_batch_is_decided_as_in_a_plain_one(sm):
    from raftcore.raft import CommittedBatch
    from raftcore.records import encode_batch, iter_batches

    sm.apply([committed([(b"n", b"1")], 0)])
    raw = encode_batch(
        [cas(b"n", b"1", b"2"), cas(b"n", b"1", b"3")], base_offset=1, compression="gzip"
    )
    verdicts = apply_expecting(sm, [CommittedBatch(next(iter_batches(raw)), 1)])
    assert verdicts == {1: True, 2: False}
    assert items(sm) == [(b"n", b"2")]


@pytest.mark.parametrize(
    ("headers", "problem"),
    [
        ([(IF_VALUE, None)], "with a null value"),
        ([(IF_ABSENT, b"x")], "with a 1-byte value"),
        ([(IF_VALUE, b"1"), (IF_ABSENT, None)], "2 condition headers"),
        ([("raftcore.if-version", b"\x00")], "an unknown condition"),
    ],
)
def test_a_damaged_condition_from_a_remote_producer_is_refused_never_an_error_of_the_apply(
    sm, headers, problem, caplog
):
    """A Kafka producer may write any header: a condition the store cannot read leaves the
    write out (the safe verdict), with one WARNING naming the offset, and the batch's other
    records and the applied offset go on as usual."""
    sm.apply([committed([(b"n", b"1")], 0)])
    with caplog.at_level(logging.WARNING, logger="raftcore.statemachine.conditions"):
        verdicts = apply_expecting(
            sm, [committed([(b"n", b"2", headers), (b"m", b"1"), cas(b"n", b"1", b"3")], 1)]
        )
    assert verdicts == {1: False, 3: True}
    assert items(sm) == [(b"m", b"1"), (b"n", b"3")]
    assert sm.applied_offset == 4
    [line] = [r.getMessage() for r in caplog.records]
    assert "offset 1" in line and problem in line


def test_a_damaged_stored_value_met_while_deciding_marks_the_state_damaged_and_gives_no_verdict(
    tmp_path,
):
    """A value that fails its checksum cannot be compared: the state machine is marked
    damaged (the node rebuilds it from a snapshot and the log, deciding again from intact
    values, as the other replicas do) and gives no verdict, rather than a wrong one."""
    told: list[DamagedValueError] = []
    with LmdbStateMachine(tmp_path, map_size=64 << 20, sync=False) as sm:
        sm.on_damaged = told.append
        sm.apply([committed([(b"n", b"1"), (b"m", b"1")], 0)])
        with sm.env.begin(write=True) as txn:  # n's bytes changed under its seal
            txn.put(b"n", seal_value(b"n", b"1")[:4] + b"2", db=sm._data)
        verdicts = apply_expecting(
            sm, [committed([cas(b"n", b"1", b"3"), cas(b"m", b"1", b"2")], 2)]
        )
        assert verdicts == {3: True}  # the sound one is decided; the damaged one is not
        assert [e.key for e in told] == [b"n"]
        assert sm.applied_offset == 4


def test_other_headers_do_not_make_a_write_conditional(sm):
    sm.apply([committed([(b"n", b"1", [("trace-id", b"t"), ("raftcore.if", b"x")])], 0)])
    assert items(sm) == [(b"n", b"1")]
    assert len(sm.outcomes) == 0


def test_verdicts_beyond_the_recent_ones_are_kept_only_while_a_reader_waits_for_them():
    """Verdicts stay for the readers that said, before the writes, from which offset they
    want them (a writer, a watch); beyond the last ``recent`` ones, those nobody waits for
    are dropped, so conditional writes of others leave a bounded trace."""
    sm = DictStateMachine()
    sm.outcomes = Outcomes(recent=2)
    sm.apply([committed([cas(b"a", None, b"1"), cas(b"a", None, b"2")], 0)])
    with sm.outcomes.waiting(2) as reader:
        sm.apply([committed([cas(b"b", None, b"1"), cas(b"c", None, b"1")], 2)])
        sm.apply([committed([cas(b"d", None, b"1"), cas(b"d", None, b"1")], 4)])
        assert [sm.outcomes.get(o) for o in range(6)] == [None, None, True, True, True, False]
        reader.floor = 4  # a watch that has gone past 2 and 3
        sm.apply([committed([(b"e", b"1")], 6), committed([cas(b"e", b"1", b"2")], 7)])
        assert [sm.outcomes.get(o) for o in range(2, 8)] == [None, None, True, False, None, True]
    assert [sm.outcomes.get(o) for o in range(4, 8)] == [None, False, None, True]  # the last 2
    assert len(sm.outcomes) == 2


def test_the_decoder_reports_the_condition_headers_of_key_value_records_only():
    from raftcore.records import decode_kv_pairs, encode_batch

    plain = decode_kv_pairs(encode_batch([(b"a", b"1", [("trace", b"t")]), (b"b", None)]))
    assert plain.conditions is None
    batch = encode_batch(
        [
            (b"a", b"1"),
            (b"b", b"2", [("trace", b"t"), (IF_VALUE, b"1")]),
            (None, b"3", [(IF_ABSENT, None)]),  # skipped (a null key): no pair, no condition
            (b"c", None, [(IF_ABSENT, None), ("raftcore.if-other", b"")]),
        ],
        base_offset=10,
    )
    kv = decode_kv_pairs(batch)
    assert kv.pairs == [(b"a", b"1"), (b"b", b"2"), (b"c", None)]
    assert kv.conditions == [
        (1, 11, IF_VALUE, b"1"),
        (2, 13, IF_ABSENT, None),
        (2, 13, "raftcore.if-other", b""),
    ]
    assert decode_kv_pairs(batch, from_offset=12).conditions == [
        (0, 13, IF_ABSENT, None),
        (0, 13, "raftcore.if-other", b""),
    ]


def test_the_lmdb_store_decides_every_condition_as_a_naive_reference_does(tmp_path):
    """Random plain and conditional writes, deletes among them, in random batches: the LMDB
    store, the dict store and a naive dict loop written here agree on every verdict and on the
    final state."""
    rng = random.Random(39)
    keys = [b"k%d" % i for i in range(4)]
    values = [None, b"", b"a", b"b"]
    records: list[tuple] = []
    for _ in range(600):
        key, new = rng.choice(keys), rng.choice(values)
        if rng.random() < 0.3:
            records.append((key, new))
        else:
            records.append(cas(key, rng.choice(values), new))
    reference: dict[bytes, bytes] = {}
    expected_verdicts: dict[int, bool] = {}
    for offset, record in enumerate(records):
        key, new = record[0], record[1]
        if len(record) == 3:
            wanted = record[2][0][1] if record[2][0][0] == IF_VALUE else None
            holds = reference.get(key) == wanted
            expected_verdicts[offset] = holds
            if not holds:
                continue
        if new is None:
            reference.pop(key, None)
        else:
            reference[key] = new
    batches = []
    offset = 0
    while offset < len(records):
        n = rng.randint(1, 20)
        batches.append(committed(records[offset : offset + n], offset))
        offset += n
    with LmdbStateMachine(tmp_path, map_size=64 << 20, sync=False) as lmdb_sm:
        for sm in (lmdb_sm, DictStateMachine()):
            verdicts: dict[int, bool] = {}
            for i in range(0, len(batches), 7):  # several batches per apply, as the node does
                verdicts.update(apply_expecting(sm, batches[i : i + 7]))
            assert verdicts == expected_verdicts
            assert items(sm) == sorted(reference.items())


# ---- through the cluster ---------------------------------------------------------------------


APPLIED = [(b"n", b"1"), (b"n", b"2"), (b"m", b"kept"), (b"m", None), (b"end", b"")]


def test_a_compare_and_set_on_a_follower_is_decided_alike_on_every_replica(tmp_path):
    """Every replica decides the same; a watch and the application's listener report the
    writes that were applied and not those refused (a refused write changed nothing)."""
    heard: list[tuple[bytes, bytes | None]] = []

    async def main() -> None:
        async with stores(tmp_path, listener=lambda c: heard.append((c.key, c.value))) as (
            kvs,
            leader,
        ):
            follower = followers(kvs, leader)[0]
            changes = leader.watch(b"")
            assert await follower.compare_and_set(b"n", None, b"1")  # created: it was absent
            assert not await follower.compare_and_set(b"n", None, b"x")  # exists now
            assert await follower.compare_and_set(b"n", b"1", b"2")
            assert not await leader.compare_and_set(b"n", b"1", b"3")  # it is 2
            assert follower.get_local(b"n") == b"2"  # applied here when it returns
            assert not await follower.compare_and_set(b"n", b"1", None)
            await follower.put(b"m", b"kept")
            assert await follower.compare_and_set(b"m", b"kept", None)  # delete if equal
            assert not await follower.compare_and_set(b"gone", b"anything", b"x")
            last = await leader.put(b"end", b"")
            for kv in kvs:
                await kv.wait_applied(last)
                assert await kv.range() == [(b"end", b""), (b"n", b"2")]
            assert [((c := await anext(changes)).key, c.value) for _ in APPLIED] == APPLIED
            while len(heard) < 3 * len(APPLIED):
                await asyncio.sleep(0.01)  # the listeners run on the loop: let them catch up

    run(main())
    # three listeners, one per replica, each heard the applied writes in order
    assert Counter(heard) == {pair: 3 for pair in APPLIED}


def test_of_two_replicas_racing_to_set_a_key_from_the_same_value_exactly_one_wins(tmp_path):
    async def main() -> None:
        async with stores(tmp_path) as (kvs, leader):
            a, b = followers(kvs, leader)
            await a.put(b"owner", b"nobody")
            for round_ in range(3):
                seen = kvs[0].get_local(b"owner")
                results = await asyncio.gather(
                    a.compare_and_set(b"owner", seen, b"a%d" % round_),
                    b.compare_and_set(b"owner", seen, b"b%d" % round_),
                )
                assert sorted(results) == [False, True]
                winner = (b"a%d" if results[0] else b"b%d") % round_
                last = await leader.put(b"fence", b"%d" % round_)
                for kv in kvs:
                    await kv.wait_applied(last)
                    assert kv.get_local(b"owner") == winner

    run(main())


def test_a_replica_rebuilding_its_state_from_the_log_decides_every_condition_as_before(
    tmp_path,
):
    """A replica whose state directory is gone replays the whole log when restarted: the
    conditional writes, refused ones included, come out as they did the first time."""

    async def main() -> None:
        async with stores(tmp_path) as (kvs, leader):
            follower = followers(kvs, leader)[0]
            for i in range(10):  # a history where refusals matter: every other one loses
                seen = follower.get_local(b"c")
                assert await follower.compare_and_set(b"c", seen, b"%d" % i)
                assert not await follower.compare_and_set(b"c", seen, b"stale %d" % i)
            assert await follower.compare_and_set(b"c", b"9", None)
            assert await follower.compare_and_set(b"c", None, b"final")
            last = await leader.put(b"end", b"")
            await follower.wait_applied(last)
            before = await follower.range()
            config = follower.config
            await follower.stop()
            shutil.rmtree(config.data_dir / "state")
            again = KeyValueStore(config, sync=False)
            await again.start()
            try:
                await again.wait_applied(last)
                assert await again.range() == before == [(b"c", b"final"), (b"end", b"")]
                # the replay decided them again here: a watch from the start reports the ten
                # that won (and the delete, the create), none of the stale ones
                history = again.watch(b"c", from_offset=0)
                changes = [(await anext(history)).value for _ in range(12)]
                assert changes == [b"%d" % i for i in range(10)] + [None, b"final"]
                # verdicts this replica no longer holds: the watch says so, never guesses
                again.state.outcomes = Outcomes()
                with pytest.raises(StateMachineError, match="no longer known"):
                    await anext(again.watch(b"c", from_offset=0))
            finally:
                await again.stop()

    run(main())


def test_the_docs_read_modify_write_loses_no_increment_from_replicas_racing(tmp_path):
    text = (Path(__file__).resolve().parent.parent / "docs" / "embedding.md").read_text()
    match = re.search(
        r"<!-- docs-test: python compare-and-set -->\s*```python\n(.*?)```", text, re.DOTALL
    )
    assert match, "docs/embedding.md lost its compare-and-set block"
    namespace: dict = {}
    exec(compile(match.group(1), "docs/embedding.md", "exec"), namespace)
    increment = namespace["increment"]

    async def main() -> None:
        async with stores(tmp_path) as (kvs, leader):
            # racing from the two followers (forwarded) and the leader, one after another
            writers = [*followers(kvs, leader), leader]
            counts = await asyncio.gather(*(increment(kv, b"count") for kv in writers[:2] * 2))
            counts.append(await increment(writers[2], b"count"))
            assert sorted(counts) == [1, 2, 3, 4, 5]  # each saw its own increment applied
            for kv in kvs:
                assert await kv.get(b"count", linearizable=True) == b"5"

    run(main())
