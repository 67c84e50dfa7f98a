"""The group coordinator's settings, with Kafka's broker option names and defaults."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["GroupConfig"]

_INT32_MAX = 2**31 - 1


@dataclass(frozen=True, slots=True)
class GroupConfig:
    # group.initial.rebalance.delay.ms: an empty group's first rebalance waits this long (and
    # this long again after each new member, up to the rebalance timeout) so that the members
    # of a starting application join one generation instead of one each.
    group_initial_rebalance_delay_ms: int = 3000
    # group.min.session.timeout.ms / group.max.session.timeout.ms: a JoinGroup asking for a
    # session timeout outside these is answered INVALID_SESSION_TIMEOUT.
    group_min_session_timeout_ms: int = 6000
    group_max_session_timeout_ms: int = 1_800_000
    # group.max.size: members (and KIP-394 pending member ids) a group may hold.
    group_max_size: int = _INT32_MAX
    # offset.metadata.max.bytes: the metadata string of one committed offset.
    offset_metadata_max_bytes: int = 4096
    # Not a Kafka option. True (Kafka's behaviour, the default): a member of the current
    # generation may commit an offset below the committed one (a consumer that seeks back and
    # commits; unmodified clients do). False: committed offsets move back only by an operator's
    # reset, and such a commit is refused with OFFSET_OUT_OF_RANGE.
    allow_backward_commits: bool = True

    def __post_init__(self) -> None:
        if self.group_initial_rebalance_delay_ms < 0:
            raise ValueError(
                f"group.initial.rebalance.delay.ms={self.group_initial_rebalance_delay_ms}: "
                "must be >= 0"
            )
        if not 0 < self.group_min_session_timeout_ms <= self.group_max_session_timeout_ms:
            raise ValueError(
                f"group.min.session.timeout.ms={self.group_min_session_timeout_ms} and "
                f"group.max.session.timeout.ms={self.group_max_session_timeout_ms}: "
                "need 0 < min <= max"
            )
        if self.group_max_size < 1:
            raise ValueError(f"group.max.size={self.group_max_size}: must be >= 1")
