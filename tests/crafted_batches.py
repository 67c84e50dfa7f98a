"""Record batches built byte by byte, with any field wrong and a fresh CRC: what a buggy
client can send. ``record`` writes one record (v2 layout), ``raw_record`` wraps any bytes as a
record body, ``batch`` wraps records in a batch header whose count, last offset delta, magic,
attributes and producer fields can be set freely."""

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


def raw_record(body: bytes, length_adjust: int = 0) -> bytes:
    """``body`` (attributes onwards) behind its length varint."""
    return zigzag(len(body) + length_adjust) + body


def record(
    offset_delta: int,
    key: bytes | None = b"k",
    value: bytes | None = b"v",
    headers: tuple = (),
    *,
    length_adjust: int = 0,
    header_count: int | None = None,
    key_length: int | None = None,
) -> bytes:
    """One record; headers are (key bytes or None, value bytes or None) pairs."""
    body = bytes([0]) + zigzag(0) + zigzag(offset_delta)
    if key_length is not None:
        body += zigzag(key_length) + (key or b"")
    else:
        body += zigzag(-1) if key is None else zigzag(len(key)) + key
    body += zigzag(-1) if value is None else zigzag(len(value)) + value
    body += zigzag(len(headers) if header_count is None else header_count)
    for hk, hv in headers:
        body += zigzag(-1) if hk is None else zigzag(len(hk)) + hk
        body += zigzag(-1) if hv is None else zigzag(len(hv)) + hv
    return raw_record(body, length_adjust)


def batch(
    records: list[bytes],
    *,
    count: int | None = None,
    last_delta: int | None = None,
    magic: int = 2,
    attributes: int = 0,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    crc_adjust: int = 0,
) -> bytes:
    body = b"".join(records)
    n = len(records) if count is None else count
    last = n - 1 if last_delta is None else last_delta
    after_crc = (
        struct.pack(
            ">hiqqqhii", attributes, last, 1, 1, producer_id, producer_epoch, base_sequence, n
        )
        + body
    )
    head = struct.pack(">qiib", 0, 9 + len(after_crc), 0, magic)
    crc = (crc32c(after_crc) + crc_adjust) & 0xFFFFFFFF
    return head + struct.pack(">I", crc) + after_crc


def refresh_crc(data: bytes | bytearray) -> bytes:
    """One batch with its CRC recomputed over its bytes as they are."""
    raw = bytearray(data)
    raw[17:21] = crc32c(bytes(raw[21:])).to_bytes(4, "big")
    return bytes(raw)
