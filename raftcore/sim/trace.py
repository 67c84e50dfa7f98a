"""How the simulation's trace names a message: its type and the fields that tell the story."""

from __future__ import annotations

from typing import Any

_FIELDS = (
    "candidate_epoch",
    "leader_epoch",
    "current_leader_epoch",
    "fetch_offset",
    "last_fetched_epoch",
    "pre_vote",
    "vote_granted",
    "error_code",
    "high_watermark",
    "diverging_epoch",
    "snapshot_id",
    "position",
)


def short_message(message: Any) -> str:
    name = type(message).__name__
    fields = []
    for attr in _FIELDS:
        value = getattr(message, attr, None)
        if value is not None and value is not False:
            fields.append(f"{attr}={value}")
    leader = getattr(message, "current_leader", None)
    if leader is not None:
        fields.append(f"leader={leader.leader_id}@{leader.epoch}")
    records = getattr(message, "records", None) or getattr(message, "data", None)
    if records:
        fields.append(f"bytes={len(records)}")
    return f"{name}({', '.join(fields)})"
