"""The users file: who may log in by SASL, and how each proves it, without a single password
in it.

A JSON file, written by ``raftcore users`` (:mod:`raftcore.cli.users`)::

    {"version": 1,
     "users": {
       "alice": {
         "PLAIN":         {"salt": "<base64>", "iterations": 8192, "hash": "<base64>"},
         "SCRAM-SHA-256": {"salt": "<base64>", "iterations": 8192,
                           "stored_key": "<base64>", "server_key": "<base64>"},
         "SCRAM-SHA-512": {...}},
       "node-1": {...}, "node-2": {...}, "node-3": {...}},
     "shared_node_password": {...},
     "salt_key": "<base64>"}

- ``PLAIN``: PBKDF2-HMAC-SHA-256 of the password (32 bytes) with its own salt: the node
  compares the hash of what a PLAIN client sends with it (``hmac.compare_digest``);
- ``SCRAM-SHA-*``: RFC 5802's salt, iteration count, StoredKey and ServerKey, as Kafka keeps
  SCRAM credentials (``kafka-configs --add-config SCRAM-SHA-256=[...]``);
- ``node-<id>``: the credentials of node ``<id>`` itself, which it logs in to the other nodes
  with (``raftcore users add-node``); a user cannot be named so;
- ``shared_node_password`` (optional): the credentials of a password shared by every node
  that has no ``node-<id>`` of its own (a cluster's inter-node password before each node had
  its own: docs/security.md, "Per-node credentials");
- ``salt_key``: a random key the nodes derive an unknown user's made-up SCRAM salt from, so
  that every node makes up the same one (:mod:`raftcore.security.scram`).

Nodes of version 1 files that predate ``node-<id>`` entries ignore them (with a warning) and
do not read the two other keys.

The file is written atomically (a temporary file, fsync, rename) with mode 0600; a node warns
when it is readable by group or others. :class:`UserStore` re-reads it when its modification
time or size changes, checked at each login, so users and nodes' credentials can be added or
removed while the nodes run.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import logging
import os
import re
import secrets
import stat
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from raftcore.errors import RaftcoreError
from raftcore.security.scram import (
    DEFAULT_ITERATIONS,
    MIN_ITERATIONS,
    SALT_BYTES,
    ScramCredential,
    make_credential,
)

__all__ = [
    "MECHANISMS",
    "NODE_USER",
    "PlainHash",
    "User",
    "UserStore",
    "UsersFile",
    "BadUserError",
    "UsersFileError",
    "make_node_user",
    "make_user",
    "node_user",
    "read_users",
    "read_users_file",
    "write_users",
    "write_users_file",
]

logger = logging.getLogger(__name__)

MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
NODE_USER = re.compile(r"node-(\d+)")
FORMAT_VERSION = 1


class UsersFileError(RaftcoreError):
    """A users file that cannot be read, parsed or written; the message names the file."""


class BadUserError(UsersFileError):
    """A user that cannot be added: a bad or reserved name, an empty password, too few
    iterations, an unknown mechanism."""


Pbkdf2 = Callable[[str, bytes, bytes, int], bytes]  # hashlib.pbkdf2_hmac's signature


@dataclass(frozen=True, slots=True)
class PlainHash:
    salt: bytes
    iterations: int
    hash: bytes

    @classmethod
    def of(cls, password: str, iterations: int = DEFAULT_ITERATIONS) -> PlainHash:
        salt = secrets.token_bytes(16)
        return cls(salt, iterations, _pbkdf2(password, salt, iterations))

    def matches(self, password: str, pbkdf2: Pbkdf2 = hashlib.pbkdf2_hmac) -> bool:
        derived = _pbkdf2(password, self.salt, self.iterations, pbkdf2)
        return hmac.compare_digest(derived, self.hash)


def _pbkdf2(
    password: str, salt: bytes, iterations: int, pbkdf2: Pbkdf2 = hashlib.pbkdf2_hmac
) -> bytes:
    return pbkdf2("sha256", password.encode("utf-8"), salt, iterations)


@dataclass(frozen=True)
class User:
    name: str
    plain: PlainHash | None = None
    scram: dict[str, ScramCredential] = field(default_factory=dict)

    @property
    def mechanisms(self) -> list[str]:
        return (["PLAIN"] if self.plain else []) + sorted(self.scram)


def node_user(node_id: int) -> str:
    """The login name of node ``node_id``: ``node-<id>``."""
    return f"node-{node_id}"


def check_name(name: str) -> None:
    if not name or any(c in name for c in "\x00\r\n") or len(name) > 255:
        raise BadUserError(f"bad username {name!r} (1-255 characters, no NUL or newline)")
    m = NODE_USER.fullmatch(name)
    if m:
        raise BadUserError(
            f"{name!r} is kept for the nodes: give node {int(m.group(1))} its own credentials "
            f"with raftcore users add-node FILE {int(m.group(1))}"
        )


def make_user(
    name: str,
    password: str,
    *,
    mechanisms: tuple[str, ...] = MECHANISMS,
    iterations: int = DEFAULT_ITERATIONS,
) -> User:
    """A user's credentials for ``password``, for each of ``mechanisms``."""
    check_name(name)
    return _credentials(name, password, mechanisms, iterations)


def make_node_user(
    node_id: int | None,
    password: str,
    *,
    mechanisms: tuple[str, ...] = MECHANISMS,
    iterations: int = DEFAULT_ITERATIONS,
) -> User:
    """The credentials of node ``node_id`` (``node-<id>``), or with None of the password
    shared by the nodes without their own."""
    if node_id is not None and node_id < 0:
        raise BadUserError(f"a node id is >= 0, got {node_id}")
    name = SHARED_NODE if node_id is None else node_user(node_id)
    return _credentials(name, password, mechanisms, iterations)


SHARED_NODE = "(shared node password)"  # the name the shared credentials go by in messages


def _credentials(name: str, password: str, mechanisms: tuple[str, ...], iterations: int) -> User:
    if not password:
        raise BadUserError("an empty password")
    if iterations < MIN_ITERATIONS:
        raise BadUserError(f"{iterations} iterations is below the minimum {MIN_ITERATIONS}")
    unknown = set(mechanisms) - set(MECHANISMS)
    if unknown:
        raise BadUserError(f"unknown mechanisms {sorted(unknown)} (known: {MECHANISMS})")
    plain = PlainHash.of(password, iterations) if "PLAIN" in mechanisms else None
    scram = {
        m: make_credential(m, password, iterations=iterations)
        for m in mechanisms
        if m.startswith("SCRAM-")
    }
    return User(name, plain, scram)


@dataclass(frozen=True)
class UsersFile:
    """What a users file holds: ``users`` by login name (the clients, and ``node-<id>`` for
    the nodes with their own credentials), the ``shared_node`` password's credentials if any,
    and the key made-up SCRAM salts are derived from (None in a file written before it)."""

    users: dict[str, User] = field(default_factory=dict)
    shared_node: User | None = None
    salt_key: bytes | None = field(default=None, repr=False)

    def node(self, node_id: int) -> User | None:
        return self.users.get(node_user(node_id))

    @property
    def clients(self) -> dict[str, User]:
        return {n: u for n, u in self.users.items() if not NODE_USER.fullmatch(n)}


# ---- the file ----------------------------------------------------------------------------------


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(obj: dict[str, Any], key: str) -> bytes:
    return base64.b64decode(obj[key], validate=True)


def _user_to_json(user: User) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if user.plain is not None:
        p = user.plain
        out["PLAIN"] = {"salt": _b64(p.salt), "iterations": p.iterations, "hash": _b64(p.hash)}
    for mech, c in sorted(user.scram.items()):
        out[mech] = {
            "salt": _b64(c.salt),
            "iterations": c.iterations,
            "stored_key": _b64(c.stored_key),
            "server_key": _b64(c.server_key),
        }
    return out


def _user_from_json(name: str, obj: dict[str, Any]) -> User:
    plain = None
    scram = {}
    for mech, c in obj.items():
        if mech == "PLAIN":
            plain = PlainHash(_unb64(c, "salt"), int(c["iterations"]), _unb64(c, "hash"))
        elif mech in MECHANISMS:
            scram[mech] = ScramCredential(
                _unb64(c, "salt"),
                int(c["iterations"]),
                _unb64(c, "stored_key"),
                _unb64(c, "server_key"),
            )
        else:
            raise ValueError(f"unknown mechanism {mech!r}")
    return User(name, plain, scram)


def read_users_file(path: Path) -> UsersFile:
    """Everything ``path`` holds (UsersFileError naming the file when it cannot be read or
    parsed)."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise UsersFileError(f"cannot read the users file {path}: {exc.strerror}") from None
    try:
        doc = json.loads(text)
        if doc.get("version") != FORMAT_VERSION:
            raise ValueError(f"format version {doc.get('version')!r}, not {FORMAT_VERSION}")
        users = {name: _user_from_json(name, obj) for name, obj in doc["users"].items()}
        shared = doc.get("shared_node_password")
        salt_key = doc.get("salt_key")
        return UsersFile(
            users,
            None if shared is None else _user_from_json(SHARED_NODE, shared),
            None if salt_key is None else _unb64(doc, "salt_key"),
        )
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise UsersFileError(f"the users file {path} is not valid: {exc}") from None


def read_users(path: Path) -> dict[str, User]:
    """The users (clients, not nodes) of ``path``; UsersFileError naming the file."""
    return read_users_file(path).clients


def write_users_file(path: Path, contents: UsersFile) -> None:
    """Replace ``path`` with ``contents``, atomically, mode 0600 (a salt key is made if the
    file had none)."""
    doc: dict[str, Any] = {
        "version": FORMAT_VERSION,
        "users": {name: _user_to_json(u) for name, u in sorted(contents.users.items())},
    }
    if contents.shared_node is not None:
        doc["shared_node_password"] = _user_to_json(contents.shared_node)
    doc["salt_key"] = _b64(contents.salt_key or secrets.token_bytes(32))
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            os.fchmod(f.fileno(), 0o600)
            json.dump(doc, f, indent=1)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        raise UsersFileError(f"cannot write the users file {path}: {exc}") from None


def write_users(path: Path, users: dict[str, User]) -> None:
    """Replace ``path`` with a file of these ``users`` (and no node credentials)."""
    write_users_file(path, UsersFile(dict(users)))


def loose_mode(path: Path) -> str | None:
    """A warning when ``path`` is readable or writable by group or others, else None."""
    try:
        mode = path.stat().st_mode
    except OSError:
        return None
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        return (
            f"the users file {path} has mode {stat.S_IMODE(mode):04o}: group or others may "
            f"read it (its hashes allow offline guessing); chmod 600 it"
        )
    return None


class UserStore:
    """The users and nodes' credentials of one file, re-read when the file changes (checked at
    each lookup). A change that does not parse is logged and the previous contents stay."""

    def __init__(self, path: Path, *, prefix: str = "") -> None:
        self.path = Path(path)
        self.prefix = prefix
        self._contents = read_users_file(self.path)
        self._typical = _typical_shapes(self._contents)
        self._salt_key = self._contents.salt_key or secrets.token_bytes(32)
        self._stamp = self._stat()
        warning = loose_mode(self.path)
        if warning:
            logger.warning("%s %s", prefix, warning)

    def _stat(self) -> tuple[int, int] | None:
        try:
            st = self.path.stat()
        except OSError:
            return None
        return (st.st_mtime_ns, st.st_size)

    def _refresh(self) -> None:
        stamp = self._stat()
        if stamp == self._stamp or stamp is None:
            return
        try:
            contents = read_users_file(self.path)
        except UsersFileError as exc:
            logger.error("%s keeping the previous users: %s", self.prefix, exc)
        else:
            self._contents = contents
            self._typical = _typical_shapes(contents)
            if contents.salt_key is not None:
                self._salt_key = contents.salt_key
            nodes = len(contents.users) - len(contents.clients)
            logger.info(
                "%s re-read %s: %d users, %d nodes' own credentials%s",
                self.prefix,
                self.path,
                len(contents.clients),
                nodes,
                ", the shared node password" if contents.shared_node is not None else "",
            )
        self._stamp = stamp

    def get(self, name: str) -> User | None:
        """The user ``name`` (never a node's credentials: :meth:`node`)."""
        self._refresh()
        if NODE_USER.fullmatch(name):
            return None
        return self._contents.users.get(name)

    def node(self, node_id: int) -> User | None:
        """Node ``node_id``'s own credentials, or None."""
        self._refresh()
        return self._contents.node(node_id)

    @property
    def shared_node(self) -> User | None:
        """The credentials of the password shared by nodes without their own, or None."""
        self._refresh()
        return self._contents.shared_node

    @property
    def salt_key(self) -> bytes:
        return self._salt_key

    def typical_iterations(self, mechanism: str) -> int:
        """The iteration count most of the file's ``mechanism`` credentials have (what an
        unknown user's made-up credential gets, so that it looks and costs the same)."""
        return self._typical.get(mechanism, (DEFAULT_ITERATIONS, SALT_BYTES))[0]

    def typical_salt_bytes(self, mechanism: str) -> int:
        """The salt length those credentials have (an unknown user's made-up salt gets it)."""
        return self._typical.get(mechanism, (DEFAULT_ITERATIONS, SALT_BYTES))[1]

    def __len__(self) -> int:
        return len(self._contents.clients)


def _typical_shapes(contents: UsersFile) -> dict[str, tuple[int, int]]:
    """Per mechanism, the (iteration count, salt length) most of the file's credentials have."""
    counts: dict[str, Counter[tuple[int, int]]] = {}
    for user in contents.users.values():
        if user.plain is not None:
            shape = (user.plain.iterations, len(user.plain.salt))
            counts.setdefault("PLAIN", Counter())[shape] += 1
        for mechanism, credential in user.scram.items():
            shape = (credential.iterations, len(credential.salt))
            counts.setdefault(mechanism, Counter())[shape] += 1
    return {m: c.most_common(1)[0][0] for m, c in counts.items()}
