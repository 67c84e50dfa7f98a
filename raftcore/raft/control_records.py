"""The control records KRaft writes into its own log: LeaderChange (type 2) at the start of
every epoch. The value is Kafka's LeaderChangeMessage serialized at version 0, flexible:

    Version int16, LeaderId int32, Voters [VoterId int32, tags], GrantingVoters [...], tags

(compact arrays: unsigned varint length + 1; each struct ends with an empty tagged-field
section, a single 0 byte).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from raftcore.errors import CorruptRecordError
from raftcore.records import ControlRecordType, control_record_key

__all__ = ["LeaderChangeMessage", "leader_change_record"]

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


def _uvarint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _read_uvarint(data: bytes, pos: int) -> tuple[int, int]:
    shift = value = 0
    while True:
        if pos >= len(data) or shift > 28:
            raise CorruptRecordError("truncated unsigned varint in a LeaderChange message")
        b = data[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, pos
        shift += 7


@dataclass(frozen=True, slots=True)
class LeaderChangeMessage:
    leader_id: int
    voters: tuple[int, ...]
    granting_voters: tuple[int, ...]
    version: int = 0

    def encode(self) -> bytes:
        out = bytearray(_I16.pack(self.version) + _I32.pack(self.leader_id))
        for group in (self.voters, self.granting_voters):
            out += _uvarint(len(group) + 1)
            for voter in group:
                out += _I32.pack(voter) + b"\x00"
        out += b"\x00"
        return bytes(out)

    @classmethod
    def decode(cls, data: bytes) -> LeaderChangeMessage:
        try:
            (version,) = _I16.unpack_from(data, 0)
            (leader,) = _I32.unpack_from(data, 2)
            pos = 6
            groups = []
            for _ in range(2):
                n, pos = _read_uvarint(data, pos)
                ids = []
                for _ in range(max(n - 1, 0)):
                    (voter,) = _I32.unpack_from(data, pos)
                    pos += 4
                    tags, pos = _read_uvarint(data, pos)
                    if tags:
                        raise CorruptRecordError("unexpected tagged fields in a Voter")
                    ids.append(voter)
                groups.append(tuple(ids))
        except struct.error as exc:
            raise CorruptRecordError(f"truncated LeaderChange message: {exc}") from None
        return cls(leader, groups[0], groups[1], version)


def leader_change_record(leader_id: int, voters, granting_voters) -> tuple[bytes, bytes]:
    """(key, value) of the LeaderChange control record a new leader appends first."""
    message = LeaderChangeMessage(leader_id, tuple(sorted(voters)), tuple(sorted(granting_voters)))
    return control_record_key(ControlRecordType.LEADER_CHANGE), message.encode()
