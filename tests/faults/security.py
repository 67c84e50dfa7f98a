"""How the nodes and the clients of a fault run talk: ``PLAINTEXT``; ``SSL``, mutual TLS
between the nodes and from every client (``ssl.client.auth=required``); or ``SASL_SSL``, nodes
proving themselves to each other by certificate and clients logging in with SCRAM-SHA-512 over
TLS. The certificates (``raftcore certs``) name every address a node has in the run, so the
clients check the host names as a real deployment's would.

A client's settings are librdkafka's properties, one dict for confluent-kafka and, through
:func:`raftcore.security.client_config.client_security`, for raftcore's own clients, so both
are configured from the same words.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from raftcore.node.local_cluster import tls_listener_args
from raftcore.security.certs import make_certs
from raftcore.security.client_config import client_security
from raftcore.security.config import ClientSecurity
from raftcore.security.users import make_user, write_users

__all__ = ["MODES", "RunSecurity", "make_run_security"]

MODES = ("PLAINTEXT", "SSL", "SASL_SSL")
CLIENT = "writer"  # the SSL client certificate's name, and the SASL user
MECHANISM = "SCRAM-SHA-512"


@dataclass
class RunSecurity:
    mode: str = "PLAINTEXT"
    tls_dir: Path | None = None
    users_file: Path | None = None
    client_props: dict[str, str] = field(default_factory=dict)  # librdkafka's names

    def listener_args(self, node_id: int, endpoint: str) -> list[str]:
        """``raftcore node`` arguments for the node's one listener."""
        if self.tls_dir is None:
            return ["--listen", endpoint]
        args = tls_listener_args(self.tls_dir, node_id, endpoint)
        if self.users_file is not None:
            args.append(f"--sasl-users={self.users_file}")
        return args

    def client(self) -> ClientSecurity:
        """What raftcore's clients (writer, prober, consumer) present."""
        return client_security(self.client_props, f"the {self.mode} fault run")

    def confluent(self) -> dict[str, Any]:
        """What confluent-kafka's clients add to their configuration."""
        return dict(self.client_props)


def make_run_security(
    mode: str, run_dir: Path, node_ids: list[int], hosts: list[str]
) -> RunSecurity:
    """The certificates and users a run in ``mode`` needs, written under ``run_dir``;
    ``hosts`` are the nodes' addresses (the certificates name them all)."""
    mode = mode.upper()
    if mode not in MODES:
        raise ValueError(f"security must be one of {', '.join(MODES)}, got {mode!r}")
    if mode == "PLAINTEXT":
        return RunSecurity()
    tls_dir = run_dir / "certs"
    names = sorted({*hosts, "127.0.0.1", "localhost"})
    files = make_certs(tls_dir, node_ids, clients=[CLIENT], hosts=names)
    props = {"security.protocol": mode, "ssl.ca.location": str(files.ca)}
    users_file = None
    if mode == "SSL":
        cert, key = files.clients[CLIENT]
        props["ssl.certificate.location"] = str(cert)
        props["ssl.key.location"] = str(key)
    else:
        password = f"fault-run-{run_dir.name}"
        users_file = run_dir / "users.json"
        write_users(users_file, {CLIENT: make_user(CLIENT, password, mechanisms=(MECHANISM,))})
        props.update(
            {"sasl.mechanism": MECHANISM, "sasl.username": CLIENT, "sasl.password": password}
        )
    return RunSecurity(mode, tls_dir, users_file, props)
