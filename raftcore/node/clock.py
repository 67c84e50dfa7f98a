"""The node's clock for its Raft core: monotonic milliseconds. The core never reads a clock; the
node hands it this time at every step (and the modules that ask the core something at a time,
the same)."""

from __future__ import annotations

import time

__all__ = ["now_ms"]


def now_ms() -> int:
    return int(time.monotonic() * 1000)
