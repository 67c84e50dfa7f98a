"""The LMDB state machine: a batch and its applied offset in one transaction (checked by killing
a process in the middle of one, and at random), snapshots from one read transaction while
applies go on, a full map, and what reopening finds."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import lmdb
import pytest
from statemachine_helpers import batches_of, committed

import raftcore
from raftcore.statemachine import (
    LmdbStateMachine,
    MemorySnapshotReader,
    MemorySnapshotWriter,
    StateMachineError,
    StateMachineFullError,
)

pytestmark = pytest.mark.timeout(120)

ROOT = Path(__file__).resolve().parent.parent


def key_at(offset: int) -> bytes:
    return b"r%010d" % offset


def check_state_matches_offset(path: Path) -> int:
    """The invariant a crash must keep: the keys stored are exactly those of the records
    below the stored applied offset."""
    with LmdbStateMachine(path, map_size=256 << 20) as sm:
        applied = sm.applied_offset
        keys = [k for k, _ in sm.items()]
    assert keys == [key_at(o) for o in range(applied)], (
        f"applied offset {applied}, but {len(keys)} keys stored (last {keys[-1:]!r})"
    )
    return applied


CHILD = textwrap.dedent(
    """
    import os, signal, sys
    sys.path.insert(0, {tests!r})
    from statemachine_helpers import committed
    from raftcore.statemachine import LmdbStateMachine
    import raftcore.statemachine.lmdb_kv as lmdb_kv

    def batch_at(offset, n):
        return committed([(b"r%010d" % o, b"v" * 50) for o in range(offset, offset + n)], offset)

    sm = LmdbStateMachine({path!r}, map_size=256 << 20, sync=False)
    mode, n = sys.argv[1], int(sys.argv[2])
    if mode == "kill-inside":
        # apply n batches, then die inside the transaction of the next call, after the puts of
        # its first batch and before the applied offset and the commit
        for _ in range(n):
            sm.apply([batch_at(sm.applied_offset, 10)])
        real = lmdb_kv.decode_batches

        class DieAfterFirst(list):
            def __iter__(self):
                yield self[0]
                os.kill(os.getpid(), signal.SIGKILL)

        def decode(*args, **kw):
            decoded, end, skipped = real(*args, **kw)
            return DieAfterFirst(decoded), end, skipped

        lmdb_kv.decode_batches = decode
        start = sm.applied_offset
        sm.apply([batch_at(start, 10), batch_at(start + 10, 10)])
        sys.exit("not killed")
    else:  # apply forever; the parent kills us
        print("ready", flush=True)
        while True:
            sm.apply([batch_at(sm.applied_offset, n)])
    """
)


def spawn(path: Path, mode: str, n: int) -> subprocess.Popen:
    script = CHILD.format(tests=str(ROOT / "tests"), path=str(path))
    # The raftcore these tests import (installed in CI, a checkout here); the working
    # directory is not the source tree, whose native modules are not built in CI.
    env = {**os.environ, "PYTHONPATH": str(Path(raftcore.__file__).resolve().parent.parent)}
    return subprocess.Popen(
        [sys.executable, "-c", script, mode, str(n)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        cwd=path,
    )


def test_a_batch_and_its_applied_offset_commit_in_one_transaction(tmp_path):
    """Killed inside the transaction of an apply, after the puts of one of its batches: on
    reopening, neither those puts nor the offset are there, and the earlier batches are."""
    child = spawn(tmp_path, "kill-inside", 12)
    _, err = child.communicate(timeout=60)
    assert child.returncode == -signal.SIGKILL, err.decode()
    assert check_state_matches_offset(tmp_path) == 120


@pytest.mark.slow
def test_a_process_killed_at_any_moment_leaves_the_state_of_its_applied_offset(tmp_path):
    """SIGKILL at random moments of a process applying batches of 50, then resuming from the
    applied offset: the state always holds exactly the records below the stored offset."""
    rng = random.Random(1)
    applied = 0
    for _ in range(4):
        child = spawn(tmp_path, "forever", 50)
        assert child.stdout is not None
        assert child.stdout.readline() == b"ready\n", child.stderr.read() if child.stderr else ""
        time.sleep(rng.uniform(0.05, 0.4))
        child.send_signal(signal.SIGKILL)
        child.communicate(timeout=30)
        now = check_state_matches_offset(tmp_path)
        assert now >= applied
        applied = now
    assert applied > 0


def test_the_applied_offset_and_state_survive_reopening(tmp_path):
    with LmdbStateMachine(tmp_path) as sm:
        sm.apply(batches_of([(b"k%d" % i, b"v") for i in range(30)], 7))
        sm.apply([committed([(b"k0", None)], 31)])
    with LmdbStateMachine(tmp_path) as sm:
        assert sm.applied_offset == 32
        assert len(sm) == 29
        assert sm.get(b"k0") is None and sm.get(b"k29") == b"v"


def test_state_of_another_format_is_refused(tmp_path):
    env = lmdb.open(str(tmp_path), max_dbs=2)
    meta = env.open_db(b"meta")
    with env.begin(write=True) as txn:
        txn.put(b"format", b"someone-else-9", db=meta)
    env.close()
    with pytest.raises(StateMachineError, match="someone-else-9"):
        LmdbStateMachine(tmp_path)


class BlockingWriter(MemorySnapshotWriter):
    """Holds the snapshot after its first chunk until told to go on."""

    def __init__(self) -> None:
        super().__init__()
        self.first_chunk = threading.Event()
        self.go_on = threading.Event()

    def append(self, records) -> None:  # type: ignore[no-untyped-def]
        super().append(records)
        if len(self.chunks) == 1:
            self.first_chunk.set()
            assert self.go_on.wait(30)


def test_snapshot_reads_one_consistent_view_while_writes_go_on(tmp_path):
    with LmdbStateMachine(tmp_path, sync=False) as sm:
        sm.apply(batches_of([(b"%06d" % i, b"old") for i in range(20_000)], 1000))
        before = dict(sm.items())
        writer = BlockingWriter()
        result: list[int] = []
        snap = threading.Thread(target=lambda: result.append(sm.snapshot(writer)))
        snap.start()
        assert writer.first_chunk.wait(30)
        # while the snapshot is half written: overwrite, delete and add, across the key range
        ops = [(b"%06d" % i, b"new") for i in range(0, 20_000, 3)]
        ops += [(b"%06d" % i, None) for i in range(1, 20_000, 3)]
        ops += [(b"%06d" % i, b"added") for i in range(20_000, 21_000)]
        t0 = time.monotonic()
        sm.apply(batches_of(ops, 1000, base_offset=20_000))
        assert time.monotonic() - t0 < 20  # the writer was not blocked by the reader
        writer.go_on.set()
        snap.join(30)
        assert result == [20_000]
        assert dict(writer.freeze().pairs()) == before
        assert sm.applied_offset == 20_000 + len(ops)
        assert sm.get(b"000000") == b"new" and sm.get(b"000001") is None


def test_a_full_map_fails_the_apply_whole_and_a_larger_map_goes_on(tmp_path):
    big = b"x" * 2000
    with LmdbStateMachine(tmp_path, map_size=1 << 20) as sm:
        sm.apply([committed([(b"first", b"1")], 0)])
        with pytest.raises(StateMachineFullError, match="reopen with a larger map_size") as info:
            for offset in range(1, 10_000, 100):
                sm.apply([committed([(b"k%d" % (offset + i), big) for i in range(100)], offset)])
        full_at = sm.applied_offset
        assert f"applied offset stays {full_at}" in str(info.value)
        stored = len(sm)
    with LmdbStateMachine(tmp_path, map_size=64 << 20) as sm:
        assert sm.applied_offset == full_at
        assert len(sm) == stored  # nothing of the failed apply
        sm.apply([committed([(b"k%d" % (full_at + i), big) for i in range(100)], full_at)])
        assert sm.applied_offset == full_at + 100


def test_restore_takes_pairs_out_of_key_order_too(tmp_path):
    """Snapshots from LMDB are in key order (MDB_APPEND); others may not be."""
    pairs = [(b"b", b"2"), (b"c", b"3"), (b"a", b"1"), (b"c", b"33"), (b"d", b"4")]
    with LmdbStateMachine(tmp_path) as sm:
        sm.restore(MemorySnapshotReader.from_pairs(pairs, 9, chunk_pairs=2))
        assert sm.items() == [(b"a", b"1"), (b"b", b"2"), (b"c", b"33"), (b"d", b"4")]
        assert sm.applied_offset == 9


def test_a_snapshot_with_a_null_value_is_refused_and_the_state_kept(tmp_path):
    with LmdbStateMachine(tmp_path) as sm:
        sm.apply([committed([(b"k", b"v")], 0)])
        with pytest.raises(StateMachineError, match="null value"):
            sm.restore(MemorySnapshotReader([[(b"a", b"1"), (b"b", None)]], 50))
        assert sm.items() == [(b"k", b"v")]
        assert sm.applied_offset == 1
