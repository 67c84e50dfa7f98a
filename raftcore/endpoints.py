"""Where a node listens and how an operator writes it: ``host:port``, Kafka's
``controller.quorum.voters`` (``1@host:port,...``) and ``controller.quorum.bootstrap.servers``.

A value shared by every layer (the client, the node, the Spark options), so it sits below all of
them and imports nothing of raftcore."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Endpoint", "parse_endpoint", "parse_endpoints", "parse_voters"]


@dataclass(frozen=True, slots=True)
class Endpoint:
    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.host}:{self.port}"


def parse_endpoint(text: str) -> Endpoint:
    """``host:port`` (IPv6 as ``[::1]:9091``)."""
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"expected host:port, got {text!r}")
    return Endpoint(host.strip("[]"), int(port))


def parse_voters(text: str) -> dict[int, Endpoint]:
    """Kafka's ``controller.quorum.voters`` syntax: ``1@host:port,2@host:port,...``."""
    voters: dict[int, Endpoint] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        node, sep, endpoint = item.partition("@")
        if not sep or not node.isdigit():
            raise ValueError(f"expected id@host:port in the voter list, got {item!r}")
        if int(node) in voters:
            raise ValueError(f"voter {node} is listed twice")
        voters[int(node)] = parse_endpoint(endpoint)
    if not voters:
        raise ValueError("the voter list is empty")
    return voters


def parse_endpoints(text: str) -> tuple[Endpoint, ...]:
    """``host:port[,host:port...]`` (Kafka's ``controller.quorum.bootstrap.servers``)."""
    endpoints = tuple(parse_endpoint(part.strip()) for part in text.split(",") if part.strip())
    if not endpoints:
        raise ValueError("the list of servers is empty")
    return endpoints
