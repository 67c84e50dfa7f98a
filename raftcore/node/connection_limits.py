"""How many connections a node accepts, and how many bytes of requests it holds.

- :class:`ConnectionLimits`: Kafka's ``max.connections`` (in all) and
  ``max.connections.per.ip``. A connection past a cap is closed as it is accepted (before a
  TLS handshake), counted by reason, and logged once per host and reason, then once per 30 s
  with the count of those left out. The voters' own hosts are exempt from the per-IP cap (the
  other voters connect from them: a voter refused cannot replicate) and may go ``reserve``
  connections past ``max.connections`` (each voter's connections to the node: four), so that
  a flood from elsewhere cannot lock a voter out when it reconnects.
- :class:`RequestBudget`: Kafka's ``queued.max.request.bytes`` with its ``MemoryPool``
  semantics: bytes of requests received (or being received) and not yet answered, across
  every connection. A large frame (one that gets a buffer of its own,
  :data:`~raftcore.protocol.framing.LARGE_FRAME` and more) may start while the budget has any
  room left, and reserves its whole announced size; past the budget its connection stops
  reading until answers give bytes back, rather than allocate. The bound is the budget plus
  one frame. Small frames are counted, never made to wait: they live in each connection's
  receive buffer, bounded by ``max.connections`` and the requests in flight per connection,
  and the other voters' replication requests are small (a node that stopped reading them
  would stall the quorum).
- ``FD_RESERVE``: the descriptors a one-partition node needs besides its connections
  (:func:`raftcore.node.preflight.warn_if_open_files_short` warns when the process may open
  fewer than that plus ``max.connections``).
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import time
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any

from raftcore.connect_errors import host_port
from raftcore.log_limit import RepeatLimiter

__all__ = [
    "FD_RESERVE",
    "MAX_CONNECTIONS",
    "MAX_CONNECTIONS_PER_IP",
    "QUEUED_MAX_REQUEST_BYTES",
    "ConnectionLimits",
    "RequestBudget",
    "resolve_hosts",
]

logger = logging.getLogger(__name__)

# Defaults (NodeConfig and `raftcore node` say why; docs/security.md, "Bounds").
MAX_CONNECTIONS = 768
MAX_CONNECTIONS_PER_IP = 256
QUEUED_MAX_REQUEST_BYTES = 256 * 1024 * 1024
# File descriptors a node needs besides its connections: log segments and indexes, the
# snapshot being written or sent, the peers, the metrics listener, the state machine.
FD_RESERVE = 256
REFUSED_LOG_EVERY_S = 30.0  # per client host and reason

MAX_CONNECTIONS_REASON = "max_connections"
PER_IP_REASON = "max_connections_per_ip"


class ConnectionLimits:
    """Counts the open connections, in all and by client host, and admits or refuses new
    ones. ``protected`` hosts (the voters') are not capped per IP and have ``reserve``
    connections past ``max_connections``."""

    def __init__(
        self,
        max_connections: int,
        max_per_ip: int,
        *,
        protected: Iterable[str] = (),
        reserve: int = 0,
        prefix: str = "",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.max_connections = max_connections
        self.max_per_ip = max_per_ip
        self.protected = frozenset(protected)
        self.reserve = reserve
        self.prefix = prefix
        self.open = 0
        self.by_host: dict[str, int] = {}
        self.refused = {MAX_CONNECTIONS_REASON: 0, PER_IP_REASON: 0}
        self._log = RepeatLimiter(REFUSED_LOG_EVERY_S, clock=clock)

    def admit(self, address: Any) -> str | None:
        """The client host to :meth:`release` when the connection ends, or None: refused
        (counted and logged; the caller closes the connection)."""
        host = _host_of(address)
        count = self.by_host.get(host, 0)
        protected = host in self.protected
        if not protected and count >= self.max_per_ip:
            self._refuse(
                PER_IP_REASON,
                address,
                host,
                f"{count} connections from {host} (max.connections.per.ip {self.max_per_ip})",
            )
            return None
        cap = self.max_connections + (self.reserve if protected else 0)
        if self.open >= cap:
            self._refuse(
                MAX_CONNECTIONS_REASON,
                address,
                host,
                f"{self.open} connections open (max.connections {self.max_connections})",
            )
            return None
        self.open += 1
        self.by_host[host] = count + 1
        return host

    def release(self, host: str) -> None:
        self.open -= 1
        left = self.by_host[host] - 1
        if left:
            self.by_host[host] = left
        else:
            del self.by_host[host]

    def _refuse(self, reason: str, address: Any, host: str, why: str) -> None:
        self.refused[reason] += 1
        left_out = self._log.admit((host, reason))
        if left_out is not None:
            logger.warning(
                "%s refusing a connection from %s: %s%s",
                self.prefix,
                host_port(address),
                why,
                RepeatLimiter.since(left_out, host),
            )


def _host_of(address: Any) -> str:
    """The client's IP as text (an IPv4-mapped IPv6 address as IPv4)."""
    host = str(address[0]) if isinstance(address, tuple) and address else str(address)
    if host.startswith("::ffff:") and "." in host:
        return host[7:]
    return host


async def resolve_hosts(hosts: Iterable[str]) -> set[str]:
    """The IP addresses of ``hosts`` (literal IPs as they are; names through the resolver,
    and a name that does not resolve is left out)."""
    loop = asyncio.get_running_loop()
    out: set[str] = set()
    for host in set(hosts):
        try:
            out.add(str(ipaddress.ip_address(host)))
            continue
        except ValueError:
            pass
        try:
            infos = await loop.getaddrinfo(host, None)
        except OSError as exc:
            logger.debug("cannot resolve voter host %s: %s", host, exc)
            continue
        out.update(_host_of(info[4]) for info in infos)
    return out


class RequestBudget:
    """Bytes of requests held, node-wide (see the module docstring). A connection whose large
    frame was refused waits in line; answers that give bytes back wake the waiting
    connections, in order, while there is room (on the next loop pass, not inside the
    answering connection's write)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        # Bytes held. A connection adds a small frame's size itself and takes back an
        # answered request's (then calls wake() if anyone waits): one addition per request.
        self.used = 0
        self.waiters: deque[Callable[[], None]] = deque()  # waiting for room, in order
        self._wake_scheduled = False

    @property
    def waiting(self) -> int:
        """Connections waiting for room."""
        return len(self.waiters)

    def try_take(self, size: int, wake: Callable[[], None]) -> bool:
        """Reserve ``size`` bytes for a frame about to start: True while there is any room
        left; else False, and ``wake`` is called once there is room again (the caller then
        asks again)."""
        if self.used < self.limit:
            self.used += size
            return True
        self.waiters.append(wake)
        return False

    def give_back(self, size: int) -> None:
        self.used -= size
        if self.waiters:
            self.wake()

    def wake(self) -> None:
        """Wake the waiting connections, on the next loop pass, if there is room."""
        if self.used < self.limit and not self._wake_scheduled:
            self._wake_scheduled = True
            asyncio.get_running_loop().call_soon(self._wake)

    def forget(self, wake: Callable[[], None]) -> None:
        """A waiting connection closed."""
        with contextlib.suppress(ValueError):
            self.waiters.remove(wake)

    def _wake(self) -> None:
        self._wake_scheduled = False
        while self.waiters and self.used < self.limit:
            self.waiters.popleft()()
