"""Fuzzing of the record batch readers with damaged input.

Whatever the bytes, ``iter_batches``,
``RecordBatch.validate/is_valid/records/control_type``, ``scan_batches``, ``find_batch`` and
``span_batches`` may only raise ``CorruptRecordError`` (whatever the codec bits say: none,
gzip, snappy, lz4 or zstd): never another exception, never a crash. A batch whose CRC fails
never yields records, and every byte flipped inside a batch (CRC field, attributes to the
end) fails its CRC. The three walkers (``iter_batches``, ``scan_batches``,
``find_batch``/``span_batches``) must agree on where the whole batches are and where the
damage starts.

Examples per test: RAFTCORE_FUZZ_EXAMPLES (default 300). The subprocess test runs a seeded
loop of the same checks in a child process, so that a native crash fails one test instead of
killing the run; RAFTCORE_FUZZ_SEED picks its seed (default: random, printed on failure).
"""

from __future__ import annotations

import os
import random
import struct
import subprocess
import sys
import textwrap
from contextlib import contextmanager
from pathlib import Path

import crc32c as crc32c_package
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import raftcore
from raftcore.records import (
    BatchBuilder,
    ControlRecordType,
    CorruptRecordError,
    encode_control_batch,
    find_batch,
    iter_batches,
    parse_control_record_key,
    scan_batches,
    span_batches,
)

FUZZ_EXAMPLES = int(os.environ.get("RAFTCORE_FUZZ_EXAMPLES", "300"))
FUZZ = settings(
    max_examples=FUZZ_EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
T = 1_700_000_000_000


# ---- the checks every input must pass ------------------------------------------------------


@contextmanager
def only_allowed(batch=None):
    """Let CorruptRecordError through; turn anything else into a test failure naming it."""
    try:
        yield
    except CorruptRecordError as exc:
        assert isinstance(exc.position, int), "a CorruptRecordError names its position"
    except Exception as exc:
        raise AssertionError(f"reader raised {type(exc).__name__}: {exc}") from exc


def walk(data: bytes):
    """The batches iter_batches yields, and the CorruptRecordError that stopped it (or None);
    any other exception is a failure."""
    batches = []
    iterator = iter_batches(data)
    while True:
        try:
            batches.append(next(iterator))
        except StopIteration:
            return batches, None
        except CorruptRecordError as exc:
            return batches, exc
        except Exception as exc:
            raise AssertionError(f"iter_batches raised {type(exc).__name__}: {exc}") from exc


def check_batch(batch) -> None:
    """Header properties, CRC verdict, records and control type of one walked batch."""
    repr(batch)
    assert batch.size_in_bytes >= 61 and batch.magic == 2
    assert batch.compression in ("none", "gzip", "snappy", "lz4", "zstd") or (
        batch.compression.startswith("unknown(")
    )
    assert batch.last_offset == batch.base_offset + batch.last_offset_delta
    valid = batch.is_valid()
    assert valid == (batch.compute_crc() == batch.crc)
    if not valid:
        # No data from a batch whose CRC fails.
        with pytest.raises(CorruptRecordError):
            batch.validate()
        with pytest.raises(CorruptRecordError):
            batch.records()
        if batch.is_control:
            with pytest.raises(CorruptRecordError):
                _ = batch.control_type
        else:
            assert batch.control_type is None
        return
    batch.validate()
    records = None
    with only_allowed(batch):
        records = list(batch.records())
    if records is not None:
        assert len(records) == batch.record_count
        offsets = [r.offset for r in records]
        assert offsets == sorted(set(offsets))
        assert all(batch.base_offset <= o <= batch.last_offset for o in offsets)
        for r in records:
            assert r.key is None or isinstance(r.key, bytes)
            assert r.value is None or isinstance(r.value, bytes)
            assert all(isinstance(k, str) for k, _ in r.headers)
    control_type = "unread"
    with only_allowed(batch):
        control_type = batch.control_type
    if not batch.is_control:
        assert control_type is None
    elif control_type != "unread":
        # The control type is the first record's (later records may still be corrupt).
        first = next(iter(batch.records()))
        assert control_type == parse_control_record_key(first.key)


def exercise(data: bytes) -> None:
    """Every reader over ``data``; they must agree with each other."""
    batches, error = walk(data)
    for batch in batches:
        check_batch(batch)

    # scan_batches never raises for bad data, and agrees with iter_batches.
    loose = scan_batches(data, check_crc=False)
    assert loose.positions.tolist() == [b.position for b in batches]
    assert loose.sizes.tolist() == [b.size_in_bytes for b in batches]
    assert loose.base_offsets.tolist() == [b.base_offset for b in batches]
    assert loose.last_offsets.tolist() == [b.last_offset for b in batches]
    assert loose.epochs.tolist() == [b.partition_leader_epoch for b in batches]
    assert loose.max_timestamps.tolist() == [b.max_timestamp for b in batches]
    assert loose.attributes.tolist() == [b.attributes for b in batches]
    if error is None:
        assert (loose.error, loose.valid_end) == (None, len(data))
    else:
        assert loose.error_position == loose.valid_end == error.position
    strict = scan_batches(data)
    first_bad = next((i for i, b in enumerate(batches) if not b.is_valid()), None)
    if first_bad is None:
        assert (strict.count, strict.error_position) == (loose.count, loose.error_position)
    else:
        assert strict.count == first_bad
        assert strict.error_position == strict.valid_end == batches[first_bad].position

    # find_batch: the first walked batch whose last offset reaches the target.
    targets = {0, -1, 2**63 - 1} | {b.last_offset for b in batches[:4]}
    targets |= {b.base_offset for b in batches[:4]}
    for target in targets:
        expected = next((b.position for b in batches if b.last_offset >= target), None)
        if expected is None and error is not None:
            with pytest.raises(CorruptRecordError):
                find_batch(data, target)
        else:
            assert find_batch(data, target) == (len(data) if expected is None else expected)

    # span_batches: whole batches within max_bytes, at least one.
    for max_bytes in (0, 61, 200, 10**9):
        pos, i, corrupt = 0, 0, False
        while pos < len(data):
            if i == len(batches):
                corrupt = True
                break
            if pos > 0 and pos + batches[i].size_in_bytes > max_bytes:
                break
            pos += batches[i].size_in_bytes
            i += 1
        if corrupt:
            with pytest.raises(CorruptRecordError):
                span_batches(data, 0, -1, max_bytes)
        else:
            assert span_batches(data, 0, -1, max_bytes) == pos


# ---- inputs ---------------------------------------------------------------------------------


def sample_batch(kind: int, base_offset: int, size: int) -> bytes:
    """A small valid batch of one of several shapes."""
    compression = ("none", "gzip", "zstd")[kind % 3]
    if kind % 5 == 4:
        control_type = list(ControlRecordType)[kind % 7]
        return encode_control_batch(control_type, b"\x00" * (kind % 9), base_offset=base_offset)
    builder = BatchBuilder(
        base_offset=base_offset, leader_epoch=kind % 4, compression=compression, timestamp_ms=T
    )
    for i in range(1 + kind % 4):
        key = None if i % 2 else b"key-%d" % i
        headers = [("h", b"v"), ("n", None)] if kind % 2 else None
        builder.append(key, b"value " * (size % 40) + bytes([i]), headers, T + i * 7 - 3)
    return builder.build()


def _log_of(spec: list[tuple[int, int]]) -> tuple[bytes, list[tuple[int, int]]]:
    """Batches back to back; returns the bytes and each batch's (position, size)."""
    data, layout, offset = b"", [], 0
    for kind, size in spec:
        batch = sample_batch(kind, offset, size)
        layout.append((len(data), len(batch)))
        data += batch
        offset += 5
    return data, layout


logs = st.lists(st.tuples(st.integers(0, 59), st.integers(0, 200)), min_size=1, max_size=4).map(
    _log_of
)


def restamp_crcs(data: bytearray, layout) -> bytes:
    """Recompute each batch's CRC, so that a change reaches the parsers behind the CRC."""
    for pos, size in layout:
        crc = crc32c_package.crc32c(bytes(data[pos + 21 : pos + size]))
        struct.pack_into(">I", data, pos + 17, crc)
    return bytes(data)


# ---- tests ----------------------------------------------------------------------------------


@FUZZ
@given(data=st.binary(max_size=400))
def test_random_bytes_raise_only_corrupt_record_error(data):
    exercise(data)


@FUZZ
@given(
    body=st.binary(max_size=200),
    count=st.integers(-2, 40),
    last_offset_delta=st.integers(-2, 40),
    attributes=st.integers(0, 0x3F),
)
def test_random_records_behind_a_crc_valid_header_raise_only_allowed_errors(
    body, count, last_offset_delta, attributes
):
    """Random bytes as (possibly 'compressed') records, with a CRC that matches them: the
    record parser and the decompressors face garbage directly."""
    after_crc = struct.pack(">hiqqqhii", attributes, last_offset_delta, T, T, -1, -1, -1, count)
    after_crc += body
    crc = crc32c_package.crc32c(after_crc)
    exercise(struct.pack(">qiibI", 0, 9 + len(after_crc), 0, 2, crc) + after_crc)


@FUZZ
@given(
    log=logs,
    flips=st.lists(st.tuples(st.integers(0, 2**20), st.integers(1, 255)), min_size=1, max_size=3),
)
def test_flipped_bytes_inside_a_batch_are_caught_by_its_crc(log, flips):
    data, layout = log
    damaged = bytearray(data)
    for at, mask in flips:
        damaged[at % len(data)] ^= mask
    damaged = bytes(damaged)
    changed = [i for i in range(len(data)) if damaged[i] != data[i]]
    exercise(damaged)
    walked = {b.position: b for b in walk(damaged)[0]}
    for pos, size in layout:
        offsets = [i - pos for i in changed if pos <= i < pos + size]
        batch = walked.get(pos)
        if batch is None or batch.size_in_bytes != size or any(8 <= d < 12 for d in offsets):
            continue  # the walk lost this batch (an earlier length or magic changed)
        covered = any(d >= 17 for d in offsets)  # the CRC field and attributes..end
        assert batch.is_valid() == (not covered), f"changes at {offsets} in the batch at {pos}"


@FUZZ
@given(log=logs, cut=st.integers(0, 2**20))
def test_truncated_log_yields_its_whole_batches_then_names_the_cut(log, cut):
    data, layout = log
    cut %= len(data) + 1
    exercise(data[:cut])
    whole = [(pos, size) for pos, size in layout if pos + size <= cut]
    boundary = sum(size for _, size in whole)
    batches, error = walk(data[:cut])
    assert [b.position for b in batches] == [pos for pos, _ in whole]
    assert all(b.is_valid() for b in batches)
    if cut == boundary:
        assert error is None
    else:
        assert error is not None and error.position == boundary
    assert scan_batches(data[:cut]).valid_end == boundary


@FUZZ
@given(
    log=logs,
    inserts=st.lists(
        st.tuples(st.integers(0, 2**20), st.binary(min_size=1, max_size=8)), min_size=1, max_size=3
    ),
)
def test_inserted_bytes_raise_only_corrupt_record_error(log, inserts):
    data, _ = log
    damaged = bytearray(data)
    for where, extra in inserts:
        at = where % (len(damaged) + 1)
        damaged[at:at] = extra
    exercise(bytes(damaged))


@FUZZ
@given(
    log=logs,
    which=st.integers(0, 3),
    length=st.one_of(st.integers(-(2**31), 2**31 - 1), st.integers(-4, 4)),
    relative=st.booleans(),
)
def test_corrupt_length_field_raises_only_corrupt_record_error(log, which, length, relative):
    data, layout = log
    pos, size = layout[which % len(layout)]
    damaged = bytearray(data)
    new_length = size - 12 + length if relative else length
    new_length = max(-(2**31), min(2**31 - 1, new_length))
    struct.pack_into(">i", damaged, pos + 8, new_length)
    exercise(bytes(damaged))
    batches, _ = walk(bytes(damaged))
    # The batches before the damaged one are untouched.
    assert [b.position for b in batches[: which % len(layout)]] == [
        p for p, _ in layout[: which % len(layout)]
    ]


@FUZZ
@given(
    log=logs,
    changes=st.lists(st.tuples(st.integers(0, 2**20), st.integers(0, 255)), min_size=1, max_size=4),
)
def test_damage_behind_a_restamped_crc_raises_only_allowed_errors(log, changes):
    """Bytes changed after the CRC field -- header fields, record bytes, compressed payloads --
    with the CRC recomputed, so that the parsers (not the CRC check) meet the damage."""
    data, layout = log
    damaged = bytearray(data)
    for at, value in changes:
        pos, size = layout[at % len(layout)]
        damaged[pos + 21 + (at // 7) % (size - 21)] = value
    exercise(restamp_crcs(damaged, layout))


@FUZZ
@given(
    log=logs,
    field=st.sampled_from([(21, ">h"), (23, ">i"), (27, ">q"), (35, ">q"), (57, ">i")]),
    value=st.integers(-(2**63), 2**63 - 1),
)
def test_header_fields_behind_a_restamped_crc_raise_only_allowed_errors(log, field, value):
    """Attributes (any codec id, control and timestamp-type bits), last offset delta,
    timestamps and record count set to anything, with a matching CRC."""
    data, layout = log
    offset, fmt = field
    bits = struct.calcsize(fmt) * 8
    value = (value + 2 ** (bits - 1)) % 2**bits - 2 ** (bits - 1)
    damaged = bytearray(data)
    struct.pack_into(fmt, damaged, layout[0][0] + offset, value)
    exercise(restamp_crcs(damaged, layout))


@pytest.mark.parametrize("codec", range(8))
def test_every_codec_id_behind_a_valid_crc_raises_only_its_allowed_error(codec):
    data, layout = _log_of([(0, 50)])
    damaged = bytearray(data)
    damaged[22] = (damaged[22] & ~0x07) | codec
    batch = next(iter_batches(restamp_crcs(damaged, layout)))
    if codec == 0:
        assert len(list(batch.records())) == batch.record_count
    else:  # gzip, snappy, lz4, zstd: not their format; 5-7: no codec
        with pytest.raises(CorruptRecordError):
            list(batch.records())


# ---- the same checks in a child process -----------------------------------------------------


def fuzz_loop(seed: int, iterations: int) -> None:
    """Seeded mutations of valid logs through ``exercise`` (for the child process)."""
    rng = random.Random(seed)
    for _ in range(iterations):
        spec = [(rng.randrange(60), rng.randrange(200)) for _ in range(rng.randint(1, 3))]
        data, layout = _log_of(spec)
        damaged = bytearray(data)
        kind = rng.randrange(6)
        if kind == 0:  # flips
            for _ in range(rng.randint(1, 4)):
                damaged[rng.randrange(len(damaged))] ^= rng.randint(1, 255)
        elif kind == 1:  # truncation
            del damaged[rng.randrange(len(damaged)) :]
        elif kind == 2:  # insertion
            at = rng.randrange(len(damaged) + 1)
            damaged[at:at] = rng.randbytes(rng.randint(1, 8))
        elif kind == 3:  # length field
            pos, _ = rng.choice(layout)
            struct.pack_into(">i", damaged, pos + 8, rng.randint(-(2**31), 2**31 - 1))
        elif kind == 4:  # damage behind a restamped CRC
            for _ in range(rng.randint(1, 4)):
                pos, size = rng.choice(layout)
                damaged[pos + rng.randrange(21, size)] = rng.randrange(256)
            damaged = bytearray(restamp_crcs(damaged, layout))
        else:  # random bytes
            damaged = bytearray(rng.randbytes(rng.randrange(300)))
        exercise(bytes(damaged))


@pytest.mark.slow
def test_fuzz_loop_in_a_child_process_exits_cleanly():
    """A native crash (segfault, abort) in the readers fails this test with the seed, instead
    of killing the whole pytest run."""
    seed = int(os.environ.get("RAFTCORE_FUZZ_SEED", random.randrange(2**32)))
    iterations = 5 * FUZZ_EXAMPLES
    package_root = Path(raftcore.__file__).resolve().parent.parent
    tests_dir = Path(__file__).resolve().parent
    script = textwrap.dedent(
        f"""
        import sys
        sys.path[:0] = [{str(package_root)!r}, {str(tests_dir)!r}]
        import raftcore
        assert raftcore.__file__.startswith({str(package_root)!r}), raftcore.__file__
        import test_records_fuzz
        test_records_fuzz.fuzz_loop({seed}, {iterations})
        """
    )
    result = subprocess.run(
        [sys.executable, "-X", "faulthandler", "-c", script],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    how = (
        f"was killed by signal {-result.returncode}"
        if result.returncode < 0
        else f"exited with code {result.returncode}"
    )
    assert result.returncode == 0, (
        f"the fuzz loop {how}; reproduce with RAFTCORE_FUZZ_SEED={seed}\n{result.stderr[-4000:]}"
    )
