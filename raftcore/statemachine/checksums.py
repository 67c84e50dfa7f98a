"""Checksummed values of the LMDB state machine: every value LMDB holds is *sealed*, the
CRC-32C of its key and value (4 bytes, big-endian) followed by the value, so a value damaged
on disk (a flipped bit, a torn page LMDB did not notice) is found when it is read and is
never served, nor copied into a snapshot, from where it would spread to other replicas.

The work is native (:mod:`raftcore._native.crc32c`) and takes whole lists: an apply seals
each batch's pairs in one call, a snapshot checks each chunk of pairs in one call.

- :func:`seal_pairs`: a batch's pairs as LMDB stores them (deletes stay None);
- :func:`open_value` / :func:`open_chunk`: the values back, checked; a damaged one raises
  :class:`DamagedValueError` naming the key;
- :func:`upgrade_values`: seal, in place, the values of a store written before values
  carried checksums (format ``raftcore-kv-1``), in the caller's write transaction.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from raftcore._native.crc32c import open_pairs, seal_pairs, seal_value
from raftcore._native.crc32c import open_value as _open_value
from raftcore.statemachine.api import StateMachineError

if TYPE_CHECKING:
    import lmdb

__all__ = [
    "SEAL_BYTES",
    "DamagedValueError",
    "describe_key",
    "open_chunk",
    "open_value",
    "seal_pairs",
    "seal_value",
    "upgrade_values",
]

SEAL_BYTES = 4
UPGRADE_CHUNK = 4096


class DamagedValueError(StateMachineError):
    """A stored value whose checksum does not match its key and value: the state machine is
    damaged and is not read from until it is rebuilt. ``key`` is the damaged value's key."""

    def __init__(self, message: str, key: bytes) -> None:
        super().__init__(message)
        self.key = key


def describe_key(key: bytes) -> str:
    """A key for a log line: its repr, cut at 64 bytes, and its length."""
    shown = repr(key[:64]) + ("..." if len(key) > 64 else "")
    return f"{shown} ({len(key)} bytes)"


def _damaged(where: str, key: bytes) -> DamagedValueError:
    return DamagedValueError(
        f"{where}: the value of key {describe_key(key)} fails its checksum (damaged on disk)",
        key,
    )


def open_value(key: bytes, stored: bytes, where: str) -> bytes:
    """The value ``stored`` seals; DamagedValueError if its checksum fails."""
    value = _open_value(key, stored)
    if value is None:
        raise _damaged(where, key)
    return value


def open_chunk(pairs: list[tuple[bytes, bytes]], where: str) -> list[tuple[bytes, bytes]]:
    """The values of a chunk of sealed pairs (one native call); DamagedValueError naming the
    first damaged key."""
    opened, damaged = open_pairs(pairs)
    if damaged >= 0:
        raise _damaged(where, pairs[damaged][0])
    return opened


def upgrade_values(txn: lmdb.Transaction, data: lmdb._Database) -> int:
    """Seal every value of ``data`` in place, in the write transaction ``txn`` (a store
    written before values carried checksums). Returns how many values were sealed. The
    values are taken as they are: one damaged before the upgrade cannot be told from an
    intact one."""
    reader = txn.cursor(data)
    writer = txn.cursor(data)
    count = 0
    after: bytes | None = None
    while True:
        # re-seek by key for each chunk: the puts move the pages under a walking cursor
        if not (reader.first() if after is None else reader.set_range(after)):
            break
        chunk: list[tuple[bytes, bytes | None]] = []
        for key, value in reader.iternext():
            if key == after:
                continue
            chunk.append((bytes(key), bytes(value)))
            if len(chunk) >= UPGRADE_CHUNK:
                break
        if not chunk:
            break
        writer.putmulti(seal_pairs(chunk))  # type: ignore[arg-type]
        count += len(chunk)
        after = chunk[-1][0]
    return count
