"""The control records KRaft writes into its own log, with Kafka's schemas (each value is a
flexible message at version 0: compact strings and arrays -- an unsigned varint of length + 1
-- and an empty tagged-field section, a single 0 byte, at the end of every struct):

- LeaderChange (type 2), at the start of every epoch::

    Version int16, LeaderId int32, Voters [VoterId int32], GrantingVoters [VoterId int32]

- KRaftVersion (type 5, KIP-853): the kraft.version feature level in force from its offset::

    Version int16, KRaftVersion int16

- Voters (type 6, KIP-853): the whole voter set in force from its offset (committed or not)::

    Version int16, Voters [VoterId int32, VoterDirectoryId uuid,
                           Endpoints [Name string, Host string, Port uint16],
                           KRaftVersionFeature {MinSupportedVersion int16,
                                                MaxSupportedVersion int16}]

A value that does not parse raises :class:`~raftcore.errors.CorruptRecordError`.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from dataclasses import dataclass

from raftcore.errors import CorruptRecordError
from raftcore.raft.voters import ReplicaKey, Voter, VoterEndpoint, VoterSet
from raftcore.records import ControlRecordType, control_record_key

__all__ = [
    "KRaftVersionMessage",
    "LeaderChangeMessage",
    "kraft_version_record",
    "leader_change_record",
    "voters_record",
    "decode_voters",
]

_I16 = struct.Struct(">h")
_U16 = struct.Struct(">H")
_I32 = struct.Struct(">i")
_ZERO_UUID = bytes(16)


class _Writer:
    __slots__ = ("out",)

    def __init__(self) -> None:
        self.out = bytearray()

    def int16(self, n: int) -> None:
        self.out += _I16.pack(n)

    def uint16(self, n: int) -> None:
        self.out += _U16.pack(n)

    def int32(self, n: int) -> None:
        self.out += _I32.pack(n)

    def uvarint(self, n: int) -> None:
        while n >= 0x80:
            self.out.append((n & 0x7F) | 0x80)
            n >>= 7
        self.out.append(n)

    def length(self, n: int) -> None:  # compact arrays and strings
        self.uvarint(n + 1)

    def string(self, text: str) -> None:
        data = text.encode("utf-8")
        self.length(len(data))
        self.out += data

    def uuid(self, value: bytes | None) -> None:
        self.out += _ZERO_UUID if value is None else value

    def tags(self) -> None:
        self.out.append(0)


class _Reader:
    __slots__ = ("data", "pos", "what")

    def __init__(self, data: bytes, what: str) -> None:
        self.data = data
        self.pos = 0
        self.what = what

    def _take(self, n: int) -> bytes:
        end = self.pos + n
        if end > len(self.data):
            raise CorruptRecordError(f"truncated {self.what} message at byte {self.pos}")
        chunk = self.data[self.pos : end]
        self.pos = end
        return chunk

    def int16(self) -> int:
        return _I16.unpack(self._take(2))[0]

    def uint16(self) -> int:
        return _U16.unpack(self._take(2))[0]

    def int32(self) -> int:
        return _I32.unpack(self._take(4))[0]

    def uvarint(self) -> int:
        shift = value = 0
        while True:
            if shift > 28:
                raise CorruptRecordError(f"an unsigned varint too long in a {self.what} message")
            b = self._take(1)[0]
            value |= (b & 0x7F) << shift
            if b < 0x80:
                return value
            shift += 7

    def length(self) -> int:
        n = self.uvarint() - 1
        if n < 0 or n > len(self.data) - self.pos:
            raise CorruptRecordError(f"a length of {n} past the end of a {self.what} message")
        return n

    def string(self) -> str:
        try:
            return self._take(self.length()).decode("utf-8")
        except UnicodeDecodeError:
            raise CorruptRecordError(f"a string not in UTF-8 in a {self.what} message") from None

    def uuid(self) -> bytes | None:
        raw = self._take(16)
        return None if raw == _ZERO_UUID else raw

    def tags(self) -> None:
        """Skip a tagged-field section (fields this version does not know are ignored)."""
        for _ in range(self.uvarint()):
            self.uvarint()  # tag
            self._take(self.uvarint())

    def end(self) -> None:
        if self.pos != len(self.data):
            raise CorruptRecordError(
                f"{len(self.data) - self.pos} bytes after the end of a {self.what} message"
            )


# ---- LeaderChange (type 2) ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LeaderChangeMessage:
    leader_id: int
    voters: tuple[int, ...]
    granting_voters: tuple[int, ...]
    version: int = 0

    def encode(self) -> bytes:
        w = _Writer()
        w.int16(self.version)
        w.int32(self.leader_id)
        for group in (self.voters, self.granting_voters):
            w.length(len(group))
            for voter in group:
                w.int32(voter)
                w.tags()
        w.tags()
        return bytes(w.out)

    @classmethod
    def decode(cls, data: bytes) -> LeaderChangeMessage:
        r = _Reader(bytes(data), "LeaderChange")
        version = r.int16()
        leader = r.int32()
        groups = []
        for _ in range(2):
            ids = []
            for _ in range(r.length()):
                ids.append(r.int32())
                r.tags()
            groups.append(tuple(ids))
        r.tags()
        return cls(leader, groups[0], groups[1], version)


def leader_change_record(
    leader_id: int, voters: Iterable[int], granting_voters: Iterable[int]
) -> tuple[bytes, bytes]:
    """(key, value) of the LeaderChange control record a new leader appends first."""
    message = LeaderChangeMessage(leader_id, tuple(sorted(voters)), tuple(sorted(granting_voters)))
    return control_record_key(ControlRecordType.LEADER_CHANGE), message.encode()


# ---- KRaftVersion (type 5) ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class KRaftVersionMessage:
    kraft_version: int
    version: int = 0

    def encode(self) -> bytes:
        w = _Writer()
        w.int16(self.version)
        w.int16(self.kraft_version)
        w.tags()
        return bytes(w.out)

    @classmethod
    def decode(cls, data: bytes) -> KRaftVersionMessage:
        r = _Reader(bytes(data), "KRaftVersion")
        version = r.int16()
        kraft_version = r.int16()
        r.tags()
        if kraft_version < 0:
            raise CorruptRecordError(f"kraft.version {kraft_version} in a KRaftVersion record")
        return cls(kraft_version, version)


def kraft_version_record(kraft_version: int) -> tuple[bytes, bytes]:
    return (
        control_record_key(ControlRecordType.KRAFT_VERSION),
        KRaftVersionMessage(kraft_version).encode(),
    )


# ---- Voters (type 6) ---------------------------------------------------------------------------


def encode_voters(voters: VoterSet, version: int = 0) -> bytes:
    w = _Writer()
    w.int16(version)
    w.length(len(voters))
    for voter in voters.values():
        w.int32(voter.id)
        w.uuid(voter.key.directory_id)
        w.length(len(voter.endpoints))
        for ep in voter.endpoints:
            w.string(ep.name)
            w.string(ep.host)
            w.uint16(ep.port)
            w.tags()
        w.int16(voter.min_version)  # KRaftVersionFeature, a struct with its own tags
        w.int16(voter.max_version)
        w.tags()
        w.tags()
    w.tags()
    return bytes(w.out)


def decode_voters(data: bytes) -> VoterSet:
    r = _Reader(bytes(data), "Voters")
    r.int16()  # version
    voters = []
    for _ in range(r.length()):
        voter_id = r.int32()
        if voter_id < 0:
            raise CorruptRecordError(f"voter id {voter_id} in a Voters record")
        directory_id = r.uuid()
        endpoints = []
        for _ in range(r.length()):
            name, host, port = r.string(), r.string(), r.uint16()
            r.tags()
            endpoints.append(VoterEndpoint(name, host, port))
        low, high = r.int16(), r.int16()
        r.tags()
        r.tags()
        voters.append(Voter(ReplicaKey(voter_id, directory_id), tuple(endpoints), low, high))
    r.tags()
    r.end()
    try:
        return VoterSet(voters)
    except ValueError as exc:
        raise CorruptRecordError(f"a Voters record: {exc}") from None


def voters_record(voters: VoterSet) -> tuple[bytes, bytes]:
    return control_record_key(ControlRecordType.KRAFT_VOTERS), encode_voters(voters)
