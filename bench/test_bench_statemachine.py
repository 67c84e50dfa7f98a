"""The LMDB state machine against raw LMDB (py-lmdb) on the same records, in one process.

- apply: 1,000,000 records (16-byte keys, 100-byte values) in committed batches of 1,000, one
  write transaction per batch, through ``LmdbStateMachine.apply`` (native decode of each batch,
  puts, the applied offset in the same transaction) vs ``Cursor.putmulti`` of the same pairs,
  one transaction per 1,000 (the raw peer neither decodes nor stores an offset). Random keys
  and increasing keys; without and with ``writemap``; no fsync per commit (``sync=False``);
  and 128 batches a transaction (the applier's group commit under load: it takes up to 16 MiB
  of queued batches into one ``apply``). With fsync (``sync=True``): 100,000 records a
  transaction per batch, and 1,000,000 with 128 batches a transaction.
- snapshot 1,000,000 keys: ``snapshot`` into the in-memory writer vs ``env.copy`` (a file copy
  of the environment) and ``env.copy(compact=True)``; restore of that snapshot into an empty
  state machine.
- restart of a single-node cluster with 1,000,000 applied records: until it serves local reads
  and until it leads with a read index, vs the same restart with a fresh in-memory state
  machine that has to replay the log.

Environments live in RAFTCORE_BENCH_DIR, else the system's temporary directory (a disk:
commits and copies there are what a node pays).
"""

from __future__ import annotations

import asyncio
import os
import random
import shutil
import tempfile
import time

import lmdb
import pytest
from bench_helpers import formatted

from raftcore.endpoints import Endpoint
from raftcore.node.config import NodeConfig
from raftcore.node.local_cluster import free_ports
from raftcore.node.node import RaftNode
from raftcore.raft import CommittedBatch, QuorumConfig
from raftcore.records import encode_batch, iter_batches
from raftcore.statemachine import (
    DictStateMachine,
    LmdbStateMachine,
    MemorySnapshotWriter,
)

BATCH = 1000
BENCH_DIR = os.environ.get("RAFTCORE_BENCH_DIR")
MAP_SIZE = 4 << 30


def make_pairs(count: int, order: str) -> list[tuple[bytes, bytes]]:
    rng = random.Random(7)
    if order == "increasing":
        keys = [b"%016d" % i for i in range(count)]
    else:
        keys = [rng.randbytes(16) for _ in range(count)]
    return [(k, rng.randbytes(100)) for k in keys]


def committed_batches(pairs: list[tuple[bytes, bytes]]) -> list[CommittedBatch]:
    out = []
    for base in range(0, len(pairs), BATCH):
        data = encode_batch(pairs[base : base + BATCH], base_offset=base, leader_epoch=1)
        out.append(CommittedBatch(next(iter_batches(data)), base))
    return out


@pytest.fixture
def workdir():
    d = tempfile.mkdtemp(prefix="raftcore-bench-sm-", dir=BENCH_DIR)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def fresh(workdir: str, name: str) -> str:
    path = os.path.join(workdir, name)
    shutil.rmtree(path, ignore_errors=True)
    return path


_cache: dict[tuple[int, str], tuple[list, list]] = {}


def workload(count: int, order: str) -> tuple[list, list]:
    """(pairs cut into lists of 1,000, committed batches) of ``count`` records."""
    if (count, order) not in _cache:
        pairs = make_pairs(count, order)
        chunks = [pairs[i : i + BATCH] for i in range(0, count, BATCH)]
        _cache[(count, order)] = (chunks, committed_batches(pairs))
    return _cache[(count, order)]


# ---- apply ---------------------------------------------------------------------------------

APPLY_CASES = [
    # id, records at scale 1, key order, sync, writemap, batches per transaction
    ("random-nosync", 1_000_000, "random", False, False, 1),
    ("random-nosync-writemap", 1_000_000, "random", False, True, 1),
    ("increasing-nosync", 1_000_000, "increasing", False, False, 1),
    ("random-nosync-group128", 1_000_000, "random", False, False, 128),
    ("random-sync", 100_000, "random", True, False, 1),
    ("random-sync-group128", 1_000_000, "random", True, False, 128),
]


def _rounds(benchmark, n: int) -> int:
    return 1 if benchmark.disabled else n


@pytest.mark.parametrize(
    ("case", "count", "order", "sync", "writemap", "per_txn"),
    APPLY_CASES,
    ids=[c[0] for c in APPLY_CASES],
)
@pytest.mark.parametrize("side", ["state-machine", "raw-lmdb"])
def test_apply(benchmark, scale, workdir, side, case, count, order, sync, writemap, per_txn):
    benchmark.group = f"apply {case}"
    count = max(BATCH * per_txn, int(count * scale) // BATCH * BATCH)
    chunks, batches = workload(count, order)
    benchmark.extra_info["records"] = count
    state = {}

    def setup():
        for opened in state.values():
            opened.close()
        state.clear()
        path = fresh(workdir, "env")
        if side == "state-machine":
            state["sm"] = LmdbStateMachine(path, map_size=MAP_SIZE, sync=sync, writemap=writemap)
        else:
            state["env"] = lmdb.open(
                path, map_size=MAP_SIZE, max_dbs=2, sync=sync, writemap=writemap,
                readahead=False, meminit=False,
            )  # fmt: skip

    def run_state_machine():
        sm = state["sm"]
        for i in range(0, len(batches), per_txn):
            sm.apply(batches[i : i + per_txn])

    def run_raw():
        env = state["env"]
        db = env.open_db(b"data")
        for i in range(0, len(chunks), per_txn):
            with env.begin(write=True) as txn:
                cursor = txn.cursor(db)
                for chunk in chunks[i : i + per_txn]:
                    cursor.putmulti(chunk)

    fn = run_state_machine if side == "state-machine" else run_raw
    benchmark.pedantic(fn, setup=setup, rounds=_rounds(benchmark, 5), iterations=1)
    if side == "state-machine":
        assert state["sm"].applied_offset == count
        assert len(state["sm"]) == count
    for opened in state.values():
        opened.close()


# ---- snapshot and restore -----------------------------------------------------------------


@pytest.fixture(scope="module")
def snapshot_source(request):
    """An LMDB state machine holding 1,000,000 keys (16-byte keys, 100-byte values)."""
    count = 10_000 if request.config.getoption("benchmark_disable") else 1_000_000
    root = tempfile.mkdtemp(prefix="raftcore-bench-snap-", dir=BENCH_DIR)
    sm = LmdbStateMachine(os.path.join(root, "source"), map_size=MAP_SIZE, sync=False)
    _, batches = workload(count, "random")
    for i in range(0, len(batches), 128):
        sm.apply(batches[i : i + 128])
    sm.env.sync(True)
    yield sm, count, root
    sm.close()
    shutil.rmtree(root, ignore_errors=True)


@pytest.mark.benchmark(group="snapshot 1M keys")
def test_snapshot_to_the_writer(benchmark, snapshot_source):
    sm, count, _ = snapshot_source
    writers = []

    def run():
        writer = MemorySnapshotWriter()
        sm.snapshot(writer)
        writers.append(writer)

    benchmark.pedantic(run, setup=writers.clear, rounds=_rounds(benchmark, 3), iterations=1)
    assert writers[-1].pair_count == count


@pytest.mark.parametrize("compact", [False, True], ids=["copy", "copy-compact"])
@pytest.mark.benchmark(group="snapshot 1M keys")
def test_snapshot_peer_env_copy(benchmark, snapshot_source, compact):
    sm, _, root = snapshot_source
    target = os.path.join(root, "copy")

    def setup():
        shutil.rmtree(target, ignore_errors=True)
        os.makedirs(target)

    benchmark.pedantic(
        lambda: sm.env.copy(target, compact=compact),
        setup=setup,
        rounds=_rounds(benchmark, 3),
        iterations=1,
    )


@pytest.mark.benchmark(group="restore 1M keys")
def test_restore_from_the_reader(benchmark, snapshot_source, workdir):
    sm, count, _ = snapshot_source
    writer = MemorySnapshotWriter()
    sm.snapshot(writer)
    reader = writer.freeze()
    state = {}

    def setup():
        if "sm" in state:
            state.pop("sm").close()
        state["sm"] = LmdbStateMachine(fresh(workdir, "restored"), map_size=MAP_SIZE, sync=True)

    benchmark.pedantic(
        lambda: state["sm"].restore(reader), setup=setup, rounds=_rounds(benchmark, 3), iterations=1
    )
    assert state["sm"].applied_offset == count
    assert len(state["sm"]) == count
    state.pop("sm").close()


@pytest.mark.benchmark(group="restore 1M keys")
def test_restore_peer_env_copy_back(benchmark, snapshot_source, workdir):
    """The plain way back: copy the environment file into place and open it."""
    sm, _, root = snapshot_source
    source = os.path.join(root, "copy-for-restore")
    shutil.rmtree(source, ignore_errors=True)
    os.makedirs(source)
    sm.env.copy(source)
    state = {}

    def setup():
        state["path"] = fresh(workdir, "copied")

    def run():
        shutil.copytree(source, state["path"])
        env = lmdb.open(state["path"], map_size=MAP_SIZE, max_dbs=2)
        env.sync(True)
        env.close()

    benchmark.pedantic(run, setup=setup, rounds=_rounds(benchmark, 3), iterations=1)


# ---- restart -------------------------------------------------------------------------------


def _config(root: str, port: int) -> NodeConfig:
    return NodeConfig(
        node_id=1,
        voters={1: Endpoint("127.0.0.1", port)},
        data_dir=root,
        cluster_id="bench-statemachine",
        quorum=QuorumConfig(election_timeout_ms=300, fetch_timeout_ms=600),
    )


async def _fill(cfg: NodeConfig, count: int) -> int:
    formatted(cfg)
    sm = LmdbStateMachine(cfg.data_dir / "state", map_size=MAP_SIZE, sync=False)
    node = RaftNode(cfg, state_machine=sm)
    await node.start()
    try:
        while not node.is_leader():
            await asyncio.sleep(0.01)
        chunks, _ = workload(count, "random")
        appended = None
        for i, chunk in enumerate(chunks):
            appended = await node.append(chunk, wait=i == len(chunks) - 1)
        assert appended is not None
        await node.wait_applied(appended.last_offset + 1, timeout_s=600)
        return node.applied_offset  # type: ignore[return-value]
    finally:
        await node.stop()
        sm.close()


@pytest.fixture(scope="module")
def filled_node(request):
    count = 10_000 if request.config.getoption("benchmark_disable") else 1_000_000
    root = tempfile.mkdtemp(prefix="raftcore-bench-restart-", dir=BENCH_DIR)
    cfg = _config(os.path.join(root, "node"), free_ports(1)[0])
    applied = asyncio.run(_fill(cfg, count))
    yield cfg, applied
    shutil.rmtree(root, ignore_errors=True)


@pytest.mark.parametrize("until", ["local-reads", "read-index"])
@pytest.mark.parametrize("state", ["lmdb-resumes", "dict-replays"])
def test_restart(benchmark, filled_node, state, until):
    """Start to ready: ``local-reads`` once start() returned with the state machine at the
    applied offset; ``read-index`` once it leads and has a read index."""
    benchmark.group = f"restart with 1M applied records, until {until}"
    cfg, applied = filled_node

    async def restart():
        sm = (
            LmdbStateMachine(cfg.data_dir / "state", map_size=MAP_SIZE, sync=False)
            if state == "lmdb-resumes"
            else DictStateMachine()
        )
        node = RaftNode(cfg, state_machine=sm)
        t0 = time.perf_counter()
        await node.start()
        if until == "read-index":
            while not node.is_leader():
                await asyncio.sleep(0.001)
            await node.read_index()
        await node.wait_applied(applied, timeout_s=600)
        elapsed = time.perf_counter() - t0
        await node.stop()
        if isinstance(sm, LmdbStateMachine):
            sm.close()
        return elapsed

    times = []
    benchmark.pedantic(
        lambda: times.append(asyncio.run(restart())), rounds=_rounds(benchmark, 3), iterations=1
    )
    benchmark.extra_info["start_to_ready_s"] = times
