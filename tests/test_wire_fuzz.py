"""Wire fuzzing against running node processes (issue 9, item 5).

A 3-node cluster of ``raftcore node`` processes on loopback gets, at every node and while a
steady writer (``Producer``, acks=all) writes numbered values:

- random bytes; random frames behind a valid size prefix; frames with a valid header and a
  random body; huge (2^31-1, one past the maximum frame) and negative sizes; zero-length frames;
- every API we know (``ApiKey``), at every version of its spec (served or not; the consumer
  and the replica Fetch), built validly with our codecs, then cut short (the frame's size says
  the cut length; and, sampled, a size that promises more than is ever sent) and mutated (bit
  flips, byte replacement, length-looking fields inflated);
- raft requests (Vote, BeginQuorumEpoch, EndQuorumEpoch, UpdateRaftVoter, replica Fetch,
  FetchSnapshot) and voter changes (AddRaftVoter, RemoveRaftVoter, TransferLeadership) with
  another cluster id; replica Fetch and FetchSnapshot from ids outside the voter set too; with
  absurd epochs;
- slow clients (a request a byte at a time over about two seconds; frames begun and never
  finished, held for the whole run); 300 idle connections per node, held and then closed;
- an HTTP request and a TLS ClientHello on the Kafka port;
- connection attacks, each with the node's memory before, during and after (the nodes run
  with tighter bounds than the defaults, :data:`BOUNDS`, to keep the run short): a flood past
  ``max.connections.per.ip`` from one host and past ``max.connections`` from several; a
  slowloris (requests a byte every half second), closed within the frame receive timeout;
  frames begun by many connections, held within ``queued.max.request.bytes``; idle
  connections, closed after ``connections.max.idle.ms``. Clients from the voters' host
  (127.0.0.1) are served throughout; the attackers come from 127.0.0.2 and up.

Raft input that is legitimate is never sent: a Vote or BeginQuorumEpoch with our cluster id
(or none) and a high epoch is what a real candidate or leader sends, and may depose the leader
-- that is the protocol working, not a bug (the protocol has no authentication on a PLAINTEXT
listener; Kafka's has none either). A Vote from an id outside the voter set gets no vote but
still raises the epoch (a removed voter may be stranded in a higher one: docs/raft.md), and a
voter change from anyone is an operator's on a PLAINTEXT listener. So these are sent only with
another cluster id; a replica Fetch, which counts toward the high watermark only from a voter, also
from ids outside the voter set. Every mutated frame that still decodes is checked locally: if
it is legitimate input, it is counted as skipped and not sent.

Then: every process is alive and serving (ApiVersions and Metadata answered by each node,
DescribeQuorum names a leader, no epoch moved to an absurd value), every write the writer saw
acknowledged is consumable at its offset, in order, exactly once; every frame that does not
decode (by our own decoder) had its connection closed by the node, and only that connection;
no node logged a traceback, an ERROR or a CRITICAL line; each connection attack was bounded
(refused past the caps, closed by the timeouts, held within the budget); and once the fuzzing
connections are closed, each node's open file descriptors are back within 10 of the baseline
and its resident memory grew by less than 64 MiB.

In this process too (``test_mutated_raft_rpcs_with_a_nodes_credentials_...``): every raft
RPC built valid against a SASL_PLAINTEXT cluster as it is, one to three fields then set by
what they mean, sent with a voter's and a non-voter's node login.

``RAFTCORE_FUZZ_WIRE_SEED`` replays a run (the seed is printed, and named in every failure);
``RAFTCORE_FUZZ_WIRE_ITERATIONS`` (default 1) multiplies the mutated and random frames and
truncates at every length instead of a sample, for a long run by hand.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import re
import ssl
import struct
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import pytest
from cluster_helpers import FAST
from connection_attacks import (
    close_all,
    count_closed,
    flood,
    idle,
    memory_kib,
    partial_frames,
    slowloris,
    stop_slowloris,
)

from raftcore.client import Consumer, Producer, describe_quorum
from raftcore.client.connection import Connection
from raftcore.error_codes import Errors
from raftcore.node.local_cluster import LocalCluster
from raftcore.protocol.api import (
    SUPPORTED_VERSIONS,
    ApiKey,
    ProtocolError,
    UnknownApiKeyError,
    UnsupportedVersionError,
    decode_request,
    decode_response,
    encode_request,
    request_header_version,
    request_spec,
)
from raftcore.protocol.schema import FieldSpec, StructSpec
from raftcore.records import encode_batch

SEED = int(os.environ.get("RAFTCORE_FUZZ_WIRE_SEED") or random.SystemRandom().randrange(2**32))
ITERATIONS = max(1, int(os.environ.get("RAFTCORE_FUZZ_WIRE_ITERATIONS") or 1))
REPLAY = f"seed {SEED} (replay: RAFTCORE_FUZZ_WIRE_SEED={SEED} pytest tests/test_wire_fuzz.py)"

MAX_FRAME = 100 * 1024 * 1024  # the nodes' default max_frame_bytes
VOTERS = (1, 2, 3)
OUTSIDERS = (0x7FFFFFFF, 4, 99, 1000, 65536)  # ids outside the voter set
ABSURD_EPOCHS = (0x7FFFFFFF, 0x7FFFFFFE, 1 << 30, 1 << 20)
TOPIC = "raftcore"
FD_TOLERANCE = 10
RSS_TOLERANCE_KIB = 64 * 1024
IDLE_CONNECTIONS = 300
CONCURRENCY = 6  # fuzzing connections in flight per node
CLOSE_TIMEOUT_S = 5.0  # a malformed frame's connection must be closed within this
ANSWER_WAIT_S = 0.5  # how long to wait for an answer to a frame that decodes

# The nodes' bounds in this run (the defaults are larger or longer: docs/security.md).
PER_IP = 100
MAX_CONNECTIONS = 450  # above the 300 idle connections and the fuzzing's own
FRAME_TIMEOUT_S = 4.0
IDLE_TIMEOUT_S = 6.0  # above any pause of the writer and the fuzzing
BUDGET_MIB = 64
BOUNDS = [
    f"--max-connections={MAX_CONNECTIONS}",
    f"--max-connections-per-ip={PER_IP}",
    f"--frame-receive-timeout-ms={int(FRAME_TIMEOUT_S * 1000)}",
    f"--connections-max-idle-ms={int(IDLE_TIMEOUT_S * 1000)}",
    f"--queued-max-request-bytes={BUDGET_MIB << 20}",
]
ATTACKERS = [f"127.0.0.{i}" for i in range(2, 8)]  # not the voters' host

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(300),
    pytest.mark.cluster(3, node_args=FAST + BOUNDS),
]


def topic_id(cluster_id: str) -> bytes:
    """NodeConfig.topic_id, without building a NodeConfig."""
    return uuid.uuid5(uuid.NAMESPACE_URL, f"raftcore:{cluster_id}:{TOPIC}").bytes


# ---- what the node should do with a payload ----------------------------------------------------

CLOSE = "close"  # the first frame is malformed: the node must close the connection, unanswered
ANY = "any"  # it decodes (or is incomplete): an answer, silence or a close are all fine
PIPELINE = "pipeline"  # three valid requests, then anything: three answers at least, in order
PIPELINABLE = (ApiKey.API_VERSIONS, ApiKey.METADATA, ApiKey.DESCRIBE_QUORUM, ApiKey.LIST_OFFSETS)


@dataclass
class Shot:
    """One connection's worth of fuzz: the bytes, what kind of input, what the node must do."""

    kind: str
    payload: bytes
    expect: str
    detail: str = ""
    check: Any = None  # for a frame that decodes: a function of the decoded answer


def expectation(payload: bytes) -> str:
    """CLOSE if the first frame of ``payload`` is one the node must refuse by closing the
    connection (bad size, does not decode, unknown API, unsupported version of anything but
    ApiVersions), ANY otherwise."""
    if len(payload) < 4:
        return ANY
    (size,) = struct.unpack_from(">i", payload)
    if size < 0 or size > MAX_FRAME:
        return CLOSE
    if len(payload) - 4 < size:
        return ANY  # incomplete: the node waits for the rest
    try:
        decode_request(payload[4 : 4 + size])
    except UnsupportedVersionError as exc:
        return ANY if exc.header.request_api_key == ApiKey.API_VERSIONS else CLOSE
    except (UnknownApiKeyError, ProtocolError):
        return CLOSE
    return ANY


def legitimate_raft_input(frame: bytes, cluster_id: str) -> bool:
    """Whether a frame is a raft request a real voter could send: it decodes, carries our
    cluster id (or none), and comes from an id in the voter set. Such input may legitimately
    change the epoch or the leader, so the fuzzer does not send it."""
    try:
        header, body = decode_request(frame)
    except ProtocolError:
        return False
    key = header.request_api_key
    if getattr(body, "cluster_id", None) not in (None, cluster_id):
        return False
    if key in ANY_SOURCE_KEYS:
        return True
    sources: list[int] = []
    if key == ApiKey.FETCH:
        state = getattr(body, "replica_state", None)
        sources.append(state.replica_id if state is not None else body.replica_id)
    elif key == ApiKey.FETCH_SNAPSHOT:
        sources.append(body.replica_id)
    return any(s in VOTERS for s in sources)


# legitimate from any id with our cluster id (see the module docstring)
ANY_SOURCE_KEYS = frozenset(
    {
        ApiKey.VOTE,
        ApiKey.BEGIN_QUORUM_EPOCH,
        ApiKey.END_QUORUM_EPOCH,
        ApiKey.UPDATE_RAFT_VOTER,
        ApiKey.ADD_RAFT_VOTER,
        ApiKey.REMOVE_RAFT_VOTER,
        ApiKey.TRANSFER_LEADERSHIP,
    }
)


def framed(frame: bytes) -> bytes:
    return struct.pack(">i", len(frame)) + frame


# ---- valid requests of every API and version ------------------------------------------------


def spec_versions(key: ApiKey) -> range:
    spec = request_spec(key)
    return range(spec.valid.low, spec.valid.high + 1)


def build_body(key: ApiKey, version: int, cluster_id: str, rng: random.Random, **kw: Any) -> Any:
    """A valid body of ``key`` at ``version``. Raft requests come from outside the voter set
    (or carry another cluster id, when ``wrong_cluster``)."""
    cls = request_spec(key).cls
    tid = topic_id(cluster_id)
    wrong_cluster = kw.get("wrong_cluster", False)
    raft_cluster = "not-" + cluster_id if wrong_cluster else cluster_id
    source = rng.choice(VOTERS) if wrong_cluster else rng.choice(OUTSIDERS)
    epoch = rng.choice(ABSURD_EPOCHS)
    if key == ApiKey.API_VERSIONS:
        return cls(client_software_name="raftcore-fuzz", client_software_version="1.0")
    if key == ApiKey.METADATA:
        return cls(topics=[cls.MetadataRequestTopic(name=TOPIC, topic_id=tid)])
    if key == ApiKey.PRODUCE:
        records = encode_batch([(b"fuzz", b"%d" % rng.randrange(1 << 30))])
        return cls(
            transactional_id=None,
            acks=rng.choice((-1, 1)),
            timeout_ms=2000,
            topic_data=[
                cls.TopicProduceData(
                    name=TOPIC,
                    partition_data=[cls.PartitionProduceData(index=0, records=records)],
                )
            ],
        )
    if key == ApiKey.FETCH:
        replica = kw.get("replica", False)
        replica_id = source if replica else -1
        partition = cls.FetchPartition(
            partition=0,
            current_leader_epoch=epoch if replica else -1,
            fetch_offset=0,
            last_fetched_epoch=0 if replica else -1,
            partition_max_bytes=65536,
        )
        body = cls(
            replica_id=replica_id,
            replica_state=cls.ReplicaState(replica_id=replica_id, replica_epoch=-1),
            max_wait_ms=100,
            min_bytes=1,
            max_bytes=1 << 20,
            topics=[cls.FetchTopic(topic=TOPIC, topic_id=tid, partitions=[partition])],
        )
        if replica:
            body.cluster_id = raft_cluster
        return body
    if key == ApiKey.LIST_OFFSETS:
        return cls(
            replica_id=-1,
            topics=[
                cls.ListOffsetsTopic(
                    name=TOPIC,
                    partitions=[cls.ListOffsetsPartition(partition_index=0, timestamp=-1)],
                )
            ],
        )
    if key == ApiKey.INIT_PRODUCER_ID:
        return cls(
            transactional_id=None, transaction_timeout_ms=1000, producer_id=-1, producer_epoch=-1
        )
    if key == ApiKey.DESCRIBE_QUORUM:
        return cls(
            topics=[
                cls.TopicData(topic_name=TOPIC, partitions=[cls.PartitionData(partition_index=0)])
            ]
        )
    if key == ApiKey.VOTE:
        partition = cls.PartitionData(
            partition_index=0,
            candidate_epoch=epoch,
            candidate_id=source,
            last_offset_epoch=epoch - 1,
            last_offset=rng.choice((0, 1 << 40)),
        )
        return cls(
            cluster_id=raft_cluster,
            voter_id=rng.choice(VOTERS),
            topics=[cls.TopicData(topic_name=TOPIC, partitions=[partition])],
        )
    if key == ApiKey.BEGIN_QUORUM_EPOCH:
        partition = cls.PartitionData(partition_index=0, leader_id=source, leader_epoch=epoch)
        return cls(
            cluster_id=raft_cluster,
            voter_id=rng.choice(VOTERS),
            topics=[cls.TopicData(topic_name=TOPIC, partitions=[partition])],
            leader_endpoints=[cls.LeaderEndpoint(name="PLAINTEXT", host="127.0.0.1", port=1)],
        )
    if key == ApiKey.END_QUORUM_EPOCH:
        partition = cls.PartitionData(
            partition_index=0,
            leader_id=source,
            leader_epoch=epoch,
            preferred_successors=list(VOTERS),
            preferred_candidates=[cls.ReplicaInfo(candidate_id=v) for v in VOTERS],
        )
        return cls(
            cluster_id=raft_cluster,
            topics=[cls.TopicData(topic_name=TOPIC, partitions=[partition])],
            leader_endpoints=[cls.LeaderEndpoint(name="PLAINTEXT", host="127.0.0.1", port=1)],
        )
    if key == ApiKey.FETCH_SNAPSHOT:
        partition = cls.PartitionSnapshot(
            partition=0,
            current_leader_epoch=epoch,
            snapshot_id=cls.SnapshotId(end_offset=0, epoch=0),
            position=0,
        )
        return cls(
            cluster_id=raft_cluster,
            replica_id=source,
            max_bytes=1 << 20,
            topics=[cls.TopicSnapshot(name=TOPIC, partitions=[partition])],
        )
    if key == ApiKey.DELETE_RECORDS:
        # The fuzzed nodes keep no snapshots: a valid request is POLICY_VIOLATION, and no
        # record may go.
        partition = cls.DeleteRecordsPartition(
            partition_index=0, offset=rng.choice((-1, 0, 5, 1 << 40))
        )
        return cls(
            topics=[cls.DeleteRecordsTopic(name=TOPIC, partitions=[partition])], timeout_ms=100
        )
    if key == ApiKey.DESCRIBE_PRODUCERS:
        return cls(
            topics=[cls.TopicRequest(name=TOPIC, partition_indexes=rng.choice(([0], [0, 1], [])))]
        )
    if key == ApiKey.FIND_COORDINATOR:
        return cls(key="group", key_type=rng.choice((0, 1, 9)), coordinator_keys=["group", ""])
    if key == ApiKey.DESCRIBE_CONFIGS:
        resources = [
            cls.DescribeConfigsResource(
                resource_type=rng.choice((2, 4, 9)),
                resource_name=rng.choice((TOPIC, "1", "orders", "")),
                configuration_keys=rng.choice((None, ["retention.ms", "nope"])),
            )
        ]
        return cls(resources=resources)
    if key == ApiKey.CREATE_TOPICS:  # validate_only: none is ever created
        topic = cls.CreatableTopic(
            name=rng.choice((TOPIC, "orders", "")),
            num_partitions=rng.choice((1, 0, -1, 1 << 20)),
            replication_factor=rng.choice((3, 0, -1, 99)),
        )
        return cls(topics=[topic], timeout_ms=100, validate_only=True)
    if key == ApiKey.CREATE_PARTITIONS:  # validate_only: none is ever added
        topic = cls.CreatePartitionsTopic(
            name=rng.choice((TOPIC, "orders", "")), count=rng.choice((2, 0, 1 << 20))
        )
        return cls(topics=[topic], timeout_ms=100, validate_only=True)
    if key == ApiKey.DELETE_TOPICS:  # topics that do not exist: none is ever deleted
        names = [rng.choice(("orders", "", "__cluster_metadata-x"))]
        if hasattr(cls, "DeleteTopicState"):
            return cls(
                topics=[cls.DeleteTopicState(name=n, topic_id=bytes(16)) for n in names],
                timeout_ms=100,
            )
        return cls(topic_names=names, timeout_ms=100)
    group = rng.choice(("g", "", "x" * 300))  # consumer groups: a few names, bounded state
    if key == ApiKey.JOIN_GROUP:
        # answered at once: an empty group id is INVALID_GROUP_ID, an unknown member of a new
        # group UNKNOWN_MEMBER_ID (a join that waits for the rebalance would hold back the
        # answers behind it on its connection, which the harness reads as silence)
        return cls(
            group_id=rng.choice(("", "g")),
            session_timeout_ms=rng.choice((6000, 0, -1, 1 << 30)),
            rebalance_timeout_ms=rng.choice((6000, 0, -1)),
            member_id="m-1",
            protocol_type="consumer",
            protocols=[cls.JoinGroupRequestProtocol(name="range", metadata=rng.randbytes(8))],
        )
    if key == ApiKey.SYNC_GROUP:
        return cls(
            group_id=group,
            generation_id=rng.choice((1, -1, 0)),
            member_id=rng.choice(("", "m-1")),
            assignments=[cls.SyncGroupRequestAssignment(member_id="m-1", assignment=b"\x00")],
        )
    if key == ApiKey.HEARTBEAT:
        return cls(group_id=group, generation_id=rng.choice((1, -1)), member_id="m-1")
    if key == ApiKey.LEAVE_GROUP:
        return cls(
            group_id=group,
            member_id="m-1",
            members=[cls.MemberIdentity(member_id="m-1", group_instance_id=None)],
        )
    if key == ApiKey.OFFSET_COMMIT:
        partition = cls.OffsetCommitRequestPartition(
            partition_index=rng.choice((0, 7, -1)),
            committed_offset=rng.choice((0, -1, 1 << 40)),
            committed_metadata=rng.choice(("", None)),
        )
        return cls(
            group_id=group,
            generation_id=rng.choice((-1, 1)),
            member_id="",
            topics=[cls.OffsetCommitRequestTopic(name=TOPIC, partitions=[partition])],
        )
    if key == ApiKey.OFFSET_FETCH:
        return cls(
            group_id=group,
            topics=[cls.OffsetFetchRequestTopic(name=TOPIC, partition_indexes=[0, 9])],
        )
    if key == ApiKey.DESCRIBE_GROUPS:
        return cls(groups=[group, "nope"])
    if key == ApiKey.LIST_GROUPS:
        return cls(states_filter=rng.choice(([], ["Stable"], ["nope"])))
    if key == ApiKey.DELETE_GROUPS:
        return cls(groups_names=["nope", group])
    if key == ApiKey.SASL_HANDSHAKE:  # the fuzzed listeners have no SASL: ILLEGAL_SASL_STATE
        return cls(mechanism=rng.choice(("PLAIN", "SCRAM-SHA-256", "GSSAPI", "")))
    if key == ApiKey.SASL_AUTHENTICATE:
        return cls(auth_bytes=rng.choice((b"\x00alice\x00pw", b"n,,n=user,r=abc", b"")))
    listeners = (
        [cls.Listener(name="PLAINTEXT", host="127.0.0.1", port=1)]
        if hasattr(cls, "Listener")
        else []
    )
    if key == ApiKey.UPDATE_RAFT_VOTER:
        return cls(
            cluster_id=raft_cluster,
            current_leader_epoch=epoch,
            voter_id=source,
            voter_directory_id=rng.randbytes(16),
            listeners=listeners,
            k_raft_version_feature=cls.KRaftVersionFeature(
                min_supported_version=0, max_supported_version=1
            ),
        )
    if key == ApiKey.ADD_RAFT_VOTER:
        return cls(
            cluster_id=raft_cluster,
            timeout_ms=100,
            voter_id=source,
            voter_directory_id=rng.randbytes(16),
            listeners=listeners,
        )
    if key == ApiKey.REMOVE_RAFT_VOTER:
        return cls(cluster_id=raft_cluster, voter_id=source, voter_directory_id=bytes(16))
    if key == ApiKey.TRANSFER_LEADERSHIP:
        return cls(cluster_id=raft_cluster, timeout_ms=100, target_id=source)
    if key == ApiKey.READ_INDEX:
        return cls(cluster_id=raft_cluster, timeout_ms=100)
    raise AssertionError(f"no template for {key!r}")


@dataclass(frozen=True)
class Template:
    key: ApiKey
    version: int
    variant: str  # "", "replica", "wrong-cluster"
    frame: bytes

    @property
    def name(self) -> str:
        variant = f" ({self.variant})" if self.variant else ""
        return f"{self.key.name} v{self.version}{variant}"


RAFT_KEYS = tuple(sorted(ANY_SOURCE_KEYS))  # sent with another cluster id only


def templates(cluster_id: str, rng: random.Random) -> list[Template]:
    out = []
    for key in ApiKey:
        for version in spec_versions(key):
            variants = [""]
            if key in RAFT_KEYS:
                variants = ["wrong-cluster"]
            elif key == ApiKey.FETCH_SNAPSHOT:
                variants = ["outsider", "wrong-cluster"]
            elif key == ApiKey.FETCH and version >= 12:
                variants = ["", "replica", "replica wrong-cluster"]
            for variant in variants:
                body = build_body(
                    key,
                    version,
                    cluster_id,
                    rng,
                    replica="replica" in variant,
                    wrong_cluster="wrong-cluster" in variant,
                )
                frame = encode_request(key, version, rng.randrange(1 << 31), "fuzz", body)
                assert not legitimate_raft_input(frame, cluster_id), (key, version, variant)
                out.append(Template(key, version, variant, frame))
    return out


def served(t: Template) -> bool:
    lo, hi = SUPPORTED_VERSIONS.get(t.key, (0, -1))  # type: ignore[call-overload]
    return lo <= t.version <= hi


def answer_check(t: Template) -> Any:
    """What the answer to an unmutated template must say (None: whatever it says)."""
    if not served(t):
        return None
    if t.key in (ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE):

        def no_sasl_here(body: Any) -> str | None:
            ok = body.error_code == Errors.ILLEGAL_SASL_STATE
            return None if ok else f"error code {body.error_code}, not ILLEGAL_SASL_STATE"

        return no_sasl_here
    if t.key in RAFT_KEYS or "replica" in t.variant:
        if "wrong-cluster" in t.variant:
            allowed = {Errors.INCONSISTENT_CLUSTER_ID}
        elif t.version < 13:
            allowed = {Errors.UNKNOWN_TOPIC_ID}  # replica fetches need topic ids (v13+)
        else:
            # a fetch from an observer in an epoch nobody has reached
            allowed = {Errors.UNKNOWN_LEADER_EPOCH}

        def check(body: Any) -> str | None:
            codes = {body.error_code}
            for topic in getattr(body, "topics", None) or getattr(body, "responses", []):
                codes |= {p.error_code for p in topic.partitions}
            codes.discard(Errors.NONE)
            return None if codes and codes <= allowed else f"error codes {codes}, not {allowed}"

        return check
    return None


# ---- mutations -----------------------------------------------------------------------------

INTERESTING_BYTES = (0x00, 0xFF, 0x7F, 0x80, 0x01, 0xFE)
INFLATED = (
    struct.pack(">h", 0x7FFF),
    struct.pack(">h", -2),
    struct.pack(">i", 0x7FFFFFFF),
    struct.pack(">i", -2),
    struct.pack(">i", 0x00100000),
    b"\xff\xff\xff\xff\x0f",  # the largest 5-byte unsigned varint
    b"\xff\xff\xff\xff\xff\x01",  # a 6-byte varint: too long
)


def length_like_positions(frame: bytes) -> list[tuple[int, int]]:
    """(position, width) of bytes that read like a length or a count of what follows: an int16
    or int32 (or a one-byte unsigned varint, length + 1) no larger than what is left."""
    out = []
    for p in range(len(frame)):
        left = len(frame) - p
        if left >= 4 and 0 < struct.unpack_from(">i", frame, p)[0] <= left - 4:
            out.append((p, 4))
        if left >= 2 and 0 < struct.unpack_from(">h", frame, p)[0] <= left - 2:
            out.append((p, 2))
        if 1 < frame[p] < 0x80 and frame[p] - 1 <= left - 1:
            out.append((p, 1))
    return out


def mutate(frame: bytes, rng: random.Random) -> tuple[bytes, str]:
    data = bytearray(frame)
    how = rng.choice(("bitflip", "replace", "inflate", "inflate", "splice"))
    if how == "bitflip" and data:
        flips = [rng.randrange(len(data) * 8) for _ in range(rng.randint(1, 4))]
        for bit in flips:
            data[bit // 8] ^= 1 << (bit % 8)
        return bytes(data), f"bit flips at {flips}"
    if how == "replace" and data:
        spots = [rng.randrange(len(data)) for _ in range(rng.randint(1, 4))]
        for p in spots:
            data[p] = rng.choice(INTERESTING_BYTES) if rng.random() < 0.5 else rng.randrange(256)
        return bytes(data), f"bytes replaced at {spots}"
    if how == "inflate":
        candidates = length_like_positions(frame)
        if candidates:
            p, width = rng.choice(candidates)
            value = int.from_bytes(frame[p : p + width], "big", signed=width > 1)
            if rng.random() < 0.5 and width > 1:
                bigger = value + rng.randint(1, 4096)
                limit = 0x7FFF if width == 2 else 0x7FFFFFFF
                new = min(bigger, limit).to_bytes(width, "big", signed=True)
            else:
                new = rng.choice(INFLATED)
            data[p : p + width] = new
            return bytes(data), f"length-like field at {p} ({width} bytes) -> {new.hex()}"
    # splice: a run of random bytes inserted or a run deleted
    p = rng.randrange(len(data) + 1)
    if rng.random() < 0.5 and data:
        n = rng.randint(1, min(16, len(data) - p) or 1)
        del data[p : p + n]
        return bytes(data), f"{n} bytes deleted at {p}"
    extra = rng.randbytes(rng.randint(1, 16))
    data[p:p] = extra
    return bytes(data), f"{len(extra)} random bytes inserted at {p}"


INT_RANGES = {
    "int8": (-(1 << 7), (1 << 7) - 1),
    "int16": (-(1 << 15), (1 << 15) - 1),
    "uint16": (0, (1 << 16) - 1),
    "int32": (-(1 << 31), (1 << 31) - 1),
    "uint32": (0, (1 << 32) - 1),
    "int64": (-(1 << 63), (1 << 63) - 1),
}


def present_fields(struct_spec: StructSpec, obj: Any, version: int) -> list[tuple[Any, FieldSpec]]:
    """(object, field) of every field present at ``version``, nested structs and array
    elements included."""
    out = []
    for f in struct_spec.fields:
        if version not in f.versions:
            continue
        out.append((obj, f))
        value = getattr(obj, f.attr)
        if f.struct is not None and value is not None:
            for item in value if f.is_array else [value]:
                out.extend(present_fields(f.struct, item, version))
    return out


def extreme_value(f: FieldSpec, version: int, current: Any, rng: random.Random) -> Any:
    """A value of the field's type that a sane client would rarely send."""
    if version in f.nullable and rng.random() < 0.3:
        return None
    if f.is_array:
        if not current or rng.random() < 0.3:
            return []
        return list(current) * rng.choice((2, 3, 50))
    if f.struct is not None:
        return f.struct.cls()
    t = f.type
    if t in INT_RANGES:
        lo, hi = INT_RANGES[t]
        return rng.choice((lo, hi, -1, 0, 1, hi - 1, rng.randint(lo, hi)))
    if t == "bool":
        return not current
    if t == "float64":
        return rng.choice((float("nan"), float("inf"), -0.0))
    if t == "uuid":
        return rng.choice((b"\x00" * 16, rng.randbytes(16)))
    if t == "string":
        return rng.choice(("", "x" * rng.randint(1, 300), "\u00e9\u4e2d", TOPIC + "-other"))
    # bytes, records
    raw = bytes(current or b"")
    return rng.choice((b"", rng.randbytes(rng.randint(1, 200)), raw[: len(raw) // 2], raw * 2))


def mutate_field(t: Template, rng: random.Random) -> tuple[bytes, str] | None:
    """The template re-encoded with one field set to an extreme value (None if that value
    cannot be encoded at this version)."""
    spec = request_spec(t.key)
    correlation_id, client_id = struct.unpack_from(">i", t.frame, 4)[0], "fuzz"
    body_at = 14 + (request_header_version(t.key, t.version) >= 2)
    body = spec.decode(t.frame[body_at:], t.version)
    fields = present_fields(spec.root, body, t.version)
    if not fields:
        return None
    obj, f = rng.choice(fields)
    value = extreme_value(f, t.version, getattr(obj, f.attr), rng)
    object.__setattr__(obj, f.attr, value)
    try:
        frame = encode_request(t.key, t.version, correlation_id, client_id, body)
    except (ProtocolError, TypeError, ValueError, AttributeError):
        return None
    shown = (
        value if not isinstance(value, (bytes, list)) else f"{type(value).__name__}[{len(value)}]"
    )
    return frame, f"field {f.name} = {shown!r}"


def truncation_lengths(size: int, rng: random.Random) -> list[int]:
    if ITERATIONS > 1 or size <= 24:
        return list(range(size))
    return sorted(set(range(16)) | set(rng.sample(range(16, size), min(8, size - 16))))


# ---- the shots -------------------------------------------------------------------------------


def tls_client_hello() -> bytes:
    ctx = ssl.create_default_context()
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = ctx.wrap_bio(incoming, outgoing, server_hostname="localhost")
    with contextlib.suppress(ssl.SSLWantReadError):
        tls.do_handshake()
    hello = outgoing.read()
    assert hello[:1] == b"\x16", hello[:8]
    return hello


def build_shots(cluster_id: str, rng: random.Random) -> list[Shot]:
    shots: list[Shot] = []

    def add(kind: str, payload: bytes, detail: str = "", check: Any = None) -> None:
        shots.append(Shot(kind, payload, expectation(payload), detail, check))

    # raw bytes and sizes
    for _ in range(60 * ITERATIONS):
        add("random bytes", rng.randbytes(rng.randint(1, 512)))
    for _ in range(60 * ITERATIONS):
        add("random frame", framed(rng.randbytes(rng.randint(0, 512))))
    for _ in range(60 * ITERATIONS):
        key = rng.choice(list(ApiKey))
        version = rng.choice(spec_versions(key))
        head = struct.pack(">hhih", key, version, rng.randrange(1 << 31), -1)
        add("valid header, random body", framed(head + rng.randbytes(rng.randint(0, 256))))
    for size in (0x7FFFFFFF, MAX_FRAME + 1, 1 << 30, -1, -2, -(1 << 31)):
        add("bad size", struct.pack(">i", size) + rng.randbytes(64), f"size {size}")
    for _ in range(5):
        add("zero-length frame", struct.pack(">i", 0))
    add("zero-length frames", struct.pack(">i", 0) * 8)
    add("size only, up to the maximum", struct.pack(">i", MAX_FRAME), "never sent")
    add("http", b"GET / HTTP/1.1\r\nHost: localhost\r\nUser-Agent: fuzz\r\n\r\n")
    add("http", b"POST /v3/clusters HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}")
    add("tls client hello", tls_client_hello())

    # every API at every version: valid, cut short, mutated
    for t in templates(cluster_id, rng):
        add(f"valid {t.name}", framed(t.frame), check=answer_check(t))
        for n in truncation_lengths(len(t.frame), rng):
            add("truncated frame", framed(t.frame[:n]), f"{t.name} cut to {n} of {len(t.frame)}")
        for n in rng.sample(range(len(t.frame)), min(2 * ITERATIONS, len(t.frame))):
            # the size promises the whole frame; the client stops sending and closes
            add(
                "truncated stream",
                struct.pack(">i", len(t.frame)) + t.frame[:n],
                f"{t.name}: {n} of {len(t.frame)} bytes sent",
            )
        for _ in range(10 * ITERATIONS):
            frame, how = mutate(t.frame, rng)
            if legitimate_raft_input(frame, cluster_id):
                shots.append(Shot("skipped: legitimate raft input", b"", ANY, t.name))
                continue
            add("mutated frame", framed(frame), f"{t.name}: {how}")
        for _ in range(6 * ITERATIONS):
            mutated = mutate_field(t, rng)
            if mutated is None:
                continue
            frame, how = mutated
            if legitimate_raft_input(frame, cluster_id):
                shots.append(Shot("skipped: legitimate raft input", b"", ANY, t.name))
                continue
            add("extreme field value", framed(frame), f"{t.name}: {how}")
    # answers to what came before a bad frame still go out, in order, before the close
    simple = [t for t in templates(cluster_id, rng) if served(t) and t.key in PIPELINABLE]
    for _ in range(20 * ITERATIONS):
        before = rng.sample(simple, 3)
        bad, how = mutate(rng.choice(simple).frame, rng)
        payload = b"".join(framed(t.frame) for t in before) + framed(bad)
        detail = f"{', '.join(t.name for t in before)}, then {how}"
        shots.append(Shot("pipelined, then mutated", payload, PIPELINE, detail))
    # ApiVersions above what we serve: answered (KIP-511), not closed
    head = struct.pack(">hhih", ApiKey.API_VERSIONS, 99, 42, -1)
    add("ApiVersions v99", framed(head + b"\x00\x00\x00"))
    rng.shuffle(shots)
    return shots


@dataclass
class Tally:
    sent: Counter[str] = field(default_factory=Counter)
    outcomes: Counter[str] = field(default_factory=Counter)
    failures: list[str] = field(default_factory=list)


async def read_outcome(reader: asyncio.StreamReader, expect: str) -> tuple[str, bytes]:
    """ "closed" (EOF or reset, with whatever came before), "answered" (bytes arrived and the
    connection stayed open), or "silent"."""
    data = b""
    deadline = time.monotonic() + (ANSWER_WAIT_S if expect == ANY else CLOSE_TIMEOUT_S)
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return ("answered" if data else "silent"), data
            chunk = await asyncio.wait_for(reader.read(65536), left)
            if not chunk:
                return "closed", data
            data += chunk
            if (
                expect == ANY
                and len(data) >= 4
                and len(data) >= 4 + struct.unpack(">i", data[:4])[0]
            ):
                return "answered", data
    except (ConnectionResetError, BrokenPipeError):
        return "closed", data
    except asyncio.TimeoutError:
        return ("answered" if data else "silent"), data


async def fire(host: str, port: int, shot: Shot, tally: Tally, node_id: int) -> None:
    tally.sent[shot.kind] += 1
    if not shot.payload:
        return  # a skipped frame
    reader, writer = await asyncio.open_connection(host, port)
    try:
        with contextlib.suppress(ConnectionResetError, BrokenPipeError):
            writer.write(shot.payload)
            await writer.drain()
        outcome, data = await read_outcome(reader, shot.expect)
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError, OSError):
            await writer.wait_closed()
    tally.outcomes[outcome] += 1
    where = f"node {node_id}, {shot.kind}"
    if shot.detail:
        where += f" ({shot.detail})"
    if shot.expect == CLOSE and (outcome != "closed" or data):
        tally.failures.append(
            f"{where}: a frame that does not decode was {outcome} "
            f"({len(data)} bytes back), not closed; payload {shot.payload[:64].hex()}"
        )
    if shot.expect == PIPELINE:
        ids = answered_correlation_ids(data)
        # A pipelined frame too short for a header has no correlation id (the node closes
        # on it); the fuzzer's own check must not crash on it (seed 1957733188).
        sent = [
            struct.unpack_from(">i", f, 4)[0] for f in split_frames(shot.payload) if len(f) >= 8
        ]
        if ids[:3] != sent[:3]:
            tally.failures.append(f"{where}: answers {ids} to requests {sent}")
    if shot.check is not None and outcome != "closed" and data:
        key, version = _key_version(shot.payload)
        try:
            _, body = decode_response(key, version, data[4:])
        except ProtocolError as exc:
            tally.failures.append(f"{where}: unreadable answer: {exc}")
            return
        problem = shot.check(body)
        if problem:
            tally.failures.append(f"{where}: {problem}")
    elif shot.check is not None:
        tally.failures.append(f"{where}: no answer ({outcome})")


def split_frames(data: bytes) -> list[bytes]:
    """The complete frames at the start of ``data`` (without their sizes)."""
    frames, pos = [], 0
    while len(data) - pos >= 4:
        (size,) = struct.unpack_from(">i", data, pos)
        if size < 0 or len(data) - pos - 4 < size:
            break
        frames.append(data[pos + 4 : pos + 4 + size])
        pos += 4 + size
    return frames


def answered_correlation_ids(data: bytes) -> list[int]:
    return [struct.unpack_from(">i", f)[0] for f in split_frames(data) if len(f) >= 4]


def _key_version(payload: bytes) -> tuple[int, int]:
    return struct.unpack_from(">hh", payload, 4)


async def fire_all(host: str, port: int, shots: list[Shot], tally: Tally, node_id: int) -> None:
    gate = asyncio.Semaphore(CONCURRENCY)

    async def one(shot: Shot) -> None:
        async with gate:
            try:
                await fire(host, port, shot, tally, node_id)
            except OSError as exc:
                tally.failures.append(f"node {node_id}, {shot.kind}: cannot connect: {exc}")

    await asyncio.gather(*(one(s) for s in shots))


async def slow_valid_request(host: str, port: int, tally: Tally, node_id: int) -> None:
    """ApiVersions v3, one byte every ~50 ms: answered like any other."""
    body = request_spec(ApiKey.API_VERSIONS).cls(
        client_software_name="slow", client_software_version="1"
    )
    payload = framed(encode_request(ApiKey.API_VERSIONS, 3, 7, "slow-client", body))
    tally.sent["slow client (a byte at a time)"] += 1
    reader, writer = await asyncio.open_connection(host, port)
    try:
        for i in range(len(payload)):
            writer.write(payload[i : i + 1])
            await writer.drain()
            await asyncio.sleep(2.0 / len(payload))
        (size,) = struct.unpack(">i", await asyncio.wait_for(reader.readexactly(4), 5))
        _, resp = decode_response(
            ApiKey.API_VERSIONS, 3, await asyncio.wait_for(reader.readexactly(size), 5)
        )
        if resp.error_code != Errors.NONE:
            tally.failures.append(f"node {node_id}: slow ApiVersions answered {resp.error_code}")
    except (asyncio.TimeoutError, asyncio.IncompleteReadError, ConnectionError) as exc:
        tally.failures.append(f"node {node_id}: slow ApiVersions not answered: {exc!r}")
    finally:
        writer.close()


async def unfinished_frames(
    host: str, port: int, release: asyncio.Event, tally: Tally, rng: random.Random
) -> None:
    """Frames begun and never finished, held open until ``release``."""
    writers = []
    for partial in (b"\x00\x00", struct.pack(">i", 64) + b"\x00\x12", struct.pack(">i", 1 << 20)):
        tally.sent["unfinished frame (held)"] += 1
        _, writer = await asyncio.open_connection(host, port)
        writer.write(partial + rng.randbytes(rng.randint(0, 8)) * (len(partial) > 2))
        writers.append(writer)
    await release.wait()
    for writer in writers:
        writer.close()


async def greedy_client(
    host: str, port: int, pid: int, tid: bytes, tally: Tally, asks: int = 1000
) -> int:
    """Pipelines ``asks`` consumer fetches of up to 1 MiB each and reads nothing for two
    seconds, then closes. The node's resident memory (KiB) at the end of the two seconds."""
    cls = request_spec(ApiKey.FETCH).cls
    partition = cls.FetchPartition(partition=0, fetch_offset=1, partition_max_bytes=1 << 20)
    body = cls(
        replica_id=-1,
        max_wait_ms=0,
        min_bytes=1,
        max_bytes=1 << 20,
        topics=[cls.FetchTopic(topic_id=tid, partitions=[partition])],
    )
    frames = b"".join(
        framed(encode_request(ApiKey.FETCH, 16, cid, "greedy", body)) for cid in range(asks)
    )
    tally.sent["pipelined fetches, never read"] += asks
    _, writer = await asyncio.open_connection(host, port)
    try:
        writer.write(frames)
        await asyncio.sleep(2.0)
        return rss_kib(pid)
    finally:
        writer.close()


async def idle_connections(
    host: str, port: int, pid: int, count: int, hold_s: float, tally: Tally
) -> int:
    """``count`` connections that send nothing, held for ``hold_s``, then closed. The node's
    peak fd count while they are open."""
    writers = []
    try:
        for _ in range(count):
            _, writer = await asyncio.open_connection(host, port)
            writers.append(writer)
        tally.sent["idle connection"] += count
        await asyncio.sleep(hold_s)
        return fd_count(pid)
    finally:
        for writer in writers:
            writer.close()


# ---- connection attacks (tests/connection_attacks.py), each with the node's memory ----------


def anon_mib(pid: int) -> float:
    return memory_kib(pid)["RssAnon"] / 1024


async def attack_flood(cluster: LocalCluster, node_id: int, pid: int, tally: Tally) -> str:
    """Past max.connections.per.ip from one host, then past max.connections from five more:
    the surplus is closed at accept; a client on the voters' host is still served."""
    host, port = cluster.endpoint(node_id).rsplit(":", 1)
    before = anon_mib(pid)
    one_host = await flood(host, int(port), PER_IP + 50, ATTACKERS[:1])
    many = await flood(host, int(port), PER_IP, ATTACKERS[1:])
    tally.sent["flood connection"] += len(one_host) + len(many)
    await asyncio.sleep(0.3)
    during = anon_mib(pid)
    try:
        await serving(cluster, node_id)
    except Exception as exc:
        tally.failures.append(f"node {node_id}: not serving during a flood: {exc!r}")
    open_one = len(one_host) - await count_closed(one_host)
    open_all = open_one + len(many) - await count_closed(many)
    await close_all(one_host + many)
    if open_one != PER_IP:
        tally.failures.append(f"node {node_id}: {open_one} flood connections from one host open")
    if open_all > MAX_CONNECTIONS:
        tally.failures.append(f"node {node_id}: {open_all} flood connections open")
    tally.outcomes["flood: refused at accept"] += len(one_host) + len(many) - open_all
    return f"flood {open_all} of {len(one_host) + len(many)} kept, {_mib(before, during)}"


async def attack_slowloris(cluster: LocalCluster, node_id: int, pid: int, tally: Tally) -> str:
    """Requests a byte every half second: each connection closed within the frame timeout."""
    host, port = cluster.endpoint(node_id).rsplit(":", 1)
    before = anon_mib(pid)
    attack = await slowloris(host, int(port), 30, 0.5)
    tally.sent["slowloris connection"] += 30
    await asyncio.sleep(FRAME_TIMEOUT_S + 2.5)  # one check period late at most
    during = anon_mib(pid)
    lasted = sorted(attack.closed_after)
    await stop_slowloris(attack)
    if len(lasted) != 30 or lasted[0] < FRAME_TIMEOUT_S - 0.5:
        tally.failures.append(
            f"node {node_id}: slowloris connections closed after {lasted} s, not at "
            f"{FRAME_TIMEOUT_S} s (30 expected)"
        )
    first = f"{lasted[0]:.1f} s" if lasted else "never"
    return f"slowloris closed after {first}, {_mib(before, during)}"


async def attack_partial_frames(cluster: LocalCluster, node_id: int, pid: int, tally: Tally) -> str:
    """30 connections send 6 MiB of an 8 MiB frame and wait: the node holds no more than the
    request budget plus one frame, and serves other clients meanwhile."""
    host, port = cluster.endpoint(node_id).rsplit(":", 1)
    before = anon_mib(pid)
    conns = await partial_frames(host, int(port), 30, 8 << 20, 6 << 20, within_s=2.0)
    tally.sent["partial frame (6 of 8 MiB)"] += 30
    await asyncio.sleep(0.5)
    during = anon_mib(pid)
    try:
        await serving(cluster, node_id)
    except Exception as exc:
        tally.failures.append(f"node {node_id}: not serving with frames held: {exc!r}")
    await close_all(conns)
    if during - before > BUDGET_MIB + 8 + 16:
        tally.failures.append(
            f"node {node_id}: {during - before:.0f} MiB held for partial frames "
            f"(budget {BUDGET_MIB} MiB)"
        )
    return f"partial frames {_mib(before, during)}"


async def attack_idle(cluster: LocalCluster, node_id: int, pid: int, tally: Tally) -> str:
    """200 connections that send nothing: the node closes them after the idle timeout."""
    host, port = cluster.endpoint(node_id).rsplit(":", 1)
    before, fds = anon_mib(pid), fd_count(pid)
    conns = [c for source in ATTACKERS[:2] for c in await idle(host, int(port), 100, source=source)]
    tally.sent["idle connection (past the idle timeout)"] += 200
    during = anon_mib(pid)
    await asyncio.sleep(IDLE_TIMEOUT_S + 2.5)
    closed, fds_after = await count_closed(conns), fd_count(pid)
    await close_all(conns)
    if closed != 200 or fds_after > fds + FD_TOLERANCE:
        tally.failures.append(
            f"node {node_id}: {closed} of 200 idle connections closed by the node "
            f"(fds {fds} -> {fds_after})"
        )
    return f"idle {closed} of 200 closed, {_mib(before, during)}"


def _mib(before: float, during: float) -> str:
    return f"RssAnon {before:.0f} -> {during:.0f} MiB"


# ---- the node's vital signs ------------------------------------------------------------------


def fd_count(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError(f"no VmRSS for {pid}")


async def serving(cluster: LocalCluster, node_id: int) -> None:
    """ApiVersions and Metadata answered by this node."""
    host, port = cluster.endpoint(node_id).rsplit(":", 1)
    conn = await Connection.open(host, int(port), timeout_s=5)
    try:
        versions = await conn.request(
            ApiKey.API_VERSIONS, 3, request_spec(ApiKey.API_VERSIONS).cls(), timeout_s=5
        )
        assert versions.error_code == Errors.NONE, (node_id, versions.error_code)
        cls = request_spec(ApiKey.METADATA).cls
        meta = await conn.request(
            ApiKey.METADATA,
            12,
            cls(topics=[cls.MetadataRequestTopic(name=TOPIC)]),
            timeout_s=5,
        )
        assert {b.node_id for b in meta.brokers} == set(VOTERS), meta
    finally:
        await conn.close()


async def warm_up(cluster: LocalCluster, rng: random.Random) -> None:
    """Every served API and version once at every node, so that codecs compiled on first use
    are in the baseline and not counted as a leak."""
    tally = Tally()
    valid = [t for t in templates(cluster.cluster_id, rng) if served(t)]
    for node_id in cluster.node_ids:
        host, port = cluster.endpoint(node_id).rsplit(":", 1)
        shots = [Shot("warm-up", framed(t.frame), ANY) for t in valid]
        await fire_all(host, int(port), shots, tally, node_id)


# ---- the writer ----------------------------------------------------------------------------


@dataclass
class Written:
    acknowledged: dict[int, bytes] = field(default_factory=dict)  # offset -> value
    failed: list[bytes] = field(default_factory=list)
    errors: Counter[str] = field(default_factory=Counter)


async def writer_loop(bootstrap: list[str], stop: asyncio.Event, out: Written) -> None:
    """Numbered values w00000000, w00000001, ... in batches of 1-3, one batch at a time."""
    n = 0
    async with Producer(bootstrap, request_timeout_ms=5000, delivery_timeout_ms=30_000) as p:
        while not stop.is_set():
            values = [b"w%08d" % (n + i) for i in range(1 + n % 3)]
            n += len(values)
            try:
                first, last = await p.send([(b"writer", v) for v in values])
            except Exception as exc:  # not acknowledged: may or may not be in the log
                out.errors[type(exc).__name__] += 1
                out.failed.extend(values)
                continue
            assert last - first + 1 == len(values), (first, last, values)
            for offset, v in zip(range(first, last + 1), values, strict=True):
                out.acknowledged[offset] = v


async def read_back(bootstrap: list[str], end: int) -> dict[int, bytes]:
    """The writer's records (key b"writer") among the committed ones below ``end``."""
    got: dict[int, bytes] = {}
    deadline = time.monotonic() + 30
    async with Consumer(bootstrap, start="earliest", max_wait_ms=200) as consumer:
        while consumer.position is None or consumer.position < end:
            assert time.monotonic() < deadline, f"read up to {consumer.position} of {end}"
            for r in await consumer.poll():
                if r.key == b"writer":
                    assert r.offset not in got, f"offset {r.offset} read twice"
                    got[r.offset] = r.value
    return got


# ---- the test --------------------------------------------------------------------------------


def test_hostile_wire_input_harms_no_node_loses_no_record_and_leaks_nothing(cluster):
    """The node never stops because of what a client sent, closes only the connection that
    sent something malformed, loses nothing acknowledged, and holds nothing once the
    connections are gone (module docstring: what is sent and what is checked)."""
    print(f"wire fuzz: {REPLAY}, iterations {ITERATIONS}")
    started = time.monotonic()
    pids = {i: cluster.pid(i) for i in cluster.node_ids}
    tally = Tally()
    written = Written()

    async def campaign() -> dict[str, Any]:
        info = await describe_quorum(cluster.bootstrap, timeout_s=30)
        first_epoch = info.leader_epoch
        stop = asyncio.Event()
        writer = asyncio.ensure_future(writer_loop(cluster.bootstrap, stop, written))
        await warm_up(cluster, random.Random(SEED + 1))
        await asyncio.sleep(1.0)
        base_fd = {i: fd_count(p) for i, p in pids.items()}
        base_rss = {i: rss_kib(p) for i, p in pids.items()}

        release = asyncio.Event()
        jobs, holders = [], []
        for node_id in cluster.node_ids:
            host, port_text = cluster.endpoint(node_id).rsplit(":", 1)
            port = int(port_text)
            node_rng = random.Random(f"{SEED}-{node_id}")
            shots = build_shots(cluster.cluster_id, node_rng)
            jobs.append(fire_all(host, port, shots, tally, node_id))
            jobs.append(slow_valid_request(host, port, tally, node_id))
            holders.append(unfinished_frames(host, port, release, tally, node_rng))
        held = asyncio.ensure_future(asyncio.gather(*holders))
        await asyncio.gather(*jobs)
        greedy_rss = {}
        for node_id in cluster.node_ids:
            host, port_text = cluster.endpoint(node_id).rsplit(":", 1)
            greedy_rss[node_id] = await greedy_client(
                host, int(port_text), pids[node_id], topic_id(cluster.cluster_id), tally
            )
        peaks = {}
        for node_id in cluster.node_ids:  # one node at a time: 300 sockets on our side too
            host, port_text = cluster.endpoint(node_id).rsplit(":", 1)
            peaks[node_id] = await idle_connections(
                host, int(port_text), pids[node_id], IDLE_CONNECTIONS, 1.0, tally
            )
        release.set()
        await held
        attacks: dict[int, list[str]] = {i: [] for i in cluster.node_ids}
        for node_id in cluster.node_ids:  # one at a time: hundreds of sockets on our side
            attacks[node_id].append(await attack_flood(cluster, node_id, pids[node_id], tally))
        for attack in (attack_slowloris, attack_partial_frames, attack_idle):
            lines = await asyncio.gather(
                *(attack(cluster, i, pids[i], tally) for i in cluster.node_ids)
            )
            for node_id, line in zip(cluster.node_ids, lines, strict=True):
                attacks[node_id].append(line)
        fuzz_s = time.monotonic() - started

        await asyncio.sleep(1.0)  # the writer goes on a little after the fuzzing
        stop.set()
        await writer
        for node_id in cluster.node_ids:
            await serving(cluster, node_id)
        info = await describe_quorum(cluster.bootstrap, timeout_s=20)
        end = max(written.acknowledged, default=-1) + 1
        consumed = await read_back(cluster.bootstrap, end)

        await asyncio.sleep(2.0)  # let every node close what the clients closed
        fd = {i: fd_count(p) for i, p in pids.items()}
        rss = {i: rss_kib(p) for i, p in pids.items()}
        return {
            "first_epoch": first_epoch,
            "info": info,
            "consumed": consumed,
            "base_fd": base_fd,
            "base_rss": base_rss,
            "peak_fd": peaks,
            "greedy_rss": greedy_rss,
            "fd": fd,
            "rss": rss,
            "fuzz_s": fuzz_s,
            "attacks": attacks,
        }

    r = asyncio.run(asyncio.wait_for(campaign(), 240))
    elapsed = time.monotonic() - started

    print(f"frames sent per kind: {dict(sorted(tally.sent.items()))}")
    print(f"outcomes: {dict(tally.outcomes)}")
    print(
        f"writer: {len(written.acknowledged)} acknowledged, {len(written.failed)} not "
        f"({dict(written.errors)}); epochs {r['first_epoch']} -> {r['info'].leader_epoch}"
    )
    for i in cluster.node_ids:
        print(
            f"node {i}: fd {r['base_fd'][i]} -> peak {r['peak_fd'][i]} -> {r['fd'][i]}; "
            f"RSS {r['base_rss'][i]} -> greedy client {r['greedy_rss'][i]} -> {r['rss'][i]} KiB"
        )
        print(f"node {i} attacks: " + "; ".join(r["attacks"][i]))
    print(f"fuzzing {r['fuzz_s']:.1f} s, whole test {elapsed:.1f} s")

    # every node alive and serving, a leader, no absurd epoch
    for i in cluster.node_ids:
        assert cluster.alive(i), f"node {i} died; {REPLAY}\n{cluster.log_tail(i)}"
    info = r["info"]
    assert info.leader_id in VOTERS, REPLAY
    assert info.leader_epoch < min(ABSURD_EPOCHS), f"epoch {info.leader_epoch}; {REPLAY}"

    # every malformed frame closed its connection; every check of an answer held
    assert not tally.failures, f"{len(tally.failures)} failures; {REPLAY}:\n" + "\n".join(
        tally.failures[:30]
    )

    # nothing acknowledged was lost, reordered or duplicated
    acked, consumed = written.acknowledged, r["consumed"]
    assert len(acked) > 50, f"the writer barely wrote ({len(acked)}); {REPLAY}"
    missing = {o: v for o, v in acked.items() if consumed.get(o) != v}
    assert not missing, f"acknowledged but not read back: {sorted(missing.items())[:10]}; {REPLAY}"
    values = [consumed[o] for o in sorted(consumed)]
    assert len(values) == len(set(values)), f"a value read twice; {REPLAY}"
    assert values == sorted(values), f"values out of order; {REPLAY}"

    # no traceback or error in any node's log
    for i in cluster.node_ids:
        text = cluster.log_file(i).read_text(errors="replace")
        bad = [
            line
            for line in text.splitlines()
            if "Traceback" in line or re.search(r"\b(ERROR|CRITICAL)\b", line)
        ]
        assert not bad, f"node {i} logged:\n" + "\n".join(bad[:20]) + f"\n{REPLAY}"

    # no leak once the connections are closed
    for i in cluster.node_ids:
        # (within a few: the idle timeout closes the voters' idle connections to each other,
        # and they open them again, now and then)
        assert r["peak_fd"][i] >= r["base_fd"][i] + IDLE_CONNECTIONS - 3, (
            f"node {i} did not hold the idle connections (fd {r['peak_fd'][i]}); {REPLAY}"
        )
        assert r["fd"][i] <= r["base_fd"][i] + FD_TOLERANCE, (
            f"node {i}: {r['fd'][i]} fds, baseline {r['base_fd'][i]}; {REPLAY}"
        )
        assert r["greedy_rss"][i] - r["base_rss"][i] < RSS_TOLERANCE_KIB, (
            f"node {i}: RSS {r['greedy_rss'][i]} KiB with a client that never reads, "
            f"baseline {r['base_rss'][i]} KiB; {REPLAY}"
        )
        assert r["rss"][i] - r["base_rss"][i] < RSS_TOLERANCE_KIB, (
            f"node {i}: RSS {r['rss'][i]} KiB, baseline {r['base_rss'][i]} KiB; {REPLAY}"
        )
    assert elapsed < 240


# ---- rules the fuzzing found broken, one node in this process --------------------------------


@contextlib.asynccontextmanager
async def one_node(tmp_path: Any) -> Any:
    """A single-voter cluster in this process (it elects itself at once)."""
    from raftcore.endpoints import Endpoint
    from raftcore.node.config import NodeConfig
    from raftcore.node.local_cluster import free_ports
    from raftcore.node.node import RaftNode
    from raftcore.raft import QuorumConfig

    (port,) = free_ports(1)
    config = NodeConfig(
        node_id=1,
        voters={1: Endpoint("127.0.0.1", port)},
        data_dir=tmp_path / "node-1",
        cluster_id="wire-fuzz-rules",
        quorum=QuorumConfig(election_timeout_ms=300, fetch_timeout_ms=600),
    )
    node = RaftNode(config)
    await node.start()
    try:
        deadline = time.monotonic() + 10
        while not node.is_leader() or node.high_watermark is None or node.core.kraft_version < 1:
            # a single voter moves its voter set into the log at once (KIP-853)
            assert time.monotonic() < deadline, "the single voter did not become leader"
            await asyncio.sleep(0.01)
        yield node
    finally:
        await node.stop(timeout_s=0.5)


async def send_raw(node: Any, frame: bytes) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    reader, writer = await asyncio.open_connection(node.config.listen.host, node.config.listen.port)
    writer.write(framed(frame))
    await writer.drain()
    return reader, writer


async def read_answer(reader: asyncio.StreamReader, timeout_s: float = 5.0) -> bytes:
    (size,) = struct.unpack(">i", await asyncio.wait_for(reader.readexactly(4), timeout_s))
    return await asyncio.wait_for(reader.readexactly(size), timeout_s)


def metadata_by_id(version: int, name: str | None, tid: bytes) -> bytes:
    cls = request_spec(ApiKey.METADATA).cls
    body = cls(topics=[cls.MetadataRequestTopic(name=name, topic_id=tid)])
    return encode_request(ApiKey.METADATA, version, 5, "rules", body)


@pytest.mark.parametrize("version", [10, 11])
def test_a_metadata_request_with_a_null_topic_name_before_v12_closes_only_its_connection(
    tmp_path, caplog, version
):
    """Metadata v10-11 name topics; a null name is an invalid request (Kafka refuses it):
    that connection is closed, nothing is logged at ERROR, and the node serves on. (Before,
    the answer failed to encode -- its Name is not nullable before v12 -- and the node logged
    a traceback.)"""

    async def main() -> None:
        async with one_node(tmp_path) as node:
            reader, writer = await send_raw(node, metadata_by_id(version, None, b"\x01" * 16))
            assert await asyncio.wait_for(reader.read(), 5) == b""
            writer.close()
            reader, writer = await send_raw(node, metadata_by_id(version, TOPIC, b"\x00" * 16))
            _, body = decode_response(ApiKey.METADATA, version, await read_answer(reader))
            writer.close()
            assert [(t.name, t.error_code) for t in body.topics] == [(TOPIC, Errors.NONE)]

    asyncio.run(asyncio.wait_for(main(), 30))
    assert not [r for r in caplog.records if r.levelname in ("ERROR", "CRITICAL")]


def test_metadata_from_v12_finds_a_topic_by_its_id_when_the_name_is_null(tmp_path):
    """KIP-516: from Metadata v12 a topic may be asked for by id alone; an unknown id is
    UNKNOWN_TOPIC_ID."""

    async def main() -> None:
        async with one_node(tmp_path) as node:
            tid = node.config.topic_id
            reader, writer = await send_raw(node, metadata_by_id(12, None, tid))
            _, known = decode_response(ApiKey.METADATA, 12, await read_answer(reader))
            writer.write(framed(metadata_by_id(12, None, b"\x07" * 16)))
            _, unknown = decode_response(ApiKey.METADATA, 12, await read_answer(reader))
            writer.close()
            assert [(t.name, t.error_code, t.topic_id) for t in known.topics] == [
                (TOPIC, Errors.NONE, tid)
            ]
            assert [(t.name, t.error_code) for t in unknown.topics] == [
                (None, Errors.UNKNOWN_TOPIC_ID)
            ]

    asyncio.run(asyncio.wait_for(main(), 30))


def consumer_fetch(tid: bytes, offset: int, max_wait_ms: int, correlation_id: int = 9) -> bytes:
    cls = request_spec(ApiKey.FETCH).cls
    partition = cls.FetchPartition(partition=0, fetch_offset=offset, partition_max_bytes=1 << 16)
    body = cls(
        replica_id=-1,
        max_wait_ms=max_wait_ms,
        min_bytes=1,
        max_bytes=1 << 20,
        topics=[cls.FetchTopic(topic_id=tid, partitions=[partition])],
    )
    return encode_request(ApiKey.FETCH, 16, correlation_id, "rules", body)


def test_a_closed_connection_stops_the_requests_it_was_waiting_on(tmp_path):
    """A request's answer can only go back on its own connection: once that connection is
    closed, a long-poll fetch on it (MaxWaitMs of a minute, at the end of the log) stops at
    once instead of waiting out its time -- a client that opens, asks and hangs up, again and
    again, would otherwise pile up waiting requests that every commit wakes."""

    async def main() -> None:
        async with one_node(tmp_path) as node:
            settled = time.monotonic() + 5  # the KRaftVersion and Voters records committed
            while node.core.kraft_version < 1 or node.high_watermark != node.log.end_offset:
                assert time.monotonic() < settled, "the node never became dynamic"
                await asyncio.sleep(0.01)
            end = node.high_watermark
            _, writer = await send_raw(node, consumer_fetch(node.config.topic_id, end, 60_000))
            deadline = time.monotonic() + 5
            while not len(node.group.hw_moved):
                assert time.monotonic() < deadline, "the fetch never started waiting"
                await asyncio.sleep(0.01)
            writer.close()
            deadline = time.monotonic() + 2
            while len(node.group.hw_moved) or node.messaging.connections:
                assert time.monotonic() < deadline, (
                    f"{len(node.group.hw_moved)} fetches still waiting for a closed connection"
                )
                await asyncio.sleep(0.01)

    asyncio.run(asyncio.wait_for(main(), 30))


@pytest.mark.parametrize(
    ("what", "offset", "tid"),
    [("offset past the end", 10**9, None), ("unknown topic id", 0, b"\x07" * 16)],
)
def test_a_consumer_fetch_that_fails_is_answered_at_once_not_after_max_wait(
    tmp_path, what, offset, tid
):
    """As Kafka does (a partition with an error completes the fetch): an error is the answer,
    there is nothing to wait for."""

    async def main() -> None:
        async with one_node(tmp_path) as node:
            frame = consumer_fetch(tid or node.config.topic_id, offset, 20_000)
            started = time.monotonic()
            reader, writer = await send_raw(node, frame)
            _, body = decode_response(ApiKey.FETCH, 16, await read_answer(reader, 10))
            writer.close()
            assert time.monotonic() - started < 2, what
            assert body.responses[0].partitions[0].error_code != Errors.NONE

    asyncio.run(asyncio.wait_for(main(), 40))


def test_a_client_that_asks_and_never_reads_cannot_make_the_node_hold_its_answers(tmp_path):
    """Backpressure: a client that pipelines requests and does not read the answers stops
    being read itself once its answers fill the connection, as a Kafka broker mutes it. The
    node holds at most MAX_IN_FLIGHT requests of it and about one answer beyond the socket's
    buffers; every answer still arrives, in order, once the client reads. (Before, 600
    fetches of 60 bytes each made the node buffer 600 answers of 64 KiB: 38 MiB, and memory
    grew with every request.)"""
    from raftcore.node.transport import MAX_IN_FLIGHT

    asks = 600

    async def main() -> None:
        async with one_node(tmp_path) as node:
            first = node.log.end_offset  # past the LeaderChange (and KIP-853) control records
            for _ in range(20):
                await node.append([(b"k", b"x" * 1000)] * 100, wait=True)
            tid = node.config.topic_id
            pipelined = b"".join(framed(consumer_fetch(tid, first, 0, cid)) for cid in range(asks))
            reader, writer = await asyncio.open_connection(
                node.config.listen.host, node.config.listen.port
            )
            writer.write(pipelined)
            await asyncio.sleep(1.5)
            (conn,) = node.messaging.connections
            held = conn.writer.transport.get_write_buffer_size()
            assert held < 4 << 20, f"the node holds {held} bytes of answers nobody reads"
            assert len(conn._order) <= MAX_IN_FLIGHT
            for cid in range(asks):
                answer = await read_answer(reader, 10)
                assert struct.unpack_from(">i", answer)[0] == cid
                _, body = decode_response(ApiKey.FETCH, 16, answer)
                assert len(body.responses[0].partitions[0].records) > 60_000
            writer.close()

    asyncio.run(asyncio.wait_for(main(), 60))


# ---- structure-aware mutations of every raft RPC, sent with a node's credentials --------------
#
# In this process: three voters on SASL_PLAINTEXT, and each raft RPC built valid for the
# cluster as it is (its cluster id, topic id, leader, epoch, log end and the voters' directory
# ids), then one to three of its fields set to values a confused or hostile node would send:
# ids of voters, of no voter, negative or huge; epochs around the current one and absurd ones;
# the voters' directory ids, another's, a random one, none; offsets and positions around the
# log's end and at the limits; sizes and waits at the limits; arrays emptied or repeated. Each
# is sent over a connection logged in as a voter (node-2, whose own requests are legitimate:
# they may depose the leader or move node 2's endpoint) or as a replica outside the voter set
# (node-9, which may fetch and ask to be added, as a joining node does). Then: no node stopped,
# no traceback was logged, and every node still answers.

RAFT_RPCS = (
    ApiKey.VOTE,
    ApiKey.BEGIN_QUORUM_EPOCH,
    ApiKey.END_QUORUM_EPOCH,
    ApiKey.FETCH,
    ApiKey.FETCH_SNAPSHOT,
    ApiKey.DESCRIBE_QUORUM,
    ApiKey.ADD_RAFT_VOTER,
    ApiKey.REMOVE_RAFT_VOTER,
    ApiKey.UPDATE_RAFT_VOTER,
)
RAFT_SHOTS = 270 * ITERATIONS  # 30 of each RPC
RAFT_FUZZ_S = 12.0 * ITERATIONS  # and no longer than this
RAFT_ANSWER_S = 0.3  # a parked fetch may hold its answer: a shot does not wait longer
IDENTITIES = (2, 9)  # a voter's login, and a replica's outside the voter set


@dataclass(frozen=True)
class RaftView:
    """The cluster as the fuzzer builds its valid requests against it."""

    cluster_id: str
    leader: int
    epoch: int
    end_offset: int
    directory_ids: tuple[bytes, ...]


def raft_view(nodes: list[Any]) -> RaftView:
    lead = next((n for n in nodes if n.is_leader()), nodes[0])
    core = lead.core
    dirs = tuple(
        key.directory_id
        for key in (core.voter_set.key_of(i) for i in core.voter_set)
        if key is not None and key.directory_id is not None
    )
    return RaftView(
        lead.config.cluster_id,
        lead.node_id,
        lead.leader_and_epoch.epoch,
        lead.log.end_offset,
        dirs or (uuid.uuid4().bytes,),
    )


def raft_rpc(key: ApiKey, view: RaftView, source: int, rng: random.Random) -> Any:
    """A valid body of raft RPC ``key`` at its highest served version, speaking for
    ``source``."""
    cls = request_spec(key).cls
    epoch, end, cid = view.epoch, view.end_offset, view.cluster_id
    own_dir = rng.choice(view.directory_ids)
    endpoint = {"name": "PLAINTEXT", "host": "127.0.0.1", "port": 1}
    if key == ApiKey.VOTE:
        p = cls.PartitionData(
            partition_index=0,
            candidate_epoch=epoch + 1,
            candidate_id=source,
            candidate_directory_id=own_dir,
            voter_directory_id=rng.choice(view.directory_ids),
            last_offset_epoch=epoch,
            last_offset=end,
            pre_vote=rng.random() < 0.5,
        )
        return cls(
            cluster_id=cid,
            voter_id=rng.choice(VOTERS),
            topics=[cls.TopicData(topic_name=TOPIC, partitions=[p])],
        )
    if key == ApiKey.BEGIN_QUORUM_EPOCH:
        p = cls.PartitionData(
            partition_index=0,
            voter_directory_id=rng.choice(view.directory_ids),
            leader_id=source,
            leader_epoch=epoch + 1,
        )
        return cls(
            cluster_id=cid,
            voter_id=rng.choice(VOTERS),
            topics=[cls.TopicData(topic_name=TOPIC, partitions=[p])],
            leader_endpoints=[cls.LeaderEndpoint(**endpoint)],
        )
    if key == ApiKey.END_QUORUM_EPOCH:
        p = cls.PartitionData(
            partition_index=0,
            leader_id=source,
            leader_epoch=epoch,
            preferred_candidates=[
                cls.ReplicaInfo(candidate_id=v, candidate_directory_id=d)
                for v, d in zip(VOTERS, view.directory_ids, strict=False)
            ],
        )
        return cls(
            cluster_id=cid,
            topics=[cls.TopicData(topic_name=TOPIC, partitions=[p])],
            leader_endpoints=[cls.LeaderEndpoint(**endpoint)],
        )
    if key == ApiKey.FETCH:
        p = cls.FetchPartition(
            partition=0,
            current_leader_epoch=epoch,
            fetch_offset=end,
            last_fetched_epoch=epoch,
            partition_max_bytes=65536,
            replica_directory_id=own_dir,
        )
        return cls(
            cluster_id=cid,
            replica_state=cls.ReplicaState(replica_id=source, replica_epoch=-1),
            max_wait_ms=50,
            min_bytes=1,
            max_bytes=1 << 20,
            topics=[cls.FetchTopic(topic_id=topic_id(cid), partitions=[p])],
        )
    if key == ApiKey.FETCH_SNAPSHOT:
        p = cls.PartitionSnapshot(
            partition=0,
            current_leader_epoch=epoch,
            snapshot_id=cls.SnapshotId(end_offset=end, epoch=epoch),
            position=0,
            replica_directory_id=own_dir,
        )
        return cls(
            cluster_id=cid,
            replica_id=source,
            max_bytes=1 << 20,
            topics=[cls.TopicSnapshot(name=TOPIC, partitions=[p])],
        )
    if key == ApiKey.DESCRIBE_QUORUM:
        return cls(
            topics=[
                cls.TopicData(topic_name=TOPIC, partitions=[cls.PartitionData(partition_index=0)])
            ]
        )
    listeners = [cls.Listener(**endpoint)] if hasattr(cls, "Listener") else []
    if key == ApiKey.ADD_RAFT_VOTER:
        return cls(
            cluster_id=cid,
            timeout_ms=200,
            voter_id=source,
            voter_directory_id=own_dir,
            listeners=listeners,
        )
    if key == ApiKey.REMOVE_RAFT_VOTER:
        return cls(cluster_id=cid, voter_id=rng.choice(VOTERS), voter_directory_id=own_dir)
    if key == ApiKey.UPDATE_RAFT_VOTER:
        return cls(
            cluster_id=cid,
            current_leader_epoch=epoch,
            voter_id=source,
            voter_directory_id=own_dir,
            listeners=listeners,
            k_raft_version_feature=cls.KRaftVersionFeature(
                min_supported_version=0, max_supported_version=1
            ),
        )
    raise AssertionError(f"not a raft RPC: {key!r}")


def raft_value(f: FieldSpec, version: int, current: Any, view: RaftView, rng: random.Random) -> Any:
    """A value for field ``f`` chosen by what it means: an id, an epoch, a directory id, an
    offset, a size; anything else gets :func:`extreme_value`."""
    name = f.name.lower()
    if f.type == "uuid" and "directory" in name:
        return rng.choice((*view.directory_ids, uuid.uuid4().bytes, bytes(16)))
    if f.type in ("int32", "int64") and not f.is_array:
        lo, hi = INT_RANGES[f.type]
        if "epoch" in name:
            e = view.epoch
            return rng.choice((e - 1, e, e + 1, e + 2, e + 1000, -1, 0, hi))
        if name.endswith("id"):
            return rng.choice((*VOTERS, 9, 0, -1, -2, hi, lo))
        if "offset" in name or "position" in name or "watermark" in name:
            end = view.end_offset
            return rng.choice((end - 1, end, end + 1, end + 1000, 0, -1, hi, lo))
        if "bytes" in name or "timeout" in name or "wait" in name:
            return rng.choice((-1, 0, 1, 100, hi))
    return extreme_value(f, version, current, rng)


def mutated_raft_rpc(key: ApiKey, view: RaftView, source: int, rng: random.Random) -> bytes:
    """A valid encoding of raft RPC ``key`` with one to three fields mutated (a frame that
    cannot be encoded after a mutation is built again)."""
    version = SUPPORTED_VERSIONS[key][1]
    while True:
        body = raft_rpc(key, view, source, rng)
        fields = present_fields(request_spec(key).root, body, version)
        for obj, f in rng.sample(fields, min(len(fields), rng.randint(1, 3))):
            value = raft_value(f, version, getattr(obj, f.attr), view, rng)
            object.__setattr__(obj, f.attr, value)
        try:
            return encode_request(key, version, rng.randrange(1 << 31), "raft-fuzz", body)
        except (ProtocolError, TypeError, ValueError, AttributeError, OverflowError):
            continue


async def logged_in(node: Any, identity: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A connection to ``node`` logged in as ``node-<identity>`` (SASL PLAIN)."""
    from sasl_helpers import NODE_PASSWORD, Raw

    raw = await Raw.open(node)
    answer = await raw.login_plain(f"node-{identity}", NODE_PASSWORD)
    assert answer is not None and answer.error_code == Errors.NONE, answer
    return raw.reader, raw.writer


async def fire_raft(node: Any, identity: int, frame: bytes) -> str:
    """Send one frame on a fresh logged-in connection: "answered", "closed" or "held"."""
    reader, writer = await logged_in(node, identity)
    try:
        writer.write(framed(frame))
        await writer.drain()
        try:
            (size,) = struct.unpack(
                ">i", await asyncio.wait_for(reader.readexactly(4), RAFT_ANSWER_S)
            )
            await asyncio.wait_for(reader.readexactly(size), RAFT_ANSWER_S)
        except asyncio.TimeoutError:
            return "held"
        except (asyncio.IncompleteReadError, ConnectionError):
            return "closed"
        return "answered"
    finally:
        writer.close()


async def still_serving(nodes: list[Any]) -> None:
    """Each node answers a DescribeQuorum (whatever it says: a voter's own requests may have
    moved the epoch, changed its endpoint or added node 9, as that node may)."""
    from sasl_helpers import Raw

    cls = request_spec(ApiKey.DESCRIBE_QUORUM).cls
    body = cls(
        topics=[cls.TopicData(topic_name=TOPIC, partitions=[cls.PartitionData(partition_index=0)])]
    )
    for node in nodes:
        raw = await Raw.open(node)
        try:
            assert (await raw.login_plain("node-2", _node_password())).error_code == Errors.NONE
            answer = await raw.ask(ApiKey.DESCRIBE_QUORUM, 0, body)
            assert answer is not None, f"node {node.node_id} does not answer; {REPLAY}"
        finally:
            raw.close()


def _node_password() -> str:
    from sasl_helpers import NODE_PASSWORD

    return NODE_PASSWORD


def test_mutated_raft_rpcs_with_a_nodes_credentials_stop_no_node_and_log_no_traceback(
    tmp_path, caplog
):
    """Every raft RPC, valid but for one to three fields, sent as node-2 (a voter) and as
    node-9 (outside the voter set): no node stops, none logs a traceback, each still answers
    (see the comment above for what is mutated)."""
    import logging

    from sasl_helpers import users_file
    from test_sasl_identity import nodes_with, plaintext

    caplog.set_level(logging.INFO)
    rng = random.Random(SEED)
    print(f"raft wire fuzz: {REPLAY}")
    outcomes: Counter[str] = Counter()
    sent: Counter[str] = Counter()

    async def main() -> None:
        security = plaintext(users_file(tmp_path))
        async with nodes_with(tmp_path, {1: security, 2: security, 3: security}) as nodes:
            deadline = time.monotonic() + RAFT_FUZZ_S
            for i in range(RAFT_SHOTS):
                if time.monotonic() > deadline:
                    break
                key = RAFT_RPCS[i % len(RAFT_RPCS)]
                identity = rng.choice(IDENTITIES)
                view = raft_view(nodes)
                frame = mutated_raft_rpc(key, view, identity, rng)
                node = rng.choice(nodes)
                outcomes[await fire_raft(node, identity, frame)] += 1
                sent[key.name] += 1
                stopped = {n.node_id: str(n.failure) for n in nodes if n.failure is not None}
                assert not stopped, f"stopped after {key.name} {frame!r}: {stopped}; {REPLAY}"
            await still_serving(nodes)

    asyncio.run(asyncio.wait_for(main(), RAFT_FUZZ_S + 60))
    print(f"raft wire fuzz: sent {dict(sent)}, outcomes {dict(outcomes)}")
    assert set(sent) == {k.name for k in RAFT_RPCS}, sent
    tracebacks = [r.getMessage() for r in caplog.records if r.exc_info or r.exc_text]
    assert not tracebacks, f"{tracebacks[:3]}; {REPLAY}"
