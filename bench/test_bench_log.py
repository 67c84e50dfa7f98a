"""The segmented log against plain file I/O on the same bytes.

- append: 256 MiB of record batches (1,000 records of 16+100 bytes each, ~126 KB a batch),
  8 batches per call, with ``append_as_follower`` (CRC check of every batch, offset and epoch
  validation, index upkeep) vs ``os.write`` of the same chunks to one file. No fsync in either.
- sequential read back: ``log.read`` zero-copy views vs ``readinto`` of the file; and the same
  two with every byte touched (CRC-32C of each chunk), since a view nobody reads is free.
Both sides run on the same filesystem: the system's temporary directory by default; set
RAFTCORE_BENCH_DIR to measure elsewhere (docs/benchmarks.md reports ext4 and tmpfs).
"""

import os
import shutil
import tempfile
import time

import pytest

import raftcore
from raftcore.log import SegmentedLog
from raftcore.records import encode_batch, iter_batches

RECORDS = [(b"key-%012d" % i, bytes([i % 251]) * 100) for i in range(1000)]
CHUNK_BATCHES = 8
ROUNDS = 9
READ_BYTES = 1 << 20


@pytest.fixture(scope="module")
def chunks(request):
    total = 256 << 20
    if request.config.getoption("benchmark_disable"):
        total = 4 << 20
    out, offset, size = [], 0, 0
    while size < total:
        chunk = b"".join(
            encode_batch(RECORDS, base_offset=offset + k * 1000, leader_epoch=1, timestamp_ms=1)
            for k in range(CHUNK_BATCHES)
        )
        out.append(chunk)
        offset += CHUNK_BATCHES * 1000
        size += len(chunk)
    return out


BENCH_DIR = os.environ.get("RAFTCORE_BENCH_DIR") or (
    "/dev/shm" if os.path.isdir("/dev/shm") else None
)


@pytest.fixture
def workdir():
    d = tempfile.mkdtemp(prefix="raftcore-bench-", dir=BENCH_DIR)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def _fresh(workdir, name):
    path = os.path.join(workdir, name)
    shutil.rmtree(path, ignore_errors=True)
    return path


# Between rounds (untimed) both sides do the same: fsync what the last round wrote, delete it,
# and let the filesystem settle, so no round pays for its predecessor's writeback.


def _settle():
    os.sync()
    time.sleep(0.05)


@pytest.mark.benchmark(group="append 256 MiB")
def test_append_segmented_log(benchmark, chunks, workdir):
    logs = []

    def setup():
        for log in logs:
            log.close()  # fsyncs
        logs.clear()
        path = _fresh(workdir, "log")
        _settle()
        logs.append(SegmentedLog.open(path))
        return (logs[0],), {}

    def run(log):
        for chunk in chunks:
            log.append_as_follower(chunk)

    benchmark.pedantic(run, setup=setup, rounds=ROUNDS)
    assert logs[0].end_offset == len(chunks) * CHUNK_BATCHES * 1000
    logs[0].close()


@pytest.mark.benchmark(group="append 256 MiB")
def test_append_os_write(benchmark, chunks, workdir):
    fds = []

    def setup():
        path = os.path.join(workdir, "plain.log")
        for fd in fds:
            os.fsync(fd)
            os.close(fd)
        fds.clear()
        if os.path.exists(path):
            os.unlink(path)
        _settle()
        fds.append(os.open(path, os.O_WRONLY | os.O_CREAT, 0o644))
        return (fds[0],), {}

    def run(fd):
        for chunk in chunks:
            os.write(fd, chunk)

    benchmark.pedantic(run, setup=setup, rounds=ROUNDS)
    os.close(fds[0])


@pytest.fixture(scope="module")
def written(chunks):
    d = tempfile.mkdtemp(prefix="raftcore-bench-read-", dir=BENCH_DIR)
    log = SegmentedLog.open(os.path.join(d, "log"))
    for chunk in chunks:
        log.append_as_follower(chunk)
    plain = os.path.join(d, "plain.log")
    with open(plain, "wb") as f:
        for chunk in chunks:
            f.write(chunk)
    yield log, plain
    log.close()
    shutil.rmtree(d, ignore_errors=True)


def _read_log(log, touch):
    offset, total, end = 0, 0, log.end_offset
    while offset < end:
        view = log.read(offset, READ_BYTES)
        if touch:
            raftcore.crc32c(view)
        total += len(view)
        *_, last = iter_batches(view)
        offset = last.next_offset
    return total


def _read_file(path, touch):
    buf = bytearray(READ_BYTES)
    total = 0
    with open(path, "rb", buffering=0) as f:
        while n := f.readinto(buf):
            if touch:
                raftcore.crc32c(memoryview(buf)[:n])
            total += n
    return total


@pytest.mark.benchmark(group="sequential read 256 MiB")
def test_read_segmented_log_views(benchmark, written):
    log, plain = written
    assert benchmark(_read_log, log, False) == os.path.getsize(plain)


@pytest.mark.benchmark(group="sequential read 256 MiB")
def test_read_file_readinto(benchmark, written):
    _, plain = written
    assert benchmark(_read_file, plain, False) == os.path.getsize(plain)


@pytest.mark.benchmark(group="sequential read 256 MiB, every byte touched (crc32c)")
def test_read_segmented_log_views_touched(benchmark, written):
    log, plain = written
    assert benchmark(_read_log, log, True) == os.path.getsize(plain)


@pytest.mark.benchmark(group="sequential read 256 MiB, every byte touched (crc32c)")
def test_read_file_readinto_touched(benchmark, written):
    _, plain = written
    assert benchmark(_read_file, plain, True) == os.path.getsize(plain)
