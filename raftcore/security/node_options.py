"""The node's security options, as Kafka names them: ``--listeners SSL://host:port`` (one
listener, used by clients and by the other voters), ``--ssl-certfile`` / ``--ssl-keyfile``
(Kafka's ``ssl.keystore.location`` with ``ssl.keystore.type=PEM``), ``--ssl-cafile``
(``ssl.truststore.location``), ``--ssl-client-auth`` (``ssl.client.auth``), and ``--config FILE``
of Kafka-style properties holding the same (an option given on the command line wins over the
file). Everything is checked before the node starts: a missing file or a key that does not
match its certificate is one line and exit status 2."""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path
from typing import Any

from raftcore.security.config import SECURITY_PROTOCOLS, ListenerSecurity
from raftcore.security.properties import read_properties
from raftcore.security.tls import check_listener_security

__all__ = ["NODE_PROPERTIES", "add_node_security_options", "node_listener", "parse_listener"]

# --config keys -> ListenerSecurity fields (None: handled apart)
NODE_PROPERTIES: dict[str, str | None] = {
    "listeners": None,
    "ssl.keystore.type": None,
    "ssl.truststore.type": None,
    "ssl.keystore.location": "ssl_certfile",
    "ssl.key.location": "ssl_keyfile",
    "ssl.truststore.location": "ssl_cafile",
    "ssl.client.auth": "ssl_client_auth",
    "sasl.enabled.mechanisms": "sasl_mechanisms",
    "sasl.users.file": "sasl_users_file",
}


def add_node_security_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("security (docs/security.md)")
    g.add_argument(
        "--listeners",
        default=None,
        metavar="PROTOCOL://HOST:PORT",
        help="the listener, as Kafka's listeners: PLAINTEXT://, SSL://, SASL_PLAINTEXT:// or "
        "SASL_SSL://host:port (instead of --listen)",
    )
    g.add_argument("--ssl-certfile", default=None, help="this node's certificate chain (PEM)")
    g.add_argument("--ssl-keyfile", default=None, help="this node's private key (PEM)")
    g.add_argument(
        "--ssl-cafile", default=None, help="the cluster's CA (PEM): peers and clients chain to it"
    )
    g.add_argument(
        "--ssl-client-auth",
        choices=("required", "requested", "none"),
        default=None,
        help="client certificates: required (the default on SSL), requested (the default on "
        "SASL_SSL) or none (only for a single voter: the voters prove who they are with theirs)",
    )
    g.add_argument(
        "--config",
        default=None,
        metavar="FILE",
        help="Kafka-style key=value properties: listeners, ssl.keystore.location, "
        "ssl.key.location, ssl.truststore.location, ssl.client.auth, "
        "sasl.enabled.mechanisms, sasl.users.file",
    )


def parse_listener(text: str) -> tuple[str, str]:
    """``SSL://127.0.0.1:9091`` into ("SSL", "127.0.0.1:9091"); one listener only."""
    if "," in text:
        raise ValueError(f"one listener only (clients and voters share it), got {text!r}")
    protocol, sep, address = text.partition("://")
    protocol = protocol.upper()
    if not sep or protocol not in SECURITY_PROTOCOLS:
        raise ValueError(
            f"a listener is PROTOCOL://host:port with PROTOCOL one of "
            f"{', '.join(SECURITY_PROTOCOLS)}, got {text!r}"
        )
    return protocol, address


def node_listener(args: argparse.Namespace, voters: int) -> tuple[str | None, ListenerSecurity]:
    """(the listen address ``--listeners`` or the config file gives, or None; the listener's
    security), checked (ValueError, one line)."""
    props = read_properties(args.config) if getattr(args, "config", None) else {}
    unknown = sorted(set(props) - set(NODE_PROPERTIES))
    if unknown:
        raise ValueError(
            f"{args.config}: unknown propert{'ies' if len(unknown) > 1 else 'y'} "
            f"{', '.join(unknown)} (known: {', '.join(NODE_PROPERTIES)})"
        )
    for key in ("ssl.keystore.type", "ssl.truststore.type"):
        if props.get(key, "PEM").upper() != "PEM":
            raise ValueError(f"{args.config}: {key}: only PEM files are supported")
    fields: dict[str, Any] = {}
    for key, name in NODE_PROPERTIES.items():
        if name is not None and props.get(key):
            fields[name] = props[key]
    for name in ("ssl_certfile", "ssl_keyfile", "ssl_cafile", "ssl_client_auth"):
        value = getattr(args, name, None)
        if value is not None:
            fields[name] = value
    listeners = args.listeners or props.get("listeners")
    listen = None
    protocol = "PLAINTEXT"
    if listeners:
        if args.listen:
            raise ValueError("give --listen or --listeners, not both")
        protocol, listen = parse_listener(listeners)
    for name in ("ssl_certfile", "ssl_keyfile", "ssl_cafile", "sasl_users_file"):
        if name in fields:
            fields[name] = Path(fields[name])
    if "sasl_mechanisms" in fields:
        fields["sasl_mechanisms"] = tuple(
            m.strip().upper() for m in fields["sasl_mechanisms"].split(",") if m.strip()
        )
    if protocol in ("SSL", "SASL_SSL") and "ssl_client_auth" not in fields:
        # The voters always present their certificates; on SASL_SSL clients log in with SASL
        # instead, so a certificate is asked for there, not required. (``--sasl-users`` on an
        # SSL:// listener makes it SASL_SSL: raftcore.cli.users.sasl_listener_security.)
        sasl = (
            protocol == "SASL_SSL"
            or getattr(args, "sasl_users", None)
            or "sasl_users_file" in fields
        )
        fields["ssl_client_auth"] = "requested" if sasl else "required"
    security = replace(ListenerSecurity(protocol=protocol), **fields)
    check_listener_security(security, voters)
    return listen, security
