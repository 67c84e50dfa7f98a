"""The default state machine: keys and values in LMDB (py-lmdb), the applied offset beside them.

One LMDB environment per node (the node's ``<data-dir>/state/``) with two named databases:
``data`` (key -> value, in key order) and ``meta`` (``applied_offset`` as 8 bytes big-endian,
and the format name).

**Apply.** Every ``apply(batches)`` is one write transaction: the puts and deletes of all its
batches and the new applied offset. LMDB commits a transaction whole or not at all (copy-on-
write pages; the commit flips a meta page), so the stored applied offset always describes the
stored data: there is no moment, crash or not, where a batch is in without its offset or the
offset without its batch.

**Durability, and why the state machine can be behind but never ahead.** With ``sync=True``
(the default) a commit returns once LMDB has fsynced it. With ``sync=False`` it returns before:
a killed process loses nothing (the pages are in the OS page cache), a crash of the machine
may lose the last transactions -- each one whole, offset included, so what survives is the
state as of an earlier applied offset (LMDB keeps its integrity on a crash as long as
``writemap`` is off and the file system keeps write order, see ``mdb_env_open``'s MDB_NOSYNC).
Behind is harmless: the node applies only records that are durable in its own log (it waits
for the log's fsync first, :mod:`raftcore.node.applier`), so whatever applied offset survives,
the log still holds everything after it and the restarted node applies it again from there.
Ahead cannot happen: an offset is never stored without its data. ``metasync=False`` (one fsync
per commit instead of two) may undo the last transaction on a machine crash, with the same
argument.

**Snapshots** read one read transaction: one consistent view, with its applied offset, while
applies go on in their own write transactions (LMDB readers never block the writer). They are
written in key order, so ``restore`` loads them with MDB_APPEND (no tree search per key).

**Checksums.** Every stored value is sealed with the CRC-32C of its key and value
(:mod:`raftcore.statemachine.checksums`), checked whenever it is read and whenever it is
written into a snapshot. A value that fails it is never served nor copied: the state machine
is marked ``damaged`` (one ERROR line naming the key), every later read and snapshot raises
:class:`~raftcore.statemachine.checksums.DamagedValueError`, and ``on_damaged`` is told, once,
so that the node rebuilds it (``restore``, then the log; :mod:`raftcore.node.rebuild`). A
store of the format before checksums (``raftcore-kv-1``) is upgraded in place when opened:
every value is sealed in one write transaction, once.

**Conditions.** A record with a ``raftcore.if-value`` or ``raftcore.if-absent`` header is
applied only if its key's value is the expected one, or the key does not exist
(:mod:`raftcore.statemachine.conditions`); the verdicts go to ``outcomes`` for the writers
waiting for them. A batch without conditions is applied as before, with no work added.

**Keys** are 1 to 511 bytes (LMDB's limit); records with another key are skipped with a
warning by every replica alike (:mod:`raftcore.statemachine.kv_batches`).

**Map size.** LMDB maps the file at a fixed size: ``map_size`` (default 16 GiB of address
space; the file grows only as data is written). A full map fails the apply with
:class:`StateMachineFullError` and nothing of it is kept; reopen with a larger ``map_size``.
"""

from __future__ import annotations

import itertools
import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, cast

import lmdb

from raftcore.statemachine.api import (
    SnapshotReader,
    SnapshotWriter,
    StateMachineError,
    StateMachineFullError,
)
from raftcore.statemachine.checksums import (
    DamagedValueError,
    open_chunk,
    open_value,
    seal_pairs,
    seal_value,
    upgrade_values,
)
from raftcore.statemachine.conditions import Outcomes, conditions_of, refuse_damaged
from raftcore.statemachine.kv_batches import decode_batches

if TYPE_CHECKING:
    from raftcore.raft.listener import CommittedBatch
    from raftcore.records import KvPairs

__all__ = ["DEFAULT_MAP_SIZE", "LmdbStateMachine"]

_Stored = tuple[bytes, bytes]  # a key and its value (never a delete: it is stored)

logger = logging.getLogger(__name__)

DEFAULT_MAP_SIZE = 16 << 30
SNAPSHOT_CHUNK_PAIRS = 4096
FORMAT = b"raftcore-kv-2"  # sealed values (checksums.py)
UNSEALED_FORMAT = b"raftcore-kv-1"  # the same without checksums: upgraded in place
_APPLIED = b"applied_offset"
_FORMAT = b"format"


class LmdbStateMachine:
    """Key/value state in an LMDB environment at ``path`` (created if missing). See the module
    docstring for what ``sync``, ``metasync``, ``writemap`` and ``map_size`` trade."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        map_size: int = DEFAULT_MAP_SIZE,
        sync: bool = True,
        metasync: bool = True,
        writemap: bool = False,
        log_prefix: str = "",
    ) -> None:
        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True)
        self.prefix = log_prefix
        self.map_size = map_size
        self.sync = sync
        self.env = lmdb.open(
            str(self.path),
            map_size=map_size,
            max_dbs=2,
            sync=sync,
            metasync=metasync,
            writemap=writemap,
            readahead=False,
            meminit=False,
        )
        try:
            self._data = self.env.open_db(b"data")
            self._meta = self.env.open_db(b"meta")
            with self.env.begin(write=True) as txn:
                stored = txn.get(_FORMAT, db=self._meta)
                if stored is None:
                    txn.put(_FORMAT, FORMAT, db=self._meta)
                elif stored == UNSEALED_FORMAT:
                    sealed = upgrade_values(txn, self._data)
                    txn.put(_FORMAT, FORMAT, db=self._meta)
                    logger.info(
                        "%s %s: sealed the %d values of a store without checksums (%s -> %s)",
                        log_prefix,
                        self.path,
                        sealed,
                        UNSEALED_FORMAT.decode(),
                        FORMAT.decode(),
                    )
                elif stored != FORMAT:
                    raise StateMachineError(
                        f"{self.path} holds state of format {stored!r}, not {FORMAT!r}"
                    )
                self._applied = self._read_applied(txn)
        except BaseException:
            self.env.close()
            raise
        self.skipped_records = 0
        # The first damaged value found (checksums.py): no read or snapshot until a restore.
        self.damaged: DamagedValueError | None = None
        # Restores so far: a reader notes it in its read transaction, and damage it reports
        # after a later restore was found in a state since replaced (a stale report: the
        # rebuild under way already covers it), so it starts no second rebuild.
        self._restores = 0
        self._damage_lock = threading.Lock()  # readers on several threads report at once
        # Told once per damage, on the thread that found it (the node rebuilds the state).
        self.on_damaged: Callable[[DamagedValueError], None] | None = None
        # The verdicts of conditional writes, for the writers waiting (conditions.py).
        self.outcomes = Outcomes()

    def _read_applied(self, txn: lmdb.Transaction) -> int:
        raw = txn.get(_APPLIED, db=self._meta)
        if raw is None:
            return 0
        if len(raw) != 8:
            raise StateMachineError(
                f"{self.path}: the stored applied offset has {len(raw)} bytes, not 8"
            )
        return int.from_bytes(raw, "big")

    # ---- the state-machine contract ----------------------------------------------------------

    @property
    def applied_offset(self) -> int:
        return self._applied

    def apply(self, batches: list[CommittedBatch]) -> None:
        """Apply ``batches`` and their applied offset in one write transaction."""
        if not batches:
            return
        # values sealed by the batch decoder itself: one CRC per value, no extra copy
        decoded, end, skipped = decode_batches(
            batches, self._applied, prefix=self.prefix, seal=True
        )
        data = self._data
        decided: list[tuple[int, bool]] = []
        try:
            with self.env.begin(write=True) as txn:
                cursor = txn.cursor(data)
                for kv in decoded:
                    if kv.conditions is not None:  # None for a batch of plain records
                        self._apply_conditional(txn, kv, decided)
                        continue
                    if not kv.deletes:  # every value is bytes
                        cursor.putmulti(cast("list[tuple[bytes, bytes]]", kv.pairs))
                        continue
                    for key, value in kv.pairs:
                        if value is None:
                            txn.delete(key, db=data)
                        else:
                            cursor.put(key, value)
                txn.put(_APPLIED, end.to_bytes(8, "big"), db=self._meta)
        except lmdb.MapFullError:
            raise StateMachineFullError(
                f"{self.prefix} LMDB map of {self.map_size} bytes at {self.path} is full: "
                f"batches {batches[0].base_offset}..{batches[-1].last_offset} were not applied "
                f"(applied offset stays {self._applied}); reopen with a larger map_size"
            ) from None
        self._applied = end
        self.skipped_records += skipped
        if decided:
            self.outcomes.record(decided)

    def _apply_conditional(
        self, txn: lmdb.Transaction, kv: KvPairs, decided: list[tuple[int, bool]]
    ) -> None:
        """A batch with conditions, pair by pair: a conditional pair only if its condition
        holds in ``txn`` (which sees the writes before it, this batch's too), its verdict
        appended to ``decided``."""
        conditions = conditions_of(kv)
        data = self._data
        for index, (key, value) in enumerate(kv.pairs):  # values sealed by the decoder
            condition = conditions.get(index)
            if condition is not None:
                if condition.problem is not None:
                    refuse_damaged(self.prefix, key, condition)
                    holds = False
                else:
                    try:
                        holds = self._holds(txn, key, condition.expected)
                    except DamagedValueError as exc:
                        # undecidable here: the rebuild (restore, then the log) decides it
                        # again from intact values, as every other replica does
                        self.mark_damaged(exc)
                        continue
                decided.append((condition.offset, holds))
                if not holds:
                    continue  # left out, on every replica alike
            if value is None:
                txn.delete(key, db=data)
            else:
                txn.put(key, value, db=data)

    def _holds(self, txn: lmdb.Transaction, key: bytes, expected: bytes | None) -> bool:
        """Whether ``key``'s value in ``txn`` is ``expected`` (None: the key does not exist).
        Equal sealed bytes are an intact, equal value; on a mismatch the stored value is
        checked, so that a damaged one raises DamagedValueError instead of a verdict."""
        stored = txn.get(key, db=self._data)
        if expected is None or stored is None:
            return expected is None and stored is None
        if stored == seal_value(key, expected):
            return True
        open_value(key, bytes(stored), str(self.path))
        return False

    def snapshot(self, writer: SnapshotWriter) -> int:
        """Write every pair, in key order, from one read transaction (applies go on). Each
        value is checked first: a damaged one raises DamagedValueError and the snapshot is
        given up (never written with it)."""
        self._refuse_if_damaged()
        with self.env.begin(db=self._data) as txn:
            generation = self._restores
            end = self._read_applied(txn)
            writer.start(end)
            it = txn.cursor().iternext()
            where = f"{self.path} (snapshot at offset {end})"
            while chunk := list(itertools.islice(it, SNAPSHOT_CHUNK_PAIRS)):
                writer.append(self._open_chunk(chunk, where, generation))
        return end

    def restore(self, reader: SnapshotReader) -> None:
        """Replace the whole state by the snapshot's, and the applied offset by its end
        offset, in one write transaction. Pairs in increasing key order (as ``snapshot``
        writes them) go in with MDB_APPEND; from the first chunk that is not, plain puts."""
        end = reader.end_offset
        try:
            with self.env.begin(write=True) as txn:
                txn.drop(self._data, delete=False)
                cursor = txn.cursor(self._data)
                append = True
                for chunk in reader:
                    plain = list(chunk)
                    if any(value is None for _, value in plain):
                        raise StateMachineError(
                            f"{self.prefix} snapshot {end} holds a null value: a snapshot "
                            "lists the keys that exist"
                        )
                    pairs = cast("list[tuple[bytes, bytes]]", seal_pairs(plain))
                    if append:
                        _, added = cursor.putmulti(pairs, append=True)
                        if added == len(pairs):
                            continue
                        append = False  # out of order or repeated: LMDB dropped some
                    cursor.putmulti(pairs)
                txn.put(_APPLIED, end.to_bytes(8, "big"), db=self._meta)
        except lmdb.MapFullError:
            raise StateMachineFullError(
                f"{self.prefix} LMDB map of {self.map_size} bytes at {self.path} is full: "
                f"snapshot {end} was not restored; reopen with a larger map_size"
            ) from None
        except lmdb.BadValsizeError as exc:
            raise StateMachineError(
                f"{self.prefix} snapshot {end} holds a key LMDB cannot store: {exc}"
            ) from None
        self._applied = end
        with self._damage_lock:
            self._restores += 1
            self.damaged = None  # the whole state is the snapshot's now
        logger.info("%s restored snapshot %d into %s", self.prefix, end, self.path)

    # ---- reads ---------------------------------------------------------------------------------

    def get(self, key: bytes, default: bytes | None = None) -> bytes | None:
        """This replica's value of ``key`` (a local read: as of this replica's applied
        offset), checked: DamagedValueError if it, or any value read before, is damaged."""
        self._refuse_if_damaged()
        with self.env.begin(db=self._data) as txn:
            generation = self._restores
            stored = txn.get(key)
        if stored is None:
            return default
        try:
            return open_value(key, stored, str(self.path))
        except DamagedValueError as exc:
            self.mark_damaged(exc, generation)
            raise

    def items(self) -> list[tuple[bytes, bytes]]:
        """Every pair in key order, from one read transaction (for tests and small states),
        checked as ``get`` is."""
        self._refuse_if_damaged()
        with self.env.begin(db=self._data) as txn:
            generation = self._restores
            stored = list(txn.cursor().iternext())
        return self._open_chunk(stored, str(self.path), generation)

    # ---- damage (checksums.py) -----------------------------------------------------------------

    def _refuse_if_damaged(self) -> None:
        damaged = self.damaged
        if damaged is not None:
            raise DamagedValueError(
                f"{self.prefix} the state machine at {self.path} is damaged and being rebuilt "
                f"(a value of key {damaged.key!r:.80} failed its checksum)".lstrip(),
                damaged.key,
            )

    def _open_chunk(
        self, pairs: list[tuple[bytes, bytes]], where: str, generation: int
    ) -> list[_Stored]:
        """The values of sealed ``pairs`` read in a transaction begun after ``generation``
        restores; a damaged one marks the state machine damaged (see ``mark_damaged``) and
        raises DamagedValueError."""
        try:
            return open_chunk(pairs, where)
        except DamagedValueError as exc:
            self.mark_damaged(exc, generation)
            raise

    def mark_damaged(self, exc: DamagedValueError, generation: int | None = None) -> None:
        """Mark the state machine damaged (reads and snapshots refuse) until a restore, and
        tell ``on_damaged`` once. ``generation``: the restores counted when the damaged value
        was read (None: now, as the applier's own transaction is); damage read before a later
        restore is in a state since replaced, and is not reported again."""
        with self._damage_lock:
            if self.damaged is not None:
                return
            if generation is not None and generation != self._restores:
                logger.debug("%s damage read before the latest restore: %s", self.prefix, exc)
                return
            self.damaged = exc
        if self.on_damaged is not None:
            self.on_damaged(exc)  # its owner says what it does (one line)
            return
        logger.error(
            "%s state machine damaged: %s; no value is read from it or copied into a snapshot "
            "until it is restored",
            self.prefix,
            exc,
        )

    def range(
        self, start: bytes = b"", end: bytes | None = None, *, limit: int | None = None
    ) -> list[tuple[bytes, bytes]]:
        """The pairs with ``start <= key < end`` (no ``end``: to the last key) in key order, at
        most ``limit`` of them, from one read transaction (a local read), checked as ``get``
        is."""
        self._refuse_if_damaged()
        out: list[tuple[bytes, bytes]] = []
        if limit is not None and limit <= 0:
            return out
        with self.env.begin(db=self._data) as txn:
            generation = self._restores
            cursor = txn.cursor()
            if not (cursor.set_range(start) if start else cursor.first()):
                return out
            for key, value in cursor.iternext():
                if end is not None and key >= end:
                    break
                out.append((key, value))
                if limit is not None and len(out) >= limit:
                    break
        return self._open_chunk(out, str(self.path), generation)

    def __len__(self) -> int:
        with self.env.begin() as txn:
            return int(txn.stat(self._data)["entries"])

    # ---- lifecycle -----------------------------------------------------------------------------

    def close(self) -> None:
        """Flush (when commits do not) and close the environment."""
        if not self.sync:
            self.env.sync(True)
        self.env.close()

    def __enter__(self) -> LmdbStateMachine:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"LmdbStateMachine({str(self.path)!r}, applied_offset={self._applied})"
