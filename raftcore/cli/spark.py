"""``raftcore spark export|snapshot``: the Spark jobs from the command line, on a local Spark
session of their own (``--master``, default ``local[*]``; UI off).

Each takes a running cluster (``--bootstrap host:port,...``) or a node's data directory (the
positional ``DATA_DIR``). Arguments are checked before Spark starts. Exit codes: 0 done;
1 the job was refused or failed (the message says why: an offset off a batch boundary, a log
whose start moved, ...); 2 bad arguments.

This module imports no Spark until a command runs: ``raftcore --help`` stays fast and works
without pyspark.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from raftcore.cli.args import bootstrap_list, non_negative_int, positive_int
from raftcore.security.client_config import add_command_config_option

__all__ = ["add_spark_commands", "local_session"]


class _Usage(Exception):
    """Bad arguments: one line, exit 2."""


def local_session(master: str) -> tuple[Any, bool]:
    """A SparkSession for one job and whether the job owns it (stops it after): the active
    session when the command runs inside a Spark application (``raftcore.cli.main`` from a
    notebook), else a new one on ``master``, UI and console progress off, whose Python
    workers run this interpreter. raftcore is registered either way."""
    try:
        from pyspark.sql import SparkSession
    except ImportError:
        raise _Usage("needs pyspark>=4.0 and pyarrow: pip install 'raftcore[spark]'") from None
    from raftcore.spark import register

    active = SparkSession.getActiveSession()
    if active is not None:
        register(active)
        return active, False

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    spark = (
        SparkSession.builder.master(master)
        .appName("raftcore-jobs")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark, True


def _source(args: argparse.Namespace) -> dict[str, Any]:
    if bool(args.bootstrap) == bool(args.data_dir):
        raise _Usage(
            "give either --bootstrap host:port[,...] (a running cluster) or DATA_DIR (a node's "
            "data directory)" + (", not both" if args.bootstrap else "")
        )
    if args.data_dir is not None and not Path(args.data_dir).is_dir():
        raise _Usage(f"{args.data_dir}: no such directory")
    security = None
    if args.command_config is not None:  # TLS to the cluster: librdkafka's properties
        if not args.bootstrap:
            raise _Usage("--command-config is for a running cluster (--bootstrap)")
        from raftcore.security.client_config import load_client_security
        from raftcore.security.properties import read_properties

        try:
            load_client_security(args.command_config)  # checked now: one line
        except ValueError as exc:
            raise _Usage(str(exc)) from None
        security = read_properties(args.command_config)
    return {"bootstrap": args.bootstrap, "path": args.data_dir, "security": security}


def _progress(args: argparse.Namespace, label: str) -> Any:
    from raftcore.logtools import Progress

    return Progress(label, sys.stderr, unit="tasks", plain_every=0.1 if args.progress else 0.0)


def _cmd_export(args: argparse.Namespace) -> int:
    from raftcore.spark.export import export

    source = _source(args)
    if Path(args.out).exists() and not args.overwrite:
        raise _Usage(f"{args.out} exists: give another --out, or --overwrite")
    if args.start is not None and args.end is not None and args.end < args.start:
        raise _Usage(f"--end {args.end} is below --start {args.start}")
    spark, owned = local_session(args.master)
    try:
        summary = export(
            spark,
            out=args.out,
            start_offset=args.start,
            end_offset=args.end,
            range_records=args.range_records,
            partition_records=args.partition_records,
            overwrite=args.overwrite,
            topic=args.topic,
            progress=_progress(args, "exporting"),
            request_timeout_ms=args.timeout_ms,
            **source,
        )
    finally:
        if owned:
            spark.stop()
    print(summary.line())
    return 0


def _cmd_snapshot(args: argparse.Namespace) -> int:
    from raftcore.spark.snapshot_job import build_snapshot

    source = _source(args)
    if not Path(args.out_dir).is_dir():
        raise _Usage(f"--out-dir {args.out_dir}: no such directory")
    spark, owned = local_session(args.master)
    try:
        result = build_snapshot(
            spark,
            out_dir=args.out_dir,
            offset=args.offset,
            partition_records=args.partition_records,
            topic=args.topic,
            progress=_progress(args, "snapshot"),
            request_timeout_ms=args.timeout_ms,
            **source,
        )
    finally:
        if owned:
            spark.stop()
    print(result.line())
    return 0


def _guarded(command: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    def run(args: argparse.Namespace) -> int:
        from raftcore.spark.options import SparkSourceError

        where = f"raftcore spark {args.spark_command}"
        try:
            return command(args)
        except _Usage as exc:
            print(f"{where}: {exc}", file=sys.stderr)
            return 2
        except SparkSourceError as exc:
            print(f"{where}: {exc}", file=sys.stderr)
            return 1

    return run


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("data_dir", nargs="?", metavar="DATA_DIR", help="a node's data directory")
    p.add_argument(
        "--bootstrap",
        type=bootstrap_list,
        help="host:port[,host:port...] of a running cluster",
    )
    p.add_argument("--topic", default="raftcore", help="the cluster's topic")
    add_command_config_option(p)
    p.add_argument(
        "--timeout-ms",
        type=positive_int,
        default=30_000,
        help="with --bootstrap: give up on a node that does not answer within this long "
        "(default 30000, the Spark source's requestTimeoutMs)",
    )
    p.add_argument(
        "--partition-records",
        type=positive_int,
        default=1_000_000,
        help="offsets per Spark task (default 1,000,000)",
    )
    p.add_argument("--master", default="local[*]", help="Spark master (default local[*])")
    p.add_argument(
        "--progress", action="store_true", help="progress lines on stderr even when not a TTY"
    )


def add_spark_commands(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Register ``raftcore spark ...`` on the top-level subparsers."""
    top = sub.add_parser("spark", help="Spark jobs: export a log to Parquet, build a snapshot")
    cmds = top.add_subparsers(dest="spark_command", required=True, metavar="SUBCOMMAND")

    p = cmds.add_parser("export", help="the committed records as Parquet, by offset range")
    _common(p)
    p.add_argument("--out", required=True, help="the Parquet directory to create")
    p.add_argument(
        "--range-records",
        type=positive_int,
        default=1_000_000,
        help="offsets per offset_range=... directory (default 1,000,000)",
    )
    p.add_argument("--start", type=non_negative_int, help="first offset (default: the log start)")
    p.add_argument(
        "--end",
        type=non_negative_int,
        help="export below this offset; with DATA_DIR: the committed offset (high watermark)",
    )
    p.add_argument("--overwrite", action="store_true", help="replace --out if it exists")
    p.set_defaults(func=_guarded(_cmd_export))

    p = cmds.add_parser(
        "snapshot", help="a KIP-630 snapshot of the key/value state at a committed offset"
    )
    _common(p)
    p.add_argument("--out-dir", required=True, help="where to write <offset>-<epoch>.checkpoint")
    p.add_argument(
        "--offset",
        type=non_negative_int,
        help="the snapshot's end offset: a committed batch boundary (default: the high "
        "watermark of a cluster; with DATA_DIR, required unless it holds a snapshot)",
    )
    p.set_defaults(func=_guarded(_cmd_snapshot))
