"""``raftcore certs``: a CA and node and client certificates for a local cluster
(:mod:`raftcore.security.certs`), and the options to run the nodes and clients with them."""

from __future__ import annotations

import argparse
import sys

__all__ = ["add_certs_command"]


def _cmd_certs(args: argparse.Namespace) -> int:
    from raftcore.security.certs import make_certs, parse_names, parse_node_ids

    try:
        nodes = parse_node_ids(args.nodes)
        clients = parse_names(args.clients) if args.clients else []
        hosts = [h.strip() for h in args.hosts.split(",") if h.strip()]
        files = make_certs(
            args.out, nodes, clients=clients, hosts=hosts, days=args.days, force=args.force
        )
    except (ValueError, FileExistsError) as exc:
        print(f"raftcore certs: {exc}", file=sys.stderr)
        return 2
    d = files.directory
    print(f"wrote the CA {files.ca} (key {files.ca_key}) and {len(nodes)} node certificates")
    for node_id, (cert, key) in files.nodes.items():
        print(
            f"  node {node_id}: raftcore node --id {node_id} "
            f"--listeners SSL://HOST:PORT --ssl-certfile {cert} --ssl-keyfile {key} "
            f"--ssl-cafile {files.ca} --ssl-client-auth required ..."
        )
    for name, (cert, key) in files.clients.items():
        print(
            f"  client {name}: --command-config with\n"
            f"      security.protocol=SSL\n      ssl.ca.location={files.ca}\n"
            f"      ssl.certificate.location={cert}\n      ssl.key.location={key}"
        )
    if not files.clients:
        print(f"  clients: security.protocol=SSL, ssl.ca.location={d / 'ca.pem'}")
    print(
        "  SASL logins for clients: --listeners SASL_SSL://HOST:PORT --sasl-users FILE and the "
        "same --ssl-certfile/--ssl-keyfile/--ssl-cafile, without --ssl-client-auth required "
        "(no --sasl-node-password-file: a node is the node its certificate names, and a login "
        "never makes a connection a node)"
    )
    return 0


def add_certs_command(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "certs",
        help="make a CA and node and client certificates (PEM) for a local cluster's TLS",
    )
    p.add_argument("--out", required=True, help="the directory to write them to")
    p.add_argument("--nodes", required=True, help="node ids: 1,2,3 (certificates node-<id>)")
    p.add_argument("--clients", default="", help="client names: alice,bob (client-<name>)")
    p.add_argument(
        "--hosts",
        default="127.0.0.1,localhost",
        help="host names and IP addresses the nodes are reached at (subject alternative "
        "names, for clients that check host names)",
    )
    p.add_argument("--days", type=int, default=365, help="validity")
    p.add_argument("--force", action="store_true", help="overwrite existing files")
    p.set_defaults(func=_cmd_certs)
