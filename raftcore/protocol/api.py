"""Kafka APIs, their versions, and whole frames: header + body.

- Request header v1 (api key, version, correlation id, nullable client id) for non-flexible
  request versions, v2 (the same and tagged fields) for flexible ones. The client id is a
  classic int16 string even in v2.
- Response header v0 (correlation id), v1 (and tagged fields) for flexible versions -- except
  ApiVersions, whose response header is always v0 so that a client can read the answer to a
  version it does not yet know the broker supports (KIP-511).

``SUPPORTED_VERSIONS`` is what a raftcore node serves and advertises in ApiVersions (but for
``UNADVERTISED``: raftcore's own APIs, under keys Kafka does not use). Produce is
advertised from v0 because librdkafka disables compression otherwise (KAFKA-18659); versions
0-2 carry message formats v0/v1, which are answered with UNSUPPORTED_FOR_MESSAGE_FORMAT.
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from raftcore.protocol.schema import MessageSpec, ProtocolError, Reader, Writer, load_spec

__all__ = [
    "SUPPORTED_VERSIONS",
    "RAFT_ONLY_APIS",
    "UNADVERTISED",
    "ApiKey",
    "ProtocolError",
    "RequestHeader",
    "UnknownApiKeyError",
    "UnsupportedVersionError",
    "decode_request",
    "decode_response",
    "encode_request",
    "encode_response",
    "request_header_version",
    "request_spec",
    "response_header_version",
    "response_spec",
]


class ApiKey(enum.IntEnum):
    PRODUCE = 0
    FETCH = 1
    LIST_OFFSETS = 2
    METADATA = 3
    OFFSET_COMMIT = 8
    OFFSET_FETCH = 9
    FIND_COORDINATOR = 10
    JOIN_GROUP = 11
    HEARTBEAT = 12
    LEAVE_GROUP = 13
    SYNC_GROUP = 14
    DESCRIBE_GROUPS = 15
    LIST_GROUPS = 16
    SASL_HANDSHAKE = 17
    API_VERSIONS = 18
    CREATE_TOPICS = 19
    DELETE_TOPICS = 20
    DELETE_RECORDS = 21
    INIT_PRODUCER_ID = 22
    DESCRIBE_CONFIGS = 32
    SASL_AUTHENTICATE = 36
    DELETE_GROUPS = 42
    CREATE_PARTITIONS = 37
    VOTE = 52
    BEGIN_QUORUM_EPOCH = 53
    END_QUORUM_EPOCH = 54
    DESCRIBE_QUORUM = 55
    FETCH_SNAPSHOT = 59
    DESCRIBE_PRODUCERS = 61
    ADD_RAFT_VOTER = 80
    REMOVE_RAFT_VOTER = 81
    UPDATE_RAFT_VOTER = 82
    # raftcore's own (see TransferLeadershipRequest.json): far above Kafka's keys, and never
    # listed in ApiVersions
    TRANSFER_LEADERSHIP = 10000
    READ_INDEX = 10001


_NAMES = {
    ApiKey.PRODUCE: "Produce",
    ApiKey.FETCH: "Fetch",
    ApiKey.LIST_OFFSETS: "ListOffsets",
    ApiKey.METADATA: "Metadata",
    ApiKey.OFFSET_COMMIT: "OffsetCommit",
    ApiKey.OFFSET_FETCH: "OffsetFetch",
    ApiKey.FIND_COORDINATOR: "FindCoordinator",
    ApiKey.JOIN_GROUP: "JoinGroup",
    ApiKey.HEARTBEAT: "Heartbeat",
    ApiKey.LEAVE_GROUP: "LeaveGroup",
    ApiKey.SYNC_GROUP: "SyncGroup",
    ApiKey.DESCRIBE_GROUPS: "DescribeGroups",
    ApiKey.LIST_GROUPS: "ListGroups",
    ApiKey.SASL_HANDSHAKE: "SaslHandshake",
    ApiKey.API_VERSIONS: "ApiVersions",
    ApiKey.CREATE_TOPICS: "CreateTopics",
    ApiKey.DELETE_TOPICS: "DeleteTopics",
    ApiKey.DELETE_RECORDS: "DeleteRecords",
    ApiKey.INIT_PRODUCER_ID: "InitProducerId",
    ApiKey.DESCRIBE_CONFIGS: "DescribeConfigs",
    ApiKey.SASL_AUTHENTICATE: "SaslAuthenticate",
    ApiKey.DELETE_GROUPS: "DeleteGroups",
    ApiKey.CREATE_PARTITIONS: "CreatePartitions",
    ApiKey.VOTE: "Vote",
    ApiKey.BEGIN_QUORUM_EPOCH: "BeginQuorumEpoch",
    ApiKey.END_QUORUM_EPOCH: "EndQuorumEpoch",
    ApiKey.DESCRIBE_QUORUM: "DescribeQuorum",
    ApiKey.FETCH_SNAPSHOT: "FetchSnapshot",
    ApiKey.DESCRIBE_PRODUCERS: "DescribeProducers",
    ApiKey.ADD_RAFT_VOTER: "AddRaftVoter",
    ApiKey.REMOVE_RAFT_VOTER: "RemoveRaftVoter",
    ApiKey.UPDATE_RAFT_VOTER: "UpdateRaftVoter",
    ApiKey.TRANSFER_LEADERSHIP: "TransferLeadership",
    ApiKey.READ_INDEX: "ReadIndex",
}

# What a node serves (inclusive ranges).
SUPPORTED_VERSIONS: dict[ApiKey, tuple[int, int]] = {
    ApiKey.PRODUCE: (0, 10),
    ApiKey.FETCH: (4, 17),
    ApiKey.LIST_OFFSETS: (1, 7),
    ApiKey.METADATA: (0, 12),
    ApiKey.OFFSET_COMMIT: (0, 8),
    ApiKey.OFFSET_FETCH: (0, 7),
    ApiKey.FIND_COORDINATOR: (0, 4),
    # the classic group protocol from v0: librdkafka before 2.11 turns its group consumer off
    # unless JoinGroup v0 is advertised (KAFKA-19444)
    ApiKey.JOIN_GROUP: (0, 5),
    ApiKey.HEARTBEAT: (0, 3),
    ApiKey.LEAVE_GROUP: (0, 3),
    ApiKey.SYNC_GROUP: (0, 3),
    ApiKey.DESCRIBE_GROUPS: (0, 5),
    ApiKey.LIST_GROUPS: (0, 4),
    ApiKey.SASL_HANDSHAKE: (0, 1),  # advertised only by SASL listeners
    ApiKey.API_VERSIONS: (0, 4),
    ApiKey.CREATE_TOPICS: (0, 7),
    ApiKey.DELETE_TOPICS: (0, 6),
    ApiKey.DELETE_RECORDS: (0, 2),
    ApiKey.INIT_PRODUCER_ID: (0, 4),
    ApiKey.DESCRIBE_CONFIGS: (0, 4),
    ApiKey.SASL_AUTHENTICATE: (0, 2),  # advertised only by SASL listeners
    ApiKey.DELETE_GROUPS: (0, 2),
    ApiKey.CREATE_PARTITIONS: (0, 3),
    ApiKey.VOTE: (0, 2),
    ApiKey.BEGIN_QUORUM_EPOCH: (0, 1),
    ApiKey.END_QUORUM_EPOCH: (0, 1),
    ApiKey.DESCRIBE_QUORUM: (0, 2),
    ApiKey.FETCH_SNAPSHOT: (0, 1),
    ApiKey.DESCRIBE_PRODUCERS: (0, 0),
    ApiKey.ADD_RAFT_VOTER: (0, 0),
    ApiKey.REMOVE_RAFT_VOTER: (0, 0),
    ApiKey.UPDATE_RAFT_VOTER: (0, 0),
    ApiKey.TRANSFER_LEADERSHIP: (0, 0),  # served, not advertised (UNADVERTISED)
    ApiKey.READ_INDEX: (0, 0),  # served, not advertised (UNADVERTISED)
}

# Served but never listed in ApiVersions: raftcore's own APIs, which no Kafka client knows.
UNADVERTISED = frozenset({ApiKey.TRANSFER_LEADERSHIP, ApiKey.READ_INDEX})

# The Raft RPCs between nodes (with a Fetch naming a replica): served on a node listener, or a
# listener shared by nodes and clients, never on a client listener (raftcore.node.listeners),
# which does not list them in ApiVersions either (Kafka's broker listeners leave out the
# controller's RPCs).
RAFT_ONLY_APIS = frozenset(
    {
        ApiKey.VOTE,
        ApiKey.BEGIN_QUORUM_EPOCH,
        ApiKey.END_QUORUM_EPOCH,
        ApiKey.FETCH_SNAPSHOT,
        ApiKey.UPDATE_RAFT_VOTER,
    }
)


def request_spec(key: int) -> MessageSpec:
    return load_spec(f"{_NAMES[ApiKey(key)]}Request")


def response_spec(key: int) -> MessageSpec:
    return load_spec(f"{_NAMES[ApiKey(key)]}Response")


def request_header_version(key: int, version: int) -> int:
    return 2 if version in request_spec(key).flexible else 1


def response_header_version(key: int, version: int) -> int:
    if key == ApiKey.API_VERSIONS:
        return 0
    return 1 if version in response_spec(key).flexible else 0


@dataclass(slots=True)
class RequestHeader:
    request_api_key: int
    request_api_version: int
    correlation_id: int
    client_id: str | None


class UnknownApiKeyError(ProtocolError):
    def __init__(self, header: RequestHeader) -> None:
        super().__init__(f"unknown API key {header.request_api_key}")
        self.header = header


class UnsupportedVersionError(ProtocolError):
    def __init__(self, header: RequestHeader) -> None:
        key = header.request_api_key
        lo, hi = SUPPORTED_VERSIONS.get(key, (0, -1))  # type: ignore[call-overload]
        super().__init__(
            f"{_NAMES.get(key, key)} version {header.request_api_version} is not supported "  # type: ignore[call-overload]
            f"({lo}-{hi})"
        )
        self.header = header


_HEAD = struct.Struct(">hhi")
_HEAD_AND_CLIENT_ID_LENGTH = struct.Struct(">hhih")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_API_KEYS = {int(k): k for k in ApiKey}

# (whether the header is flexible, the body's encoder or decoder) per (api, version), looked up
# once: the hot path does not rebuild a spec name or ask a version range per frame.
_REQUEST_DECODERS: dict[tuple[int, int], tuple[bool, Callable]] = {}
_RESPONSE_ENCODERS: dict[tuple[int, int], tuple[bool, Callable]] = {}
_RESPONSE_DECODERS: dict[tuple[int, int], tuple[bool, Callable]] = {}


def _request_decoder(key: int, version: int) -> tuple[bool, Callable]:
    entry = _REQUEST_DECODERS.get((key, version))
    if entry is None:
        decode = request_spec(key).codec(version)[1]
        entry = _REQUEST_DECODERS[key, version] = (
            request_header_version(key, version) >= 2,
            decode,
        )
    return entry


def _response_codec(key: int, version: int, side: int) -> tuple[bool, Callable]:
    cache = _RESPONSE_DECODERS if side else _RESPONSE_ENCODERS
    entry = cache.get((key, version))
    if entry is None:
        coder = response_spec(key).codec(version)[side]
        entry = cache[key, version] = (response_header_version(key, version) >= 1, coder)
    return entry


# ---- requests ----------------------------------------------------------------------------------


def encode_request(
    key: int, version: int, correlation_id: int, client_id: str | None, body: Any
) -> bytes:
    """A request frame (without the 4-byte size)."""
    w = Writer()
    w.put(_HEAD.pack(key, version, correlation_id))
    if client_id is None:
        w.put(_I16.pack(-1))
    else:
        raw = client_id.encode("utf-8")
        if len(raw) > 0x7FFF:
            raise ProtocolError(f"a client id of {len(raw)} bytes is too long (32767 at most)")
        w.put(_I16.pack(len(raw)) + raw)
    if request_header_version(key, version) >= 2:
        w.put(b"\x00")  # no tagged fields
    request_spec(key).codec(version)[0](body, w)
    return w.getvalue()


def decode_request(frame: bytes | memoryview) -> tuple[RequestHeader, Any]:
    """(header, body) of a request frame. UnknownApiKeyError / UnsupportedVersionError carry
    the header (to answer or to log); anything malformed is a ProtocolError."""
    r = Reader(frame)
    if r.end >= _HEAD_AND_CLIENT_ID_LENGTH.size:
        key, version, correlation_id, n = _HEAD_AND_CLIENT_ID_LENGTH.unpack_from(r.buf, 0)
        r.pos = _HEAD_AND_CLIENT_ID_LENGTH.size
    else:  # truncated: name what is missing
        key = r.unpack(_I16, "api key")
        version = r.unpack(_I16, "api version")
        correlation_id = r.unpack(_I32, "correlation id")
        n = r.unpack(_I16, "client id length")
    if n < -1:
        raise ProtocolError(f"bad client id length {n}")
    client_id = None if n == -1 else bytes(r.take(n, "client id")).decode("utf-8", "replace")
    header = RequestHeader(key, version, correlation_id, client_id)
    api = _API_KEYS.get(key)
    if api is None:
        raise UnknownApiKeyError(header)
    supported = SUPPORTED_VERSIONS.get(api)
    if supported is None:
        raise UnknownApiKeyError(header)
    if not supported[0] <= version <= supported[1]:
        raise UnsupportedVersionError(header)
    flexible_header, decode = _request_decoder(api, version)
    if flexible_header:
        _skip_tagged_fields(r)
    body = decode(r)
    if r.remaining() and api not in _TRAILING_BYTES_READ_AS_KAFKA_DOES:
        raise ProtocolError(f"{r.remaining()} bytes after the {_NAMES[api]} v{version} request")
    return header, body


# Kafka's broker reads a request's fields and ignores what follows them. librdkafka (2.x) relies
# on it: its all-topics Metadata v9+ request keeps a 4-byte placeholder where the compact array
# count belongs (00 00 00 00, then its own flags and tags), which Kafka reads as "all topics",
# allow_auto_topic_creation false, and 3 bytes it ignores. Elsewhere trailing bytes stay an
# error: they are how a codec mismatch shows.
_TRAILING_BYTES_READ_AS_KAFKA_DOES = frozenset({ApiKey.METADATA})


def _skip_tagged_fields(r: Reader) -> None:
    if r.pos < r.end and r.buf[r.pos] == 0:  # none: the usual case
        r.pos += 1
        return
    for _ in range(r.uvarint()):
        r.uvarint()  # tag
        r.take(r.uvarint(), "tagged field")


# ---- responses ---------------------------------------------------------------------------------

_COALESCE_BELOW = 64 * 1024


def encode_response(
    key: int, version: int, correlation_id: int, body: Any
) -> list[bytes | memoryview]:
    """A response frame (without the size) as a list of pieces: small pieces are joined, large
    byte fields (records read from the log) are left as they are, uncopied."""
    flexible_header, encode = _response_codec(key, version, 0)
    w = Writer()
    w.put(_I32.pack(correlation_id))
    if flexible_header:
        w.put(b"\x00")
    encode(body, w)
    return coalesce(w.parts)


def coalesce(parts: list[bytes | memoryview]) -> list[bytes | memoryview]:
    """Small pieces joined, large ones (records read from the log) left as they are, uncopied:
    how a frame's pieces go to the socket."""
    out: list[bytes | memoryview] = []
    small: list[bytes | memoryview] = []
    for part in parts:
        if len(part) >= _COALESCE_BELOW:
            if small:
                out.append(b"".join(small))
                small = []
            out.append(part)
        else:
            small.append(part)
    if small:
        out.append(b"".join(small))
    return out


def decode_response(key: int, version: int, frame: bytes | memoryview) -> tuple[int, Any]:
    """(correlation id, body) of a response frame to a request of ``key`` at ``version``."""
    r = Reader(frame)
    correlation_id = r.unpack(_I32, "correlation id")
    flexible_header, decode = _response_codec(key, version, 1)
    if flexible_header:
        _skip_tagged_fields(r)
    body = decode(r)
    if r.remaining():
        raise ProtocolError(
            f"{r.remaining()} bytes after the {_NAMES[ApiKey(key)]} v{version} response"
        )
    return correlation_id, body
