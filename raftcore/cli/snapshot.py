"""``raftcore snapshot list|verify|dump|create``: the snapshots (KIP-630) of a node's data
directory from the command line.

Each command takes a node's data directory (its snapshots live beside the segments, in
``<data-dir>/log/``, see :mod:`raftcore.node.data_dir`) or a log directory itself. ``list``,
``verify`` and ``dump`` only read. ``create`` writes a snapshot of the node's LMDB state
machine as of its applied offset, offline: it opens the log as the node does (taking its
lock, so it refuses while a node runs there), and writes through the log's snapshot writer,
the node's own (verified whole, fsynced, renamed from ``.part``).

Exit codes: 0 done; 1 a snapshot failed verification, or ``create`` was refused or failed;
2 nothing to work on (no such directory, no log and no snapshots there, an unknown id, nothing
for ``verify`` to verify).
"""

from __future__ import annotations

import argparse
import datetime
import os
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from raftcore.cli.args import positive_int
from raftcore.errors import CorruptRecordError, CorruptSnapshotError, RaftcoreError
from raftcore.logtools import (
    NothingToCheck,
    Progress,
    find_log_directory,
    segment_files,
    snapshot_files,
)
from raftcore.node.data_dir import LOG_DIR, STATE_DIR
from raftcore.records import ControlRecordType, iter_batches, scan_batches
from raftcore.snapshot import (
    SnapshotFileKind,
    SnapshotFooter,
    SnapshotHeader,
    SnapshotId,
    SnapshotPath,
    parse_snapshot_path,
    verify_snapshot_file,
)

__all__ = ["add_snapshot_commands", "log_directory", "verdict_line"]

_KIND_NOTE = {
    SnapshotFileKind.PART: "PARTIAL (.part: being written or received, or left by a crash)",
    SnapshotFileKind.DELETED: "DELETED (.deleted: being deleted, or left by a crash)",
    SnapshotFileKind.DAMAGED: "DAMAGED (.damaged: failed its checks, set aside by the node)",
}
_ID_TEXT = re.compile(r"(\d+)-(\d+)")


class UsageError(RaftcoreError):
    """Nothing to work on: the command exits 2 with this one-line message."""


# ---- where the snapshots are -------------------------------------------------------------------


def log_directory(path: str | os.PathLike[str]) -> Path:
    """The log directory of ``path``: ``<path>/log`` for a node's data directory, else
    ``path`` itself (a log directory)."""
    p = Path(path)
    return p / LOG_DIR if (p / LOG_DIR).is_dir() else p


def _snapshot_directory(path: str) -> Path:
    """The directory holding the snapshots; UsageError when it holds neither a log nor a
    snapshot (a wrong path must not read as "no snapshots, all OK")."""
    try:
        return find_log_directory(path)
    except NothingToCheck as exc:
        raise UsageError(str(exc)) from None


def _find(directory: Path, text: str) -> SnapshotPath:
    """The frozen snapshot named by ``text``: a file name (or path) or ``OFFSET-EPOCH``."""
    named = parse_snapshot_path(text)
    if named is not None:
        if named.kind is not SnapshotFileKind.FROZEN:
            raise UsageError(f"{named.path.name}: {_KIND_NOTE[named.kind]}, not a snapshot")
        wanted = named.snapshot_id
    else:
        m = _ID_TEXT.fullmatch(text)
        if m is None:
            raise UsageError(f"{text!r} is not a snapshot: give its file name or OFFSET-EPOCH")
        try:
            wanted = SnapshotId(int(m.group(1)), int(m.group(2)))
        except ValueError as exc:
            raise UsageError(f"{text!r}: {exc}") from None
    found = [f for f in snapshot_files(directory) if f.snapshot_id == wanted]
    for f in found:
        if f.kind is SnapshotFileKind.FROZEN:
            return f
    if found:
        raise UsageError(f"{directory}: snapshot {wanted} is only {found[0].path.name}")
    raise UsageError(f"{directory}: no snapshot {wanted}")


def _progress(args: argparse.Namespace, label: str, unit: str = "bytes") -> Progress:
    """A bar on stderr when it is a terminal; with ``--progress`` elsewhere, a line per 10%."""
    return Progress(label, sys.stderr, unit=unit, plain_every=0.1 if args.progress else 0.0)


def _mtime(path: Path) -> str:
    stamp = datetime.datetime.fromtimestamp(path.stat().st_mtime)
    return stamp.strftime("%Y-%m-%d %H:%M:%S")


def _utc_ms(ms: int) -> str:
    try:
        stamp = datetime.datetime.fromtimestamp(ms / 1000, datetime.timezone.utc)
    except (OverflowError, OSError, ValueError):
        return "?"
    return stamp.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def verdict_line(
    name: str, sid: SnapshotId, size: int, records: int | None, problem: str | None
) -> str:
    """One snapshot's verification, as ``snapshot verify`` and ``verify-log`` print it."""
    what = f"{name} (end offset {sid.end_offset}, epoch {sid.epoch}, {size} bytes)"
    if problem is None:
        return f"OK      {what}: {records} records"
    return f"FAILED  {what}: {problem}"


# ---- list --------------------------------------------------------------------------------------


def _cheap_counts(path: Path) -> str:
    """Batches and data records from the batch headers alone (no CRC, no record walk)."""
    if path.stat().st_size == 0:
        return "empty"
    scan = scan_batches(_mapped(path), check_crc=False)
    if scan.error is not None:
        return f"unreadable at byte position {scan.error_position}: {scan.error}"
    n = scan.count
    records = int(scan.last_offsets[-2] - scan.base_offsets[1] + 1) if n > 2 else 0
    return f"{n} batches, {records} records"


def _mapped(path: Path) -> Any:
    from raftcore._native.segment import MappedFile

    fd = os.open(path, os.O_RDONLY)
    try:
        m = MappedFile(fd, os.fstat(fd).st_size)
    finally:
        os.close(fd)
    return m.view(0, len(m))


def _cmd_list(args: argparse.Namespace) -> int:
    directory = _snapshot_directory(args.directory)
    files = snapshot_files(directory)
    if not files:
        print(f"no snapshots in {directory}")
        return 0
    print(f"{len(files)} snapshot file(s) in {directory}:")
    failed = 0
    for f in files:
        sid, size = f.snapshot_id, f.path.stat().st_size
        head = f"{f.path.name}  end offset {sid.end_offset}  epoch {sid.epoch}  {size} bytes"
        if f.kind is not SnapshotFileKind.FROZEN:
            detail = _KIND_NOTE[f.kind]
        elif args.verify:
            try:
                summary = verify_snapshot_file(f.path, snapshot_id=sid)
                detail = f"{summary.batch_count} batches, {summary.record_count} records, verified"
            except CorruptSnapshotError as exc:
                failed += 1
                detail = "FAILED: " + _reason(exc, f.path)
        else:
            detail = _cheap_counts(f.path)
        print(f"{head}  {detail}  {_mtime(f.path)}")
    return 1 if failed else 0


# ---- verify ------------------------------------------------------------------------------------


def _reason(exc: CorruptSnapshotError, path: Path) -> str:
    text = str(exc)
    prefix = f"{path}: "
    return text[len(prefix) :] if text.startswith(prefix) else text


def _cmd_verify(args: argparse.Namespace) -> int:
    directory = _snapshot_directory(args.directory)
    if args.id is not None:
        targets = [_find(directory, args.id)]
    else:
        targets = [f for f in snapshot_files(directory) if f.kind is SnapshotFileKind.FROZEN]
        for f in snapshot_files(directory):
            if f.kind is not SnapshotFileKind.FROZEN:
                print(f"skipped {f.path.name}: {_KIND_NOTE[f.kind]}")
    if not targets:  # a verifier that checked nothing must not exit 0 (issue 12)
        raise UsageError(f"{directory}: no snapshots to verify")
    total = sum(f.path.stat().st_size for f in targets)
    progress = _progress(args, "verifying")
    done = 0
    failed = 0
    for f in targets:
        size = f.path.stat().st_size

        def step(n: int, _: int, before: int = done) -> None:
            progress(before + n, total)

        try:
            summary = verify_snapshot_file(f.path, snapshot_id=f.snapshot_id, progress=step)
            line = verdict_line(f.path.name, f.snapshot_id, size, summary.record_count, None)
        except CorruptSnapshotError as exc:
            failed += 1
            line = verdict_line(f.path.name, f.snapshot_id, size, None, _reason(exc, f.path))
            progress(done + size, total)  # a sound file reported its last byte itself
        done += size
        if progress.enabled and done < total:  # the bar's line is cleared for the verdict
            progress.stream.write("\r\x1b[2K")
            progress.stream.flush()
        print(line, flush=True)
    print(
        f"{len(targets) - failed} of {len(targets)} snapshot(s) verified"
        + (f", {failed} FAILED" if failed else "")
    )
    return 1 if failed else 0


# ---- dump --------------------------------------------------------------------------------------


def show_bytes(data: bytes | None, limit: int) -> str:
    """A key or value for a terminal: quoted UTF-8 text when it decodes to printable text,
    else ``hex:...``; at most ``limit`` bytes, the rest counted."""
    if data is None:
        return "null"
    data = bytes(data)
    head = data[:limit]
    text = None
    for cut in range(4):  # the cut may split a UTF-8 sequence
        try:
            text = head[: len(head) - cut].decode("utf-8")
        except UnicodeDecodeError:
            if len(data) <= limit:
                break
            continue
        head = head[: len(head) - cut]
        break
    shown = f'"{text}"' if text is not None and text.isprintable() else "hex:" + head.hex()
    return shown + (f"...(+{len(data) - len(head)} bytes)" if len(data) > len(head) else "")


def _control_summary(batch: Any) -> list[tuple[int, bytes]]:
    out = []
    for r in batch.records():
        key = r.key or b""
        ctype = int.from_bytes(key[2:4], "big", signed=True) if len(key) >= 4 else -1
        out.append((ctype, bytes(r.value or b"")))
    return out


def _control_name(ctype: int) -> str:
    try:
        return ControlRecordType(ctype).name
    except ValueError:
        return f"UNKNOWN({ctype})"


def _dump_control(batch: Any, first: bool, out: Callable[[str], None]) -> None:
    for ctype, value in _control_summary(batch):
        if ctype == ControlRecordType.SNAPSHOT_HEADER:
            h = SnapshotHeader.decode(value)
            ts = h.last_contained_log_timestamp
            out(f"Header: version {h.version}, last contained log timestamp {ts} ({_utc_ms(ts)})")
        elif ctype == ControlRecordType.SNAPSHOT_FOOTER:
            out(f"Footer: version {SnapshotFooter.decode(value).version}")
        else:
            where = "header batch" if first else "control batch"
            out(f"Control record in the {where}: {_control_name(ctype)}, {len(value)} bytes")


def _cmd_dump(args: argparse.Namespace) -> int:
    directory = _snapshot_directory(args.directory)
    f = _find(directory, args.id)
    sid, size = f.snapshot_id, f.path.stat().st_size
    out = print
    out(f"Snapshot {f.path.name} (end offset {sid.end_offset}, epoch {sid.epoch}, {size} bytes)")
    batches = records = 0
    damaged = size == 0
    try:
        if damaged:
            raise CorruptRecordError("the file is empty")
        for batch in iter_batches(_mapped(f.path)):
            valid = batch.is_valid()
            out(
                f"Batch {batches}: position {batch.position} baseOffset {batch.base_offset} "
                f"lastOffset {batch.last_offset} count {batch.record_count} "
                f"size {batch.size_in_bytes} compression {batch.compression} "
                f"epoch {batch.partition_leader_epoch} "
                f"{'control' if batch.is_control else 'data'} "
                f"crc {batch.crc:#010x} {'valid' if valid else 'INVALID'}"
            )
            batches += 1
            if not valid:
                damaged = True
                continue
            try:
                if batch.is_control:
                    _dump_control(batch, batches == 1, out)
                    continue
                records += batch.record_count
                if args.records:
                    for r in batch.records():
                        out(
                            f"| offset {r.offset} key {show_bytes(r.key, args.max_bytes)} "
                            f"value {show_bytes(r.value, args.max_bytes)}"
                        )
            except (CorruptRecordError, ValueError) as exc:
                damaged = True
                out(f"| cannot read the records: {exc}")
    except CorruptRecordError as exc:
        damaged = True
        out(f"ERROR: {exc}")
    out(
        f"{batches} batches, {records} data records, {size} bytes"
        + (" -- DAMAGED: run `raftcore snapshot verify`" if damaged else "")
    )
    return 1 if damaged else 0


# ---- create ------------------------------------------------------------------------------------


class _CountingWriter:
    """The state machine's ``SnapshotWriter`` over the log's snapshot writer: checks that the
    state is as of the offset the snapshot was named after, and shows progress."""

    def __init__(self, log_writer: Any, end_offset: int, total: int, progress: Progress) -> None:
        self.log_writer = log_writer
        self.end_offset = end_offset
        self.total = total
        self.progress = progress
        self.pairs = 0

    def start(self, end_offset: int) -> None:
        if end_offset != self.end_offset:
            raise RaftcoreError(
                f"the state machine's applied offset moved from {self.end_offset} to "
                f"{end_offset}: is a node running on this data directory?"
            )

    def append(self, records: Sequence[Any]) -> None:
        self.log_writer.append(records)
        self.pairs += len(records)
        self.progress(self.pairs, max(self.total, self.pairs))


def _cmd_create(args: argparse.Namespace) -> int:
    from raftcore.errors import LogError
    from raftcore.log import SegmentedLog
    from raftcore.statemachine import LmdbStateMachine

    data_dir = Path(args.directory)
    if not data_dir.is_dir():
        raise UsageError(f"{data_dir}: no such directory")
    log_dir, state_dir = data_dir / LOG_DIR, data_dir / STATE_DIR
    if not (log_dir.is_dir() and segment_files(log_dir)):
        raise UsageError(f"{data_dir}: not a node's data directory (no log in {LOG_DIR}/)")
    if not (state_dir / "data.mdb").is_file():
        raise UsageError(
            f"{data_dir}: no state machine ({STATE_DIR}/ holds no LMDB environment; the node "
            "runs with --state-machine lmdb to keep one)"
        )
    try:  # the log's lock: a running node holds it
        log = SegmentedLog.open(log_dir)
    except LogError as exc:
        if "in use" in str(exc):
            print(f"raftcore snapshot create: {exc}: stop the node first", file=sys.stderr)
            return 1
        raise
    try:
        with LmdbStateMachine(state_dir) as machine:
            return _create(log, machine, args)
    finally:
        log.close()


def _create(log: Any, machine: Any, args: argparse.Namespace) -> int:
    from raftcore.raft.values import OffsetAndEpoch

    applied = machine.applied_offset
    name = f"{args.directory}: "
    for existing in log.snapshot_ids():
        if existing.offset == applied:
            print(
                f"snapshot (end offset {applied}, epoch {existing.epoch}) already exists: "
                f"{log.directory / SnapshotId(applied, existing.epoch).file_name}; nothing to do"
            )
            return 0
    if applied == 0:
        print(
            f"raftcore snapshot create: {name}the state machine has applied nothing "
            "(applied offset 0)",
            file=sys.stderr,
        )
        return 1
    start, end = log.log_start_offset, log.end_offset
    if not start < applied <= end:
        print(
            f"raftcore snapshot create: {name}the state machine's applied offset {applied} "
            f"does not end a record of the log (log start {start}, end {end})",
            file=sys.stderr,
        )
        return 1
    epoch = _epoch_of(log, applied - 1)
    if epoch < 0:
        print(
            f"raftcore snapshot create: {name}the epoch of the record at offset {applied - 1} "
            "is unknown (neither the leader-epoch cache nor a batch header gives it)",
            file=sys.stderr,
        )
        return 1
    try:
        writer = log.create_new_snapshot(OffsetAndEpoch(applied, epoch))
    except ValueError as exc:  # not at a batch boundary, or the batch's epoch differs
        print(f"raftcore snapshot create: {name}{exc}", file=sys.stderr)
        return 1
    progress = _progress(args, "writing", unit="records")
    adapter = _CountingWriter(writer, applied, len(machine), progress)
    try:
        machine.snapshot(adapter)
        summary = writer.freeze()  # verify whole, fsync, read-only, rename, fsync directory
    except BaseException:
        writer.abort()
        raise
    path = log.directory / SnapshotId(applied, epoch).file_name
    print(
        f"created {path}: end offset {applied}, epoch {epoch}, {summary.size} bytes, "
        f"{summary.batch_count} batches, {summary.record_count} records (verified)"
    )
    return 0


def _epoch_of(log: Any, offset: int) -> int:
    """The epoch of the record at ``offset``: the leader-epoch cache's answer, else the header
    of the batch holding it; -1 when neither knows."""
    epoch = int(log.epoch_for_offset(offset))
    if epoch >= 0:
        return epoch
    for batch in iter_batches(log.read(offset, 1)):
        if batch.base_offset <= offset <= batch.last_offset:
            return int(batch.partition_leader_epoch)
    return -1


# ---- the parser --------------------------------------------------------------------------------


def _guarded(command: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    def run(args: argparse.Namespace) -> int:
        try:
            return command(args)
        except UsageError as exc:
            print(f"raftcore snapshot {args.snapshot_command}: {exc}", file=sys.stderr)
            return 2

    return run


def add_snapshot_commands(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Register ``raftcore snapshot ...`` on the top-level subparsers."""
    top = sub.add_parser(
        "snapshot", help="list, verify, dump or create the snapshots of a data directory"
    )
    cmds = top.add_subparsers(dest="snapshot_command", required=True, metavar="SUBCOMMAND")
    directory_help = "a node's data directory (or the log directory holding the snapshots)"

    p = cmds.add_parser("list", help="one line per snapshot file (read-only)")
    p.add_argument("directory", help=directory_help)
    p.add_argument("--verify", action="store_true", help="verify each snapshot whole as well")
    p.set_defaults(func=_guarded(_cmd_list))

    p = cmds.add_parser("verify", help="verify snapshots whole (read-only); exit 1 if any fails")
    p.add_argument("directory", help=directory_help)
    p.add_argument("id", nargs="?", help="only this one: its file name or OFFSET-EPOCH")
    p.add_argument(
        "--progress", action="store_true", help="progress lines on stderr even when not a TTY"
    )
    p.set_defaults(func=_guarded(_cmd_verify))

    p = cmds.add_parser("dump", help="header, batches and footer of one snapshot (read-only)")
    p.add_argument("directory", help=directory_help)
    p.add_argument("id", help="the snapshot: its file name or OFFSET-EPOCH")
    p.add_argument("--records", action="store_true", help="print every record too")
    p.add_argument(
        "--max-bytes",
        type=positive_int,
        default=64,
        help="show at most this much of a key or value",
    )
    p.set_defaults(func=_guarded(_cmd_dump))

    p = cmds.add_parser(
        "create",
        help="snapshot the LMDB state machine as of its applied offset (node stopped)",
    )
    p.add_argument("directory", help="the node's data directory (with log/ and state/)")
    p.add_argument(
        "--progress", action="store_true", help="progress lines on stderr even when not a TTY"
    )
    p.set_defaults(func=_guarded(_cmd_create))
