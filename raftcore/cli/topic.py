"""``raftcore topic``: create, list, describe and delete the topics of a running cluster, as
Kafka's ``kafka-topics`` does, through the controller (:mod:`raftcore.client.topics`).

- ``create --topic T --partitions N --replication-factor R [--config K=V ...]
  [--validate-only]``: placed by the controller over the nodes;
- ``list``: every topic's name, one a line;
- ``describe [--topic T]``: each topic and partition with its leader, replicas and in-sync
  replicas, in ``kafka-topics --describe``'s layout;
- ``delete --topic T``.

``create`` and ``delete`` print one line (what was done, or Kafka's error name and why) and
exit 0 when done, 1 when refused; ``describe`` of a topic that does not exist exits 1.
The node's own topic (``--topic`` of ``raftcore node``, ``raftcore`` by default) is listed and
described too; it is made by ``raftcore format`` and never created or deleted here.
"""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

from raftcore.cli import args as types
from raftcore.error_codes import Errors
from raftcore.security.client_config import add_command_config_option, load_client_security

__all__ = ["add_topic_commands"]


def _bootstrap(args: argparse.Namespace) -> list[str]:
    return [b for b in args.bootstrap.split(",") if b]


def _config(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {text!r}")
    return key.strip(), value.strip()


def _connection(args: argparse.Namespace) -> dict[str, Any]:
    """The options every topic command hands the client: its deadline and its security."""
    return {
        "timeout_s": args.timeout_ms / 1000,
        "security": load_client_security(args.command_config),
    }


def _cmd_create(args: argparse.Namespace) -> int:
    from raftcore.client.topics import create_topic

    outcome = asyncio.run(
        create_topic(
            _bootstrap(args),
            args.topic,
            partitions=args.partitions,
            replication_factor=args.replication_factor,
            configs=dict(args.config),
            validate_only=args.validate_only,
            **_connection(args),
        )
    )
    print(outcome.line)
    return 0 if outcome.ok else 1


def _cmd_delete(args: argparse.Namespace) -> int:
    from raftcore.client.topics import delete_topic

    outcome = asyncio.run(
        delete_topic(
            _bootstrap(args),
            args.topic,
            **_connection(args),
        )
    )
    print(outcome.line)
    return 0 if outcome.ok else 1


def _cmd_list(args: argparse.Namespace) -> int:
    from raftcore.client.topics import describe_topics

    topics = asyncio.run(
        describe_topics(
            _bootstrap(args),
            None,
            **_connection(args),
        )
    )
    for t in sorted(topics, key=lambda t: t.name):
        print(t.name)
    return 0


def _cmd_describe(args: argparse.Namespace) -> int:
    from raftcore.client.topics import describe_topics, format_topics

    topics = asyncio.run(
        describe_topics(
            _bootstrap(args),
            None if args.topic is None else [args.topic],
            **_connection(args),
        )
    )
    print(format_topics(sorted(topics, key=lambda t: t.name)))
    return 0 if all(t.error == Errors.NONE for t in topics) else 1


def add_topic_commands(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    topic = sub.add_parser("topic", help="create, list, describe and delete topics")
    commands = topic.add_subparsers(dest="topic_command", required=True, metavar="COMMAND")

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "--bootstrap",
            type=types.bootstrap_list,
            required=True,
            help="host:port[,host:port...] of any node(s) of the cluster",
        )
        p.add_argument(
            "--timeout-ms",
            type=types.positive_int,
            default=30_000,
            help="how long the command may take (a topic whose records are written but not "
            "committed by then may still be created or deleted)",
        )
        add_command_config_option(p)

    p = commands.add_parser("create", help="create a topic, its replicas placed by the cluster")
    common(p)
    p.add_argument("--topic", required=True, help="the topic's name")
    p.add_argument(
        "--partitions",
        type=types.positive_int,
        default=1,
        help="how many partitions (each a Raft group of its own; default 1)",
    )
    p.add_argument(
        "--replication-factor",
        type=types.positive_int,
        default=1,
        help="how many replicas each partition has, at most the number of nodes (default 1)",
    )
    p.add_argument(
        "--config",
        type=_config,
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a topic config (retention.ms, retention.bytes, segment.bytes, segment.ms, "
        "max.message.bytes, ...); again for more",
    )
    p.add_argument(
        "--validate-only",
        action="store_true",
        help="check the request with the controller, create nothing",
    )
    p.set_defaults(func=_cmd_create)

    p = commands.add_parser("list", help="every topic's name")
    common(p)
    p.set_defaults(func=_cmd_list)

    p = commands.add_parser(
        "describe", help="the topics' partitions with their leader, replicas and in-sync replicas"
    )
    common(p)
    p.add_argument("--topic", default=None, help="this topic only (default: every topic)")
    p.set_defaults(func=_cmd_describe)

    p = commands.add_parser("delete", help="delete a topic and every replica of it")
    common(p)
    p.add_argument("--topic", required=True, help="the topic's name")
    p.set_defaults(func=_cmd_delete)
