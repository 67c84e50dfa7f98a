"""The ``raftcore`` command line: the top-level parser, :func:`main`, and the log and cluster
commands; each group of other commands adds its parsers from its own module of this package."""

from __future__ import annotations

import argparse
import os
import sys
import time
import traceback
from collections.abc import Sequence
from pathlib import Path

from raftcore import __version__
from raftcore.cli import args as types
from raftcore.cli.args import (
    ArgumentParser,
    CommandLineError,
    DefaultsHelpFormatter,
    every_parser,
)
from raftcore.cli.certs import add_certs_command
from raftcore.cli.format import add_format_command
from raftcore.cli.logging_options import add_logging_options, configure_logging, debugging
from raftcore.cli.node import add_node_command
from raftcore.cli.partition import add_partition_option
from raftcore.cli.quorum import add_quorum_commands
from raftcore.cli.snapshot import add_snapshot_commands, verdict_line
from raftcore.cli.spark import add_spark_commands
from raftcore.cli.storage_demo import run_storage_demo
from raftcore.cli.topic import add_topic_commands
from raftcore.cli.users import add_users_commands
from raftcore.errors import RaftcoreError
from raftcore.logtools import (
    NothingToCheck,
    Progress,
    dump_log,
    find_log_directory,
    live_log_holder,
    segment_files,
    verify_log,
)
from raftcore.security.client_config import add_command_config_option, load_client_security
from raftcore.snapshot import SnapshotId

__all__ = ["build_parser", "main"]


def _warn_if_live(command: str, directory: Path) -> None:
    """A log tool reads a log a node may be writing: say so (the figures may move under it,
    and a batch being written may read as torn), on stderr, before the output."""
    pid = live_log_holder(directory)
    if pid is None:
        return
    who = f"node running, pid {pid}" if pid else "held open by another process"
    print(
        f"raftcore {command}: warning: the log is live ({who}): figures may change while read",
        file=sys.stderr,
        flush=True,
    )


def _cmd_dump_log(args: argparse.Namespace) -> int:
    directory = find_log_directory(args.directory)
    _warn_if_live("dump-log", directory)
    bases = [base for base, _ in segment_files(directory)]
    if args.segment is not None and args.segment not in bases:
        raise NothingToCheck(
            f"{directory}: no segment with base offset {args.segment} (its segments start at "
            f"{', '.join(map(str, bases)) or 'nothing: it holds none'})"
        )
    if directory != Path(args.directory):
        print(f"Log directory {directory}")
    dump_log(directory, records=args.records, segment=args.segment)
    return 0


def _cmd_verify_log(args: argparse.Namespace) -> int:
    directory = find_log_directory(args.directory)
    _warn_if_live("verify-log", directory)
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
        # the native reader's message ends with the position this line already names
        problem = report.problem.removesuffix(f" (at byte position {report.position})")
        print(
            f"CORRUPT: {report.file} at byte position {report.position}: {problem}\n"
            f"(checked {report.batches} good batch{'' if report.batches == 1 else 'es'} before it)"
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


# ---- cluster commands ------------------------------------------------------------------------


def _cmd_describe_quorum(args: argparse.Namespace) -> int:
    import asyncio

    from raftcore.client import describe_quorum, format_quorum

    if args.watch:
        return _watch_quorum(args)
    info = asyncio.run(
        describe_quorum(
            _bootstrap(args),
            topic=args.topic,
            partition=args.partition,
            timeout_s=args.timeout_ms / 1000,
            security=load_client_security(args.command_config),
        )
    )
    print(format_quorum(info))
    return 0


def _watch_quorum(args: argparse.Namespace) -> int:
    from raftcore.cli.quorum_watch import run_watch

    if not args.interval > 0:
        print("raftcore describe-quorum: --interval must be > 0", file=sys.stderr)
        return 2
    return run_watch(
        _bootstrap(args),
        sys.stdout,
        topic=args.topic,
        partition=args.partition,
        interval_s=args.interval,
        timeout_s=args.timeout_ms / 1000,
        security=load_client_security(args.command_config),
    )


def _bootstrap(args: argparse.Namespace) -> list[str]:
    return [b.strip() for b in args.bootstrap.split(",") if b.strip()]


def _timeout_ms(args: argparse.Namespace) -> int:
    """The client commands' ``--timeout-ms``: how long to wait for a silent node."""
    return int(getattr(args, "timeout_ms", 10_000))


def produced_line(acked: int, first: int | None, last: int | None, elapsed: float) -> str:
    """``raftcore produce``'s last line. The span may hold records that are not this run's (a
    leader change's control record after a failover, another writer's batches): then it
    says how many, so that 300,000 records over 300,001 offsets do not read as a miscount."""
    rate = f"({acked / max(elapsed, 1e-9):,.0f} records/s)"
    if first is None or last is None:
        return f"produced {acked} records {rate}"
    others = last - first + 1 - acked
    plural = "" if others == 1 else "s"
    between = f", {others} other record{plural} between them" if others > 0 else ""
    return f"produced {acked} records at offsets {first}..{last}{between} {rate}"


def unacknowledged_line(
    failed: int, unknown: int, timeout_ms: int, why: str | None, unread_stdin: bool
) -> str:
    """What ``raftcore produce`` says of the records it did not get acknowledged: those that
    are not in the log (never sent, or refused) apart from those that may be."""
    parts = [f"failed {failed}"]
    if failed:
        parts[0] += f" (not written: {why})" if why else " (not written)"
    parts.append(f"outcome unknown {unknown}")
    if unknown:
        parts[1] += (
            f" (sent, no verdict within --timeout-ms {timeout_ms}: they may be committed; "
            "consume to see which)"
        )
    line = ", ".join(parts)
    if unread_stdin:
        line += "; stdin was not read further"
    return line


def _cmd_produce(args: argparse.Namespace) -> int:
    import asyncio

    from raftcore.client import OutcomeUnknownError, ProduceError, Producer

    timeout_ms = _timeout_ms(args)
    from_stdin = not args.generate and not args.values

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
        acked = failed = unknown = 0
        why: str | None = None  # the first definite failure's reason
        first = last = None
        started = time.perf_counter()
        # --timeout-ms bounds every wait: finding the leader and a producer id at the start
        # (the Producer's delivery timeout covers both), each record's delivery (its delivery
        # timeout), and the command: it gives up when nothing was acknowledged for that long.
        timeout_s = timeout_ms / 1000
        progress_at = time.monotonic()
        producer = Producer(
            _bootstrap(args),
            topic=args.topic,
            partition=args.partition,
            acks=args.acks,
            idempotent=args.acks == -1,
            compression=args.compression,
            request_timeout_ms=timeout_ms,
            delivery_timeout_ms=timeout_ms,
            security=load_client_security(args.command_config),
        )
        try:
            await producer.start()
        except BaseException:
            await producer.close()
            raise
        pending: list = []
        stopped = False  # a record was not acknowledged: send no more

        def settle(count: int, fut: asyncio.Future) -> None:
            nonlocal acked, failed, unknown, why, first, last, stopped, progress_at
            exc = fut.exception()
            if exc is None:
                lo, hi = fut.result()
                acked += count
                first = lo if first is None else first
                last = hi
                progress_at = time.monotonic()
                if progress is not None:
                    progress(acked, total)
                return
            stopped = True
            if isinstance(exc, OutcomeUnknownError):
                unknown += count
            elif isinstance(exc, ProduceError):
                failed += count
                why = why or str(exc)
            else:
                raise exc

        async def drain(limit: int) -> None:
            while len(pending) > limit:
                count, fut = pending[0]
                left = progress_at + timeout_s - time.monotonic()
                if not fut.done() and left > 0:
                    await asyncio.wait({fut}, timeout=left)
                if not fut.done():  # nothing acknowledged for --timeout-ms: give up
                    await producer.close()  # the rest: unknown if sent, failed if not
                pending.pop(0)
                settle(count, fut)

        handed = 0
        batch: list = []
        unread = False  # stdin not read to its end
        try:
            source = iter(records())
            while True:
                if stopped:  # read no more
                    unread = from_stdin
                    break
                rec = next(source, None)
                if rec is None:
                    break
                batch.append(rec)
                if len(batch) >= args.batch:
                    pending.append((len(batch), producer.send_nowait(batch)))
                    handed += len(batch)
                    batch = []
                    await drain(8)
            if batch and not stopped:
                pending.append((len(batch), producer.send_nowait(batch)))
                handed += len(batch)
                batch = []
            await drain(0)
        finally:
            await producer.close()
        elapsed = time.perf_counter() - started
        if args.acks == 0:
            print(f"sent {acked} records (acks=0: offsets unknown)", file=sys.stderr)
        else:
            print(produced_line(acked, first, last, elapsed), file=sys.stderr)
        if failed or unknown or stopped:
            given = handed + len(batch) if from_stdin else args.generate or len(args.values)
            if given > handed:  # never handed to the producer: the command stopped first
                failed += given - handed
                why = why or "never sent: the command stopped at the first record not acknowledged"
            line = unacknowledged_line(failed, unknown, timeout_ms, why, unread)
            print(f"raftcore produce: {line}", file=sys.stderr)
            return 1
        return 0

    return asyncio.run(run())


def _cmd_consume(args: argparse.Namespace) -> int:
    import asyncio

    from raftcore.client import Consumer
    from raftcore.client.consumer import EARLIEST, LATEST

    start: str | int = args.start  # earliest, latest or an offset (types.start_position)

    async def run() -> int:
        seen = 0
        reached = False  # stopped at the high watermark (not --max, not --idle-timeout-ms)
        idle_since = time.monotonic()
        timeout_ms = _timeout_ms(args)
        consumer = Consumer(
            _bootstrap(args),
            topic=args.topic,
            partition=args.partition,
            start=start,
            max_wait_ms=200,
            request_timeout_ms=timeout_ms,
            security=load_client_security(args.command_config),
        )

        async def begin() -> int | None:
            # kcat's -e: what the log holds now, then stop; --follow waits for more
            end = None if args.follow else await consumer.list_offset(LATEST)
            if end is not None and consumer.position is None:  # no wait at an empty end
                consumer.seek(end if start == "latest" else await consumer.list_offset(EARLIEST))
            return end

        try:
            # finding the leader (its own errors name the addresses) and asking it where the
            # log ends share one --timeout-ms
            deadline = time.monotonic() + timeout_ms / 1000
            await consumer.start()
            try:
                end = await asyncio.wait_for(begin(), max(0.0, deadline - time.monotonic()))
            except asyncio.TimeoutError:
                raise RaftcoreError(
                    f"no leader answered within --timeout-ms {timeout_ms} (a hung leader, or "
                    "none elected)"
                ) from None
            while args.max is None or seen < args.max:
                if end is not None and consumer.position is not None and consumer.position >= end:
                    reached = True
                    break
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
        finally:
            await consumer.close()
        plural = "" if seen == 1 else "s"
        why = ""
        if isinstance(start, int) and end is not None and start > end:
            why = f": --from {start} is past the high watermark (offset {end})"
        elif reached:
            why = f", up to the high watermark (offset {end})"
        print(f"consumed {seen} record{plural}{why}", file=sys.stderr)
        return 0

    return asyncio.run(run())


def _cmd_demo(args: argparse.Namespace) -> int:
    from raftcore.cli.demo import KEY_WIDTH, run_demo

    if args.size < KEY_WIDTH:
        raise CommandLineError(f"--size {args.size}: a record value needs >= {KEY_WIDTH} bytes")
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
    add_node_command(sub)
    add_format_command(sub)

    def bootstrap(p: argparse.ArgumentParser, timeout_help: str) -> None:
        p.add_argument(
            "--bootstrap",
            type=types.bootstrap_list,
            required=True,
            help="host:port[,host:port...] of any node(s)",
        )
        p.add_argument("--topic", default="raftcore", help="the cluster's topic")
        p.add_argument(
            "--timeout-ms",
            type=types.positive_int,
            default=10_000,
            help=timeout_help + " (an address that refuses, with no node ever answering, "
            "fails at once)",
        )
        add_command_config_option(p)

    p = sub.add_parser(
        "describe-quorum", help="leader, epoch, high watermark and every replica's progress"
    )
    bootstrap(
        p,
        "the longest the command waits for a node that does not answer and for the leader's answer",
    )
    p.add_argument(
        "--watch", action="store_true", help="ask again every --interval seconds until Ctrl-C"
    )
    p.add_argument(
        "--interval",
        type=types.positive_float,
        default=1.0,
        help="seconds between tables with --watch",
    )
    add_partition_option(p, "describe-quorum")
    p.set_defaults(func=_cmd_describe_quorum)

    p = sub.add_parser("produce", help="write records: lines of stdin, the arguments, or generated")
    bootstrap(
        p,
        "the longest the command waits: for a node that does not answer, for a leader, and "
        "for a record's verdict; it gives up when nothing was acknowledged for this long and "
        "reports what was not written apart from what may have been",
    )
    add_partition_option(p, "produce")
    p.add_argument("values", nargs="*", help="record values (default: one per line of stdin)")
    p.add_argument("--key-separator", default=None, help="split each line into key and value")
    p.add_argument(
        "--generate",
        type=types.non_negative_int,
        default=0,
        metavar="N",
        help="write N generated records",
    )
    p.add_argument(
        "--size", type=types.positive_int, default=100, help="value size of generated records"
    )
    p.add_argument("--batch", type=types.positive_int, default=1000, help="records per batch")
    p.add_argument(
        "--acks",
        type=int,
        choices=(-1, 0, 1),
        default=-1,
        help="-1: every voter (idempotent), 1: the leader, 0: no answer",
    )
    p.add_argument(
        "--compression",
        choices=("none", "gzip", "snappy", "lz4", "zstd"),
        default="none",
        help="compression of the record batches (Kafka's compression.type)",
    )
    p.set_defaults(func=_cmd_produce)

    p = sub.add_parser(
        "consume",
        help="print the committed records up to the high watermark (--follow: and then wait "
        "for more)",
    )
    bootstrap(
        p,
        "the longest the command waits for a node that does not answer and for a leader to "
        "serve a fetch (a leader change meanwhile is retried within it); records already "
        "printed stay printed",
    )
    p.add_argument(
        "--from",
        dest="start",
        type=types.start_position,
        default="earliest",
        metavar="POSITION",
        help="earliest, latest, or an offset >= 0",
    )
    add_partition_option(p, "consume")
    p.add_argument(
        "--follow",
        action="store_true",
        help="do not stop at the high watermark: print records as they are committed, until "
        "Ctrl-C, --max or --idle-timeout-ms",
    )
    p.add_argument(
        "--max",
        type=types.positive_int,
        default=None,
        help="stop after this many records (or at the high watermark, without --follow)",
    )
    p.add_argument(
        "--idle-timeout-ms",
        type=types.positive_int,
        default=None,
        help="stop when nothing arrives for this long (for --follow)",
    )
    p.add_argument("--print-offsets", action="store_true", help="print offset, key and value")
    p.set_defaults(func=_cmd_consume)

    p = sub.add_parser(
        "demo",
        help="3 node processes on loopback: write, SIGKILL the leader midway, restart it, "
        "check every record on every node",
    )
    p.add_argument("--dir", default=None, help="where the nodes keep their data (default: temp)")
    p.add_argument("--records", type=types.positive_int, default=200_000, help="records to write")
    p.add_argument(
        "--batch", type=types.positive_int, default=1000, help="records per producer batch"
    )
    p.add_argument(
        "--size", type=types.positive_int, default=100, help="bytes per record value (>= 12)"
    )
    p.add_argument(
        "--keep",
        action="store_true",
        help="keep the data directory afterwards (it is always kept when the demo fails)",
    )
    p.add_argument(
        "--tls", action="store_true", help="mutual TLS everywhere (certificates in DIR/tls)"
    )
    p.set_defaults(func=_cmd_demo)


def build_parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(
        prog="raftcore",
        description="raftcore: an embeddable, Kafka-compatible Raft replicated log.",
        formatter_class=DefaultsHelpFormatter,
    )
    parser.add_argument(
        "--version", action="version", version=f"raftcore {__version__}", help="print it and exit"
    )
    add_logging_options(parser, top=True)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser(
        "dump-log", help="print the batches and snapshots of a log directory (read-only)"
    )
    p.add_argument("directory", help="the log directory, or a node's data directory")
    p.add_argument("--records", action="store_true", help="print every record too")
    p.add_argument(
        "--segment",
        type=types.non_negative_int,
        default=None,
        metavar="BASE_OFFSET",
        help="only the segment with this base offset",
    )
    p.set_defaults(func=_cmd_dump_log)

    p = sub.add_parser(
        "verify-log",
        help="check every batch and snapshot of a log directory (read-only); exit 1 at the "
        "first bad batch or any bad snapshot, or when there is nothing to check",
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
    p.add_argument("--records", type=types.positive_int, default=30_000, help="records to write")
    p.set_defaults(func=run_storage_demo)

    add_snapshot_commands(sub)
    add_spark_commands(sub)
    add_users_commands(sub)
    add_certs_command(sub)
    _add_cluster_commands(sub)
    add_quorum_commands(sub)
    add_topic_commands(sub)
    _finish(parser)
    return parser


def _finish(parser: argparse.ArgumentParser) -> None:
    """Every command, whoever added it: its defaults in its help, and the logging options
    (accepted before or after the command's name)."""
    for p in every_parser(parser):
        p.formatter_class = DefaultsHelpFormatter
        if p is not parser:
            add_logging_options(p, top=False)
            if isinstance(p, ArgumentParser):
                p.command = True


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    configure_logging(args, getattr(args, "default_log_level", "warning"))
    where = f"raftcore {args.command}"
    try:
        return int(args.func(args))
    except BrokenPipeError:  # the reader went away (`| head`): end quietly
        _quiet_stdout()
        return 0
    except CommandLineError as exc:
        print(f"{where}: error: {exc}", file=sys.stderr)
        return 2
    except (RaftcoreError, OSError) as exc:
        print(f"{where}: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # a bug: one line, the traceback only when debugging
        if debugging(args):
            traceback.print_exc()
        hint = "" if debugging(args) else " (-v shows the traceback)"
        print(f"raftcore: error: {type(exc).__name__}: {exc}{hint}", file=sys.stderr)
        return 1


def _quiet_stdout() -> None:
    """Point stdout at /dev/null, so the interpreter's final flush of what is still buffered
    cannot fail (and print "Exception ignored ... BrokenPipeError") on a closed pipe."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    finally:
        os.close(devnull)


if __name__ == "__main__":
    sys.exit(main())
