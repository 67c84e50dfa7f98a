"""Snapshot files against a plain sequential file write of the same bytes (the floor).

One group, 1,000,000 records of a 16-byte key and a 100-byte value (~126 MB of batches):

- ``write``: ``SnapshotStore.writer`` -> ``append`` of the million (key, value) pairs (batched
  1,024 records a batch, as Kafka's metadata emitter) -> ``freeze`` (the footer, verification
  of the whole file -- every CRC and every record --, fsync, chmod 0o444, rename, directory
  fsync);
- ``write zstd``: the same, zstd-compressed batches;
- ``verify``: ``verify_snapshot_file`` of the frozen snapshot alone (what a leader runs before
  serving a snapshot it did not write in this process, and a follower before installing one);
- ``plain write``: ``os.write`` of the snapshot's bytes, already encoded, 1 MiB at a time, then
  fsync -- the floor no snapshot writer can beat.

The issue's target: a 1M-key LMDB snapshot in under 2 s including reading LMDB; the file part
should be a small fraction of it. Files go to RAFTCORE_BENCH_DIR, else /dev/shm (as the log
benchmark), so the figures are CPU, not the disk.
"""

import os
import shutil
import tempfile

import pytest

from raftcore.snapshot import SnapshotId, SnapshotStore, verify_snapshot_file

SID = SnapshotId(1_000_001, 1)
ROUNDS = 5
CHUNK = 1 << 20

BENCH_DIR = os.environ.get("RAFTCORE_BENCH_DIR") or (
    "/dev/shm" if os.path.isdir("/dev/shm") else None
)


@pytest.fixture(scope="module")
def records(request):
    n = 10_000 if request.config.getoption("benchmark_disable") else 1_000_000
    values = [os.urandom(100) for _ in range(1024)]
    return [(b"%016d" % i, values[i % 1024]) for i in range(n)]


@pytest.fixture
def workdir():
    d = tempfile.mkdtemp(prefix="raftcore-bench-snapshot-", dir=BENCH_DIR)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def _write(directory, records, compression="none"):
    store = SnapshotStore(directory)
    writer = store.writer(
        SID, last_contained_log_timestamp=1, compression=compression, timestamp_ms=1
    )
    writer.append(records)
    return writer.freeze()


def _bench_write(benchmark, records, workdir, compression):
    def setup():
        shutil.rmtree(os.path.join(workdir, "s"), ignore_errors=True)
        return (os.path.join(workdir, "s"), records, compression), {}

    summary = benchmark.pedantic(_write, setup=setup, rounds=ROUNDS)
    assert summary.record_count == len(records)
    benchmark.extra_info["bytes"] = summary.size


@pytest.mark.benchmark(group="snapshot of 1M records (16 B key, 100 B value)")
def test_snapshot_write(benchmark, records, workdir):
    _bench_write(benchmark, records, workdir, "none")


@pytest.mark.benchmark(group="snapshot of 1M records (16 B key, 100 B value)")
def test_snapshot_write_zstd(benchmark, records, workdir):
    _bench_write(benchmark, records, workdir, "zstd")


@pytest.fixture
def frozen(records, workdir):
    directory = os.path.join(workdir, "frozen")
    _write(directory, records)
    return SnapshotStore(directory).path_of(SID)


@pytest.mark.benchmark(group="snapshot of 1M records (16 B key, 100 B value)")
def test_snapshot_verify(benchmark, records, frozen):
    summary = benchmark(verify_snapshot_file, frozen, snapshot_id=SID)
    assert summary.record_count == len(records)


@pytest.mark.benchmark(group="snapshot of 1M records (16 B key, 100 B value)")
def test_plain_sequential_write_of_the_same_bytes(benchmark, frozen, workdir):
    data = frozen.read_bytes()
    chunks = [data[i : i + CHUNK] for i in range(0, len(data), CHUNK)]
    path = os.path.join(workdir, "plain")

    def setup():
        if os.path.exists(path):
            os.unlink(path)
        return (), {}

    def run():
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            for chunk in chunks:
                os.write(fd, chunk)
            os.fsync(fd)
        finally:
            os.close(fd)

    benchmark.pedantic(run, setup=setup, rounds=ROUNDS)
    assert os.path.getsize(path) == len(data)
    benchmark.extra_info["bytes"] = len(data)
