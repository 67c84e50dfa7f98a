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
from pathlib import Path
from typing import TYPE_CHECKING, cast

import lmdb

from raftcore.statemachine.api import (
    SnapshotReader,
    SnapshotWriter,
    StateMachineError,
    StateMachineFullError,
)
from raftcore.statemachine.kv_batches import decode_batches

if TYPE_CHECKING:
    from raftcore.raft.listener import CommittedBatch

__all__ = ["DEFAULT_MAP_SIZE", "LmdbStateMachine"]

logger = logging.getLogger(__name__)

DEFAULT_MAP_SIZE = 16 << 30
SNAPSHOT_CHUNK_PAIRS = 4096
FORMAT = b"raftcore-kv-1"
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
                elif stored != FORMAT:
                    raise StateMachineError(
                        f"{self.path} holds state of format {stored!r}, not {FORMAT!r}"
                    )
                self._applied = self._read_applied(txn)
        except BaseException:
            self.env.close()
            raise
        self.skipped_records = 0

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
        decoded, end, skipped = decode_batches(batches, self._applied, prefix=self.prefix)
        data = self._data
        try:
            with self.env.begin(write=True) as txn:
                cursor = txn.cursor(data)
                for kv in decoded:
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

    def snapshot(self, writer: SnapshotWriter) -> int:
        """Write every pair, in key order, from one read transaction (applies go on)."""
        with self.env.begin(db=self._data) as txn:
            end = self._read_applied(txn)
            writer.start(end)
            it = txn.cursor().iternext()
            while chunk := list(itertools.islice(it, SNAPSHOT_CHUNK_PAIRS)):
                writer.append(chunk)
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
                    pairs = cast("list[tuple[bytes, bytes]]", list(chunk))
                    if any(value is None for _, value in pairs):
                        raise StateMachineError(
                            f"{self.prefix} snapshot {end} holds a null value: a snapshot "
                            "lists the keys that exist"
                        )
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
        logger.info("%s restored snapshot %d into %s", self.prefix, end, self.path)

    # ---- reads ---------------------------------------------------------------------------------

    def get(self, key: bytes, default: bytes | None = None) -> bytes | None:
        """This replica's value of ``key`` (a local read: as of this replica's applied
        offset)."""
        with self.env.begin(db=self._data) as txn:
            return txn.get(key, default)

    def items(self) -> list[tuple[bytes, bytes]]:
        """Every pair in key order, from one read transaction (for tests and small states)."""
        with self.env.begin(db=self._data) as txn:
            return list(txn.cursor().iternext())

    def range(
        self, start: bytes = b"", end: bytes | None = None, *, limit: int | None = None
    ) -> list[tuple[bytes, bytes]]:
        """The pairs with ``start <= key < end`` (no ``end``: to the last key) in key order, at
        most ``limit`` of them, from one read transaction (a local read)."""
        out: list[tuple[bytes, bytes]] = []
        if limit is not None and limit <= 0:
            return out
        with self.env.begin(db=self._data) as txn:
            cursor = txn.cursor()
            if not (cursor.set_range(start) if start else cursor.first()):
                return out
            for key, value in cursor.iternext():
                if end is not None and key >= end:
                    break
                out.append((key, value))
                if limit is not None and len(out) >= limit:
                    break
        return out

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
