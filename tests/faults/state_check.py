"""The checks of snapshot mode (``--snapshots N``), over what every node left on disk once
stopped: its LMDB state machine (``<data-dir>/state``) and its snapshot files (KIP-630, beside
the segments in ``<data-dir>/log``).

Records below a replica's log start offset are gone from its log; what they wrote lives on in
the state machine and the snapshots. Each record's key is its value (``writers``), so the state
holds one pair per committed value, and:

- every acknowledged value is in every replica's final state, with its value
  (``state-lost``); so is every value of the committed log above the log start
  (``state-missing-committed``);
- every replica ends with the same applied offset, at least the high watermark's last data
  record, and the same pairs (``state-divergent``);
- nothing in a state was never written, or certainly failed (``state-phantom``);
- every frozen snapshot file verifies whole (``corrupt-snapshot``), holds only pairs of the
  final state (nothing is ever deleted or overwritten) and every value acknowledged below its
  end offset (``snapshot-state``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import crc32c
import lmdb

from raftcore.errors import CorruptSnapshotError, SnapshotError
from raftcore.logtools import snapshot_files
from raftcore.node.data_dir import LOG_DIR, STATE_DIR
from raftcore.snapshot import SnapshotFileKind, SnapshotReader, verify_snapshot_file

from .history import History

if TYPE_CHECKING:
    from .checker import Verdict

__all__ = ["NodeState", "SnapshotFile", "check_states", "read_node_state"]

MAX_DETAILS = 8
# raftcore.statemachine.lmdb_kv's layout: named databases ``data`` (key -> value, each value
# sealed: CRC-32C of key and value, 4 bytes big-endian, then the value) and ``meta`` (the
# applied offset as 8 bytes big-endian under ``applied_offset``).
_DATA_DB = b"data"
_META_DB = b"meta"
_APPLIED = b"applied_offset"


@dataclass
class SnapshotFile:
    name: str
    end_offset: int
    kind: str  # frozen | part | deleted
    error: str | None = None  # why verification failed
    pairs: dict[bytes, bytes | None] = field(default_factory=dict)


@dataclass
class NodeState:
    node_id: int
    applied_offset: int
    pairs: dict[bytes, bytes]
    snapshots: list[SnapshotFile] = field(default_factory=list)
    error: str | None = None  # the state could not be read


def read_node_state(node_id: int, data_dir: Path) -> NodeState:
    """A stopped node's LMDB state (opened read-only, without LMDB's lock file) and its
    snapshot files, each frozen one verified whole and read."""
    snaps = []
    for f in snapshot_files(data_dir / LOG_DIR):
        snap = SnapshotFile(f.path.name, f.snapshot_id.end_offset, f.kind.value)
        snaps.append(snap)
        if f.kind is not SnapshotFileKind.FROZEN:
            continue
        try:
            summary = verify_snapshot_file(f.path, snapshot_id=f.snapshot_id)
            with SnapshotReader.open_file(f.path, f.snapshot_id, summary) as reader:
                snap.pairs = {bytes(r.key or b""): _bytes(r.value) for r in reader.records()}
        except (CorruptSnapshotError, SnapshotError, OSError) as exc:
            snap.error = str(exc)
    path = data_dir / STATE_DIR
    if not (path / "data.mdb").exists():
        return NodeState(node_id, -1, {}, snaps, f"no LMDB state at {path}")
    env = lmdb.open(str(path), readonly=True, lock=False, max_dbs=2)
    try:
        data = env.open_db(_DATA_DB, create=False)
        meta = env.open_db(_META_DB, create=False)
        with env.begin() as txn:
            raw = txn.get(_APPLIED, db=meta)
            applied = int.from_bytes(raw, "big") if raw is not None else 0
            sealed = [(bytes(k), bytes(v)) for k, v in txn.cursor(db=data).iternext()]
    finally:
        env.close()
    pairs: dict[bytes, bytes] = {}
    for key, stored in sealed:
        # opened here with the crc32c package, not raftcore's own code: a second reading
        if len(stored) < 4 or crc32c.crc32c(key + stored[4:]) != int.from_bytes(stored[:4], "big"):
            return NodeState(node_id, applied, {}, snaps, f"{path}: key {key!r} fails its checksum")
        pairs[key] = stored[4:]
    return NodeState(node_id, applied, pairs, snaps)


def _bytes(value: bytes | memoryview | None) -> bytes | None:
    return None if value is None else bytes(value)


def check_states(
    v: Verdict,
    history: History,
    states: dict[int, NodeState],
    committed: list[tuple[int, bytes | None]],
    applied_floor: int,
) -> None:
    """Add the snapshot-mode figures and violations to ``v``. ``committed`` is the committed
    log above the reference replica's log start; ``applied_floor`` the offset every state must
    have applied (the end of the last data batch below the high watermark)."""
    acked = [a for a in history.attempts if a.outcome == "ok"]
    lost = missing = phantom = 0
    for node_id, st in sorted(states.items()):
        if st.error:
            v.add("state-divergent", f"node {node_id}: {st.error}")
            continue
        for a in acked:
            got = st.pairs.get(a.value)
            if got != a.value:
                lost += 1
                if lost <= MAX_DETAILS:
                    v.add(
                        "state-lost",
                        f"node {node_id}: {a.value.decode()} acknowledged at offset {a.offset} "
                        f"is {'absent' if got is None else repr(got)} in its state "
                        f"(applied offset {st.applied_offset})",
                    )
        for o, val in committed:
            if val is not None and st.pairs.get(val) != val:
                missing += 1
                if missing <= MAX_DETAILS:
                    v.add(
                        "state-missing-committed",
                        f"node {node_id}: {val.decode(errors='replace')} committed at offset "
                        f"{o} is not in its state (applied offset {st.applied_offset})",
                    )
        for key, val in st.pairs.items():
            a = history.by_value(val)
            if key != val or a is None or a.outcome == "fail":
                phantom += 1
                if phantom <= MAX_DETAILS:
                    why = "failed" if a is not None and key == val else "was never written"
                    v.add("state-phantom", f"node {node_id}: {key!r} -> {val!r} {why}")
    v.figures.update(state_lost=lost, state_missing_committed=missing, state_phantom=phantom)

    # -- the replicas agree ----------------------------------------------------------------------
    readable = {i: st for i, st in states.items() if not st.error}
    divergent = 0
    if readable:
        ref_id = min(readable)
        ref = readable[ref_id]
        v.figures["state_pairs"] = len(ref.pairs)
        v.figures["state_indeterminate"] = sum(
            1 for val in ref.pairs.values() if (a := history.by_value(val)) and a.outcome == "info"
        )
        v.figures["state_applied_offset"] = ref.applied_offset
        for node_id, st in sorted(readable.items()):
            problem = None
            if st.applied_offset < applied_floor:
                problem = f"applied offset {st.applied_offset} is below {applied_floor}"
            elif st.applied_offset != ref.applied_offset:
                problem = (
                    f"applied offset {st.applied_offset}, node {ref_id}'s {ref.applied_offset}"
                )
            elif st.pairs != ref.pairs:
                only_mine = len(st.pairs.keys() - ref.pairs.keys())
                only_ref = len(ref.pairs.keys() - st.pairs.keys())
                problem = (
                    f"{len(st.pairs)} pairs, node {ref_id} has {len(ref.pairs)} ({only_mine} "
                    f"only here, {only_ref} only there)"
                )
            if problem:
                divergent += 1
                v.add("state-divergent", f"node {node_id}: {problem}")
    v.figures["state_divergent_nodes"] = divergent

    # -- the snapshot files ----------------------------------------------------------------------
    files = corrupt = bad_content = partial = 0
    for node_id, st in sorted(states.items()):
        for snap in st.snapshots:
            if snap.kind != "frozen":
                partial += 1
                continue
            files += 1
            if snap.error:
                corrupt += 1
                v.add("corrupt-snapshot", f"node {node_id}: {snap.name}: {snap.error}")
                continue
            if st.error:
                continue
            problem = _snapshot_problem(snap, st, acked)
            if problem:
                bad_content += 1
                if bad_content <= MAX_DETAILS:
                    v.add("snapshot-state", f"node {node_id}: {snap.name}: {problem}")
    v.figures.update(
        snapshot_files=files,
        snapshot_files_partial=partial,
        corrupt_snapshots=corrupt,
        snapshot_state_wrong=bad_content,
    )


def _snapshot_problem(snap: SnapshotFile, st: NodeState, acked: list) -> str | None:
    for key, val in snap.pairs.items():
        if st.pairs.get(key) != val:
            return f"holds {key!r} -> {val!r}, the final state {st.pairs.get(key)!r}"
    below = [a for a in acked if a.offset < snap.end_offset and a.value not in snap.pairs]
    if below:
        a = below[0]
        return (
            f"lacks {len(below)} value(s) acknowledged below its end offset {snap.end_offset}, "
            f"e.g. {a.value.decode()} at {a.offset}"
        )
    return None
