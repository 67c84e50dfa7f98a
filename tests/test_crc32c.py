"""CRC-32C: standard vectors, the `crc32c` package, a bitwise reference, every code path of the
interleaved hardware loop, and both implementations."""

import mmap
import os
import random
import subprocess
import sys

import crc32c as crc32c_package
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from reference.crc32c_ref import crc32c_bitwise

import raftcore
from raftcore._native import crc32c as native

IMPLEMENTATIONS = [native.crc32c_software]
if native.hardware_available():
    IMPLEMENTATIONS.append(native.crc32c_hardware)


@pytest.mark.parametrize("impl", IMPLEMENTATIONS, ids=lambda f: f.__name__)
@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (b"", 0x00000000),
        (b"123456789", 0xE3069283),  # the check value of CRC-32C
        (bytes(32), 0x8A9136AA),  # RFC 3720 (iSCSI) B.4: 32 bytes of zeros
        (b"\xff" * 32, 0x62A8AB43),  # RFC 3720 B.4: 32 bytes of ones
        (bytes(range(32)), 0x46DD794E),  # RFC 3720 B.4: incrementing
        (bytes(range(31, -1, -1)), 0x113FDB5C),  # RFC 3720 B.4: decrementing
    ],
)
def test_standard_test_vectors(impl, data, expected):
    assert impl(data) == expected


def test_public_function_uses_the_hardware_instruction_when_the_cpu_has_one():
    if native.hardware_available():
        assert native.implementation() in ("sse4.2", "armv8-crc")
    else:
        assert native.implementation() == "software"


def test_forcing_the_software_path_by_environment(tmp_path):
    code = (
        "from raftcore._native import crc32c as c; "
        "print(c.implementation(), c.crc32c(b'123456789'))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "RAFTCORE_CRC32C": "software"},
        cwd=tmp_path,  # not the checkout: the child must import the installed raftcore
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert out == ["software", str(0xE3069283)]


@pytest.mark.parametrize("impl", [raftcore.crc32c, *IMPLEMENTATIONS], ids=lambda f: f.__name__)
def test_matches_crc32c_package_on_every_length_0_to_4096(impl):
    rng = random.Random(7)
    data = rng.randbytes(4096 + 8)
    for n in range(4097):
        # vary the alignment too: the loops start on an 8-byte boundary
        start = n % 8
        chunk = data[start : start + n]
        assert impl(chunk) == crc32c_package.crc32c(chunk), n


@pytest.mark.parametrize("impl", IMPLEMENTATIONS, ids=lambda f: f.__name__)
def test_interleaved_block_boundaries(impl):
    # lengths around the 3-way block sizes of the hardware loop (3*256 and 3*8192 bytes)
    rng = random.Random(11)
    for base in (768, 3 * 8192, 2 * 3 * 8192, 3 * 8192 + 768):
        for n in range(base - 17, base + 17):
            data = rng.randbytes(n)
            assert impl(data) == crc32c_package.crc32c(data), n


def test_matches_crc32c_package_on_64_mib():
    data = np.random.default_rng(3).integers(0, 256, 64 << 20, dtype=np.uint8).tobytes()
    assert raftcore.crc32c(data) == crc32c_package.crc32c(data)
    assert native.crc32c_software(data[: 8 << 20]) == crc32c_package.crc32c(data[: 8 << 20])


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=2048), st.integers(0, 0xFFFFFFFF))
def test_matches_bitwise_reference_with_any_start_value(data, value):
    assert raftcore.crc32c(data, value) == crc32c_bitwise(data, value)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=70000), st.data())
def test_continuing_a_checksum_equals_checksumming_the_concatenation(data, draw):
    cut = draw.draw(st.integers(0, len(data)))
    assert raftcore.crc32c(data[cut:], raftcore.crc32c(data[:cut])) == raftcore.crc32c(data)


def test_accepts_any_contiguous_buffer(tmp_path):
    payload = bytes(range(256)) * 40
    expected = crc32c_package.crc32c(payload)
    assert raftcore.crc32c(bytearray(payload)) == expected
    assert raftcore.crc32c(memoryview(payload)) == expected
    assert raftcore.crc32c(np.frombuffer(payload, dtype=np.uint8)) == expected
    path = tmp_path / "f"
    path.write_bytes(payload)
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
        assert raftcore.crc32c(m) == expected


def test_rejects_str_and_non_contiguous_buffers_and_bad_start_values():
    with pytest.raises(TypeError):
        raftcore.crc32c("text")
    with pytest.raises((BufferError, TypeError, ValueError)):
        raftcore.crc32c(memoryview(bytes(100))[::2])
    with pytest.raises(ValueError):
        raftcore.crc32c(b"x", -1)
    with pytest.raises(ValueError):
        raftcore.crc32c(b"x", 1 << 32)
