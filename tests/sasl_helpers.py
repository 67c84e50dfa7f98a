"""Shared by the SASL tests: the users, their file, a client's settings."""

from __future__ import annotations

import asyncio
from pathlib import Path

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
