"""snappy and lz4 record payloads, as Kafka's producers write them, read within a size limit.

The record batch codec (``raftcore._native.records``) handles none, gzip and zstd itself and
hands these two here; both libraries are maintained native codecs (cramjam's snappy, the lz4
project's frame format).

- **snappy** (codec 2): either one raw snappy block (what librdkafka writes) or snappy-java's
  stream (what Kafka's Java producer writes): the 16-byte header ``\\x82SNAPPY\\x00``, a version
  and a compatible version, then blocks, each a 4-byte big-endian length and one raw snappy
  block. A raw block states its uncompressed length first, so the limit is checked before
  anything is decompressed.
- **lz4** (codec 3): the LZ4 frame format (magic ``04 22 4D 18``), one frame or several. Read
  through a streaming decompressor that stops one byte past the limit, so a hostile frame
  cannot expand without bound.

Every fault is a ``CodecError`` naming the codec and what is wrong; the batch codec turns it
into a CorruptRecordError at the batch's position.

Writing: snappy as one raw block (as librdkafka does; Kafka's Java consumer, librdkafka,
aiokafka and kafka-python read both forms), lz4 as one frame of independent 64 KiB blocks
(Kafka's Java producer's layout).
"""

from __future__ import annotations

import cramjam
import lz4.frame

__all__ = ["CodecError", "compress_lz4", "compress_snappy", "decompress_lz4", "decompress_snappy"]

XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = 16  # magic (8), version (4), compatible version (4)


class CodecError(ValueError):
    """A payload that does not decompress, or would expand beyond the limit."""


def decompress_snappy(src: bytes | memoryview, limit: int) -> bytes:
    """The records of a snappy payload (raw or snappy-java's stream), at most ``limit``
    bytes."""
    data = bytes(src)
    if data[:8] != XERIAL_MAGIC:
        return _raw_snappy(data, limit)
    if len(data) < _XERIAL_HEADER:
        raise CodecError("snappy stream header is truncated")
    parts = []
    total = 0
    pos = _XERIAL_HEADER
    while pos < len(data):
        if len(data) - pos < 4:
            raise CodecError(f"snappy stream block length at byte {pos} is truncated")
        size = int.from_bytes(data[pos : pos + 4], "big")
        pos += 4
        if size > len(data) - pos:
            raise CodecError(
                f"snappy stream block at byte {pos} claims {size} bytes, {len(data) - pos} remain"
            )
        block = _raw_snappy(data[pos : pos + size], limit - total)
        total += len(block)
        parts.append(block)
        pos += size
    return b"".join(parts)


def _raw_snappy(data: bytes, limit: int) -> bytes:
    try:
        declared = cramjam.snappy.decompress_raw_len(data)
    except Exception as exc:  # cramjam raises its own DecompressionError
        raise CodecError(f"snappy payload does not decompress: {exc}") from None
    if declared > limit:
        raise CodecError(f"snappy payload expands beyond {limit} bytes (it states {declared})")
    try:
        out = bytes(cramjam.snappy.decompress_raw(data))
    except Exception as exc:
        raise CodecError(f"snappy payload does not decompress: {exc}") from None
    if len(out) != declared:
        raise CodecError(f"snappy payload gave {len(out)} bytes, it states {declared}")
    return out


def decompress_lz4(src: bytes | memoryview, limit: int) -> bytes:
    """The records of an lz4 payload (one or more LZ4 frames), at most ``limit`` bytes."""
    data = bytes(src)
    parts = []
    total = 0
    while data:
        decoder = lz4.frame.LZ4FrameDecompressor()
        # Output in pieces sized from the input (a whole limit's buffer per call costs more
        # than the decompression), never past one byte over the limit.
        piece = max(1 << 16, 8 * len(data))
        try:
            while True:
                out = decoder.decompress(data, max_length=min(piece, limit - total + 1))
                data = b""
                total += len(out)
                if total > limit:
                    raise CodecError(f"lz4 payload expands beyond {limit} bytes")
                parts.append(out)
                if decoder.eof or decoder.needs_input:
                    break
        except RuntimeError as exc:  # python-lz4 reports every frame error so
            raise CodecError(f"lz4 payload does not decompress: {exc}") from None
        if not decoder.eof:
            raise CodecError("lz4 payload is truncated")
        data = decoder.unused_data
    if not parts:
        raise CodecError("lz4 payload is empty")
    return parts[0] if len(parts) == 1 else b"".join(parts)


def compress_snappy(payload: bytes) -> bytes:
    return bytes(cramjam.snappy.compress_raw(payload))


def compress_lz4(payload: bytes) -> bytes:
    return lz4.frame.compress(
        payload,
        block_size=lz4.frame.BLOCKSIZE_MAX64KB,
        block_linked=False,
        content_checksum=False,
        store_size=False,
    )
