"""Record batches built byte by byte, with any field wrong and a fresh CRC: what a buggy
client can send. ``record`` writes one record (v2 layout), ``batch`` wraps records in a batch
header whose count, last offset delta, magic and attributes can be set freely."""

from __future__ import annotations

import struct

from raftcore import crc32c


def zigzag(n: int) -> bytes:
    n = (n << 1) ^ (n >> 63)
    out = bytearray()
    while True:
        low, n = n & 0x7F, n >> 7
        if not n:
            out.append(low)
            return bytes(out)
        out.append(low | 0x80)


def record(
    offset_delta: int,
    key: bytes | None = b"k",
    value: bytes | None = b"v",
    headers: tuple = (),
    *,
    length_adjust: int = 0,
    header_count: int | None = None,
) -> bytes:
    body = bytes([0]) + zigzag(0) + zigzag(offset_delta)
    body += zigzag(-1) if key is None else zigzag(len(key)) + key
    body += zigzag(-1) if value is None else zigzag(len(value)) + value
    body += zigzag(len(headers) if header_count is None else header_count)
    for hk, hv in headers:
        body += zigzag(len(hk)) + hk + zigzag(len(hv)) + hv
    return zigzag(len(body) + length_adjust) + body


def batch(
    records: list[bytes],
    *,
    count: int | None = None,
    last_delta: int | None = None,
    magic: int = 2,
    attributes: int = 0,
) -> bytes:
    body = b"".join(records)
    n = len(records) if count is None else count
    last = n - 1 if last_delta is None else last_delta
    after_crc = struct.pack(">hiqqqhii", attributes, last, 1, 1, -1, -1, -1, n) + body
    head = struct.pack(">qiib", 0, 9 + len(after_crc), 0, magic)
    return head + struct.pack(">I", crc32c(after_crc)) + after_crc
