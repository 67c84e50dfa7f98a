"""Shared by the SASL tests: the users, their file, a client's settings, and raw frames."""

from __future__ import annotations

import asyncio
import ssl
import struct
from pathlib import Path
from typing import Any

from raftcore.error_codes import Errors
from raftcore.protocol.api import ApiKey, decode_response, encode_request, request_spec
from raftcore.security.config import ClientSecurity
from raftcore.security.users import make_user, write_users

CLUSTER_ID = "sasl-tests-cluster"
NODE_PASSWORD = "inter-node-secret"
USERS = {"alice": "alice-secret", "bob": "bob-secret"}


def users_file(directory: Path) -> Path:
    path = directory / "users.json"
    write_users(path, {name: make_user(name, pw) for name, pw in USERS.items()})
    return path


def run(coro):  # type: ignore[no-untyped-def]
    return asyncio.run(asyncio.wait_for(coro, 60))


def client(mechanism: str, user: str = "alice", password: str | None = None) -> ClientSecurity:
    return ClientSecurity(
        protocol="SASL_PLAINTEXT",
        sasl_mechanism=mechanism,
        sasl_username=user,
        sasl_password=USERS.get(user, "") if password is None else password,
    )


# ---- raw frames ----------------------------------------------------------------------------------


class Raw:
    """One connection, requests one at a time; ``ask`` returns the answer's body, or None when
    the node closed the connection without answering."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer, self.cid = reader, writer, 0

    @classmethod
    async def open(cls, node: Any) -> Raw:
        """To an in-process RaftNode."""
        return await cls.connect(node.config.listen.host, node.config.listen.port)

    @classmethod
    async def connect(cls, host: str, port: int, tls: ssl.SSLContext | None = None) -> Raw:
        return cls(*await asyncio.open_connection(host, port, ssl=tls))

    def frame(self, key: int, version: int, body: Any) -> bytes:
        self.cid += 1
        frame = encode_request(key, version, self.cid, "raw-test", body)
        return struct.pack(">i", len(frame)) + frame

    async def answer(self, key: int, version: int, cid: int | None = None) -> Any:
        """The next answer, to request ``cid`` (the last one sent by default)."""
        try:
            (size,) = struct.unpack(">i", await asyncio.wait_for(self.reader.readexactly(4), 5))
            data = await asyncio.wait_for(self.reader.readexactly(size), 5)
        except (asyncio.IncompleteReadError, ConnectionError):
            return None
        got, answer = decode_response(key, version, data)
        assert got == (self.cid if cid is None else cid)
        return answer

    async def ask(self, key: int, version: int, body: Any) -> Any:
        self.writer.write(self.frame(key, version, body))
        return await self.answer(key, version)

    async def closed(self) -> bool:
        """True when the node closed the connection (within 5 s)."""
        try:
            return await asyncio.wait_for(self.reader.read(1), 5) == b""
        except ConnectionError:
            return True

    def close(self) -> None:
        self.writer.close()

    async def handshake(self, mechanism: str, version: int = 1) -> Any:
        cls = request_spec(ApiKey.SASL_HANDSHAKE).cls
        return await self.ask(ApiKey.SASL_HANDSHAKE, version, cls(mechanism=mechanism))

    async def authenticate(self, token: bytes, version: int = 1) -> Any:
        cls = request_spec(ApiKey.SASL_AUTHENTICATE).cls
        return await self.ask(ApiKey.SASL_AUTHENTICATE, version, cls(auth_bytes=token))

    async def login_plain(self, user: str, password: str) -> Any:
        assert (await self.handshake("PLAIN")).error_code == Errors.NONE
        return await self.authenticate(plain_token(user, password))


def plain_token(user: str, password: str) -> bytes:
    return b"\x00" + user.encode() + b"\x00" + password.encode()


def metadata_body() -> Any:
    cls = request_spec(ApiKey.METADATA).cls
    return cls(topics=None, allow_auto_topic_creation=False)


def vote_body(candidate: int, cluster_id: str = CLUSTER_ID, epoch: int = 99) -> Any:
    cls = request_spec(ApiKey.VOTE).cls
    partition = cls.PartitionData(
        partition_index=0,
        candidate_epoch=epoch,
        candidate_id=candidate,
        last_offset_epoch=epoch,
        last_offset=10**9,
    )
    return cls(
        cluster_id=cluster_id,
        voter_id=1,
        topics=[cls.TopicData(topic_name="raftcore", partitions=[partition])],
    )


def begin_quorum_epoch_body(leader: int, cluster_id: str = CLUSTER_ID, epoch: int = 99) -> Any:
    cls = request_spec(ApiKey.BEGIN_QUORUM_EPOCH).cls
    partition = cls.PartitionData(partition_index=0, leader_id=leader, leader_epoch=epoch)
    return cls(
        cluster_id=cluster_id,
        voter_id=1,
        topics=[cls.TopicData(topic_name="raftcore", partitions=[partition])],
        leader_endpoints=[cls.LeaderEndpoint(name="PLAINTEXT", host="127.0.0.1", port=1)],
    )
