"""A deliberately naive Kafka record batch v2 encoder and decoder, for differential tests.

Written straight from the layout in KRAFT.md section 3 (Kafka's DefaultRecordBatch and
DefaultRecord), one field at a time, with no speed tricks and no shared code with raftcore:
zig-zag varints by arithmetic, big-endian integers with ``struct``, CRC-32C from the ``crc32c``
package. Compression is handled only on the reading side (gzip with the ``gzip`` module, zstd
with ``zstandard``), since compressed bytes depend on the compressor.

Every check the format implies raises ``RefDecodeError``.
"""

from __future__ import annotations

import gzip
import struct
from dataclasses import dataclass

import crc32c as crc32c_package
import zstandard

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1

# Offsets of the batch header fields (KRAFT.md section 3).
PARTITION_LEADER_EPOCH_AT = 12
CRC_AT = 17
ATTRIBUTES_AT = 21
HEADER_SIZE = 61

# Attributes bits.
CODEC_MASK = 0x07
TIMESTAMP_TYPE_BIT = 0x08
TRANSACTIONAL_BIT = 0x10
CONTROL_BIT = 0x20

CODEC_NONE, CODEC_GZIP, CODEC_ZSTD = 0, 1, 4


class RefDecodeError(ValueError):
    """The bytes are not a valid record batch v2."""


# ---- zig-zag varints --------------------------------------------------------------------------


def zigzag(value: int, bits: int) -> int:
    """Zig-zag map a signed integer of ``bits`` bits to an unsigned one: 0, -1, 1, -2 ... ->
    0, 1, 2, 3 ..."""
    low, high = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
    if not low <= value <= high:
        raise ValueError(f"{value} does not fit in {bits} bits")
    return 2 * value if value >= 0 else -2 * value - 1


def unzigzag(raw: int) -> int:
    return raw // 2 if raw % 2 == 0 else -(raw + 1) // 2


def encode_unsigned_varint(raw: int) -> bytes:
    out = bytearray()
    while True:
        seven = raw % 128
        raw //= 128
        if raw:
            out.append(seven + 128)
        else:
            out.append(seven)
            return bytes(out)


def encode_varint(value: int) -> bytes:
    """A 32-bit zig-zag varint (Kafka's ByteUtils.writeVarint)."""
    return encode_unsigned_varint(zigzag(value, 32))


def encode_varlong(value: int) -> bytes:
    """A 64-bit zig-zag varint (Kafka's ByteUtils.writeVarlong)."""
    return encode_unsigned_varint(zigzag(value, 64))


def decode_zigzag(data: bytes, pos: int, bits: int) -> tuple[int, int]:
    """Read a zig-zag varint of ``bits`` bits at ``pos``; return (value, position after it).
    At most ceil(bits / 7) bytes, and the value must fit in ``bits`` bits unsigned."""
    max_bytes = (bits + 6) // 7
    raw = 0
    for i in range(max_bytes):
        if pos + i >= len(data):
            raise RefDecodeError(f"varint at {pos} runs past the end")
        byte = data[pos + i]
        raw += (byte % 128) * 128**i
        if byte < 128:
            if raw >= 2**bits:
                raise RefDecodeError(f"varint at {pos} is wider than {bits} bits")
            return unzigzag(raw), pos + i + 1
    raise RefDecodeError(f"varint at {pos} is longer than {max_bytes} bytes")


# ---- records and batches ----------------------------------------------------------------------


@dataclass(frozen=True)
class RefRecord:
    """A decoded record, with absolute offset and timestamp."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]


@dataclass(frozen=True)
class RefBatch:
    """A decoded batch: every header field, the size it took, and its records."""

    base_offset: int
    length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int
    records: tuple[RefRecord, ...]

    @property
    def size(self) -> int:
        return self.length + 12

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_BIT)


def wrap64(value: int) -> int:
    """Java's long addition: wraps around on overflow (a damaged delta can overflow)."""
    return (value + 2**63) % 2**64 - 2**63


def _nullable_bytes(data: bytes | None) -> bytes:
    if data is None:
        return encode_varint(-1)
    return encode_varint(len(data)) + bytes(data)


def encode_record(
    offset_delta: int,
    timestamp_delta: int,
    key: bytes | None,
    value: bytes | None,
    headers: list[tuple[str, bytes | None]] | tuple = (),
) -> bytes:
    body = b"\x00"  # record attributes: unused, always 0
    body += encode_varlong(timestamp_delta)
    body += encode_varint(offset_delta)
    body += _nullable_bytes(key)
    body += _nullable_bytes(value)
    body += encode_varint(len(headers))
    for header_key, header_value in headers:
        key_bytes = header_key.encode("utf-8")
        body += encode_varint(len(key_bytes)) + key_bytes
        body += _nullable_bytes(header_value)
    return encode_varint(len(body)) + body


def encode_batch(
    records: list[tuple[bytes | None, bytes | None, list, int]],
    *,
    base_offset: int = 0,
    leader_epoch: int = 0,
    control: bool = False,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    attributes_extra: int = 0,
) -> bytes:
    """An uncompressed batch of ``records`` given as (key, value, headers, timestamp), with
    consecutive offsets from ``base_offset``. The first record's timestamp is the base
    timestamp; the largest is the max timestamp."""
    if not records:
        raise ValueError("a batch needs at least one record")
    base_timestamp = records[0][3]
    max_timestamp = max(r[3] for r in records)
    body = b""
    for delta, (key, value, headers, timestamp) in enumerate(records):
        body += encode_record(delta, timestamp - base_timestamp, key, value, headers)
    attributes = attributes_extra | (CONTROL_BIT if control else 0)
    after_crc = struct.pack(
        ">hiqqqhii",
        attributes,
        len(records) - 1,
        base_timestamp,
        max_timestamp,
        producer_id,
        producer_epoch,
        base_sequence,
        len(records),
    )
    after_crc += body
    crc = crc32c_package.crc32c(after_crc)
    length = 4 + 1 + 4 + len(after_crc)  # leader epoch, magic, crc, then the CRC'd bytes
    return struct.pack(">qiibI", base_offset, length, leader_epoch, 2, crc) + after_crc


def _decompress(codec: int, payload: bytes) -> bytes:
    if codec == CODEC_NONE:
        return payload
    if codec == CODEC_GZIP:
        try:
            return gzip.decompress(payload)
        except (OSError, EOFError) as exc:
            raise RefDecodeError(f"bad gzip payload: {exc}") from None
    if codec == CODEC_ZSTD:
        try:
            reader = zstandard.ZstdDecompressor().stream_reader(payload, read_across_frames=True)
            return reader.read()
        except zstandard.ZstdError as exc:
            raise RefDecodeError(f"bad zstd payload: {exc}") from None
    raise RefDecodeError(f"codec {codec} is not handled by the reference")


def _read_nullable(data: bytes, pos: int, end: int, what: str) -> tuple[bytes | None, int]:
    length, pos = decode_zigzag(data, pos, 32)
    if length == -1:
        return None, pos
    if length < 0 or pos + length > end:
        raise RefDecodeError(f"{what} length {length} at {pos} does not fit")
    return data[pos : pos + length], pos + length


def decode_batch(data: bytes) -> RefBatch:
    """Decode exactly one batch that fills ``data``."""
    data = bytes(data)
    if len(data) < HEADER_SIZE:
        raise RefDecodeError(f"{len(data)} bytes is shorter than a batch header")
    fields = struct.unpack_from(">qiibIhiqqqhii", data)
    (base_offset, length, epoch, magic, crc, attributes, last_delta, base_ts, max_ts) = fields[:9]
    producer_id, producer_epoch, base_sequence, count = fields[9:]
    if length + 12 != len(data):
        raise RefDecodeError(f"batch length {length} but {len(data)} bytes given")
    if magic != 2:
        raise RefDecodeError(f"magic {magic}")
    if count < 0 or last_delta < 0:
        raise RefDecodeError(f"record count {count}, last offset delta {last_delta}")
    if crc32c_package.crc32c(data[ATTRIBUTES_AT:]) != crc:
        raise RefDecodeError("CRC mismatch")
    payload = _decompress(attributes & CODEC_MASK, data[HEADER_SIZE:])
    log_append_time = bool(attributes & TIMESTAMP_TYPE_BIT)
    records = []
    pos = 0
    previous_delta = -1
    for _ in range(count):
        record_length, pos = decode_zigzag(payload, pos, 32)
        end = pos + record_length
        if record_length < 0 or end > len(payload):
            raise RefDecodeError(f"record length {record_length} does not fit")
        pos += 1  # attributes
        timestamp_delta, pos = decode_zigzag(payload, pos, 64)
        offset_delta, pos = decode_zigzag(payload, pos, 32)
        if not previous_delta < offset_delta <= last_delta:
            raise RefDecodeError(f"offset delta {offset_delta} out of order")
        previous_delta = offset_delta
        key, pos = _read_nullable(payload, pos, end, "key")
        value, pos = _read_nullable(payload, pos, end, "value")
        header_count, pos = decode_zigzag(payload, pos, 32)
        if header_count < 0:
            raise RefDecodeError(f"header count {header_count}")
        headers = []
        for _ in range(header_count):
            header_key, pos = _read_nullable(payload, pos, end, "header key")
            if header_key is None:
                raise RefDecodeError("null header key")
            try:
                text = header_key.decode("utf-8")
            except UnicodeDecodeError:
                raise RefDecodeError("header key is not UTF-8") from None
            header_value, pos = _read_nullable(payload, pos, end, "header value")
            headers.append((text, header_value))
        if pos != end:
            raise RefDecodeError(f"record fields end at {pos}, its length says {end}")
        timestamp = max_ts if log_append_time else wrap64(base_ts + timestamp_delta)
        offset = wrap64(base_offset + offset_delta)
        records.append(RefRecord(offset, timestamp, key, value, tuple(headers)))
    if pos != len(payload):
        raise RefDecodeError(f"{len(payload) - pos} bytes after the last record")
    return RefBatch(
        base_offset,
        length,
        epoch,
        magic,
        crc,
        attributes,
        last_delta,
        base_ts,
        max_ts,
        producer_id,
        producer_epoch,
        base_sequence,
        count,
        tuple(records),
    )


def decode_batches(data: bytes) -> list[RefBatch]:
    """Decode a buffer of whole batches, back to back."""
    batches = []
    pos = 0
    while pos < len(data):
        if len(data) - pos < 12:
            raise RefDecodeError(f"{len(data) - pos} trailing bytes")
        (length,) = struct.unpack_from(">i", data, pos + 8)
        if length < HEADER_SIZE - 12 or pos + 12 + length > len(data):
            raise RefDecodeError(f"batch length {length} at {pos} does not fit")
        batches.append(decode_batch(data[pos : pos + 12 + length]))
        pos += 12 + length
    return batches
