"""Read-only inspection of a log directory: dump its batches, verify every byte of it -- and
list its snapshots (KIP-630), which live beside the segments, each verified whole by
``verify_log``.

These never open the log for writing and never run recovery: a tool pointed at a damaged log
reports the damage and leaves the files as they are.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from raftcore._native.records import iter_batches, scan_batches
from raftcore._native.segment import MappedFile, check_index
from raftcore.errors import (
    CorruptRecordError,
    CorruptSnapshotError,
    RaftcoreError,
    UnsupportedCompressionError,
)
from raftcore.log import INDEX_SUFFIX, LOCK_FILE, LOG_SUFFIX, first_discontinuity
from raftcore.records import ControlRecordType, RecordBatch
from raftcore.snapshot import SnapshotFileKind, SnapshotPath, parse_snapshot_path
from raftcore.snapshot import verify_snapshot_file as _verify_snapshot_file

__all__ = [
    "NothingToCheck",
    "SnapshotCheck",
    "VerifyReport",
    "dump_log",
    "find_log_directory",
    "live_log_holder",
    "segment_files",
    "snapshot_files",
    "verify_log",
]


def segment_files(directory: str | os.PathLike[str]) -> list[tuple[int, Path]]:
    """The segment files of a log directory, (base offset, path), in offset order."""
    d = Path(directory)
    if not d.is_dir():
        raise FileNotFoundError(f"{d} is not a directory")
    found = []
    for p in d.glob("*" + LOG_SUFFIX):
        stem = p.name[: -len(LOG_SUFFIX)]
        if len(stem) == 20 and stem.isdigit():
            found.append((int(stem), p))
    return sorted(found)


def snapshot_files(directory: str | os.PathLike[str]) -> list[SnapshotPath]:
    """The snapshot files of a log directory -- frozen, ``.part`` and ``.deleted`` -- in
    (end offset, epoch, name) order."""
    found = [parse_snapshot_path(p) for p in Path(directory).iterdir()]
    return sorted(
        (f for f in found if f is not None),
        key=lambda f: (f.snapshot_id.end_offset, f.snapshot_id.epoch, f.path.name),
    )


class NothingToCheck(RaftcoreError):
    """The path given to a log tool holds no log: no such directory, a file, or a directory
    without segments or snapshots. A tool must say so, never report "OK" for nothing."""


DATA_LOG_DIR = "log"  # raftcore.node.data_dir.LOG_DIR: a node's log is <data-dir>/log/


def find_log_directory(path: str | os.PathLike[str]) -> Path:
    """The log directory a tool should read for ``path``: ``<path>/log`` when ``path`` is a
    node's data directory, else ``path`` itself, which must then hold segments or snapshots.
    NothingToCheck (one line, naming ``path`` and what was expected) otherwise."""
    p = Path(path)
    if not p.exists():
        raise NothingToCheck(f"{p}: not a directory (no such file or directory)")
    if not p.is_dir():
        raise NothingToCheck(
            f"{p}: not a directory (a file; give a node's data directory or a log directory)"
        )
    d = p / DATA_LOG_DIR if (p / DATA_LOG_DIR).is_dir() else p
    if segment_files(d) or snapshot_files(d):
        return d
    nodes = sorted(c.name for c in p.iterdir() if c.is_dir() and (c / DATA_LOG_DIR).is_dir())
    if nodes:
        raise NothingToCheck(
            f"{p}: holds the data directories of several nodes ({', '.join(nodes)}), not a "
            "log: give one of them"
        )
    where = f"in {d}" if d != p else "here"
    raise NothingToCheck(
        f"{p}: no log segments and no snapshots {where}; expected a node's data directory, "
        f"which holds {DATA_LOG_DIR}/, or a log directory"
    )


def live_log_holder(directory: str | os.PathLike[str]) -> int | None:
    """Is the log in ``directory`` open (a node runs on it)? The pid of the process that holds
    its ``.lock`` (a log holds an exclusive flock there while it is open), 0 when it is held
    by a process whose pid cannot be told, None when it is not held.

    Read from ``/proc/locks``, without taking the lock: a tool that took it, even shared and
    for a moment, could make a node starting then fail with "in use by another log instance".
    Where there is no ``/proc/locks``, a non-blocking shared flock tells instead."""
    path = Path(directory) / LOCK_FILE
    try:
        st = path.stat()
    except OSError:
        return None
    try:
        with open("/proc/locks", encoding="ascii", errors="replace") as f:
            table = f.read()
    except OSError:
        return _probe_lock(path)
    wanted = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    for line in table.splitlines():
        fields = line.split()
        # "1: FLOCK  ADVISORY  WRITE 1546 fe:00:2278394 0 EOF" ("->" marks a waiter)
        if len(fields) >= 6 and fields[1] == "FLOCK" and fields[5] == wanted:
            return int(fields[4]) if fields[4].isdigit() else 0
    return None


def _probe_lock(path: Path) -> int | None:
    import fcntl

    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return 0
    finally:
        os.close(fd)  # releases the shared lock, if it was taken
    return None


def _snapshot_line(found: SnapshotPath) -> str:
    sid = found.snapshot_id
    return (
        f"Snapshot {found.path.name} (end offset {sid.end_offset}, epoch {sid.epoch}, "
        f"{found.path.stat().st_size} bytes, {found.kind.value})"
    )


def _map_file(path: Path) -> MappedFile:
    fd = os.open(path, os.O_RDONLY)
    try:
        return MappedFile(fd, os.fstat(fd).st_size)
    finally:
        os.close(fd)


def _control_name(batch: RecordBatch) -> str:
    try:
        ctype = batch.control_type
    except (CorruptRecordError, UnsupportedCompressionError) as exc:
        return f"unreadable ({exc})"
    if ctype is None:
        return "UNKNOWN(None)"
    try:
        return ControlRecordType(ctype).name
    except ValueError:
        return f"UNKNOWN({ctype})"


def _show(data: bytes | None, limit: int = 64) -> str:
    if data is None:
        return "null"
    text = repr(data[:limit])
    return text + (f"...(+{len(data) - limit} bytes)" if len(data) > limit else "")


def _iter_file_batches(path: Path) -> Iterator[RecordBatch]:
    m = _map_file(path)
    yield from iter_batches(m)


def dump_log(
    directory: str | os.PathLike[str],
    out: TextIO | None = None,
    *,
    records: bool = False,
    segment: int | None = None,
) -> int:
    """Print one line per batch (and, with ``records``, one per record) to ``out`` (default:
    the current ``sys.stdout``). Returns the number of batches printed. A malformed batch ends
    that segment's listing with an error line."""
    out = sys.stdout if out is None else out
    count = 0
    for base, path in segment_files(directory):
        if segment is not None and base != segment:
            continue
        print(f"Segment {path.name} (base offset {base}, {path.stat().st_size} bytes)", file=out)
        try:
            for batch in _iter_file_batches(path):
                count += 1
                valid = batch.is_valid()
                ctrl = _control_name(batch) if batch.is_control and valid else "-"
                print(
                    f"baseOffset: {batch.base_offset} lastOffset: {batch.last_offset} "
                    f"count: {batch.record_count} epoch: {batch.partition_leader_epoch} "
                    f"position: {batch.position} size: {batch.size_in_bytes} "
                    f"crc: {batch.crc:#010x} isValid: {str(valid).lower()} "
                    f"compression: {batch.compression} isControl: "
                    f"{str(batch.is_control).lower()} controlType: {ctrl} "
                    f"maxTimestamp: {batch.max_timestamp}",
                    file=out,
                )
                if records and valid:
                    try:
                        for r in batch.records():
                            headers = ",".join(f"{k}={_show(v, 16)}" for k, v in r.headers)
                            print(
                                f"| offset: {r.offset} timestamp: {r.timestamp} "
                                f"key: {_show(r.key)} value: {_show(r.value)}"
                                + (f" headers: {headers}" if headers else ""),
                                file=out,
                            )
                    except (CorruptRecordError, UnsupportedCompressionError) as exc:
                        print(f"| cannot read records: {exc}", file=out)
        except CorruptRecordError as exc:
            print(f"ERROR in {path.name}: {exc}", file=out)
    if segment is None:
        for found in snapshot_files(directory):
            print(_snapshot_line(found), file=out)
    return count


@dataclass(frozen=True)
class SnapshotCheck:
    """One frozen snapshot as ``verify_log`` found it: sound (``problem`` None) or not."""

    name: str
    end_offset: int
    epoch: int
    size: int
    records: int | None = None
    problem: str | None = None
    position: int | None = None

    @property
    def ok(self) -> bool:
        return self.problem is None


@dataclass
class VerifyReport:
    """What ``verify_log`` found. ``ok`` is False at the first problem, which ``problem``,
    ``file`` and ``position`` describe."""

    segments: int = 0
    batches: int = 0
    records: int = 0
    bytes: int = 0
    start_offset: int | None = None
    end_offset: int | None = None
    problem: str | None = None
    file: str | None = None
    position: int | None = None
    warnings: list[str] = field(default_factory=list)
    snapshots: list[SnapshotCheck] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.problem is None and all(s.ok for s in self.snapshots)


def verify_log(
    directory: str | os.PathLike[str],
    *,
    progress: Callable[[int, int], None] | None = None,
) -> VerifyReport:
    """Check every batch of every segment: structure, CRC, offsets contiguous within and across
    segments, leader epochs non-decreasing, records decodable, and each offset index sound.
    Stops at the first problem. Then verifies every frozen snapshot whole (``snapshots``; a
    ``.part`` or ``.deleted`` file, which the next open deletes, is a warning).
    ``progress(done_bytes, total_bytes)`` is called as it goes."""
    report = _verify_segments(directory, progress)
    for found in snapshot_files(directory):
        if found.kind is not SnapshotFileKind.FROZEN:
            report.warnings.append(f"{found.path.name}: left by a crash (the next open deletes it)")
            continue
        report.snapshots.append(_check_snapshot(found))
    return report


def _check_snapshot(found: SnapshotPath) -> SnapshotCheck:
    sid, path = found.snapshot_id, found.path
    size = path.stat().st_size
    try:
        summary = _verify_snapshot_file(path, snapshot_id=sid)
    except CorruptSnapshotError as exc:
        return SnapshotCheck(
            path.name, sid.end_offset, sid.epoch, size, None, str(exc), exc.position
        )
    return SnapshotCheck(path.name, sid.end_offset, sid.epoch, size, summary.record_count)


def _verify_segments(
    directory: str | os.PathLike[str], progress: Callable[[int, int], None] | None
) -> VerifyReport:
    files = segment_files(directory)
    report = VerifyReport()
    total = sum(p.stat().st_size for _, p in files)
    done = 0
    expected: int | None = None
    last_epoch = -1
    for base, path in files:
        report.segments += 1
        m = _map_file(path)
        size = len(m)
        if expected is not None and base != expected:
            report.problem = (
                f"segment starts at offset {base}, the previous one ended at {expected}"
            )
            report.file, report.position = path.name, 0
            return report
        scan = scan_batches(m, check_crc=True)
        n = scan.count
        if n:
            problem = first_discontinuity(scan, base)
            if problem is not None:
                k, why = problem
                report.problem, report.file, report.position = (
                    why,
                    path.name,
                    int(scan.positions[k]),
                )
                return report
            if int(scan.epochs[0]) < last_epoch:
                report.problem = (
                    f"leader epoch drops from {last_epoch} to {int(scan.epochs[0])} across segments"
                )
                report.file, report.position = path.name, 0
                return report
            last_epoch = int(scan.epochs[-1])
            if report.start_offset is None:
                report.start_offset = int(scan.base_offsets[0])
            report.end_offset = int(scan.last_offsets[-1]) + 1
            expected = report.end_offset
        elif expected is None:
            expected = base
        # Records: every batch must decode (the CRC was checked by the scan).
        for batch in iter_batches(m.view(0, scan.valid_end)):
            try:
                for _ in batch.records():
                    report.records += 1
            except (CorruptRecordError, UnsupportedCompressionError) as exc:
                report.problem, report.file, report.position = str(exc), path.name, batch.position
                return report
            report.batches += 1
        if scan.error is not None:
            report.problem, report.file = scan.error, path.name
            report.position = scan.error_position
            return report
        index_path = path.with_name(path.name[: -len(LOG_SUFFIX)] + INDEX_SUFFIX)
        if index_path.exists():
            issue = check_index(index_path.read_bytes(), size)
            if issue is not None:
                report.warnings.append(f"{index_path.name}: {issue} (recovery rebuilds it)")
        report.bytes += size
        done += size
        if progress is not None:
            progress(done, total)
    return report


class Progress:
    """A one-line progress display on a terminal. Elsewhere (a log file, CI) it prints a plain
    line every ``plain_every`` of the way (default: never)."""

    def __init__(
        self,
        label: str,
        stream: TextIO | None = None,
        *,
        unit: str = "bytes",
        plain_every: float = 0.0,
    ) -> None:
        self.label = label
        self.stream = sys.stderr if stream is None else stream
        self.enabled = self.stream.isatty()
        self.unit = unit
        self.plain_every = plain_every
        self.next_plain = plain_every
        self.started = time.monotonic()
        self.last = 0.0

    def restart_clock(self) -> None:
        """Measure the rate from now (when the work really begins)."""
        self.started = time.monotonic()

    def _rate(self, done: int, now: float) -> str:
        per_s = done / max(now - self.started, 1e-9)
        if self.unit == "bytes":
            return f"{per_s / (1 << 20):8.1f} MiB/s"
        return f"{per_s:10,.0f} {self.unit}/s"

    def __call__(self, done: int, total: int) -> None:
        now = time.monotonic()
        frac = done / total if total else 1.0
        if not self.enabled:
            if self.plain_every > 0 and (frac >= self.next_plain or done >= total):
                while self.next_plain <= frac:
                    self.next_plain += self.plain_every
                self.stream.write(f"{self.label}: {frac:6.1%} {self._rate(done, now)}\n")
                self.stream.flush()
            return
        if now - self.last < 0.1 and done < total:
            return
        self.last = now
        bar = "#" * int(frac * 30)
        self.stream.write(f"\r{self.label} [{bar:<30}] {frac:6.1%} {self._rate(done, now)}")
        if done >= total:
            self.stream.write("\n")
        self.stream.flush()

    def interrupt(self, message: str) -> None:
        """Print ``message`` on a line of its own (the bar continues below it)."""
        if self.enabled:
            self.stream.write("\r\x1b[2K")
        self.stream.write(message + "\n")
        self.stream.flush()
        self.last = 0.0
