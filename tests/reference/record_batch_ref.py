"""Record batch v2 written the slow, obvious way from the format description (struct for the
header, a loop per varint, the `crc32c` package), for differential tests."""

import struct

import crc32c


def zigzag_varint(n: int) -> bytes:
    v = (n << 1) ^ (n >> 63)
    v &= (1 << 64) - 1
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def read_varint(buf: bytes, pos: int) -> tuple[int, int]:
    shift = raw = 0
    while True:
        b = buf[pos]
        pos += 1
        raw |= (b & 0x7F) << shift
        if b < 0x80:
            return (raw >> 1) ^ -(raw & 1), pos
        shift += 7


def encode(
    records,
    *,
    base_offset,
    leader_epoch,
    timestamp,
    control=False,
    producer_id=-1,
    producer_epoch=-1,
    base_sequence=-1,
) -> bytes:
    body = bytearray()
    for delta, rec in enumerate(records):
        key, value = rec[0], rec[1]
        headers = rec[2] if len(rec) > 2 and rec[2] else []
        r = bytearray(b"\x00")
        r += zigzag_varint(0) + zigzag_varint(delta)
        r += zigzag_varint(-1) if key is None else zigzag_varint(len(key)) + key
        r += zigzag_varint(-1) if value is None else zigzag_varint(len(value)) + value
        r += zigzag_varint(len(headers))
        for hk, hv in headers:
            k = hk.encode()
            r += zigzag_varint(len(k)) + k
            r += zigzag_varint(-1) if hv is None else zigzag_varint(len(hv)) + hv
        body += zigzag_varint(len(r)) + r
    attributes = 0x20 if control else 0
    after_crc = struct.pack(
        ">hiqqqhii",
        attributes,
        len(records) - 1,
        timestamp,
        timestamp,
        producer_id,
        producer_epoch,
        base_sequence,
        len(records),
    ) + bytes(body)
    crc = crc32c.crc32c(after_crc)
    total = 12 + 4 + 1 + 4 + len(after_crc)
    head = struct.pack(">qiibI", base_offset, total - 12, leader_epoch, 2, crc)
    return head + after_crc


def decode(batch: bytes):
    """(header dict, [(offset, timestamp, key, value, headers)]) of one uncompressed batch."""
    (
        base_offset,
        length,
        epoch,
        _magic,
        crc,
        attributes,
        last_delta,
        base_ts,
        max_ts,
        pid,
        pepoch,
        bseq,
        count,
    ) = struct.unpack_from(">qiibIhiqqqhii", batch)
    assert crc32c.crc32c(batch[21 : 12 + length]) == crc
    pos, out = 61, []
    for _ in range(count):
        size, pos = read_varint(batch, pos)
        end = pos + size
        pos += 1
        ts_delta, pos = read_varint(batch, pos)
        off_delta, pos = read_varint(batch, pos)
        fields = []
        for _ in range(2):
            n, pos = read_varint(batch, pos)
            fields.append(None if n < 0 else batch[pos : pos + n])
            pos += max(n, 0)
        hcount, pos = read_varint(batch, pos)
        headers = []
        for _ in range(hcount):
            n, pos = read_varint(batch, pos)
            hk = batch[pos : pos + n].decode()
            pos += n
            n, pos = read_varint(batch, pos)
            headers.append((hk, None if n < 0 else batch[pos : pos + n]))
            pos += max(n, 0)
        assert pos == end
        out.append(
            (base_offset + off_delta, base_ts + ts_delta, fields[0], fields[1], tuple(headers))
        )
    header = dict(
        base_offset=base_offset,
        epoch=epoch,
        attributes=attributes,
        last_delta=last_delta,
        max_ts=max_ts,
        producer_id=pid,
        producer_epoch=pepoch,
        base_sequence=bseq,
        count=count,
    )
    return header, out
