"""Who votes (KIP-853): replicas named by (id, directory id), and the voter set.

A replica is a node id *and* the random directory id drawn when its data directory was first
formatted (``meta.properties``), so a node that lost its disk and came back under the same id is
a new replica: it does not count as the voter it replaced, which is how a wiped voter could
otherwise vote for a candidate lacking committed records (the "lost disk" problem).

A voter set with no directory ids (``directory_id`` None) is the static one of kraft.version 0,
built from ``--voters``: there a voter is its id alone. From kraft.version 1 the voter set lives
in the log (:mod:`raftcore.raft.voter_history`) and every voter has its directory id.
"""

from __future__ import annotations

import base64
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, replace

__all__ = [
    "KRAFT_VERSIONS",
    "Voter",
    "VoterEndpoint",
    "VoterSet",
    "ReplicaKey",
    "directory_id_text",
    "parse_directory_id",
]

# The kraft.version feature levels raftcore speaks: 0 (static voters) and 1 (KIP-853).
KRAFT_VERSIONS = (0, 1)


def directory_id_text(directory_id: bytes | None) -> str:
    """Kafka's text form of a uuid: URL-safe base64 without padding (22 characters); "-" for
    none."""
    if directory_id is None:
        return "-"
    return base64.urlsafe_b64encode(directory_id).rstrip(b"=").decode("ascii")


def parse_directory_id(text: str) -> bytes:
    """The 16 bytes of a directory id written as Kafka writes uuids; ValueError otherwise."""
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (ValueError, TypeError):
        raw = b""
    if len(raw) != 16 or raw == bytes(16):
        raise ValueError(f"not a directory id (22 characters of URL-safe base64): {text!r}")
    return raw


@dataclass(frozen=True, slots=True)
class ReplicaKey:
    """A replica: its node id and its directory id (None: not known, the static voters of
    kraft.version 0, or a peer that speaks no KIP-853 version)."""

    id: int
    directory_id: bytes | None = None

    def __post_init__(self) -> None:
        if self.directory_id is not None and (
            len(self.directory_id) != 16 or self.directory_id == bytes(16)
        ):
            raise ValueError(f"a directory id is 16 bytes, not zero: {self.directory_id!r}")

    def admits(self, other: ReplicaKey) -> bool:
        """Is ``other`` the replica this voter key names (Kafka's VoterSet.isVoter)? The ids
        must agree, and when this key has a directory id, ``other`` must have the same one (a
        replica that does not say its directory id is not admitted); a key without one (a
        static voter) admits whichever replica has the id."""
        return self.id == other.id and (
            self.directory_id is None or self.directory_id == other.directory_id
        )

    def addressed_to(self, local: ReplicaKey) -> bool:
        """Is a request that names this key as its receiver meant for ``local`` (Kafka's
        isValidVoterKey)? The ids must agree, and the directory ids too when the request
        names one."""
        return self.id == local.id and (
            self.directory_id is None or self.directory_id == local.directory_id
        )

    def __str__(self) -> str:
        if self.directory_id is None:
            return str(self.id)
        return f"{self.id}:{directory_id_text(self.directory_id)}"


@dataclass(frozen=True, slots=True)
class VoterEndpoint:
    """Where a voter listens: Kafka's (listener name, host, port)."""

    name: str
    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.name}://{self.host}:{self.port}"


@dataclass(frozen=True, slots=True)
class Voter:
    """A voter: its key, where it listens, and the kraft.version range it speaks."""

    key: ReplicaKey
    endpoints: tuple[VoterEndpoint, ...] = ()
    min_version: int = 0
    max_version: int = 1

    @property
    def id(self) -> int:
        return self.key.id

    def supports(self, kraft_version: int) -> bool:
        return self.min_version <= kraft_version <= self.max_version


class VoterSet(Mapping[int, Voter]):
    """An immutable set of voters, by id. Majorities are of this set; a replica is a voter of it
    when a voter's key admits it (:meth:`ReplicaKey.admits`)."""

    __slots__ = ("_voters",)

    def __init__(self, voters: Iterable[Voter] = ()) -> None:
        by_id: dict[int, Voter] = {}
        for voter in voters:
            if voter.id in by_id:
                raise ValueError(f"voter {voter.id} is listed twice")
            by_id[voter.id] = voter
        self._voters = dict(sorted(by_id.items()))

    @classmethod
    def static(cls, ids: Iterable[int]) -> VoterSet:
        """kraft.version 0's voters: ids from the configuration, no directory ids."""
        return cls(Voter(ReplicaKey(i)) for i in ids)

    # ---- Mapping ---------------------------------------------------------------------------

    def __getitem__(self, voter_id: int) -> Voter:
        return self._voters[voter_id]

    def __iter__(self) -> Iterator[int]:
        return iter(self._voters)

    def __len__(self) -> int:
        return len(self._voters)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, VoterSet) and self._voters == other._voters

    def __hash__(self) -> int:
        return hash(tuple(self._voters.values()))

    # ---- questions -------------------------------------------------------------------------

    @property
    def ids(self) -> frozenset[int]:
        return frozenset(self._voters)

    @property
    def majority(self) -> int:
        return len(self._voters) // 2 + 1

    def is_voter(self, key: ReplicaKey) -> bool:
        voter = self._voters.get(key.id)
        return voter is not None and voter.key.admits(key)

    def key_of(self, voter_id: int) -> ReplicaKey | None:
        voter = self._voters.get(voter_id)
        return None if voter is None else voter.key

    def endpoint_of(self, voter_id: int) -> VoterEndpoint | None:
        voter = self._voters.get(voter_id)
        return voter.endpoints[0] if voter is not None and voter.endpoints else None

    @property
    def has_directory_ids(self) -> bool:
        return all(v.key.directory_id is not None for v in self._voters.values())

    def overlapping_majority(self, other: VoterSet) -> bool:
        """Kafka's hasOverlappingMajority: the two sets differ by at most one voter (added or
        removed), so every majority of one meets every majority of the other."""
        mine = {v.key for v in self._voters.values()}
        theirs = {v.key for v in other._voters.values()}
        return len(mine ^ theirs) <= 1

    # ---- changes (new sets) ----------------------------------------------------------------

    def with_voter(self, voter: Voter) -> VoterSet:
        if voter.id in self._voters:
            raise ValueError(f"{voter.key} is already a voter")
        return VoterSet([*self._voters.values(), voter])

    def without(self, key: ReplicaKey) -> VoterSet:
        if not self.is_voter(key):
            raise ValueError(f"{key} is not a voter")
        return VoterSet(v for v in self._voters.values() if v.id != key.id)

    def updated(self, voter: Voter) -> VoterSet:
        """The same voters, ``voter``'s entry replaced (its endpoints, versions, or its
        directory id when the set had none for it)."""
        if voter.id not in self._voters:
            raise ValueError(f"{voter.key} is not a voter")
        return VoterSet(voter if v.id == voter.id else v for v in self._voters.values())

    def with_endpoint(self, voter_id: int, endpoint: VoterEndpoint) -> VoterSet:
        voter = self._voters[voter_id]
        return self.updated(replace(voter, endpoints=(endpoint,)))

    def __repr__(self) -> str:
        return "VoterSet(" + ", ".join(str(v.key) for v in self._voters.values()) + ")"
