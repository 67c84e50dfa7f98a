"""The Kafka codec of the hot requests (issue 13): the generated codec (``protocol.codegen``, in
use) side by side with the closure codec it replaced (``protocol.closure_codec``), one group per
message so that each pair sits together:

- decode a Produce v9 request carrying one batch of 1,000 records (the leader's side);
- encode a Produce v9 response (the leader's answer);
- decode a replica's Fetch v13 request (the leader's side of replication);
- encode a Fetch v13 response with records for one partition (the leader's answer);
- decode the same response (the follower's side).

Both codecs run on the message body (the header costs the same for both); an encode joins the
small pieces as ``api.encode_response`` does and leaves the records uncopied.
"""

import pytest

from raftcore.protocol.api import coalesce
from raftcore.protocol.closure_codec import compile_closures
from raftcore.protocol.schema import Reader, Writer, load_spec
from raftcore.records import encode_batch

N = 1000
BATCH = encode_batch(
    [(b"key-%012d" % i, bytes([i % 251]) * 100) for i in range(N)], timestamp_ms=1_700_000_000_000
)
TOPIC_ID = bytes(range(1, 17))


def codecs(name: str, version: int) -> dict:
    spec = load_spec(name)
    return {
        "closures": compile_closures(spec.root, version, version in spec.flexible),
        "generated": spec.codec(version),
    }


def produce_request():
    spec = load_spec("ProduceRequest")
    partition = spec.cls.PartitionProduceData(index=0, records=BATCH)
    topic = spec.cls.TopicProduceData(name="events", partition_data=[partition])
    return spec.cls(transactional_id=None, acks=-1, timeout_ms=30_000, topic_data=[topic])


def produce_response():
    spec = load_spec("ProduceResponse")
    partition = spec.cls.PartitionProduceResponse(index=0, base_offset=123_456, log_start_offset=0)
    return spec.cls(
        responses=[spec.cls.TopicProduceResponse(name="events", partition_responses=[partition])]
    )


def replica_fetch_request():
    spec = load_spec("FetchRequest")
    partition = spec.cls.FetchPartition(
        partition=0, current_leader_epoch=3, fetch_offset=123_456, last_fetched_epoch=3
    )
    topic = spec.cls.FetchTopic(topic_id=TOPIC_ID, partitions=[partition])
    return spec.cls(replica_id=1, max_wait_ms=500, min_bytes=1, topics=[topic])


def fetch_response():
    spec = load_spec("FetchResponse")
    partition = spec.cls.PartitionData(
        partition_index=0, high_watermark=124_456, last_stable_offset=124_456, log_start_offset=0
    )
    partition.records = BATCH
    topic = spec.cls.FetchableTopicResponse(topic_id=TOPIC_ID, partitions=[partition])
    return spec.cls(responses=[topic])


CASES = {
    "decode Produce v9 request (1000 records)": ("ProduceRequest", 9, produce_request),
    "encode Produce v9 response": ("ProduceResponse", 9, produce_response),
    "decode replica Fetch v13 request": ("FetchRequest", 13, replica_fetch_request),
    "encode Fetch v13 response (1000 records)": ("FetchResponse", 13, fetch_response),
    "decode Fetch v13 response (1000 records)": ("FetchResponse", 13, fetch_response),
}


def _encode(encode, obj) -> list:
    w = Writer()
    encode(obj, w)
    return coalesce(w.parts)  # as api.encode_response: small pieces joined, records as they are


def _decode(decode, body: bytes):
    return decode(Reader(body))


@pytest.mark.parametrize("codec", ["closures", "generated"])
@pytest.mark.parametrize("group", list(CASES))
def test_codec(benchmark, group, codec):
    name, version, make = CASES[group]
    benchmark.group = f"codec: {group}"
    pair = codecs(name, version)[codec]
    obj = make()
    body = load_spec(name).encode(obj, version).getvalue()
    if group.startswith("decode"):
        assert benchmark(_decode, pair[1], body) == obj
    else:
        parts = benchmark(_encode, pair[0], obj)
        assert b"".join(parts) == body
