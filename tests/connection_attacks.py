"""Connection attacks on a node, and its resident memory: shared by test_connection_memory.py and
test_wire_fuzz.py, and run as a script for the figures in docs/security.md ("Bounds")::

    PYTHONPATH=$PWD python tests/connection_attacks.py [--protocol SASL_SSL] [--node-arg=--x=y ...]

(an absolute PYTHONPATH: the nodes run in their own directories, where "." is not the checkout)

The script starts a 3-node cluster (``raftcore node`` processes, ended by their pids), runs each
attack against the leader, and prints the leader's resident memory (VmRSS and its anonymous
part, RssAnon: the log's mmap is file-backed and would hide the heap) before, during and after.
Every attack function opens its connections and returns them held; the caller measures, then
closes them (:func:`close_all`).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ssl
import struct
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from raftcore.protocol.api import ApiKey, encode_request, request_spec

Conn = tuple[asyncio.StreamReader, asyncio.StreamWriter]
CHUNK = 1 << 20  # a client writes at most this much unsent at a time


def memory_kib(pid: int) -> dict[str, int]:
    """VmRSS and RssAnon of a process, in KiB."""
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "RssAnon"):
                out[key] = int(value.split()[0])
    return out


def framed(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


async def open_conn(
    host: str, port: int, *, tls: ssl.SSLContext | None = None, source: str | None = None
) -> Conn:
    return await asyncio.open_connection(
        host,
        port,
        ssl=tls,
        server_hostname=host if tls is not None else None,
        local_addr=(source, 0) if source else None,
    )


async def close_all(conns: Sequence[Conn]) -> None:
    for _, writer in conns:
        writer.close()
    for _, writer in conns:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(writer.wait_closed(), 1)


async def is_closed(reader: asyncio.StreamReader, timeout_s: float = 0.05) -> bool:
    """Whether the node closed this connection (EOF or reset seen within ``timeout_s``)."""
    try:
        return await asyncio.wait_for(reader.read(1 << 16), timeout_s) == b""
    except (ConnectionError, ssl.SSLError):
        return True
    except asyncio.TimeoutError:
        return False


async def count_closed(conns: Sequence[Conn]) -> int:
    return sum(await asyncio.gather(*(is_closed(r) for r, _ in conns)))


# ---- the attacks -------------------------------------------------------------------------------


async def idle(host: str, port: int, n: int, *, tls: Any = None, source: str | None = None):  # type: ignore[no-untyped-def]
    """``n`` connections that send nothing (over TLS: after the handshake)."""
    return [await open_conn(host, port, tls=tls, source=source) for _ in range(n)]


async def flood(
    host: str, port: int, n: int, sources: Sequence[str], tls: Any = None
) -> list[Conn]:
    """``n`` connections from each source address; those the node refused come back closed."""
    out = []
    for source in sources:
        for _ in range(n):
            with contextlib.suppress(ConnectionError, ssl.SSLError, OSError):
                # refused during the TLS handshake: not held
                out.append(await open_conn(host, port, tls=tls, source=source))
    return out


async def partial_frames(
    host: str,
    port: int,
    n: int,
    announced: int,
    sent: int,
    *,
    tls: Any = None,
    login: tuple[str, str, str] | None = None,
    within_s: float = 10.0,
) -> list[Conn]:
    """``n`` connections that each announce a frame of ``announced`` bytes and send ``sent``
    of them (what the node takes within ``within_s``), then wait. ``login``: (mechanism,
    user, password) for a SASL login first."""
    conns = []
    for _ in range(n):
        reader, writer = await open_conn(host, port, tls=tls)
        if login is not None:
            from raftcore.security.sasl_client import raw_login

            await raw_login(reader, writer, *login)
        conns.append((reader, writer))
    deadline = time.monotonic() + within_s

    async def send(writer: asyncio.StreamWriter) -> None:
        writer.write(struct.pack(">i", announced))
        chunk = b"\x01" * min(CHUNK, sent)
        left = sent
        with contextlib.suppress(asyncio.TimeoutError, ConnectionError):
            while left > 0:
                writer.write(chunk[: min(left, len(chunk))])
                left -= len(chunk)
                await asyncio.wait_for(writer.drain(), max(0.01, deadline - time.monotonic()))

    await asyncio.gather(*(send(w) for _, w in conns))
    return conns


API_VERSIONS = framed(
    encode_request(
        ApiKey.API_VERSIONS,
        3,
        1,
        "slowloris",
        request_spec(ApiKey.API_VERSIONS).cls(
            client_software_name="slowloris" + "x" * 200, client_software_version="1"
        ),
    )
)


@dataclass
class Slowloris:
    """Connections that each send a request a byte every ``interval_s``; ``closed_after``
    holds how long each lasted before the node closed it."""

    conns: list[Conn]
    started: float = field(default_factory=time.monotonic)
    closed_after: list[float] = field(default_factory=list)
    tasks: list[asyncio.Task[None]] = field(default_factory=list)


async def slowloris(
    host: str, port: int, n: int, interval_s: float, *, tls: Any = None
) -> Slowloris:
    attack = Slowloris([await open_conn(host, port, tls=tls) for _ in range(n)])

    async def drip(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError, ssl.SSLError):
            for i in range(len(API_VERSIONS)):
                writer.write(API_VERSIONS[i : i + 1])
                if await is_closed(reader, interval_s):
                    attack.closed_after.append(time.monotonic() - attack.started)
                    return
        attack.closed_after.append(time.monotonic() - attack.started)  # reset while writing

    attack.tasks = [asyncio.ensure_future(drip(r, w)) for r, w in attack.conns]
    return attack


async def stop_slowloris(attack: Slowloris) -> None:
    for task in attack.tasks:
        task.cancel()
    await asyncio.gather(*attack.tasks, return_exceptions=True)
    await close_all(attack.conns)


def consumer_fetch(topic_id: bytes, offset: int, max_bytes: int) -> bytes:
    cls = request_spec(ApiKey.FETCH).cls
    partition = cls.FetchPartition(partition=0, fetch_offset=offset, partition_max_bytes=max_bytes)
    body = cls(
        replica_id=-1,
        max_wait_ms=0,
        min_bytes=1,
        max_bytes=max_bytes,
        topics=[cls.FetchTopic(topic_id=topic_id, partitions=[partition])],
    )
    return framed(encode_request(ApiKey.FETCH, 16, 1, "non-reading", body))


async def non_reading_fetch(
    host: str, port: int, topic_id: bytes, max_bytes: int, *, tls: Any = None, login: Any = None
) -> Conn:
    """A consumer Fetch of up to ``max_bytes`` from offset 0, whose answer is never read."""
    reader, writer = await open_conn(host, port, tls=tls)
    if login is not None:
        from raftcore.security.sasl_client import raw_login

        await raw_login(reader, writer, *login)
    writer.write(consumer_fetch(topic_id, 0, max_bytes))
    await writer.drain()
    return reader, writer


async def fill_log(bootstrap: list[str], mib: int, security: Any = None) -> None:
    """``mib`` MiB of records, in batches of 1 MiB."""
    from raftcore.client import Producer

    async with Producer(bootstrap, request_timeout_ms=30_000, security=security) as producer:
        futures = [
            producer.send_nowait([(None, b"%d" % n + b"r" * 1020) for n in range(1024)])
            for _ in range(mib)
        ]
        for fut in futures:
            await fut


# ---- the script --------------------------------------------------------------------------------


ATTACKS = (
    "idle",
    "idle-12s",
    "unauthenticated",
    "unauthenticated-12s",
    "large-frames",
    "slowloris",
    "fetch",
)


async def _measure(cluster: Any, protocol: str, users: dict[str, str], name: str) -> None:
    """Run the attack ``name`` against the leader; print one line of its memory."""
    from raftcore.client import describe_quorum

    security = _client_security(cluster, protocol, users)
    info = await describe_quorum(cluster.bootstrap, timeout_s=30, security=security)
    pid = cluster.pid(info.leader_id)
    host, port_text = cluster.endpoint(info.leader_id).rsplit(":", 1)
    port = int(port_text)
    tls = _client_tls(cluster)
    login = ("PLAIN", "alice", users["alice"]) if protocol.startswith("SASL") else None
    topic_id = uuid.uuid5(uuid.NAMESPACE_URL, f"raftcore:{cluster.cluster_id}:raftcore").bytes

    async def open_count(conns: list[Conn]) -> str:
        return f" ({len(conns) - await count_closed(conns)} of {len(conns)} open)"

    hold_s, note = 2.0, open_count
    dripping: list[Slowloris] = []
    if name in ("idle", "idle-12s"):
        what = "500 idle connections" + (", 12 s later" if name == "idle-12s" else "")
        hold_s = 12.0 if name == "idle-12s" else 2.0
        make = lambda: idle(host, port, 500, tls=tls)  # noqa: E731
    elif name in ("unauthenticated", "unauthenticated-12s"):
        what = "200 connections, 500 KiB of a 512 KiB frame each, no login"
        if name == "unauthenticated-12s":  # the login timeout (10 s) has closed them
            what, hold_s = what + ", 12 s later", 12.0
        make = lambda: partial_frames(  # noqa: E731
            host, port, 200, 512 * 1024 - 4, 500 * 1024, tls=tls
        )
    elif name == "large-frames":
        what = f"5 connections, 90 MiB of a 95 MiB frame each{', logged in' if login else ''}"
        make = lambda: partial_frames(  # noqa: E731
            host, port, 5, 95 << 20, 90 << 20, tls=tls, login=login, within_s=20
        )
    elif name == "slowloris":
        what, hold_s = "50 slowloris connections, 1 byte/s, after 35 s", 35.0

        async def make() -> list[Conn]:
            dripping.append(await slowloris(host, port, 50, 1.0, tls=tls))
            return dripping[0].conns

        async def note(conns: list[Conn]) -> str:  # each drip notices its close
            return f" ({len(conns) - len(dripping[0].closed_after)} of {len(conns)} open)"

    else:
        await fill_log(cluster.bootstrap, 100, security)
        await asyncio.sleep(1.0)
        what, note = "a Fetch of up to 100 MiB whose answer is not read", None

        async def make() -> list[Conn]:
            return [await non_reading_fetch(host, port, topic_id, 100 << 20, tls=tls, login=login)]

    before = memory_kib(pid)
    conns = await make()
    await asyncio.sleep(hold_s)
    during = memory_kib(pid)
    extra = await note(conns) if note is not None else ""
    for attack in dripping:
        await stop_slowloris(attack)
    await close_all(conns)
    await asyncio.sleep(1.0)
    after = memory_kib(pid)

    def mib(now: dict[str, int], key: str) -> str:
        return f"{(now[key] - before[key]) / 1024:+.0f}"

    print(
        f"  {what + extra:<72} RssAnon {before['RssAnon'] / 1024:.0f} MiB, during "
        f"{mib(during, 'RssAnon')}, 1 s after close {mib(after, 'RssAnon')} "
        f"(VmRSS {mib(during, 'VmRSS')}, {mib(after, 'VmRSS')})",
        flush=True,
    )


def _client_tls(cluster: Any) -> ssl.SSLContext | None:
    if cluster.tls_dir is None:
        return None
    ctx = ssl.create_default_context(cafile=str(cluster.tls_dir / "ca.pem"))
    ctx.check_hostname = False
    return ctx


def _client_security(cluster: Any, protocol: str, users: dict[str, str]) -> Any:
    from raftcore.security.config import ClientSecurity

    return ClientSecurity(
        protocol=protocol,
        ssl_cafile=None if cluster.tls_dir is None else cluster.tls_dir / "ca.pem",
        ssl_check_hostname=False,
        sasl_mechanism="PLAIN" if protocol.startswith("SASL") else None,
        sasl_username="alice" if protocol.startswith("SASL") else None,
        sasl_password=users["alice"] if protocol.startswith("SASL") else None,
    )


def main(argv: list[str] | None = None) -> int:
    from raftcore.node.local_cluster import LocalCluster
    from raftcore.security.users import make_user, write_users

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--protocol", choices=("PLAINTEXT", "SASL_SSL"), default="PLAINTEXT")
    parser.add_argument("--node-arg", action="append", default=[], help="passed to each node")
    parser.add_argument("attacks", nargs="*", help=f"some of {', '.join(ATTACKS)} (default: all)")
    args = parser.parse_args(argv)
    unknown = set(args.attacks) - set(ATTACKS)
    if unknown:
        parser.error(f"unknown attacks {sorted(unknown)}: choose among {', '.join(ATTACKS)}")
    users = {"alice": "alice-secret"}
    with tempfile.TemporaryDirectory(prefix="raftcore-attacks-") as tmp:
        directory = Path(tmp)
        node_args = ["--election-timeout-ms", "500", "--fetch-timeout-ms", "1000", *args.node_arg]
        tls_dir = None
        if args.protocol == "SASL_SSL":
            from raftcore.security.certs import make_certs

            tls_dir = make_certs(directory / "tls", [1, 2, 3]).directory
            users_path = directory / "users.json"
            write_users(users_path, {n: make_user(n, pw) for n, pw in users.items()})
            node_args += ["--sasl-users", str(users_path)]
        print(f"{args.protocol}, a fresh 3-node cluster per attack, on its leader:")
        for name in args.attacks or ATTACKS:
            if name.endswith("-12s") and args.protocol == "PLAINTEXT":
                continue  # the login timeout is for SASL listeners
            where = directory / f"cluster-{name}"
            with LocalCluster(where, 3, node_args=node_args, tls_dir=tls_dir) as c:
                c.start()
                asyncio.run(_measure(c, args.protocol, users, name))
    return 0


if __name__ == "__main__":
    sys.exit(main())
