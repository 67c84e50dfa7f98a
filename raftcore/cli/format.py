"""``raftcore format``: make an empty directory a node's data directory (Kafka's
``kafka-storage format``). A node never formats itself: two wiped voters that did would be a
majority of an empty log, and the voter holding the records would truncate to follow them.

Exactly one of:

- ``--initial-voters 1@host:port,...`` (Kafka's ``--initial-controllers``): a voter of a new
  cluster, the same list on each of them (``--voters`` when they start);
- ``--standalone``: a new cluster of this node alone;
- ``--no-initial-voters``: a node that joins an existing cluster (a wiped voter's new disk, a
  new node): it comes in as an observer and counts once ``raftcore quorum add-voter`` (or
  ``--auto-join``) takes it in.
"""

from __future__ import annotations

import argparse

from raftcore.cli import args as types
from raftcore.cli.args import CommandLineError

__all__ = ["add_format_command"]


def _cmd_format(args: argparse.Namespace) -> int:
    from raftcore.endpoints import parse_voters
    from raftcore.node.data_dir import format_data_dir
    from raftcore.node.preflight import check_data_dir
    from raftcore.raft.voters import directory_id_text

    if not args.cluster_id.strip():
        raise CommandLineError("--cluster-id: a cluster id is required (the same on every node)")
    initial: frozenset[int] | None
    if args.initial_voters:
        initial = frozenset(parse_voters(args.initial_voters))
        if args.id not in initial:
            ids = ", ".join(map(str, sorted(initial)))
            raise CommandLineError(
                f"--id {args.id} is not in --initial-voters ({ids}): format a node that "
                "joins an existing cluster with --no-initial-voters"
            )
    elif args.standalone:
        initial = frozenset({args.id})
    else:
        initial = None
    try:
        check_data_dir(args.data_dir)
    except ValueError as exc:
        raise CommandLineError(str(exc)) from None
    directory_id = format_data_dir(
        args.data_dir,
        cluster_id=args.cluster_id,
        node_id=args.id,
        initial_voters=initial,
        topic=args.topic,
        partitions=args.partitions,
    )
    voters = "no initial voters" if initial is None else f"initial voters {sorted(initial)}"
    print(
        f"formatted {args.data_dir}: cluster {args.cluster_id}, node {args.id}, directory "
        f"{directory_id_text(directory_id)}, {voters}, {args.partitions} partition(s) of "
        f"{args.topic}"
    )
    return 0


def add_format_command(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "format",
        help="format an empty data directory for a node (a node never formats itself)",
        description="Write meta.properties (cluster id, node id, a new directory id) and, "
        "for a new cluster, its first voter set into an empty directory. Refuses a directory "
        "already formatted or holding a log.",
    )
    p.add_argument("--data-dir", required=True, help="the node's data directory (empty or new)")
    p.add_argument("--cluster-id", required=True, help="the cluster's id (the same on every node)")
    p.add_argument("--id", type=types.node_id, required=True, help="this node's id (>= 0)")
    p.add_argument("--topic", default="raftcore", help="the topic the node serves")
    p.add_argument(
        "--partitions",
        type=types.positive_int,
        default=1,
        help="the topic's partitions (Kafka's num.partitions): one directory and Raft group "
        "each; the node is started with the same --partitions (default 1)",
    )
    voters = p.add_mutually_exclusive_group(required=True)
    voters.add_argument(
        "--initial-voters",
        type=types.voter_list,
        default=None,
        metavar="ID@HOST:PORT[,...]",
        help="the voters of a new cluster, the same list as their --voters (Kafka's "
        "--initial-controllers)",
    )
    voters.add_argument(
        "--standalone",
        action="store_true",
        help="a new cluster whose only voter is this node",
    )
    voters.add_argument(
        "--no-initial-voters",
        action="store_true",
        help="a node that joins an existing cluster: an observer until 'raftcore quorum "
        "add-voter' (or --auto-join) takes it in",
    )
    p.set_defaults(func=_cmd_format)
