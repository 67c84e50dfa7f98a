"""The quorum-state file (KIP-595): the epoch, and the leader or this node's vote.

A voter may never vote twice in an epoch, even across a restart, so the vote is written --
temp file, fsync, rename, directory fsync -- before the message that depends on it leaves.
The layout is Kafka's (FileQuorumStateStore), one JSON line. raftcore writes QuorumStateData
v1 (KIP-853), where a vote names the candidate's directory id and the voters live in the log:

    {"leaderId":-1,"leaderEpoch":2,"votedId":1,"votedDirectoryId":"J8aAPcfLQt2bqs1JT_rMgQ",
     "data_version":1}

and reads v0 too, which earlier releases wrote:

    {"clusterId":"","leaderId":1,"leaderEpoch":2,"votedId":-1,"appliedOffset":0,
     "currentVoters":[{"voterId":1},{"voterId":2},{"voterId":3}],"data_version":0}
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Protocol

from raftcore.checkpoint import write_atomically
from raftcore.errors import CorruptCheckpointError
from raftcore.raft.values import ElectionState
from raftcore.raft.voters import directory_id_text, parse_directory_id

__all__ = ["FileQuorumStateStore", "QuorumStateStore"]

FILE_NAME = "quorum-state"
DATA_VERSION = 1


class QuorumStateStore(Protocol):
    def read(self) -> ElectionState | None:
        """The last state written, or None if none was."""

    def write(self, state: ElectionState) -> None:
        """Make ``state`` durable before returning."""

    def clear(self) -> None: ...


def to_json(state: ElectionState, cluster_id: str = "") -> str:
    data: dict[str, object] = {
        "clusterId": cluster_id,
        "leaderId": -1 if state.leader_id is None else state.leader_id,
        "leaderEpoch": state.epoch,
        "votedId": -1 if state.voted_id is None else state.voted_id,
    }
    if state.voted_directory_id is not None:
        data["votedDirectoryId"] = directory_id_text(state.voted_directory_id)
    data["data_version"] = DATA_VERSION
    return json.dumps(data, separators=(",", ":"))


def from_json(text: str, where: str = "quorum-state") -> ElectionState:
    """Parse the first line of a quorum-state file; CorruptCheckpointError names what is
    wrong."""
    line = text.split("\n", 1)[0]
    try:
        data = json.loads(line)
    except json.JSONDecodeError as exc:
        raise CorruptCheckpointError(f"{where}: not JSON ({exc})") from None
    if not isinstance(data, dict):
        raise CorruptCheckpointError(f"{where}: expected a JSON object")
    version = data.get("data_version")
    if version not in (0, 1):
        raise CorruptCheckpointError(f"{where}: unsupported data_version {version!r}")
    try:
        epoch = int(data["leaderEpoch"])
        leader = int(data.get("leaderId", -1))
        voted = int(data.get("votedId", -1))
        voters = frozenset(int(v["voterId"]) for v in data.get("currentVoters") or [])
        voted_directory = data.get("votedDirectoryId")
        voted_directory_id = (
            None if voted_directory is None else parse_directory_id(voted_directory)
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise CorruptCheckpointError(f"{where}: bad field ({exc!r})") from None
    try:
        return ElectionState(
            epoch=epoch,
            leader_id=None if leader < 0 else leader,
            voted_id=None if voted < 0 else voted,
            voters=voters,
            voted_directory_id=voted_directory_id,
        )
    except ValueError as exc:
        raise CorruptCheckpointError(f"{where}: {exc}") from None


class FileQuorumStateStore:
    """``<directory>/quorum-state``, replaced atomically and durably on every write."""

    def __init__(self, directory: str | os.PathLike[str], cluster_id: str = "") -> None:
        self.path = Path(directory) / FILE_NAME
        self.cluster_id = cluster_id

    def read(self) -> ElectionState | None:
        try:
            text = self.path.read_text("utf-8")
        except FileNotFoundError:
            return None
        return from_json(text, str(self.path))

    def write(self, state: ElectionState) -> None:
        write_atomically(self.path, (to_json(state, self.cluster_id) + "\n").encode("utf-8"))

    def clear(self) -> None:
        self.path.unlink(missing_ok=True)
