"""The users file: who may log in by SASL, and how each proves it, without a single password
in it.

A JSON file, written by ``raftcore users add|delete`` (:mod:`raftcore.users_cli`)::

    {"version": 1,
     "users": {
       "alice": {
         "PLAIN":         {"salt": "<base64>", "iterations": 4096, "hash": "<base64>"},
         "SCRAM-SHA-256": {"salt": "<base64>", "iterations": 4096,
                           "stored_key": "<base64>", "server_key": "<base64>"},
         "SCRAM-SHA-512": {...}}}}

- ``PLAIN``: PBKDF2-HMAC-SHA-256 of the password (32 bytes) with its own salt: the node
  compares the hash of what a PLAIN client sends with it (``hmac.compare_digest``);
- ``SCRAM-SHA-*``: RFC 5802's salt, iteration count, StoredKey and ServerKey, as Kafka keeps
  SCRAM credentials (``kafka-configs --add-config SCRAM-SHA-256=[...]``).

Names of the form ``node-<id>`` are kept for the nodes themselves (they log in with the
inter-node password, :mod:`raftcore.security.sasl`): the file may not hold them.

The file is written atomically (a temporary file, fsync, rename) with mode 0600; a node warns
when it is readable by group or others. :class:`UserStore` re-reads it when its modification
time or size changes, checked at each login, so users can be added or removed while the
nodes run.
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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from raftcore.errors import RaftcoreError
from raftcore.security.scram import MIN_ITERATIONS, ScramCredential, make_credential

__all__ = [
    "MECHANISMS",
    "NODE_USER",
    "PlainHash",
    "User",
    "UserStore",
    "BadUserError",
    "UsersFileError",
    "make_user",
    "read_users",
    "write_users",
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


@dataclass(frozen=True, slots=True)
class PlainHash:
    salt: bytes
    iterations: int
    hash: bytes

    @classmethod
    def of(cls, password: str, iterations: int = MIN_ITERATIONS) -> PlainHash:
        salt = secrets.token_bytes(16)
        return cls(salt, iterations, _pbkdf2(password, salt, iterations))

    def matches(self, password: str) -> bool:
        return hmac.compare_digest(_pbkdf2(password, self.salt, self.iterations), self.hash)


def _pbkdf2(password: str, salt: bytes, iterations: int) -> bytes:
    return hashlib.pbkdf2_hmac("sha256", password.encode("utf-8"), salt, iterations)


@dataclass(frozen=True)
class User:
    name: str
    plain: PlainHash | None = None
    scram: dict[str, ScramCredential] = field(default_factory=dict)

    @property
    def mechanisms(self) -> list[str]:
        return (["PLAIN"] if self.plain else []) + sorted(self.scram)


def check_name(name: str) -> None:
    if not name or any(c in name for c in "\x00\r\n") or len(name) > 255:
        raise BadUserError(f"bad username {name!r} (1-255 characters, no NUL or newline)")
    if NODE_USER.fullmatch(name):
        raise BadUserError(
            f"{name!r} is kept for the nodes (they log in with the inter-node password)"
        )


def make_user(
    name: str,
    password: str,
    *,
    mechanisms: tuple[str, ...] = MECHANISMS,
    iterations: int = MIN_ITERATIONS,
) -> User:
    """A user's credentials for ``password``, for each of ``mechanisms``."""
    check_name(name)
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


def read_users(path: Path) -> dict[str, User]:
    """The users of ``path`` (an empty dict for a missing file is the caller's choice: this
    raises UsersFileError naming the file)."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise UsersFileError(f"cannot read the users file {path}: {exc.strerror}") from None
    try:
        doc = json.loads(text)
        if doc.get("version") != FORMAT_VERSION:
            raise ValueError(f"format version {doc.get('version')!r}, not {FORMAT_VERSION}")
        users = {}
        for name, obj in doc["users"].items():
            if NODE_USER.fullmatch(name):
                logger.warning("%s: ignoring %r (names node-<id> are the nodes')", path, name)
                continue
            users[name] = _user_from_json(name, obj)
        return users
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise UsersFileError(f"the users file {path} is not valid: {exc}") from None


def write_users(path: Path, users: dict[str, User]) -> None:
    """Replace ``path`` with ``users``, atomically, mode 0600."""
    doc = {
        "version": FORMAT_VERSION,
        "users": {name: _user_to_json(u) for name, u in sorted(users.items())},
    }
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
    """The users of one file, re-read when the file changes (checked at each lookup). A
    change that does not parse is logged and the previous users stay."""

    def __init__(self, path: Path, *, prefix: str = "") -> None:
        self.path = Path(path)
        self.prefix = prefix
        self._users = read_users(self.path)
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
            self._users = read_users(self.path)
        except UsersFileError as exc:
            logger.error("%s keeping the previous users: %s", self.prefix, exc)
        else:
            logger.info("%s re-read %s: %d users", self.prefix, self.path, len(self._users))
        self._stamp = stamp

    def get(self, name: str) -> User | None:
        self._refresh()
        return self._users.get(name)

    def __len__(self) -> int:
        return len(self._users)
