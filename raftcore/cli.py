"""The ``raftcore`` command line."""

from __future__ import annotations

import argparse
import io
import logging
import os
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from raftcore.certs_cli import add_certs_command
from raftcore.errors import RaftcoreError
from raftcore.logtools import Progress, dump_log, segment_files, verify_log
from raftcore.security.client_config import add_command_config_option, load_client_security
from raftcore.security.node_options import add_node_security_options
from raftcore.snapshot import SnapshotId
from raftcore.snapshot_cli import add_snapshot_commands, log_directory, verdict_line
from raftcore.spark_cli import add_spark_commands

__all__ = ["main"]


def _cmd_dump_log(args: argparse.Namespace) -> int:
    directory = log_directory(args.directory)
    if directory != Path(args.directory):
        print(f"Log directory {directory}")
    dump_log(directory, records=args.records, segment=args.segment)
    return 0


def _cmd_verify_log(args: argparse.Namespace) -> int:
    directory = log_directory(args.directory)
    report = verify_log(directory, progress=Progress("verifying"))
    for warning in report.warnings:
        print(f"warning: {warning}")
    span = (
        f"offsets [{report.start_offset}, {report.end_offset})"
        if report.start_offset is not None
        else "no batches"
    )
    if report.problem is None:
        print(
            f"OK: {report.segments} segments, {report.batches} batches, {report.records} records, "
            f"{report.bytes} bytes, {span}"
        )
    else:
        print(
            f"CORRUPT: {report.file} at byte position {report.position}: {report.problem}\n"
            f"(checked {report.batches} good batches before it)"
        )
    # The snapshots, each verified whole, after the log's verdict.
    print(f"{len(report.snapshots)} snapshots in {directory}" + (":" if report.snapshots else ""))
    for snap in report.snapshots:
        sid = SnapshotId(snap.end_offset, snap.epoch)
        problem = snap.problem
        if problem is not None and problem.startswith(f"{directory / snap.name}: "):
            problem = problem[len(f"{directory / snap.name}: ") :]
        print("  " + verdict_line(snap.name, sid, snap.size, snap.records, problem))
    return 0 if report.ok else 1


def _cmd_storage_demo(args: argparse.Namespace) -> int:
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


# ---- cluster commands ------------------------------------------------------------------------


def _cmd_node(args: argparse.Namespace) -> int:
    from raftcore.log import LogConfig
    from raftcore.node.config import NodeConfig, parse_endpoint, parse_voters
    from raftcore.node.runner import run_node
    from raftcore.raft.config import QuorumConfig
    from raftcore.security.node_options import node_listener

    try:
        voters = parse_voters(args.voters)
        listen = parse_endpoint(args.listen) if args.listen else None
        tls_listen, security = node_listener(args, len(voters))  # --listeners, --ssl-*, --config
        listen = parse_endpoint(tls_listen) if tls_listen else listen
        advertised = parse_endpoint(args.advertised) if args.advertised else None
        quorum = QuorumConfig(
            election_timeout_ms=args.election_timeout_ms,
            fetch_timeout_ms=args.fetch_timeout_ms,
            snapshot_min_records=args.snapshot_min_records,
            snapshot_min_bytes=args.snapshot_min_bytes,
            snapshot_interval_ms=args.snapshot_interval_ms,
            max_replication_lag_ms=args.max_replication_lag_ms,
        )
        log = LogConfig(segment_bytes=args.segment_bytes)
        config = NodeConfig(
            node_id=args.id,
            voters=voters,
            data_dir=Path(args.data_dir),
            cluster_id=args.cluster_id,
            listen=listen,
            advertised=advertised,
            topic=args.topic,
            quorum=quorum,
            log=log,
            flush=args.flush,
            flush_interval_ms=args.flush_interval_ms,
            security=security,
        )
        if quorum.snapshots_enabled and args.state_machine == "none":
            raise ValueError(
                "snapshots need something to snapshot: add --state-machine lmdb (a node "
                "without a state machine keeps its whole log)"
            )
    except ValueError as exc:
        print(f"raftcore node: {exc}", file=sys.stderr)
        return 2
    if not args.verbose:
        logging.getLogger().setLevel(logging.INFO)
    return run_node(
        config,
        ready_file=args.ready_file,
        state_machine=args.state_machine,
        state_map_size=args.state_map_size,
    )


def _cmd_describe_quorum(args: argparse.Namespace) -> int:
    import asyncio

    from raftcore.client import describe_quorum, format_quorum

    info = asyncio.run(
        describe_quorum(
            _bootstrap(args),
            topic=args.topic,
            timeout_s=args.timeout_ms / 1000,
            security=load_client_security(args.command_config),
        )
    )
    print(format_quorum(info))
    return 0


def _bootstrap(args: argparse.Namespace) -> list[str]:
    return [b.strip() for b in args.bootstrap.split(",") if b.strip()]


def _cmd_produce(args: argparse.Namespace) -> int:
    import asyncio

    from raftcore.client import Producer

    def records():  # type: ignore[no-untyped-def]
        if args.generate:
            for n in range(args.generate):
                key = str(n).zfill(12).encode()
                yield key, (key * (args.size // 12 + 1))[: args.size]
            return
        lines = args.values if args.values else (line.rstrip("\n") for line in sys.stdin)
        for line in lines:
            if args.key_separator and args.key_separator in line:
                key, _, value = line.partition(args.key_separator)
                yield key.encode(), value.encode()
            else:
                yield None, line.encode()

    async def run() -> int:
        total = args.generate or 0
        progress = Progress("producing", sys.stderr, unit="records") if total else None
        acked = 0
        first = last = None
        started = time.perf_counter()
        async with Producer(
            _bootstrap(args),
            topic=args.topic,
            acks=args.acks,
            idempotent=args.acks == -1,
            compression=args.compression,
            security=load_client_security(args.command_config),
        ) as producer:
            pending: list = []
            batch: list = []

            async def drain(limit: int) -> None:
                nonlocal acked, first, last
                while len(pending) > limit:
                    count, fut = pending.pop(0)
                    lo, hi = await fut
                    acked += count
                    first = lo if first is None else first
                    last = hi
                    if progress is not None:
                        progress(acked, total)

            for rec in records():
                batch.append(rec)
                if len(batch) >= args.batch:
                    pending.append((len(batch), producer.send_nowait(batch)))
                    batch = []
                    await drain(8)
            if batch:
                pending.append((len(batch), producer.send_nowait(batch)))
            await drain(0)
        elapsed = time.perf_counter() - started
        if args.acks == 0:
            print(f"sent {acked} records (acks=0: offsets unknown)", file=sys.stderr)
        else:
            print(
                f"produced {acked} records at offsets {first}..{last} "
                f"({acked / max(elapsed, 1e-9):,.0f} records/s)",
                file=sys.stderr,
            )
        return 0

    return asyncio.run(run())


def _cmd_consume(args: argparse.Namespace) -> int:
    import asyncio

    from raftcore.client import Consumer

    start: str | int = args.start if args.start in ("earliest", "latest") else int(args.start)

    async def run() -> int:
        seen = 0
        idle_since = time.monotonic()
        async with Consumer(
            _bootstrap(args),
            topic=args.topic,
            start=start,
            max_wait_ms=200,
            security=load_client_security(args.command_config),
        ) as consumer:
            while args.max is None or seen < args.max:
                records = await consumer.poll()
                if records:
                    idle_since = time.monotonic()
                elif (
                    args.idle_timeout_ms is not None
                    and (time.monotonic() - idle_since) * 1000 >= args.idle_timeout_ms
                ):
                    break
                for r in records:
                    value = r.value.decode(errors="replace") if r.value is not None else "null"
                    if args.print_offsets:
                        key = r.key.decode(errors="replace") if r.key is not None else "null"
                        sys.stdout.write(f"{r.offset}\t{key}\t{value}\n")
                    else:
                        sys.stdout.write(value + "\n")
                    seen += 1
                    if args.max is not None and seen >= args.max:
                        break
                sys.stdout.flush()
        print(f"consumed {seen} records", file=sys.stderr)
        return 0

    return asyncio.run(run())


def _cmd_demo(args: argparse.Namespace) -> int:
    from raftcore.demo import run_demo

    result = run_demo(
        args.dir,
        records=args.records,
        batch=args.batch,
        size=args.size,
        keep=args.keep,
        tls=args.tls,
    )
    return 0 if result.ok else 1


def _add_cluster_commands(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("node", help="run one node of a cluster (until SIGTERM/SIGINT)")
    p.add_argument("--id", type=int, required=True, help="this node's id")
    p.add_argument(
        "--voters",
        required=True,
        help="every voter, as Kafka's controller.quorum.voters: 1@host:port,2@host:port,...",
    )
    p.add_argument(
        "--listen", default=None, help="host:port to listen on (default: this node's voter entry)"
    )
    p.add_argument(
        "--advertised", default=None, help="host:port clients are told (default: listen)"
    )
    add_node_security_options(p)
    p.add_argument("--data-dir", required=True, help="the node's data directory")
    p.add_argument("--cluster-id", required=True, help="the cluster's id (the same on every node)")
    p.add_argument("--topic", default="raftcore", help="the topic Kafka clients see (partition 0)")
    p.add_argument("--election-timeout-ms", type=int, default=1000)
    p.add_argument("--fetch-timeout-ms", type=int, default=2000)
    p.add_argument("--segment-bytes", type=int, default=1 << 30)
    p.add_argument(
        "--flush",
        choices=("always", "interval"),
        default="always",
        help="fsync before acknowledging (always, the default) or every --flush-interval-ms",
    )
    p.add_argument("--flush-interval-ms", type=int, default=1000)
    p.add_argument(
        "--state-machine",
        choices=("none", "lmdb"),
        default="none",
        help="apply committed records to a key/value state machine: lmdb keeps it in "
        "<data-dir>/state/ (default: none, the node only replicates the log)",
    )
    p.add_argument(
        "--state-map-size", type=int, default=16 << 30, help="the LMDB map size in bytes"
    )
    snap = p.add_argument_group("snapshots (KIP-630; off unless one trigger is set)")
    snap.add_argument(
        "--snapshot-min-records",
        type=int,
        default=0,
        help="take a snapshot once this many records were applied since the last one",
    )
    snap.add_argument(
        "--snapshot-min-bytes",
        type=int,
        default=0,
        help="... or this many bytes of record batches",
    )
    snap.add_argument(
        "--snapshot-interval-ms",
        type=int,
        default=0,
        help="... or this long since the last one (with at least one record)",
    )
    snap.add_argument(
        "--max-replication-lag-ms",
        type=int,
        default=30_000,
        help="the leader moves its log start to its latest snapshot once every replica has "
        "fetched past it, or once the snapshot is this old",
    )
    p.add_argument(
        "--ready-file", default=None, help="write this file once the node listens (for scripts)"
    )
    p.set_defaults(func=_cmd_node)

    def bootstrap(p: argparse.ArgumentParser) -> None:
        p.add_argument("--bootstrap", required=True, help="host:port[,host:port...] of any node(s)")
        p.add_argument("--topic", default="raftcore")
        add_command_config_option(p)

    p = sub.add_parser(
        "describe-quorum", help="leader, epoch, high watermark and every replica's progress"
    )
    bootstrap(p)
    p.add_argument("--timeout-ms", type=int, default=10_000)
    p.set_defaults(func=_cmd_describe_quorum)

    p = sub.add_parser("produce", help="write records: lines of stdin, the arguments, or generated")
    bootstrap(p)
    p.add_argument("values", nargs="*", help="record values (default: one per line of stdin)")
    p.add_argument("--key-separator", default=None, help="split each line into key and value")
    p.add_argument("--generate", type=int, default=0, metavar="N", help="write N generated records")
    p.add_argument("--size", type=int, default=100, help="value size of generated records")
    p.add_argument("--batch", type=int, default=1000, help="records per batch")
    p.add_argument("--acks", type=int, choices=(-1, 0, 1), default=-1)
    p.add_argument("--compression", choices=("none", "gzip", "zstd"), default="none")
    p.set_defaults(func=_cmd_produce)

    p = sub.add_parser("consume", help="print committed records")
    bootstrap(p)
    p.add_argument(
        "--from", dest="start", default="earliest", help="earliest (default), latest, or an offset"
    )
    p.add_argument("--max", type=int, default=None, help="stop after this many records")
    p.add_argument(
        "--idle-timeout-ms", type=int, default=None, help="stop when nothing arrives for this long"
    )
    p.add_argument("--print-offsets", action="store_true", help="print offset, key and value")
    p.set_defaults(func=_cmd_consume)

    p = sub.add_parser(
        "demo",
        help="3 node processes on loopback: write, SIGKILL the leader midway, restart it, "
        "check every record on every node",
    )
    p.add_argument("--dir", default=None, help="where the nodes keep their data (default: temp)")
    p.add_argument("--records", type=int, default=200_000)
    p.add_argument("--batch", type=int, default=1000, help="records per producer batch")
    p.add_argument("--size", type=int, default=100, help="bytes per record value")
    p.add_argument("--keep", action="store_true", help="keep the data directory afterwards")
    p.add_argument(
        "--tls", action="store_true", help="mutual TLS everywhere (certificates in DIR/tls)"
    )
    p.set_defaults(func=_cmd_demo)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="raftcore",
        description="raftcore: an embeddable, Kafka-compatible Raft replicated log.",
    )
    parser.add_argument("--verbose", "-v", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser(
        "dump-log", help="print the batches and snapshots of a log directory (read-only)"
    )
    p.add_argument("directory", help="the log directory, or a node's data directory")
    p.add_argument("--records", action="store_true", help="print every record too")
    p.add_argument(
        "--segment",
        type=int,
        default=None,
        metavar="BASE_OFFSET",
        help="only the segment with this base offset",
    )
    p.set_defaults(func=_cmd_dump_log)

    p = sub.add_parser(
        "verify-log",
        help="check every batch and snapshot of a log directory (read-only); exit 1 at the "
        "first bad batch or any bad snapshot",
    )
    p.add_argument("directory", help="the log directory, or a node's data directory")
    p.set_defaults(func=_cmd_verify_log)

    p = sub.add_parser("storage-demo", help="build a sample log, tear it, recover it and show it")
    p.add_argument("--dir", default=None, help="where to build it (default: a new temp dir)")
    p.add_argument(
        "--reuse",
        dest="dir_reuse",
        action="store_true",
        help="allow a --dir that already holds a log",
    )
    p.add_argument("--records", type=int, default=30_000, help="records to write")
    p.set_defaults(func=_cmd_storage_demo)

    add_snapshot_commands(sub)
    add_spark_commands(sub)
    add_certs_command(sub)
    _add_cluster_commands(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        return int(args.func(args))
    except BrokenPipeError:  # the reader went away (`| head`): end quietly
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # so the interpreter's final flush cannot fail
        os.close(devnull)
        return 0
    except (RaftcoreError, OSError) as exc:
        print(f"raftcore {args.command}: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
