"""``raftcore node``: one node of a cluster, as a process (raftcore.node.runner), with every
option checked before anything is written to its data directory."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

from raftcore.cli import args as types
from raftcore.cli.args import CommandLineError
from raftcore.cli.users import add_sasl_node_options
from raftcore.endpoints import Endpoint
from raftcore.security.node_options import add_node_security_options

__all__ = ["add_node_command"]


def _cmd_node(args: argparse.Namespace) -> int:
    from raftcore.cli.users import sasl_listener_security
    from raftcore.endpoints import parse_endpoint, parse_endpoints, parse_voters
    from raftcore.log import LogConfig
    from raftcore.node.config import NodeConfig, parse_principals
    from raftcore.node.preflight import check_data_dir, check_data_dir_identity
    from raftcore.node.runner import check_event_loop, run_node
    from raftcore.raft.config import QuorumConfig
    from raftcore.raft.retention import RetentionConfig
    from raftcore.security.node_options import node_listener

    try:
        if bool(args.voters) == bool(args.bootstrap):
            raise ValueError(
                "give --voters (the voters of a new cluster) or --bootstrap (servers of an "
                "existing cluster to join through), not both"
                if args.voters
                else "give --voters (the voters of a new cluster) or --bootstrap (servers of "
                "an existing cluster to join through)"
            )
        if args.auto_join and not args.bootstrap:
            raise ValueError("--auto-join is for a node that joins with --bootstrap")
        voters = parse_voters(args.voters) if args.voters else {}
        bootstrap = parse_endpoints(args.bootstrap) if args.bootstrap else ()
        listen = parse_endpoint(args.listen) if args.listen else None
        # a node that joins is one of several: its listener must let the others prove who
        # they are (--listeners, --ssl-*, --config)
        tls_listen, security = node_listener(args, len(voters) or 2)
        listen = parse_endpoint(tls_listen) if tls_listen else listen
        advertised = parse_endpoint(args.advertised) if args.advertised else None
        node_listen = parse_endpoint(args.node_listen) if args.node_listen else None
        node_advertised = parse_endpoint(args.node_advertised) if args.node_advertised else None
        if node_advertised is not None and node_listen is None:
            raise ValueError("--node-advertised is for a node listener: give --node-listen too")
        client_option = "--listeners" if tls_listen else "--listen"
        check_identity(
            args,
            voters,
            {
                client_option: listen,
                "--advertised": advertised,
                "--node-listen": node_listen,
                "--node-advertised": node_advertised,
            },
        )
        check_node_listener(args.id, voters, node_listen, {client_option: listen})
        quorum = QuorumConfig(
            election_timeout_ms=args.election_timeout_ms,
            fetch_timeout_ms=args.fetch_timeout_ms,
            high_watermark_linger_ms=args.high_watermark_linger_ms,
            snapshot_min_records=args.snapshot_min_records,
            snapshot_min_bytes=args.snapshot_min_bytes,
            snapshot_interval_ms=args.snapshot_interval_ms,
            max_replication_lag_ms=args.max_replication_lag_ms,
            replica_fetch_response_max_bytes=args.replica_fetch_response_max_bytes,
            # With retention on, the log start may move on every node (and DeleteRecords with
            # it): a state machine's snapshot, or an empty one where the node only replicates.
            # Off, a node without snapshot triggers keeps its whole log, as before.
            snapshots_on_request=args.retention_ms > 0 or args.retention_bytes > 0,
        )
        log = LogConfig(segment_bytes=args.segment_bytes)
        config = NodeConfig(
            node_id=args.id,
            voters=voters,
            data_dir=Path(args.data_dir),
            cluster_id=args.cluster_id,
            listen=listen,
            advertised=advertised,
            node_listen=node_listen,
            node_advertised=node_advertised,
            topic=args.topic,
            partitions=args.partitions,
            offsets_topic_num_partitions=args.offsets_topic_num_partitions,
            group_initial_rebalance_delay_ms=args.group_initial_rebalance_delay_ms,
            auto_leader_rebalance=args.auto_leader_rebalance == "true",
            leader_imbalance_check_interval_s=args.leader_imbalance_check_interval_seconds,
            leader_imbalance_per_broker_percentage=args.leader_imbalance_per_broker_percentage,
            quorum=quorum,
            log=log,
            flush=args.flush,
            flush_interval_ms=args.flush_interval_ms,
            metrics_port=args.metrics_port,
            metrics_host=args.metrics_host,
            metrics_max_partitions=args.metrics_max_partitions,
            fetch_max_bytes=args.fetch_max_bytes,
            security=security,
            max_connections=args.max_connections,
            max_connections_per_ip=args.max_connections_per_ip,
            connections_max_idle_ms=args.connections_max_idle_ms,
            login_timeout_ms=args.login_timeout_ms,
            frame_receive_timeout_ms=args.frame_receive_timeout_ms,
            queued_max_request_bytes=args.queued_max_request_bytes,
            bootstrap=bootstrap,
            auto_join=args.auto_join,
            admin_principals=parse_principals(args.admin_principals or ""),
            log_scrub_bytes_per_second=args.log_scrub_bytes_per_second,
            log_scrub_interval_ms=args.log_scrub_interval_ms,
            retention=RetentionConfig(
                retention_ms=args.retention_ms,
                retention_bytes=args.retention_bytes,
                segment_ms=args.segment_ms,
                check_interval_ms=args.log_retention_check_interval_ms,
            ),
        )
        config = dataclasses.replace(config, security=sasl_listener_security(args, config.security))
        if quorum.snapshots_enabled and args.state_machine == "none":
            raise ValueError(
                "snapshots need something to snapshot: add --state-machine lmdb (a node "
                "without a state machine keeps its whole log)"
            )
        check_data_dir(config.data_dir)  # before anything is written there
        check_data_dir_identity(config.data_dir, config.node_id, config.cluster_id)
        check_event_loop(args.event_loop)
    except ValueError as exc:
        raise CommandLineError(str(exc)) from None
    existed = config.data_dir.exists()
    try:
        return run_node(
            config,
            ready_file=args.ready_file,
            state_machine=args.state_machine,
            state_map_size=args.state_map_size,
            event_loop=args.event_loop,
        )
    except OSError as exc:
        # The preflight passed but the directory could not be made (/proc/nope as root: the
        # parent is writable by permissions, yet holds no new directories): name the option
        # rather than print a bare "[Errno 2] ...: '/proc/nope'".
        if existed or exc.filename is None or not _is_or_above(exc.filename, config.data_dir):
            raise
        reason = exc.strerror or str(exc)
        raise CommandLineError(f"--data-dir {config.data_dir}: cannot create: {reason}") from None


def _is_or_above(path: str, data_dir: Path) -> bool:
    """Is ``path`` the data directory or one of its parents (what ``mkdir -p`` creates)?"""
    target = Path(path).absolute()
    return target == data_dir.absolute() or target in data_dir.absolute().parents


def check_identity(
    args: argparse.Namespace, voters: dict[int, Endpoint], addresses: dict[str, Endpoint | None]
) -> None:
    """ValueError (one line, naming the option) when this node would pass for another: an
    ``--id`` that is not in ``--voters`` (unless ``--observer``), or a listen or advertised
    address that is another voter's. A node started with ``--voters 1@a,2@b,3@c --id 4
    --listen a`` ran as node 4 on node 1's address."""
    if args.observer and not voters:
        raise ValueError(
            "--observer is for a node started with --voters (one started with --bootstrap "
            "is an observer until it is added)"
        )
    if voters and args.observer and args.id in voters:
        raise ValueError(f"--observer: node {args.id} is in --voters; a voter is not an observer")
    if voters and args.observer and next(iter(addresses.values())) is None:
        raise ValueError(f"--observer needs --listen HOST:PORT (node {args.id} is not in --voters)")
    if voters and args.id not in voters and not args.observer:
        ids = ", ".join(map(str, sorted(voters)))
        raise ValueError(
            f"--id {args.id} is not in --voters ({ids}): a node that joins a running cluster "
            "starts with --bootstrap instead (or --observer --listen HOST:PORT to only "
            "replicate)"
        )
    for option, address in addresses.items():
        if address is None:
            continue
        for voter, endpoint in sorted(voters.items()):
            if voter != args.id and _same_address(address, endpoint):
                raise ValueError(
                    f"{option} {address} is voter {voter}'s address in --voters, not node "
                    f"{args.id}'s"
                )


def check_node_listener(
    node_id: int,
    voters: dict[int, Endpoint],
    node_listen: Endpoint | None,
    client: dict[str, Endpoint | None],
) -> None:
    """ValueError (one line) when the client listener is this node's own entry in
    ``--voters``, which names its node listener once it has one: the other nodes would send
    their Raft RPCs to a listener that refuses them."""
    own = voters.get(node_id)
    if node_listen is None or own is None:
        return
    for option, address in client.items():
        if address is not None and _same_address(address, own):
            raise ValueError(
                f"{option} {address} is node {node_id}'s entry in --voters, which names its "
                "node listener when --node-listen is given: give the client listener another "
                "port"
            )


def _same_address(a: Endpoint, b: Endpoint) -> bool:
    return a.port == b.port and a.host.lower() == b.host.lower()


def add_node_command(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("node", help="run one node of a cluster (until SIGTERM/SIGINT)")
    p.add_argument("--id", type=types.node_id, required=True, help="this node's id (>= 0)")
    p.add_argument(
        "--voters",
        type=types.voter_list,
        default=None,
        help="the voters of a new cluster, as Kafka's controller.quorum.voters: "
        "1@host:port,2@host:port,... (the same list on each of them)",
    )
    p.add_argument(
        "--bootstrap",
        type=types.bootstrap_list,
        default=None,
        metavar="HOST:PORT[,...]",
        help="instead of --voters: nodes of an existing cluster to join through (Kafka's "
        "controller.quorum.bootstrap.servers). The node starts as an observer and copies the "
        "log; 'raftcore quorum add-voter' makes it a voter",
    )
    p.add_argument(
        "--auto-join",
        action="store_true",
        help="with --bootstrap: once caught up, ask the leader to add this node as a voter "
        "(Kafka's controller.quorum.auto.join.enable)",
    )
    p.add_argument(
        "--observer",
        action="store_true",
        help="with --voters: this node (its --id not among them) only replicates the log, "
        "as Kafka's brokers do; it needs --listen",
    )
    p.add_argument(
        "--admin-principals",
        default=None,
        metavar="User:NAME[,...]",
        help="on a TLS or SASL listener, the principals that may add and remove voters and "
        "hand leadership over (Kafka's super.users); a node may only add itself",
    )
    p.add_argument(
        "--listen",
        type=types.endpoint,
        default=None,
        help="host:port to listen on (default: this node's entry in --voters; required with "
        "--bootstrap, and with --node-listen, where it takes clients only)",
    )
    p.add_argument(
        "--advertised",
        type=types.endpoint,
        default=None,
        help="host:port clients are told (default: listen)",
    )
    p.add_argument(
        "--node-listen",
        type=types.endpoint,
        default=None,
        metavar="HOST:PORT",
        help="a listener of its own for the Raft traffic between nodes (Kafka's "
        "controller.listener.names): --voters then name node listeners, --listen takes clients "
        "only and refuses the Raft RPCs (default: one listener serves both)",
    )
    p.add_argument(
        "--node-advertised",
        type=types.endpoint,
        default=None,
        metavar="HOST:PORT",
        help="host:port the other nodes are told for the node listener (default: this node's "
        "entry in --voters, else --node-listen)",
    )
    p.add_argument(
        "--data-dir",
        required=True,
        help="the node's data directory, formatted once by 'raftcore format' (a node never "
        "formats itself)",
    )
    add_node_security_options(p)
    p.add_argument("--cluster-id", required=True, help="the cluster's id (the same on every node)")
    p.add_argument("--topic", default="raftcore", help="the topic Kafka clients see")
    p.add_argument(
        "--partitions",
        type=types.positive_int,
        default=1,
        help="the topic's partitions, each its own Raft group over the voters (Kafka's "
        "num.partitions); the count the data directory was formatted with (default 1)",
    )
    p.add_argument(
        "--offsets-topic-num-partitions",
        type=types.positive_int,
        default=3,
        help="partitions of __consumer_offsets, where consumer groups commit offsets, each its "
        "own Raft group over the voters (Kafka's offsets.topic.num.partitions; default 3); "
        "fixed at the node's first start",
    )
    p.add_argument(
        "--group-initial-rebalance-delay-ms",
        type=types.non_negative_int,
        default=3000,
        help="an empty consumer group's first rebalance waits this long for more members "
        "(Kafka's group.initial.rebalance.delay.ms; default 3000)",
    )
    p.add_argument(
        "--auto-leader-rebalance",
        choices=("true", "false"),
        default="true",
        help="hand each partition this node leads to its preferred leader (voters in id "
        "order, partition p prefers the (p mod voters)th) once that voter is live, caught up "
        "and imbalanced (Kafka's auto.leader.rebalance.enable; default true)",
    )
    p.add_argument(
        "--leader-imbalance-check-interval-seconds",
        type=types.positive_float,
        default=300.0,
        help="how often the auto leader rebalance looks (Kafka's "
        "leader.imbalance.check.interval.seconds; default 300, checked at most once a second)",
    )
    p.add_argument(
        "--leader-imbalance-per-broker-percentage",
        type=types.non_negative_int,
        default=10,
        help="a voter gets its preferred partitions back once more than this percentage of "
        "them are led elsewhere (Kafka's leader.imbalance.per.broker.percentage; default 10)",
    )
    p.add_argument(
        "--election-timeout-ms",
        type=types.positive_int,
        default=1000,
        help="a follower that hears no leader for this long (randomised up to twice it) "
        "starts an election",
    )
    p.add_argument(
        "--fetch-timeout-ms",
        type=types.positive_int,
        default=2000,
        help="a follower whose fetches go unanswered this long looks for a new leader",
    )
    p.add_argument(
        "--high-watermark-linger-ms",
        type=types.non_negative_int,
        default=5,
        help="how long the leader holds a follower's fetch whose only news is the high "
        "watermark, for records to carry it (0: answer at once)",
    )
    p.add_argument(
        "--segment-bytes",
        type=types.positive_int,
        default=1 << 30,
        help="roll to a new log segment at this size",
    )
    p.add_argument(
        "--fetch-max-bytes",
        type=types.positive_int,
        default=55 * 1024 * 1024,
        help="the most a consumer's Fetch answer holds, whatever the client asks for "
        "(Kafka's fetch.max.bytes; default 55 MiB; a larger first batch still comes whole)",
    )
    p.add_argument(
        "--log-scrub-bytes-per-second",
        type=types.non_negative_int,
        default=16 * 1024 * 1024,
        help="re-read sealed log segments in the background at this rate to find damaged "
        "batches, which are then repaired from a peer (default 16 MiB/s; 0: off)",
    )
    p.add_argument(
        "--log-scrub-interval-ms",
        type=types.positive_int,
        default=24 * 3600 * 1000,
        help="start a scrub pass this long after the last one ended (default 24 h; the "
        "first starts when the node does)",
    )
    p.add_argument(
        "--replica-fetch-response-max-bytes",
        type=types.positive_int,
        default=10 * 1024 * 1024,
        help="the most an answer to another voter's fetch holds (Kafka's "
        "replica.fetch.response.max.bytes; default 10 MiB)",
    )
    p.add_argument(
        "--flush",
        choices=("always", "interval"),
        default="always",
        help="fsync before acknowledging (always, the default) or every --flush-interval-ms",
    )
    p.add_argument(
        "--flush-interval-ms",
        type=types.positive_int,
        default=1000,
        help="with --flush interval: how often to fsync",
    )
    p.add_argument(
        "--event-loop",
        choices=("asyncio", "uvloop"),
        default="asyncio",
        help="the event loop the node runs on: asyncio's own, or uvloop's (libuv; faster "
        "per request, see docs/benchmarks.md; needs pip install uvloop)",
    )
    p.add_argument(
        "--state-machine",
        choices=("none", "lmdb"),
        default="none",
        help="apply committed records to a key/value state machine: lmdb keeps it in "
        "<data-dir>/state/ (default: none, the node only replicates the log)",
    )
    p.add_argument(
        "--state-map-size",
        type=types.map_size,
        default=16 << 30,
        help="the LMDB map size in bytes",
    )
    snap = p.add_argument_group("snapshots (KIP-630; off unless one trigger is set)")
    snap.add_argument(
        "--snapshot-min-records",
        type=types.non_negative_int,
        default=0,
        help="take a snapshot once this many records were applied since the last one",
    )
    snap.add_argument(
        "--snapshot-min-bytes",
        type=types.non_negative_int,
        default=0,
        help="... or this many bytes of record batches",
    )
    snap.add_argument(
        "--snapshot-interval-ms",
        type=types.non_negative_int,
        default=0,
        help="... or this long since the last one (with at least one record)",
    )
    snap.add_argument(
        "--max-replication-lag-ms",
        type=types.positive_int,
        default=30_000,
        help="the leader moves its log start to its latest snapshot once every replica has "
        "fetched past it, or once the snapshot is this old",
    )
    p.add_argument(
        "--ready-file", default=None, help="write this file once the node listens (for scripts)"
    )
    p.add_argument(
        "--metrics-port",
        type=types.port,
        default=None,
        help="serve Prometheus metrics at http://HOST:PORT/metrics (docs/metrics.md; "
        "default: not served)",
    )
    p.add_argument(
        "--metrics-host", default=None, help="the metrics address (default: the listen host)"
    )
    p.add_argument(
        "--metrics-max-partitions",
        type=int,
        default=1000,
        help="label the series of at most this many partitions (the lowest); the others are "
        "left out and counted in raftcore_metrics_partitions_omitted (default 1000)",
    )
    add_sasl_node_options(p)
    _add_bound_options(p)
    _add_retention_options(p)
    p.set_defaults(func=_cmd_node, default_log_level="info")


def _add_retention_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group(
        "retention (Kafka's retention.ms, retention.bytes, segment.ms; off by default: the log "
        "is kept whole)"
    )
    g.add_argument(
        "--retention-ms",
        type=types.off_or_positive_int,
        default=-1,
        help="let whole segments go once their newest record is this old (-1: never; Kafka's "
        "topics keep 604800000, 7 days)",
    )
    g.add_argument(
        "--retention-bytes",
        type=types.off_or_positive_int,
        default=-1,
        help="let the oldest segments go while the log stays at least this large (-1: never)",
    )
    g.add_argument(
        "--segment-ms",
        type=types.off_or_positive_int,
        default=-1,
        help="roll the active segment once its first record is this old, so that "
        "--retention-ms can reach it (-1: only by --segment-bytes)",
    )
    g.add_argument(
        "--log-retention-check-interval-ms",
        type=types.positive_int,
        default=300_000,
        help="how often retention is checked (Kafka's log.retention.check.interval.ms)",
    )


def _add_bound_options(p: argparse.ArgumentParser) -> None:
    from raftcore.node.connection_limits import (
        MAX_CONNECTIONS,
        MAX_CONNECTIONS_PER_IP,
        QUEUED_MAX_REQUEST_BYTES,
    )

    g = p.add_argument_group(
        "bounds on accepted connections (Kafka's names; docs/security.md, Bounds)"
    )
    g.add_argument(
        "--max-connections",
        type=types.positive_int,
        default=MAX_CONNECTIONS,
        help="connections open at once; more are closed as they are accepted (Kafka's "
        f"max.connections; default {MAX_CONNECTIONS}: a 1024-file limit less what the node "
        "needs itself). The voters' hosts may exceed it by the number of voters",
    )
    g.add_argument(
        "--max-connections-per-ip",
        type=types.positive_int,
        default=MAX_CONNECTIONS_PER_IP,
        help="connections open at once from one client host (max.connections.per.ip; "
        f"default {MAX_CONNECTIONS_PER_IP}); the voters' own hosts are exempt",
    )
    g.add_argument(
        "--connections-max-idle-ms",
        type=types.positive_int,
        default=600_000,
        help="close a connection that received and sent nothing for this long "
        "(connections.max.idle.ms; default 10 minutes)",
    )
    g.add_argument(
        "--login-timeout-ms",
        type=types.positive_int,
        default=10_000,
        help="a TLS handshake, and on a SASL listener then the SASL login, must complete "
        "within this, or the connection is closed (default 10 s)",
    )
    g.add_argument(
        "--frame-receive-timeout-ms",
        type=types.positive_int,
        default=30_000,
        help="a request frame must arrive whole within this long of its first byte, or "
        "the connection is closed (default 30 s, Kafka clients' request.timeout.ms)",
    )
    g.add_argument(
        "--queued-max-request-bytes",
        type=types.positive_int,
        default=QUEUED_MAX_REQUEST_BYTES,
        help="bytes of requests received and not yet answered, across all connections; "
        "past it the node stops reading large requests until answers go out "
        "(queued.max.request.bytes; default 256 MiB)",
    )
