"""What the writers did: one ``Attempt`` per value they tried to write, with its outcome.

Values are unique and name their writer and sequence number (``ck1:00000042``), so a value
found in a log says who sent it and when in that writer's order. Outcomes, as Jepsen records
them: ``ok`` (acknowledged, with the offset the cluster gave), ``fail`` (certainly not written:
refused before it left the client), ``info`` (indeterminate: a timeout, a lost connection, an
error after the request may have reached a leader; it may or may not be in the log, once at
most).
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

__all__ = ["Attempt", "History", "parse_value", "value_of"]


def value_of(writer: str, seq: int) -> bytes:
    return f"{writer}:{seq:08d}".encode()


def parse_value(value: bytes | None) -> tuple[str, int] | None:
    """(writer, seq) of a harness value, None for anything else."""
    if value is None:
        return None
    try:
        writer, _, seq = value.decode().partition(":")
        return (writer, int(seq)) if writer and seq.isdigit() else None
    except (UnicodeDecodeError, ValueError):
        return None


@dataclass
class Attempt:
    writer: str
    seq: int
    value: bytes
    session: int  # a writer opens a new client session after a fatal error
    t_invoke: float
    outcome: str = "pending"  # ok | fail | info | pending
    offset: int = -1
    error: str = ""
    t_complete: float = -1.0


class History:
    """Thread-safe; the writers append, the checker reads after they stopped."""

    def __init__(self, t0: float) -> None:
        self.t0 = t0
        self.attempts: list[Attempt] = []
        self._by_value: dict[bytes, Attempt] = {}
        self._lock = threading.Lock()
        self.notes: list[str] = []  # client-side events worth reporting (fatal errors, ...)

    def now(self) -> float:
        return time.monotonic() - self.t0

    def invoke(self, writer: str, seq: int, session: int) -> Attempt:
        a = Attempt(writer, seq, value_of(writer, seq), session, self.now())
        with self._lock:
            self.attempts.append(a)
            self._by_value[a.value] = a
        return a

    def complete(self, a: Attempt, outcome: str, offset: int = -1, error: str = "") -> None:
        with self._lock:
            if a.outcome != "pending":  # the first verdict stands
                return
            a.outcome = outcome
            a.offset = offset
            a.error = error
            a.t_complete = self.now()

    def note(self, text: str) -> None:
        with self._lock:
            self.notes.append(f"[{self.now():7.2f} s] {text}")

    def by_value(self, value: bytes) -> Attempt | None:
        return self._by_value.get(value)

    def resolve_pending(self, reason: str) -> int:
        """Anything still without a verdict is indeterminate (the writer gave up waiting)."""
        n = 0
        with self._lock:
            for a in self.attempts:
                if a.outcome == "pending":
                    a.outcome, a.error, a.t_complete = "info", reason, self.now()
                    n += 1
        return n

    def save(self, path: Path) -> None:
        with open(path, "w") as f:
            for a in self.attempts:
                d = asdict(a)
                d["value"] = a.value.decode()
                f.write(json.dumps(d) + "\n")
