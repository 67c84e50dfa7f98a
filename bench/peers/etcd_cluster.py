"""A 3-member etcd cluster on loopback and a minimal etcd v3 client for the small-writes benchmark.

The cluster runs the ``etcd`` binary found on the PATH (Debian: ``apt install etcd-server``);
nothing is installed here. Every member gets its own data directory and free ports, and every
process started is killed by its pid in :meth:`EtcdCluster.close`. etcd fsyncs its WAL before a
proposal counts (there is no switch to turn that off).

The client speaks etcd's v3 API through the gRPC gateway etcd serves on its client port as
HTTP/1.1 + JSON (``POST /v3/kv/put`` with base64 key and value; etcd 3.4 serves ``/v3/``, 3.3
only ``/v3beta/``). One :class:`EtcdWriter` is one keep-alive TCP connection carrying one request
at a time, written with raw asyncio streams (no client package).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import shutil
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

from raftcore.node.local_cluster import free_ports

__all__ = ["EtcdCluster", "EtcdError", "EtcdWriter", "etcd_binary"]


class EtcdError(Exception):
    pass


def etcd_binary() -> str | None:
    return shutil.which("etcd")


class EtcdCluster:
    """Three etcd members on 127.0.0.1; use as a context manager."""

    def __init__(self, directory: Path, size: int = 3, host: str = "127.0.0.1") -> None:
        binary = etcd_binary()
        if binary is None:
            raise EtcdError("etcd is not on the PATH (Debian: apt install etcd-server)")
        self.binary = binary
        self.directory = Path(directory).absolute()
        self.host = host
        ports = free_ports(2 * size, host)
        self.names = [f"m{n}" for n in range(1, size + 1)]
        self.client_ports = ports[:size]
        self.peer_ports = ports[size:]
        self.procs: list[subprocess.Popen[bytes]] = []

    def client_url(self, index: int) -> str:
        return f"http://{self.host}:{self.client_ports[index]}"

    def _command(self, index: int) -> list[str]:
        cluster = ",".join(
            f"{name}=http://{self.host}:{port}"
            for name, port in zip(self.names, self.peer_ports, strict=True)
        )
        peer = f"http://{self.host}:{self.peer_ports[index]}"
        return [
            self.binary,
            "--name",
            self.names[index],
            "--data-dir",
            str(self.directory / self.names[index]),
            "--listen-client-urls",
            self.client_url(index),
            "--advertise-client-urls",
            self.client_url(index),
            "--listen-peer-urls",
            peer,
            "--initial-advertise-peer-urls",
            peer,
            "--initial-cluster",
            cluster,
            "--initial-cluster-state",
            "new",
            "--initial-cluster-token",
            f"bench-{self.peer_ports[0]}",
            "--logger",
            "zap",
            "--log-level",
            "error",
        ]

    def start(self, timeout_s: float = 30.0) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        for index, name in enumerate(self.names):
            log = open(self.directory / f"{name}.log", "wb")  # noqa: SIM115 (closed with the proc)
            try:
                proc = subprocess.Popen(
                    self._command(index),
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    cwd=self.directory,
                )
            finally:
                log.close()
            self.procs.append(proc)
        self.leader_index(timeout_s)

    def status(self, index: int, timeout_s: float = 2.0) -> dict:
        request = urllib.request.Request(
            self.client_url(index) + "/v3/maintenance/status", data=b"{}", method="POST"
        )
        with urllib.request.urlopen(request, timeout=timeout_s) as answer:
            return json.loads(answer.read())

    def leader_index(self, timeout_s: float = 30.0) -> int:
        """The index of the member that leads, once one does (etcd's member ids are in
        ``header.member_id``; ``leader`` names the leader's)."""
        deadline = time.monotonic() + timeout_s
        last: BaseException | None = None
        while time.monotonic() < deadline:
            for index, proc in enumerate(self.procs):
                if proc.poll() is not None:
                    log = (self.directory / f"{self.names[index]}.log").read_text(errors="replace")
                    raise EtcdError(f"etcd member {self.names[index]} exited: {log[-2000:]}")
                try:
                    status = self.status(index)
                except OSError as exc:
                    last = exc
                    continue
                leader = status.get("leader")
                if leader and leader == status["header"]["member_id"]:
                    return index
            time.sleep(0.1)
        raise EtcdError(f"etcd elected no leader in {timeout_s} s (last error: {last})")

    def close(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
        for proc in self.procs:
            proc.wait(10)

    def __enter__(self) -> EtcdCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class EtcdWriter:
    """One HTTP/1.1 keep-alive connection to one etcd member; ``put`` waits for the answer,
    which etcd sends once the write is committed (a quorum fsynced it) and applied."""

    def __init__(self, host: str, port: int) -> None:
        self.host = host
        self.port = port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def connect(self) -> None:
        self.reader, self.writer = await asyncio.open_connection(self.host, self.port)

    async def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            with contextlib.suppress(OSError):
                await self.writer.wait_closed()

    async def put(self, key: bytes, value: bytes) -> int:
        """Put one key; returns the revision etcd committed it at."""
        assert self.reader is not None and self.writer is not None
        body = json.dumps(
            {"key": base64.b64encode(key).decode(), "value": base64.b64encode(value).decode()}
        ).encode()
        self.writer.write(
            b"POST /v3/kv/put HTTP/1.1\r\nHost: %s:%d\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n%s" % (self.host.encode(), self.port, len(body), body)
        )
        status, answer = await self._read_response()
        if status != 200:
            raise EtcdError(f"etcd answered {status}: {answer[:200]!r}")
        return int(json.loads(answer)["header"]["revision"])

    async def _read_response(self) -> tuple[int, bytes]:
        assert self.reader is not None
        head = await self.reader.readuntil(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ", 2)[1])
        headers = {}
        for line in lines[1:]:
            if ":" in line:
                name, value = line.split(":", 1)
                headers[name.strip().lower()] = value.strip()
        if "content-length" in headers:
            return status, await self.reader.readexactly(int(headers["content-length"]))
        if headers.get("transfer-encoding", "").lower() == "chunked":
            body = bytearray()
            while True:
                size = int((await self.reader.readuntil(b"\r\n")).split(b";")[0], 16)
                chunk = await self.reader.readexactly(size + 2)
                if size == 0:
                    return status, bytes(body)
                body += chunk[:-2]
        raise EtcdError(f"an answer with neither Content-Length nor chunks: {head!r}")
