"""Cross-checks with real Kafka client implementations: aiokafka (its C extension) and
kafka-python decode raftcore's batches, and raftcore decodes theirs -- every header field and
every record, over generated records, with none/gzip/zstd compression and control batches."""

import aiokafka.record.default_records as aiokafka_records
import kafka.record.default_records as kafka_records
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raftcore.records import encode_batch, iter_batches

CODECS = {"none": 0, "gzip": 1, "zstd": 4}

keys_values = st.one_of(st.none(), st.binary(max_size=200))
headers = st.lists(st.tuples(st.text(max_size=12), st.binary(max_size=20)), max_size=3)
record_lists = st.lists(st.tuples(keys_values, keys_values, headers), min_size=1, max_size=25)
batch_params = st.fixed_dictionaries(
    {
        "base_offset": st.integers(0, 2**40),
        "leader_epoch": st.integers(0, 2**31 - 1),
        "timestamp_ms": st.integers(0, 2**41),
        "compression": st.sampled_from(list(CODECS)),
        "producer_id": st.integers(-1, 2**40),
        "producer_epoch": st.integers(-1, 2**15 - 1),
        "base_sequence": st.integers(-1, 2**30),
    }
)


def test_aiokafka_decodes_with_its_c_extension():
    assert "_crecords" in aiokafka_records.DefaultRecordBatch.__module__
    assert "_crecords" in aiokafka_records.DefaultRecordBatchBuilder.__module__


def peer_fields(batch):
    return (
        batch.base_offset,
        batch.last_offset_delta,
        batch.producer_id,
        batch.producer_epoch,
        batch.base_sequence,
        batch.is_control_batch,
        batch.compression_type,
        batch.max_timestamp,
    )


def our_fields(batch):
    return (
        batch.base_offset,
        batch.last_offset_delta,
        batch.producer_id,
        batch.producer_epoch,
        batch.base_sequence,
        batch.is_control,
        batch.attributes & 7,
        batch.max_timestamp,
    )


def normalized(records):
    """(key, value, headers) as both sides report them."""
    return [(k, v, [(hk, hv) for hk, hv in h]) for k, v, h in records]


@pytest.mark.parametrize(
    "peer", [aiokafka_records, kafka_records], ids=["aiokafka", "kafka-python"]
)
@settings(max_examples=150, deadline=None)
@given(records=record_lists, params=batch_params, control=st.booleans())
def test_peers_decode_raftcore_batches(peer, records, params, control):
    if control:  # a control record's key is version int16 + type int16
        records = [(b"\x00\x00\x00" + bytes([i % 7]), v, h) for i, (_, v, h) in enumerate(records)]
    data = encode_batch(records, control=control, **params)
    theirs = peer.DefaultRecordBatch(bytes(data))
    ours = next(iter_batches(data))
    assert theirs.validate_crc()
    assert theirs.crc == ours.crc
    assert peer_fields(theirs) == our_fields(ours)
    got = list(theirs)
    assert [r.offset for r in got] == [params["base_offset"] + i for i in range(len(records))]
    assert {r.timestamp for r in got} == {params["timestamp_ms"]}
    assert [(r.key, r.value, list(r.headers)) for r in got] == normalized(records)
    if peer is kafka_records:
        assert theirs.leader_epoch == params["leader_epoch"]


def build_with(module, records, params, *, builder=None):
    cls = builder or module.DefaultRecordBatchBuilder
    b = cls(
        magic=2,
        compression_type=CODECS[params["compression"]],
        is_transactional=0,
        producer_id=params["producer_id"],
        producer_epoch=params["producer_epoch"],
        base_sequence=params["base_sequence"],
        batch_size=1 << 30,
    )
    for i, (k, v, h) in enumerate(records):
        b.append(i, timestamp=params["timestamp_ms"], key=k, value=v, headers=list(h))
    return bytes(b.build())


@pytest.mark.parametrize(
    "peer", [aiokafka_records, kafka_records], ids=["aiokafka", "kafka-python"]
)
@settings(max_examples=150, deadline=None)
@given(records=record_lists, params=batch_params)
def test_raftcore_decodes_peer_batches(peer, records, params):
    data = build_with(peer, records, params)
    ours = next(iter_batches(data))
    theirs = peer.DefaultRecordBatch(data)
    ours.validate()
    assert our_fields(ours) == peer_fields(theirs)
    # (kafka-python writes uncompressed when compressing would not shrink the batch)
    assert ours.compression in (params["compression"], "none")
    got = list(ours.records())
    assert [(r.key, r.value, list(r.headers)) for r in got] == normalized(records)
    assert [r.offset for r in got] == list(range(len(records)))
    assert {r.timestamp for r in got} == {params["timestamp_ms"]}


@settings(max_examples=100, deadline=None)
@given(records=record_lists, params=batch_params)
def test_uncompressed_batches_equal_aiokafkas_byte_for_byte(records, params):
    params = {**params, "compression": "none", "base_offset": 0}
    theirs = build_with(aiokafka_records, records, params)
    ours = encode_batch(records, **{**params, "leader_epoch": -1})
    assert ours == theirs  # aiokafka leaves the partition leader epoch at -1


class KafkaPythonControlBuilder(kafka_records.DefaultRecordBatchBuilder):
    """kafka-python never writes control batches (brokers do); this one sets the bit."""

    def _get_attributes(self, include_compression_type=True):
        return super()._get_attributes(include_compression_type) | self.CONTROL_MASK


class AiokafkaControlBuilder(aiokafka_records._DefaultRecordBatchBuilderPy):
    def _get_attributes(self, include_compression_type=True):
        return super()._get_attributes(include_compression_type) | 0x20


@pytest.mark.parametrize(
    ("module", "builder"),
    [(kafka_records, KafkaPythonControlBuilder), (aiokafka_records, AiokafkaControlBuilder)],
    ids=["kafka-python", "aiokafka-py"],
)
@pytest.mark.parametrize("compression", list(CODECS))
@pytest.mark.parametrize("control_type", [0, 1, 2, 3, 4, 5, 6])
def test_raftcore_reads_control_batches_written_by_peers(
    module, builder, compression, control_type
):
    params = {
        "compression": compression,
        "producer_id": -1,
        "producer_epoch": -1,
        "base_sequence": -1,
        "timestamp_ms": 1234,
    }
    key = b"\x00\x00" + control_type.to_bytes(2, "big")
    value = b"\x00\x00" + b"compressible " * 40  # big enough that the peer compresses it
    data = build_with(module, [(key, value, [])], params, builder=builder)
    batch = next(iter_batches(data))
    assert batch.is_valid() and batch.is_control
    assert batch.control_type == control_type
    assert batch.compression == compression


def test_kafka_python_memory_records_walks_many_raftcore_batches():
    from kafka.record import MemoryRecords

    data = b"".join(
        encode_batch(
            [(b"k%d" % i, b"v%d" % i)] * 3,
            base_offset=3 * i,
            leader_epoch=1,
            compression=("none", "gzip", "zstd")[i % 3],
        )
        for i in range(9)
    )
    records = MemoryRecords(data)
    offsets = []
    while (batch := records.next_batch()) is not None:
        assert batch.validate_crc()
        offsets.extend(r.offset for r in batch)
    assert offsets == list(range(27))
