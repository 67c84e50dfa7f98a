"""A client's security from librdkafka's properties (the ``--command-config`` file a Kafka user
gives librdkafka or ``kafka-console-producer``): ``security.protocol``, ``ssl.ca.location``,
``ssl.certificate.location``, ``ssl.key.location``,
``ssl.endpoint.identification.algorithm`` (``https``, the default, or ``none``),
``sasl.mechanism``, ``sasl.username``, ``sasl.password``."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from raftcore.errors import CommandLineError
from raftcore.security.config import SECURITY_PROTOCOLS, ClientSecurity
from raftcore.security.properties import read_properties
from raftcore.security.tls import client_context

__all__ = [
    "CLIENT_PROPERTIES",
    "ClientConfigError",
    "add_command_config_option",
    "client_security",
    "load_client_security",
]

CLIENT_PROPERTIES = (
    "security.protocol",
    "ssl.ca.location",
    "ssl.certificate.location",
    "ssl.key.location",
    "ssl.endpoint.identification.algorithm",
    "sasl.mechanism",
    "sasl.mechanisms",  # librdkafka's older spelling
    "sasl.username",
    "sasl.password",
)


def client_security(props: dict[str, str], source: str = "the client properties") -> ClientSecurity:
    """ClientSecurity from librdkafka-style properties; ValueError (one line) for an unknown
    property, an unknown protocol or a missing file."""
    unknown = sorted(set(props) - set(CLIENT_PROPERTIES))
    if unknown:
        raise ValueError(
            f"{source}: unknown propert{'ies' if len(unknown) > 1 else 'y'} "
            f"{', '.join(unknown)} (known: {', '.join(CLIENT_PROPERTIES)})"
        )
    protocol = props.get("security.protocol", "PLAINTEXT").upper()
    if protocol not in SECURITY_PROTOCOLS:
        raise ValueError(
            f"{source}: security.protocol must be one of {', '.join(SECURITY_PROTOCOLS)}, "
            f"got {props['security.protocol']!r}"
        )
    files: dict[str, Path | None] = {}
    for key in ("ssl.ca.location", "ssl.certificate.location", "ssl.key.location"):
        value = props.get(key)
        files[key] = Path(value) if value else None
        if value and not Path(value).is_file():
            raise ValueError(f"{source}: {key}: no such file: {value}")
    algorithm = props.get("ssl.endpoint.identification.algorithm", "https").lower()
    if algorithm not in ("https", "none", ""):
        raise ValueError(
            f"{source}: ssl.endpoint.identification.algorithm must be https or none, "
            f"got {algorithm!r}"
        )
    return ClientSecurity(
        protocol=protocol,
        ssl_cafile=files["ssl.ca.location"],
        ssl_certfile=files["ssl.certificate.location"],
        ssl_keyfile=files["ssl.key.location"],
        ssl_check_hostname=algorithm == "https",
        sasl_mechanism=props.get("sasl.mechanism", props.get("sasl.mechanisms")),
        sasl_username=props.get("sasl.username"),
        sasl_password=props.get("sasl.password"),
    )


class ClientConfigError(CommandLineError, ValueError):
    """A ``--command-config`` file that cannot be used: a bad argument, so the CLI prints it
    as one line and exits 2."""


def load_client_security(path: str | os.PathLike[str] | None) -> ClientSecurity:
    """The ClientSecurity of a ``--command-config`` file (PLAINTEXT without one);
    ClientConfigError naming the file and the property when it cannot be used."""
    if path is None:
        return ClientSecurity()
    try:
        security = client_security(read_properties(path), str(path))
        if security.uses_tls:
            client_context(security)  # a key that is not the certificate's: said now
        return security
    except ValueError as exc:
        raise ClientConfigError(f"--command-config: {exc}") from None


def add_command_config_option(p: argparse.ArgumentParser) -> None:
    """``--command-config FILE`` on a client command (Kafka's tools call it that too)."""
    p.add_argument(
        "--command-config",
        default=None,
        metavar="FILE",
        help="librdkafka-style client properties: security.protocol, ssl.ca.location, "
        "ssl.certificate.location, ssl.key.location, sasl.mechanism, sasl.username, "
        "sasl.password (docs/security.md)",
    )
