"""Writes the golden record batches of this directory (see README.md). Not run by the tests.

Each reproducible vector's records are spelled out byte by byte below, from the layout in
KRAFT.md section 3; the batch header is packed with ``struct`` and the CRC computed with the
``crc32c`` package. Nothing here imports raftcore. Before writing, each vector is checked
against the naive reference encoder (``tests/reference``) and, for data batches, against
kafka-python's builder.

The compressed vectors are written by the peers' builders (kafka-python for gzip, aiokafka for
zstd); gzip output embeds the time of writing, so rerunning changes those files' bytes (not
their content).

Run from the repository root: ``python tests/vectors/make_vectors.py``.
"""

from __future__ import annotations

import json
import struct
import sys
from pathlib import Path

import crc32c
from aiokafka.record._crecords import DefaultRecordBatchBuilder as AiokafkaBuilder
from kafka.record.default_records import DefaultRecordBatchBuilder as KafkaPythonBuilder

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from reference.record_batch_ref import encode_batch as ref_encode_batch  # noqa: E402

HEADER_FIELDS = (
    "base_offset",
    "size",
    "partition_leader_epoch",
    "magic",
    "crc",
    "attributes",
    "last_offset_delta",
    "first_timestamp",
    "max_timestamp",
    "producer_id",
    "producer_epoch",
    "base_sequence",
    "record_count",
)
T0 = 1_700_000_000_000  # 2023-11-14T22:13:20Z, in ms: 0x0000018BCFE56800


def batch(
    records: bytes,
    *,
    count: int,
    base_offset: int,
    epoch: int,
    attributes: int = 0,
    last_offset_delta: int,
    base_timestamp: int,
    max_timestamp: int,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
) -> bytes:
    after_crc = (
        struct.pack(
            ">hiqqqhii",
            attributes,
            last_offset_delta,
            base_timestamp,
            max_timestamp,
            producer_id,
            producer_epoch,
            base_sequence,
            count,
        )
        + records
    )
    length = 4 + 1 + 4 + len(after_crc)  # epoch, magic, crc, then the CRC'd part
    head = struct.pack(">qiibI", base_offset, length, epoch, 2, crc32c.crc32c(after_crc))
    return head + after_crc


def record(body_hex: str) -> bytes:
    """A record: its body (hex, spaces ignored) behind its length as a zig-zag varint."""
    body = bytes.fromhex(body_hex.replace(" ", ""))
    n = len(body) * 2  # zig-zag of a non-negative length
    length = bytearray()
    while n >= 0x80:
        length.append((n & 0x7F) | 0x80)
        n >>= 7
    length.append(n)
    return bytes(length) + body


def spec_record(key, value, headers, timestamp) -> dict:
    def hexed(b):
        """Hex; a long run of one byte as {"hex": byte, "repeat": n}, to keep the JSON short."""
        if b is not None and len(b) > 32 and len(set(b)) == 1:
            return {"hex": b[:1].hex(), "repeat": len(b)}
        return None if b is None else b.hex()

    return {
        "key": hexed(key),
        "value": hexed(value),
        "headers": [[k, hexed(v)] for k, v in headers],
        "timestamp": timestamp,
    }


def main() -> None:
    vectors: dict[str, tuple[bytes, dict]] = {}

    # 1. Two plain records.
    #    attr ts-delta off-delta key-len key     value-len value  headers
    r0 = record("00   00       00        02      6b      02        76     00")
    #    attr ts-delta(+5) off(1) key(null) value-len(0) headers
    r1 = record("00   0a       02     01        00           00")
    assert r0.hex() == "10000000026b027600" and r1.hex() == "0c000a02010000"
    data = batch(
        r0 + r1,
        count=2,
        base_offset=0,
        epoch=0,
        last_offset_delta=1,
        base_timestamp=T0,
        max_timestamp=T0 + 5,
    )
    recs = [(b"k", b"v", [], T0), (None, b"", [], T0 + 5)]
    vectors["two_records_plain"] = (data, {"encode": {"base_offset": 0, "leader_epoch": 0}}, recs)

    # 2. Null key, headers (one with a null value, one with a 2-byte UTF-8 key), an empty key,
    #    a null value, and a negative timestamp delta (-500: zig-zag 999 = e7 07).
    r0 = record(
        "00 00 00"  # attributes, ts delta 0, offset delta 0
        "01"  # key: null
        "0a 68656c6c6f"  # value: 5 bytes "hello"
        "04"  # 2 headers
        "10 74726163652d6964 06 010203"  # "trace-id" -> 01 02 03
        "04 c3a9 01"  # "é" -> null
    )
    r1 = record("00 e707 02 00 01 00")  # ts delta -500, offset delta 1, key b"", value null
    data = batch(
        r0 + r1,
        count=2,
        base_offset=42,
        epoch=7,
        last_offset_delta=1,
        base_timestamp=T0 + 500,
        max_timestamp=T0 + 500,
    )
    recs = [
        (None, b"hello", [("trace-id", b"\x01\x02\x03"), ("é", None)], T0 + 500),
        (b"", None, [], T0),
    ]
    vectors["headers_null_key_negative_delta"] = (
        data,
        {"encode": {"base_offset": 42, "leader_epoch": 7}},
        recs,
    )

    # 3. Idempotent producer fields, and lengths at the varint edges: 63 (7e), 64 (80 01),
    #    8192 (80 80 01); the second record's own length is 8200 (90 80 01).
    r0 = record("00 00 00 7e" + "61" * 63 + "8001" + "62" * 64 + "00")
    r1 = record("00 00 02 01 808001" + "ab" * 8192 + "00")
    assert r0[:2] == b"\x8c\x02" and r1[:3] == b"\x90\x80\x01"
    params = {
        "base_offset": 1_000_000,
        "leader_epoch": 2,
        "producer_id": 123_456_789,
        "producer_epoch": 3,
        "base_sequence": 17,
    }
    data = batch(
        r0 + r1,
        count=2,
        base_offset=1_000_000,
        epoch=2,
        last_offset_delta=1,
        base_timestamp=T0,
        max_timestamp=T0,
        producer_id=123_456_789,
        producer_epoch=3,
        base_sequence=17,
    )
    recs = [(b"a" * 63, b"b" * 64, [], T0), (None, b"\xab" * 8192, [], T0)]
    vectors["idempotent_producer_varint_edges"] = (data, {"encode": params}, recs)

    # 4. A LeaderChange control batch (type 2). Value: LeaderChangeMessage v0, flexible:
    #    Version int16 0, LeaderId 1, Voters [1], GrantingVoters [1] (compact arrays: count+1,
    #    each voter VoterId int32 + empty tagged fields), then empty tagged fields.
    value = "0000 00000001 02 00000001 00 02 00000001 00 00"
    r0 = record("00 00 00 08 00000002 26 " + value + " 00")
    data = batch(
        r0,
        count=1,
        base_offset=100,
        epoch=5,
        attributes=0x20,
        last_offset_delta=0,
        base_timestamp=T0,
        max_timestamp=T0,
    )
    recs = [(b"\x00\x00\x00\x02", bytes.fromhex(value.replace(" ", "")), [], T0)]
    vectors["control_leader_change"] = (
        data,
        {"encode": {"base_offset": 100, "leader_epoch": 5, "control": True}, "control_type": 2},
        recs,
    )

    specs = {}
    for name, (data, spec, recs) in vectors.items():
        encode = spec["encode"]
        ref = ref_encode_batch(
            recs,
            base_offset=encode["base_offset"],
            leader_epoch=encode["leader_epoch"],
            control=encode.get("control", False),
            producer_id=encode.get("producer_id", -1),
            producer_epoch=encode.get("producer_epoch", -1),
            base_sequence=encode.get("base_sequence", -1),
        )
        assert ref == data, f"{name}: the reference encoder disagrees with the hand encoding"
        if not encode.get("control"):
            assert with_kafka_python(recs, encode) == data, f"{name}: kafka-python disagrees"
        specs[name] = {"reproducible": True, **spec, "records": recs}

    # 5-6. Compressed batches written by the peers (decode-only vectors).
    recs = [
        (b"key-%d" % i, b"compressible value " * 8, [("n", b"%d" % i)], T0 + i) for i in range(5)
    ]
    vectors["gzip_by_kafka_python"] = (peer_batch("kafka-python", recs, 1), None, recs)
    specs["gzip_by_kafka_python"] = {"reproducible": False, "records": recs}
    vectors["zstd_by_aiokafka"] = (peer_batch("aiokafka", recs, 4), None, recs)
    specs["zstd_by_aiokafka"] = {"reproducible": False, "records": recs}

    out = {}
    for name, spec in specs.items():
        data = vectors[name][0]
        (HERE / f"{name}.bin").write_bytes(data)
        fields = struct.unpack_from(">qiibIhiqqqhii", data)
        header = dict(zip(HEADER_FIELDS, fields, strict=True))
        header["size"] += 12
        spec["records"] = [spec_record(*r) for r in spec["records"]]
        out[name] = {"header": header, **spec}
    (HERE / "vectors.json").write_text(json.dumps(out, indent=1, ensure_ascii=False) + "\n")


def with_kafka_python(recs, encode) -> bytes:
    """The same batch from kafka-python's builder, with the broker-assigned fields set."""
    builder = KafkaPythonBuilder(
        magic=2,
        compression_type=0,
        is_transactional=False,
        producer_id=encode.get("producer_id", -1),
        producer_epoch=encode.get("producer_epoch", -1),
        base_sequence=encode.get("base_sequence", -1),
        batch_size=1 << 20,
    )
    for i, (key, value, headers, timestamp) in enumerate(recs):
        builder.append(i, timestamp, key, value, headers)
    data = bytearray(builder.build())
    struct.pack_into(">q", data, 0, encode["base_offset"])  # not covered by the CRC
    struct.pack_into(">i", data, 12, encode["leader_epoch"])  # not covered by the CRC
    return bytes(data)


def peer_batch(peer: str, recs, codec: int) -> bytes:
    builder_class = KafkaPythonBuilder if peer == "kafka-python" else AiokafkaBuilder
    builder = builder_class(
        magic=2,
        compression_type=codec,
        is_transactional=False,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=1 << 20,
    )
    for i, (key, value, headers, timestamp) in enumerate(recs):
        builder.append(i, timestamp, key, value, headers)
    data = bytes(builder.build())
    assert data[22] & 0x07 == codec, "the peer did not compress"
    return data


if __name__ == "__main__":
    main()
