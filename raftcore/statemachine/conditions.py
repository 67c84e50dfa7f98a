"""Conditional writes of the key/value state machines (compare-and-set): a record carrying a
condition header is applied only if the condition holds on the state the records before it
built, and is otherwise left out -- on every replica alike, since each decides from the same
log with the same rule.

- ``raftcore.if-value`` (the expected value): applied only if the key's value is that value;
- ``raftcore.if-absent`` (a null or empty value): applied only if the key does not exist.

The condition is compared with the value itself (no version is stored beside values, so the
stored format and the snapshots are those of plain writes). A record with a damaged condition
(two of them, an unknown ``raftcore.if-*`` name, a null expected value, a value after
``if-absent``) is refused -- the write is left out, as for a condition that does not hold --
never an error of the apply: a remote producer's bad header must not stop a replica.

The native decoder reports the ``raftcore.if-*`` headers it walks past
(:attr:`raftcore.records.KvPairs.conditions`), so a batch of plain records costs nothing here.

:class:`Outcomes` keeps the verdicts for the readers on this replica: a writer says, before it
writes, from which offset it wants them (:meth:`Outcomes.waiting`), and reads its own once its
record is applied here; a watch reads each conditional record's before it reports the record
as a change (a refused write changed nothing). Beyond the last few thousand, verdicts nobody
waits for are dropped.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from raftcore.statemachine.checksums import describe_key

if TYPE_CHECKING:
    from raftcore.records import KvPairs

__all__ = [
    "IF_ABSENT",
    "IF_VALUE",
    "Condition",
    "Outcomes",
    "Waiting",
    "condition_headers",
    "conditions_of",
    "is_conditional",
    "refuse_damaged",
]

logger = logging.getLogger(__name__)

IF_VALUE = "raftcore.if-value"
IF_ABSENT = "raftcore.if-absent"
PREFIX = "raftcore.if-"  # the batch decoder's CONDITION_PREFIX (_native/kv_records.pyx)
RECENT = 4096  # verdicts kept whatever the readers


@dataclass(frozen=True, slots=True)
class Condition:
    """The condition of one record: ``expected`` None means the key must not exist;
    ``problem`` says why a damaged condition is refused (None: a sound one)."""

    offset: int
    expected: bytes | None
    problem: str | None = None


def condition_headers(expected: bytes | None) -> list[tuple[str, bytes | None]]:
    """The headers of a write applied only if its key's value is ``expected`` (None: only if
    the key does not exist)."""
    if expected is None:
        return [(IF_ABSENT, None)]
    return [(IF_VALUE, expected)]


def conditions_of(kv: KvPairs) -> dict[int, Condition]:
    """The conditions of a decoded batch, by index into ``kv.pairs`` (empty when it has
    none). Each is decided by the bytes of its headers alone, the same on every replica."""
    found = kv.conditions
    if found is None:
        return {}
    headers: dict[int, list[tuple[int, str, bytes | None]]] = {}
    for index, offset, name, value in found:
        headers.setdefault(index, []).append((offset, name, value))
    return {index: _condition(items) for index, items in headers.items()}


def _condition(items: list[tuple[int, str, bytes | None]]) -> Condition:
    offset, name, value = items[0]
    if len(items) > 1:
        return Condition(offset, None, f"{len(items)} condition headers (one is allowed)")
    if name == IF_VALUE:
        if value is None:
            return Condition(offset, None, f"{IF_VALUE} with a null value")
        return Condition(offset, value)
    if name == IF_ABSENT:
        if value:
            return Condition(offset, None, f"{IF_ABSENT} with a {len(value)}-byte value")
        return Condition(offset, None)
    return Condition(offset, None, f"an unknown condition {name!r:.80}")


def is_conditional(headers: Sequence[tuple[str, bytes | None]]) -> bool:
    """Whether a record with ``headers`` is a conditional write (its verdict decides whether
    it changed anything), as the batch decoder tells them apart."""
    return any(name.startswith(PREFIX) for name, _ in headers)


def refuse_damaged(prefix: str, key: bytes, condition: Condition) -> None:
    """One WARNING line for a record whose condition is damaged (it is refused)."""
    logger.warning(
        "%s refusing the write at offset %d to key %s: its condition is damaged (%s)",
        prefix,
        condition.offset,
        describe_key(key),
        condition.problem,
    )


class Waiting:
    """One reader of verdicts (a writer, a watch): the verdicts of offsets >= ``floor`` are
    kept while it waits; a watch moves its floor up as it goes."""

    __slots__ = ("floor",)

    def __init__(self, floor: int) -> None:
        self.floor = floor


class Outcomes:
    """The verdicts of conditional writes applied here, by offset: every one at or above the
    floor of a reader waiting (:meth:`waiting`), and the last :data:`RECENT` of them whatever
    the floors (a watch that starts after the writes it reads). ``record`` runs on the apply
    thread, the rest on the readers'; one lock, taken only for conditional records and
    readers, keeps them apart."""

    def __init__(self, recent: int = RECENT) -> None:
        self.recent = recent
        self._lock = threading.Lock()
        self._readers: set[Waiting] = set()
        self._by_offset: OrderedDict[int, bool] = OrderedDict()  # in the order decided

    @contextlib.contextmanager
    def waiting(self, floor: int) -> Iterator[Waiting]:
        """Keep the verdicts of offsets >= ``floor`` while inside (a writer's record is
        appended after it enters, so its offset is at least the applied offset then)."""
        reader = Waiting(floor)
        with self._lock:
            self._readers.add(reader)
        try:
            yield reader
        finally:
            with self._lock:
                self._readers.discard(reader)
                self._prune()

    def record(self, decided: list[tuple[int, bool]]) -> None:
        with self._lock:
            for offset, succeeded in decided:
                self._by_offset[offset] = succeeded
            self._prune()

    def _prune(self) -> None:
        """Drop the oldest verdicts beyond the last ``recent`` that no reader waits for."""
        lowest = min((r.floor for r in self._readers), default=None)
        verdicts = self._by_offset
        while len(verdicts) > self.recent:
            oldest = next(iter(verdicts))
            if lowest is not None and oldest >= lowest:
                break
            del verdicts[oldest]

    def get(self, offset: int) -> bool | None:
        """The verdict of the conditional write at ``offset`` (None: not known here -- not
        decided yet, or dropped, nobody waiting for it)."""
        with self._lock:
            return self._by_offset.get(offset)

    def __len__(self) -> int:
        return len(self._by_offset)
