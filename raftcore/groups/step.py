"""What one call into the coordinator produces: the answers ready now and the records to
persist (etcd-raft's Ready in spirit).

Rule for the driver: append ``records`` to the group's offsets partition and send ``replies``
only once those records are committed; a commit, a leader's SyncGroup or a static member's
rejoin is answered only after what it changed is durable. Replies to requests that wait (a
JoinGroup until the join completes, a follower's SyncGroup until the leader's) come in the
Output of a later call or of ``poll``.
"""

from __future__ import annotations

import random
import uuid
from dataclasses import dataclass, field

from raftcore.groups.config import GroupConfig
from raftcore.groups.records import Record

__all__ = ["Output", "Reply", "Step"]


@dataclass(frozen=True, slots=True)
class Reply:
    ref: object  # the handle the driver passed with the request
    response: object


@dataclass(slots=True)
class Output:
    replies: list[Reply] = field(default_factory=list)
    records: list[Record] = field(default_factory=list)


class Step:
    """The context of one call: settings, the call's time, and its outputs so far."""

    __slots__ = ("config", "now_ms", "out", "rng")

    def __init__(self, config: GroupConfig, now_ms: int, rng: random.Random) -> None:
        self.config = config
        self.now_ms = now_ms
        self.rng = rng
        self.out = Output()

    def reply(self, ref: object, response: object) -> None:
        self.out.replies.append(Reply(ref, response))

    def record(self, record: Record) -> None:
        self.out.records.append(record)

    def new_member_id(self, prefix: str) -> str:
        """Kafka's form, ``<client id or instance id>-<uuid>``, from the injected generator."""
        return f"{prefix}-{uuid.UUID(int=self.rng.getrandbits(128), version=4)}"
