"""A certificate authority and node and client certificates for a local cluster (PEM files),
made with the ``cryptography`` package. EC P-256 keys: quick to make, and every TLS client we
test with (OpenSSL through Python and librdkafka) takes them.

- ``ca.pem`` / ``ca.key``: the cluster's CA (a self-signed CA certificate);
- ``node-<id>.pem`` / ``node-<id>.key``: CN ``node-<id>``, SANs ``DNS:node-<id>`` and the given
  host names and IP addresses (so a client that checks the host name, as librdkafka does by
  default, accepts a node at 127.0.0.1); usable as server and as client (a node both accepts and
  opens connections to the other voters);
- ``client-<name>.pem`` / ``client-<name>.key``: CN ``<name>``, client use only.

Keys are written with mode 0600. Nothing is overwritten unless ``force``.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from raftcore.security.tls import node_name

__all__ = ["CertFiles", "make_certs", "parse_names", "parse_node_ids"]

_CLIENT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@-]*")


@dataclass
class CertFiles:
    """What :func:`make_certs` wrote: the CA, and (certificate, key) per node id and client."""

    directory: Path
    ca: Path
    ca_key: Path
    nodes: dict[int, tuple[Path, Path]] = field(default_factory=dict)
    clients: dict[str, tuple[Path, Path]] = field(default_factory=dict)


def parse_node_ids(text: str) -> list[int]:
    """``1,2,3`` into [1, 2, 3]; ValueError (one line) otherwise."""
    ids: list[int] = []
    for item in (part.strip() for part in text.split(",")):
        if not item.isdigit():
            raise ValueError(f"--nodes takes node ids like 1,2,3, got {item!r} in {text!r}")
        if int(item) in ids:
            raise ValueError(f"--nodes names node {item} twice")
        ids.append(int(item))
    return ids


def parse_names(text: str) -> list[str]:
    """Client names (``alice,bob``): letters, digits and ``._@-``, and not ``node-<id>`` (a
    client with a node's name would pass for that node)."""
    names = [part.strip() for part in text.split(",") if part.strip()]
    for name in names:
        if not _CLIENT_NAME.fullmatch(name):
            raise ValueError(f"a client name takes letters, digits and ._@-, got {name!r}")
        if re.fullmatch(r"node-\d+", name):
            raise ValueError(f"{name!r} is a node's name: choose another client name")
    if len(set(names)) != len(names):
        raise ValueError(f"a client is named twice in {text!r}")
    return names


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _name(cn: str) -> x509.Name:
    return x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "raftcore"),
            x509.NameAttribute(NameOID.COMMON_NAME, cn),
        ]
    )


def _sans(names: Sequence[str]) -> list[x509.GeneralName]:
    out: list[x509.GeneralName] = []
    for name in names:
        try:
            out.append(x509.IPAddress(ipaddress.ip_address(name)))
        except ValueError:
            out.append(x509.DNSName(name))
    return out


def _issue(
    subject: str,
    key: ec.EllipticCurvePrivateKey,
    issuer: tuple[x509.Certificate, ec.EllipticCurvePrivateKey] | None,
    days: int,
    *,
    sans: Sequence[str] = (),
    usages: Sequence[x509.ObjectIdentifier] = (),
) -> x509.Certificate:
    now = datetime.datetime.now(datetime.timezone.utc)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(subject))
        .issuer_name(_name(subject) if issuer is None else issuer[0].subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))  # clocks a little behind
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
    )
    if issuer is None:  # the CA
        builder = builder.add_extension(
            x509.BasicConstraints(ca=True, path_length=0), critical=True
        ).add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        signer = key
    else:
        builder = (
            builder.add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=True,
                    key_cert_sign=False,
                    crl_sign=False,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(x509.ExtendedKeyUsage(list(usages)), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer[1].public_key()),
                critical=False,
            )
        )
        if sans:
            builder = builder.add_extension(
                x509.SubjectAlternativeName(_sans(sans)), critical=False
            )
        signer = issuer[1]
    return builder.sign(signer, hashes.SHA256())


def _write(path: Path, data: bytes, mode: int) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.chmod(path, mode)  # an existing file (--force) keeps its old mode otherwise


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _cert_pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def make_certs(
    directory: str | os.PathLike[str],
    nodes: Sequence[int],
    *,
    clients: Sequence[str] = (),
    hosts: Sequence[str] = ("127.0.0.1", "localhost"),
    days: int = 365,
    force: bool = False,
) -> CertFiles:
    """Write a CA and the node and client certificates into ``directory``. An existing CA
    there is reused (its key signs the new certificates) unless ``force``; any other file
    that exists is an error (FileExistsError naming it) unless ``force``."""
    if days < 1:
        raise ValueError(f"--days must be at least 1, got {days}")
    if not nodes:
        raise ValueError("name at least one node (--nodes 1,2,3)")
    out = Path(directory).absolute()
    out.mkdir(parents=True, exist_ok=True)
    files = CertFiles(out, out / "ca.pem", out / "ca.key")
    targets = [(out / f"{node_name(n)}.pem", out / f"{node_name(n)}.key") for n in nodes]
    targets += [(out / f"client-{c}.pem", out / f"client-{c}.key") for c in clients]
    reuse_ca = not force and files.ca.exists() and files.ca_key.exists()
    if not force:
        for path in [p for pair in targets for p in pair]:
            if path.exists():
                raise FileExistsError(f"{path} exists (--force to overwrite)")
        if files.ca.exists() != files.ca_key.exists():
            present = files.ca if files.ca.exists() else files.ca_key
            raise FileExistsError(f"{present} exists without its pair (--force to overwrite)")
    if reuse_ca:
        ca_cert = x509.load_pem_x509_certificate(files.ca.read_bytes())
        loaded = serialization.load_pem_private_key(files.ca_key.read_bytes(), password=None)
        if not isinstance(loaded, ec.EllipticCurvePrivateKey):
            raise ValueError(f"{files.ca_key} is not an EC key made by raftcore certs")
        ca_key = loaded
    else:
        ca_key = _key()
        ca_cert = _issue("raftcore CA", ca_key, None, days)
        _write(files.ca_key, _key_pem(ca_key), 0o600)
        _write(files.ca, _cert_pem(ca_cert), 0o644)
    both = (ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH)
    for node_id, (cert_path, key_path) in zip(nodes, targets[: len(nodes)], strict=True):
        key = _key()
        name = node_name(node_id)
        cert = _issue(name, key, (ca_cert, ca_key), days, sans=[name, *hosts], usages=both)
        _write(key_path, _key_pem(key), 0o600)
        _write(cert_path, _cert_pem(cert), 0o644)
        files.nodes[node_id] = (cert_path, key_path)
    for client, (cert_path, key_path) in zip(clients, targets[len(nodes) :], strict=True):
        key = _key()
        cert = _issue(
            client, key, (ca_cert, ca_key), days, usages=(ExtendedKeyUsageOID.CLIENT_AUTH,)
        )
        _write(key_path, _key_pem(key), 0o600)
        _write(cert_path, _cert_pem(cert), 0o644)
        files.clients[client] = (cert_path, key_path)
    return files
