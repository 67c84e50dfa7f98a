"""``raftcore storage-demo``: build a sample log, tear its tail as a crash would, recover it,
verify it and show its first batches."""

from __future__ import annotations

import argparse
import io
import logging
import os
import sys
import tempfile
import time
from pathlib import Path

from raftcore.logtools import Progress, dump_log, segment_files, verify_log

__all__ = ["run_storage_demo"]


def run_storage_demo(args: argparse.Namespace) -> int:
    from raftcore import crc32c  # noqa: F401  (fails loudly without the native build)
    from raftcore._native.crc32c import implementation
    from raftcore.log import SegmentedLog
    from raftcore.records import ControlRecordType, control_record_key

    directory = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="raftcore-demo-"))
    if directory.exists() and segment_files(directory) and not args.dir_reuse:
        print(f"{directory} already holds a log; pass a new --dir (or --reuse)", file=sys.stderr)
        return 2
    batches = max(1, args.records // 1000)
    print(f"raftcore storage demo in {directory} (CRC32C: {implementation()})")
    progress = Progress("appending", sys.stdout)
    started = time.perf_counter()
    with SegmentedLog.open(directory, segment_bytes=1 << 20) as log:
        for n in range(batches):
            epoch = 1 + n * 3 // batches  # three leader epochs
            if log.last_fetched_epoch != epoch:
                log.initialize_leader_epoch(epoch)
                log.append_as_leader(
                    [(control_record_key(ControlRecordType.LEADER_CHANGE), b"")],
                    epoch,
                    control=True,
                )
            compression = ("none", "zstd", "gzip")[epoch - 1]
            log.append_as_leader(
                (
                    (f"key-{n:06d}-{i:04d}".encode(), os.urandom(16).hex().encode() * 3)
                    for i in range(1000)
                ),
                epoch,
                compression=compression,
            )
            progress(n + 1, batches)
        log.flush()
        elapsed = time.perf_counter() - started
        end = log.end_offset
        print(
            f"appended {batches * 1000} records in {batches} batches ({elapsed:.2f} s), "
            f"end offset {end}, {log.segment_count} segments, {log.size_in_bytes} bytes"
        )
        print(f"leader epochs (epoch, start offset): {log.epoch_entries()}")

    # A crash in the middle of a write leaves a torn batch: recovery cuts it off on open.
    last = segment_files(directory)[-1][1]
    with open(last, "ab") as f:
        f.write(b"\x00\x00\x00\x00\x00\x00\x99\x99\x00\x00\x10\x00torn")
    print(f"tore the tail of {last.name} (as a crash mid-write would); reopening...")
    logging.basicConfig(level=logging.WARNING, format="  recovery: %(message)s")
    with SegmentedLog.open(directory, segment_bytes=1 << 20) as log:
        print(f"recovered: end offset {log.end_offset} (was {end})")
        first = next(iter(log.batches()))
        print(f"first batch: {first}")
    report = verify_log(directory)
    print(
        f"verify-log: {'OK' if report.ok else 'CORRUPT: ' + str(report.problem)} "
        f"({report.batches} batches, {report.records} records)"
    )
    print("\nThe first batches, as `raftcore dump-log` shows them:")
    buf = io.StringIO()
    dump_log(directory, buf, segment=segment_files(directory)[0][0])
    for line in buf.getvalue().splitlines()[:6]:
        print("  " + line)
    print(
        f"\nExplore it yourself:\n  raftcore dump-log {directory} --records | less\n"
        f"  raftcore verify-log {directory}"
    )
    return 0 if report.ok else 1
