"""The exceptions raftcore raises. Every message names the offset, position, file or peer
involved."""


class RaftcoreError(Exception):
    """Base class of raftcore's errors."""


class CommandLineError(RaftcoreError):
    """A command's arguments do not fit together (found after parsing): one line, exit 2.

    Also raised by the client configuration (:mod:`raftcore.security.client_config`) for a
    bad setting, which the commands report the same way."""


class CorruptRecordError(RaftcoreError, ValueError):
    """Bytes that are not a valid Kafka record batch v2: truncated, a bad length, a bad CRC.

    ``position`` is the byte position in the buffer (or file) where the problem was found, when
    known.
    """

    def __init__(self, message: str, position: int | None = None) -> None:
        super().__init__(message)
        self.position = position


class UnsupportedCompressionError(RaftcoreError, ValueError):
    """Not raised any more: raftcore reads all five of Kafka's codecs. Kept so that code
    that catches it still imports."""


class LogError(RaftcoreError):
    """Base class of the segmented log's errors."""


class OffsetOutOfRangeError(LogError, IndexError):
    """An offset below the log start offset or above the log end offset."""


class InvalidAppendError(LogError, ValueError):
    """An append that would break the log's order: a gap or overlap of offsets, a decreasing
    leader epoch."""


class CorruptLogError(LogError):
    """The log directory holds something recovery cannot repair."""


class CorruptCheckpointError(CorruptLogError):
    """A checkpoint file (leader epochs, log start offset, recovery point) is unreadable."""


class CorruptProducerStateError(CorruptLogError):
    """A producer-state file (``<offset>.snapshot``) that is not whole and sound."""


class RecordTooLargeError(InvalidAppendError):
    """A batch larger than the log's ``max_message_bytes``."""


class LogClosedError(LogError):
    """An operation on a log that was closed."""


class SnapshotError(LogError):
    """Base class of the snapshot store's errors (``raftcore.snapshot``)."""


class CorruptSnapshotError(SnapshotError, CorruptLogError):
    """A snapshot file (or the ``.part`` file of one being written or received) that is not a
    whole, sound snapshot: torn, a failing CRC, no header first or footer last, bytes after the
    footer, the wrong size. ``path`` names the file and ``position`` the byte position in it
    where the problem was found, when known."""

    def __init__(self, message: str, path: str | None = None, position: int | None = None) -> None:
        super().__init__(message)
        self.path = path
        self.position = position


class SnapshotNotFoundError(SnapshotError, LookupError):
    """No frozen snapshot with that id is in the store."""


class SnapshotExistsError(SnapshotError):
    """A snapshot with that id is already frozen in the store."""


class SnapshotPositionError(SnapshotError, IndexError):
    """A byte position outside a snapshot (a FetchSnapshot position at or past its size), or a
    received chunk that does not start where the bytes received so far end."""


class RaftInvariantError(RaftcoreError):
    """A message that only a bug could produce (two leaders in an epoch, a high watermark
    moving back, an INVALID_REQUEST answer). The replica must stop, not guess. (A truncation
    below the committed offset is TruncationRefusedError: lost disks can ask it.)"""


class TruncationRefusedError(RaftcoreError):
    """A leader asked this replica to remove records below the offset it knows committed (a
    DivergingEpoch, or a snapshot its log does not lead to). A leader holds every committed
    record, so only a leader elected without them can ask: a majority of the voters lost
    their disks and came back empty. The log is left as it is, for the operator; the replica
    must stop (docs/operations.md, "A replica refuses to truncate committed records")."""

    def __init__(self, leader: int, epoch: int, offset: int, committed: int, what: str) -> None:
        super().__init__(
            f"asked by leader {leader} in epoch {epoch} to {what} to offset {offset}, below "
            f"the committed offset {committed}: a majority of the voters may have lost their "
            f"disks; this replica keeps its log untouched and stops (see 'A replica refuses "
            f"to truncate committed records' in docs/operations.md)"
        )
        self.leader = leader
        self.epoch = epoch
        self.offset = offset
        self.committed = committed


class LostQuorumStateError(RaftcoreError):
    """The quorum-state is missing or unreadable while the log holds records: this replica may
    have voted in an epoch it no longer remembers, so it must not come back as the voter it
    was. The driver gives it a new directory id (KIP-853: a new replica, which the voter set can
    take in by a remove and an add) and starts it again, or refuses to start when the voter set
    is static (kraft.version 0), which cannot tell the two apart."""

    def __init__(self, message: str, *, static: bool) -> None:
        super().__init__(message)
        self.static = static


class NodeFailedError(RaftcoreError):
    """A node stopped itself after a failure it cannot go on from: its log or quorum-state
    could not be written (a full disk, EIO), an fsync failed, a record it must parse to go on
    did not, the state machine failed, or an invariant broke (a damaged batch is no such
    failure: it is repaired from the leader, raftcore.raft.damage). The message is the one
    line the node logged at CRITICAL; ``__cause__`` is the error itself."""
