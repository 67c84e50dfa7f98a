"""``raftcore quorum``: change the voters of a running cluster (KIP-853) and hand leadership
over. Each command prints one line -- what it did, or why not with Kafka's error name -- and
exits 0 when it was done, 1 when not, 2 for bad arguments.

- ``add-voter --id N [--directory-id U]``: the replica must run (``raftcore node --bootstrap``)
  and have caught up with the leader: it is added by its directory id and the endpoint it
  fetches with, both from DescribeQuorum;
- ``remove-voter --id N [--directory-id U]``: the leader itself may be removed (it resigns
  once the change is committed);
- ``transfer-leader --to N``: the leader waits until voter N has its whole log, then resigns
  in its favour.
"""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

from raftcore.cli import args as types
from raftcore.security.client_config import add_command_config_option, load_client_security

__all__ = ["add_quorum_commands"]


def _directory_id(text: str) -> bytes:
    from raftcore.raft.voters import parse_directory_id

    try:
        return parse_directory_id(text.strip())
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _bootstrap(args: argparse.Namespace) -> list[str]:
    return [b.strip() for b in args.bootstrap.split(",") if b.strip()]


def _run(call: Any, args: argparse.Namespace, *positional: object) -> int:
    """Run one voter command against the cluster and print its one line (exit 1 if refused)."""
    result = asyncio.run(
        call(
            _bootstrap(args),
            *positional,
            topic=args.topic,
            timeout_s=args.timeout_ms / 1000,
            security=load_client_security(args.command_config),
        )
    )
    print(result.line)
    return 0 if result.ok else 1


def _cmd_add_voter(args: argparse.Namespace) -> int:
    from raftcore.client.voters import add_voter

    return _run(add_voter, args, args.id, args.directory_id)


def _cmd_remove_voter(args: argparse.Namespace) -> int:
    from raftcore.client.voters import remove_voter

    return _run(remove_voter, args, args.id, args.directory_id)


def _cmd_transfer_leader(args: argparse.Namespace) -> int:
    from raftcore.client.voters import transfer_leadership

    return _run(transfer_leadership, args, args.to)


def add_quorum_commands(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    quorum = sub.add_parser(
        "quorum", help="change the voters of a running cluster, hand leadership over"
    )
    commands = quorum.add_subparsers(dest="quorum_command", required=True, metavar="COMMAND")

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "--bootstrap",
            type=types.bootstrap_list,
            required=True,
            help="host:port[,host:port...] of any node(s) of the cluster",
        )
        p.add_argument("--topic", default="raftcore", help="the cluster's topic")
        p.add_argument(
            "--timeout-ms",
            type=types.positive_int,
            default=30_000,
            help="how long the change may take: the command ends within it (the leader is "
            "told to give up 5%% of it sooner, at most 5 s, so that its verdict arrives in "
            "time; a change written but not committed by then may still be)",
        )
        add_command_config_option(p)

    p = commands.add_parser(
        "add-voter",
        help="make a replica that fetches from the leader (started with --bootstrap) a voter",
    )
    common(p)
    p.add_argument("--id", type=types.node_id, required=True, help="the replica's node id")
    p.add_argument(
        "--directory-id",
        type=_directory_id,
        default=None,
        metavar="U",
        help="the replica's directory id (directory.id in its meta.properties; write it as "
        "--directory-id=U: it may start with '-'; default: the one replica of that id that "
        "fetches from the leader now)",
    )
    p.set_defaults(func=_cmd_add_voter)

    p = commands.add_parser("remove-voter", help="remove a voter (the leader too: it resigns)")
    common(p)
    p.add_argument("--id", type=types.node_id, required=True, help="the voter's node id")
    p.add_argument(
        "--directory-id",
        type=_directory_id,
        default=None,
        metavar="U",
        help="remove it only if this is its directory id (as --directory-id=U)",
    )
    p.set_defaults(func=_cmd_remove_voter)

    p = commands.add_parser(
        "transfer-leader", help="hand leadership to a voter once it has the whole log"
    )
    common(p)
    p.add_argument("--to", type=types.node_id, required=True, help="the voter to lead")
    p.set_defaults(func=_cmd_transfer_leader)
