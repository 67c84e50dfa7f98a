"""SASL on a node's listener (KIP-43, KIP-152), as Kafka's ``SaslServerAuthenticator`` does it.

On a SASL_PLAINTEXT or SASL_SSL listener a connection must log in before anything else is
served: ApiVersions (once), then SaslHandshake v1 naming a mechanism, then SaslAuthenticate
requests carrying the mechanism's tokens. Like Kafka:

- before the handshake, any request but ApiVersions and SaslHandshake (a SaslAuthenticate
  too) closes the connection unanswered (Kafka: InvalidRequestException, "Unexpected Kafka
  request of type ... during SASL handshake");
- after the handshake, a request other than SaslAuthenticate is answered ILLEGAL_SASL_STATE
  (ApiVersions and SaslHandshake; other APIs are closed unanswered, where Kafka would build each
  API's own error answer) and the connection is closed;
- a mechanism not enabled is answered UNSUPPORTED_SASL_MECHANISM with the enabled ones, then
  the connection is closed;
- wrong credentials are answered SASL_AUTHENTICATION_FAILED with Kafka's message, then the
  connection is closed;
- once logged in, SaslHandshake and SaslAuthenticate are answered ILLEGAL_SASL_STATE (no
  re-authentication, KIP-368), as they are on a listener without SASL.

SaslHandshake v0 without SaslAuthenticate framing (raw tokens after the handshake; Kafka
0.10.0 clients) is not served: a v0 handshake is answered as v1 is, and the raw token that
follows does not parse as a request, so the connection closes. librdkafka, the Java client,
kafka-python and aiokafka all use v1 + SaslAuthenticate when the broker offers it.

Who a connection is: ``conn.principal`` becomes ``User:<name>`` after a login. A node is:

- on SASL_SSL, the node its TLS certificate names, and only that: it need not log in, and a
  login as ``node-<id>`` is refused unless the certificate already names that node (the
  principal stays the certificate's; a password never makes a connection a node);
- on SASL_PLAINTEXT, ``Node:node-<id>`` after a login as ``node-<id>`` (a voter) with node
  ``<id>``'s own credentials, from the users file (``raftcore users add-node``); each node
  logs in to the others with its own password (``sasl_node_password``). A node without
  credentials of its own may still log in with the password the nodes used to share: the
  file's ``shared_node_password``, or the password of a node that has no credentials of its
  own in the file (such a node holds the shared password: it warns at start). Once
  ``node-<id>`` has its own credentials, nothing else logs in as it.

Who may send raft RPCs is decided in :mod:`raftcore.security.authorization`, for SASL and TLS
alike: only a node, and only for itself.

A PLAIN login's PBKDF2 runs on a small pool of threads (:data:`LOGIN_THREADS`), not on the
event loop, and costs the same whether or not the user exists (an unknown user's password is
hashed against a made-up credential with the users' iteration count); the connection's later
requests wait for it, so answers keep their order. A refused login is logged once per client
host, mechanism and reason every 30 s (the rest at DEBUG), and so is a connection closed for
a request out of turn.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import hmac
import logging
import weakref
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from raftcore.error_codes import Errors
from raftcore.errors import RaftcoreError
from raftcore.log_limit import RepeatLimiter
from raftcore.protocol.api import ApiKey, encode_response, response_spec
from raftcore.security.config import ListenerSecurity, Principal
from raftcore.security.scram import ScramError, ScramServer, salted_password
from raftcore.security.scram import credential_from_salted as _scram_from_salted
from raftcore.security.users import (
    MECHANISMS,
    NODE_USER,
    PlainHash,
    User,
    UserStore,
    make_node_user,
    node_user,
)

__all__ = [
    "PASS",
    "SASL_APIS",
    "AnswerThenClose",
    "SaslAuthenticator",
    "SaslConfigError",
    "check_listener",
    "gate",
    "parse_plain",
]

logger = logging.getLogger(__name__)

SASL_APIS = frozenset({ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE})
# Kafka's sasl.server.max.receive.size: the largest frame before the login completes
MAX_RECEIVE_BEFORE_LOGIN = 512 * 1024
PASS: Any = object()  # the request goes on to be served
LOGIN_FAILURE_LOG_EVERY_S = 30.0  # per client host, mechanism and reason
LOGIN_THREADS = 2  # the PBKDF2 of PLAIN logins runs there, off the event loop

PLAIN_FAILED = "Authentication failed: Invalid username or password"  # Kafka's PlainSaslServer
SCRAM_FAILED = (  # Kafka's SaslServerAuthenticator, for a SaslException of any SCRAM mechanism
    "Authentication failed during authentication due to invalid credentials with SASL mechanism "
)
AUTHZID_DIFFERS = (
    "Authentication failed: Client requested an authorization id that is different from username"
)


class SaslConfigError(RaftcoreError, ValueError):
    """A listener configuration that cannot work (or would leave raft RPCs unauthenticated)."""


class SaslLoginFailed(Exception):
    """A login refused; ``message`` is what the client is told, ``log`` what the log line
    says, ``reason`` the part of it that does not name the user (the log limiter's key)."""

    def __init__(self, message: str, log: str = "", reason: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.log = log or message
        self.reason = reason or self.log


@dataclass(frozen=True, slots=True)
class AnswerThenClose:
    """A handler's result: write this answer (None: nothing), then close the connection
    (Kafka sends an authentication failure's answer, then closes). ``log_level``: the level
    of the connection's "closing connection" line (DEBUG when the reason was logged here
    already, through the limiter)."""

    parts: list[bytes | memoryview] | None
    reason: str
    log_level: int = logging.INFO


@functools.cache
def login_executor() -> ThreadPoolExecutor:
    """The threads PLAIN logins hash passwords on (one pool per process, :data:`LOGIN_THREADS`
    threads: a flood of logins queues there, and the event loop goes on serving)."""
    return ThreadPoolExecutor(LOGIN_THREADS, thread_name_prefix="raftcore-login")


def check_listener(security: ListenerSecurity, voters: int = 2) -> None:
    """Refuse a SASL listener that cannot work: no users file, a mechanism we do not have, or
    raft RPCs that no node could be authorized to send: on SASL_PLAINTEXT, a node without its
    password (``--sasl-node-password-file``); on SASL_SSL, a cluster of more than one voter
    without client certificates (there the certificate is a node's only proof)."""
    if not security.uses_sasl:
        return
    if security.sasl_users_file is None:
        raise SaslConfigError(f"a {security.protocol} listener needs a users file (--sasl-users)")
    unknown = [m for m in security.sasl_mechanisms if m not in MECHANISMS]
    if unknown or not security.sasl_mechanisms:
        raise SaslConfigError(
            f"SASL mechanisms {list(security.sasl_mechanisms)}: "
            f"choose among {', '.join(MECHANISMS)}"
        )
    if security.uses_tls:
        if voters > 1 and security.ssl_client_auth not in ("required", "requested"):
            raise SaslConfigError(
                "on a SASL_SSL listener the nodes prove who they are for raft RPCs by their "
                "certificates: ssl.client.auth must be required or requested"
            )
    elif not getattr(security, "sasl_node_password", None):
        raise SaslConfigError(
            f"on a {security.protocol} listener the nodes must prove who they are for raft "
            "RPCs: give this node's inter-node password (--sasl-node-password-file; "
            "raftcore users add-node makes one)"
        )


def parse_plain(token: bytes) -> tuple[str, str, str]:
    """(authzid, username, password) of a SASL/PLAIN message (RFC 4616:
    ``[authzid] NUL authcid NUL passwd``); SaslLoginFailed with Kafka's words otherwise."""
    parts = token.split(b"\x00")
    if len(parts) != 3:
        raise SaslLoginFailed(f"Invalid SASL/PLAIN response: expected 3 tokens, got {len(parts)}")
    try:
        authzid, username, password = (p.decode("utf-8") for p in parts)
    except UnicodeDecodeError:
        raise SaslLoginFailed("Invalid SASL/PLAIN response: not UTF-8") from None
    if not username:
        raise SaslLoginFailed("Authentication failed: username not specified")
    if not password:
        raise SaslLoginFailed("Authentication failed: password not specified")
    if authzid and authzid != username:
        raise SaslLoginFailed(AUTHZID_DIFFERS)
    return authzid, username, password


# ---- one connection's login --------------------------------------------------------------------

INITIAL, HANDSHAKE, AUTHENTICATE, COMPLETE = "initial", "handshake", "authenticate", "complete"


class _Session:
    __slots__ = ("busy", "mechanism", "scram", "shared", "state", "username")

    def __init__(self) -> None:
        self.state = INITIAL
        self.mechanism = ""
        self.scram: ScramServer | None = None
        self.username = ""  # once the state is COMPLETE
        self.shared = False  # a node logged in with the shared password
        # set while a SaslAuthenticate is worked on: the connection's next requests wait
        self.busy: asyncio.Future[None] | None = None


class SaslAuthenticator:
    """A SASL listener's logins: the users and the nodes' credentials (re-read when the file
    changes), this node's own password, and each connection's progress."""

    def __init__(
        self, security: ListenerSecurity, node_id: int, voters: Any, *, prefix: str = ""
    ) -> None:
        self.voters = frozenset(voters)
        check_listener(security, len(self.voters))
        assert security.sasl_users_file is not None
        self.security = security
        self.mechanisms = list(security.sasl_mechanisms)
        self.node_id = node_id
        self.prefix = prefix
        self.users = UserStore(security.sasl_users_file, prefix=prefix)
        # hashlib.pbkdf2_hmac, or what a test puts there to count the work
        self.pbkdf2: Callable[[str, bytes, bytes, int], bytes] = hashlib.pbkdf2_hmac
        self._password: str | None = getattr(security, "sasl_node_password", None) or None
        own = self.users.node(node_id)
        if own is not None and self._password is not None and not security.uses_tls:
            _check_own_password(own, self._password, node_id, security)
        # A node without credentials of its own holds the password the nodes share: it is
        # accepted from every node without credentials of its own (decided once, at start: a
        # node that gets its own credentials in the file meanwhile still holds the shared
        # password until it restarts with its own).
        self._shared_password: User | None = None
        if own is None and self._password is not None:
            self._shared_password = make_node_user(
                None, self._password, mechanisms=tuple(self.mechanisms)
            )
        self._dummies: dict[int, PlainHash] = {}
        self._sessions: weakref.WeakKeyDictionary[Any, _Session] = weakref.WeakKeyDictionary()
        self.logins = 0
        self.failures = 0
        self.refusal_lines = RepeatLimiter(LOGIN_FAILURE_LOG_EVERY_S)
        self.max_frame_bytes = 100 * 1024 * 1024  # the node's, once logged in (for_node)
        self._warn_at_start()

    @classmethod
    def for_node(cls, config: Any, prefix: str = "") -> SaslAuthenticator | None:
        security = config.security
        if not security.uses_sasl:
            return None
        auth = cls(security, config.node_id, config.voters, prefix=prefix)
        auth.max_frame_bytes = config.max_frame_bytes
        return auth

    def _warn_at_start(self) -> None:
        if self.security.uses_tls:
            if self._password is not None:
                logger.warning(
                    "%s on SASL_SSL the nodes prove who they are by their certificates: this "
                    "node does not log in with --sasl-node-password-file, and a login as "
                    "node-<id> is accepted only on a connection whose certificate names that "
                    "node (the option is needed only while nodes of an older raftcore log in "
                    "with it)",
                    self.prefix,
                )
            return
        without = sorted(v for v in self.voters if self.users.node(v) is None)
        if without and self.users.shared_node is None and self._shared_password is None:
            logger.warning(
                "%s %s no credentials of %s own in %s, and it keeps no shared node password: "
                '%s cannot log in to this node (docs/security.md, "Per-node credentials")',
                self.prefix,
                _nodes(without) + (" has" if len(without) == 1 else " have"),
                "its" if len(without) == 1 else "their",
                self.users.path,
                "it" if len(without) == 1 else "they",
            )
            return
        if without:
            logger.warning(
                "%s %s no credentials of %s own: whoever holds the shared inter-node password "
                "can log in as %s and speak for %s (vote, lead, replicate); give each node "
                "its own with raftcore users add-node (docs/security.md, "
                '"Per-node credentials")',
                self.prefix,
                _nodes(without) + (" has" if len(without) == 1 else " have"),
                "its" if len(without) == 1 else "their",
                "it" if len(without) == 1 else "any of them",
                "it" if len(without) == 1 else "each",
            )

    # ---- the inter-node login (client side, for PeerConnection) ----------------------------------

    @property
    def peer_login(self) -> Callable[[Any, Any], Awaitable[None]] | None:
        """What a PeerConnection runs on each new connection to log in as this node, or None
        when nodes prove who they are by their certificates (SASL_SSL)."""
        if self.security.uses_tls or not self._password:
            return None
        from raftcore.security.sasl_client import raw_login

        preferred = ("SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN")
        mechanism = next(m for m in preferred if m in self.mechanisms)
        username, password = node_user(self.node_id), self._password

        async def login(reader: Any, writer: Any) -> None:
            await raw_login(reader, writer, mechanism, username, password)

        return login

    # ---- the server side -------------------------------------------------------------------------

    def session(self, conn: Any) -> _Session:
        s = self._sessions.get(conn)
        if s is None:
            s = self._sessions[conn] = _Session()
        return s

    def handshake(self, conn: Any, session: _Session, header: Any, body: Any) -> Any:
        cls = response_spec(ApiKey.SASL_HANDSHAKE).cls
        version = header.request_api_version
        if body.mechanism not in self.mechanisms:
            answer = cls(error_code=Errors.UNSUPPORTED_SASL_MECHANISM, mechanisms=self.mechanisms)
            self.failures += 1
            return self.close_after(
                conn,
                encode_response(ApiKey.SASL_HANDSHAKE, version, header.correlation_id, answer),
                f"SASL mechanism {body.mechanism!r} is not enabled",
            )
        session.state = AUTHENTICATE
        session.mechanism = body.mechanism
        if body.mechanism.startswith("SCRAM-"):
            mechanism = body.mechanism
            session.scram = ScramServer(
                mechanism,
                lambda name: self._scram_credential(mechanism, name, session),
                fake_salt_key=self.users.salt_key,
                fake_iterations=self.users.typical_iterations(mechanism),
                fake_salt_bytes=self.users.typical_salt_bytes(mechanism),
            )
        answer = cls(error_code=Errors.NONE, mechanisms=self.mechanisms)
        return encode_response(ApiKey.SASL_HANDSHAKE, version, header.correlation_id, answer)

    def credentials(self, name: str) -> User | None:
        """Who may log in as ``name``: a user's credentials; for ``node-<id>`` (any node: a
        joining one is not a voter yet) the node's own, or, for a node without credentials of
        its own, the shared password's."""
        m = NODE_USER.fullmatch(name)
        if m is None:
            return self.users.get(name)
        # Any node id: the voter set changes at run time, and a node joining the cluster
        # fetches as an observer before it is a voter.
        node_id = int(m.group(1))
        own = self.users.node(node_id)
        if own is not None:
            return own
        return self.users.shared_node or self._shared_password

    def _is_shared(self, user: User | None) -> bool:
        return user is not None and (
            user is self._shared_password or user is self.users.shared_node
        )

    def _scram_credential(self, mechanism: str, name: str, session: _Session) -> Any:
        user = self.credentials(name)
        session.shared = self._is_shared(user)
        return None if user is None else user.scram.get(mechanism)

    def principal(self, name: str) -> Principal:
        """The principal a completed login as ``name`` gives on SASL_PLAINTEXT."""
        m = NODE_USER.fullmatch(name)
        if m is not None:
            return Principal("node", name, node_id=int(m.group(1)))
        return Principal("user", name)

    async def authenticate(self, conn: Any, session: _Session, header: Any, body: Any) -> Any:
        cls = response_spec(ApiKey.SASL_AUTHENTICATE).cls
        version = header.request_api_version
        busy = session.busy = asyncio.get_running_loop().create_future()
        try:
            token = await self._evaluate(conn, session, bytes(body.auth_bytes))
        except SaslLoginFailed as exc:
            self.failures += 1
            self._log_limited(
                conn,
                session.mechanism,
                exc.reason,
                f"failed {session.mechanism} login from {_address(conn)}: {exc.log}",
            )
            answer = cls(
                error_code=Errors.SASL_AUTHENTICATION_FAILED,
                error_message=exc.message,
                auth_bytes=b"",
                session_lifetime_ms=0,
            )
            return AnswerThenClose(
                encode_response(ApiKey.SASL_AUTHENTICATE, version, header.correlation_id, answer),
                f"authentication failed: {exc.log}",
                logging.DEBUG,  # said above, once per 30 s
            )
        finally:
            session.busy = None
            busy.set_result(None)
        if session.state == COMPLETE:
            node_login = NODE_USER.fullmatch(session.username) is not None
            if not (self.security.uses_tls and node_login):  # SASL_SSL: the certificate's
                conn.principal = self.principal(session.username)
            conn.max_frame_bytes = self.max_frame_bytes
            self.logins += 1
            logger.info(
                "%s %s logged in from %s (%s%s)",
                self.prefix,
                conn.principal,
                _address(conn),
                session.mechanism,
                ", with the shared inter-node password" if session.shared else "",
            )
        answer = cls(
            error_code=Errors.NONE, error_message=None, auth_bytes=token, session_lifetime_ms=0
        )
        return encode_response(ApiKey.SASL_AUTHENTICATE, version, header.correlation_id, answer)

    async def _evaluate(self, conn: Any, session: _Session, token: bytes) -> bytes:
        """The server's token for the client's; sets the connection's state (and principal,
        through the caller) once the client proved who it is."""
        if session.mechanism == "PLAIN":
            _, username, password = parse_plain(token)
            if not await self._plain_matches(username, password, session):
                raise SaslLoginFailed(
                    PLAIN_FAILED,
                    f"user {username!r}: wrong password or no such user",
                    "wrong password or no such user",
                )
            self._check_node_login(conn, username, PLAIN_FAILED)
            session.state, session.username = COMPLETE, username
            return b""
        scram = session.scram
        assert scram is not None
        failed = SCRAM_FAILED + session.mechanism
        try:
            answer = scram.step(token)
        except ScramError as exc:
            message = AUTHZID_DIFFERS if "authorization id" in str(exc) else failed
            raise SaslLoginFailed(message, str(exc)) from None
        if scram.complete:
            assert scram.username is not None
            self._check_node_login(conn, scram.username, failed)
            session.state, session.username = COMPLETE, scram.username
        return answer

    def _check_node_login(self, conn: Any, username: str, message: str) -> None:
        """On SASL_SSL a password never makes a connection a node: a login as ``node-<id>``
        is refused unless the connection's certificate names that node already."""
        if not self.security.uses_tls or NODE_USER.fullmatch(username) is None:
            return
        principal = conn.principal
        if principal.kind != "node" or principal.name != username:
            raise SaslLoginFailed(
                message,
                f"{username} logs in on {self.security.protocol} only over a connection "
                f"whose certificate names it (this one is {principal})",
                "a node's login without its certificate",
            )

    async def _plain_matches(self, username: str, password: str, session: _Session) -> bool:
        """Whether ``password`` is ``username``'s, after the same work either way: an unknown
        user's password is hashed too, against a made-up hash of the users' iteration count.
        The hashing runs on :func:`login_executor`'s threads."""
        user = self.credentials(username)
        session.shared = self._is_shared(user)
        plain = None if user is None else user.plain
        known = plain is not None
        if plain is None:
            plain = self._dummy(self.users.typical_iterations("PLAIN"))
        loop = asyncio.get_running_loop()
        matches = await loop.run_in_executor(login_executor(), plain.matches, password, self.pbkdf2)
        return known and matches

    def _dummy(self, iterations: int) -> PlainHash:
        dummy = self._dummies.get(iterations)
        if dummy is None:
            dummy = self._dummies[iterations] = PlainHash(b"\x00" * 16, iterations, b"\x00" * 32)
        return dummy

    # ---- closing a connection, logged once per 30 s ------------------------------------------

    def close_after(self, conn: Any, parts: Any, reason: str, mechanism: str = "") -> Any:
        """Answer ``parts`` (None: nothing), then close; the reason is logged at INFO once per
        client host and reason every 30 s, else at DEBUG."""
        self._log_limited(
            conn, mechanism, reason, f"closing connection from {_address(conn)}: {reason}"
        )
        return AnswerThenClose(parts, reason, logging.DEBUG)

    def _log_limited(self, conn: Any, mechanism: str, reason: str, line: str) -> None:
        address = _address(conn)
        host = address.rpartition(":")[0] or address
        left_out = self.refusal_lines.admit((host, mechanism, reason))
        if left_out is None:  # a client retrying a wrong password: once per 30 s
            logger.debug("%s %s", self.prefix, line)
        else:
            logger.info("%s %s%s", self.prefix, line, RepeatLimiter.since(left_out, host))


def _address(conn: Any) -> str:
    return str(getattr(conn, "address", conn.peer))


def _nodes(ids: list[int]) -> str:
    names = [node_user(i) for i in ids]
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def _check_own_password(own: User, password: str, node_id: int, security: ListenerSecurity) -> None:
    """A node whose credentials are in the users file must hold their password: said at start,
    where it can be fixed, not as refused logins at every peer."""
    if own.plain is not None:
        ok = own.plain.matches(password)
    elif own.scram:
        mechanism, c = sorted(own.scram.items())[0]
        salted = salted_password(mechanism, password, c.salt, c.iterations)
        mine = _scram_from_salted(mechanism, salted, c.salt, c.iterations)
        ok = hmac.compare_digest(mine.stored_key, c.stored_key)
    else:
        ok = False
    if not ok:
        raise SaslConfigError(
            f"the password of --sasl-node-password-file is not {node_user(node_id)}'s in "
            f"{security.sasl_users_file}: give this node the password raftcore users add-node "
            f"wrote for it"
        )


# ---- hooks for raftcore.node.messaging ---------------------------------------------------------


def _illegal_state(header: Any, message: str) -> list[bytes | memoryview]:
    key = header.request_api_key
    version = header.request_api_version
    cls = response_spec(key).cls
    if key == ApiKey.SASL_HANDSHAKE:
        body = cls(error_code=Errors.ILLEGAL_SASL_STATE, mechanisms=[])
    elif key == ApiKey.SASL_AUTHENTICATE:
        body = cls(
            error_code=Errors.ILLEGAL_SASL_STATE,
            error_message=message,
            auth_bytes=b"",
            session_lifetime_ms=0,
        )
    else:  # ApiVersions
        body = cls(error_code=Errors.ILLEGAL_SASL_STATE, api_keys=[], throttle_time_ms=0)
    return encode_response(key, version, header.correlation_id, body)


def on_accept(node: Any, conn: Any) -> None:
    """A new connection on a SASL listener may send small frames only until it logged in
    (Kafka's ``sasl.server.max.receive.size``, 512 KiB)."""
    if node.sasl is not None and conn.principal.kind != "node":
        conn.max_frame_bytes = min(conn.max_frame_bytes, MAX_RECEIVE_BEFORE_LOGIN)


def gate(node: Any, conn: Any, header: Any, body: Any) -> Any:
    """What becomes of a decoded request on ``conn`` before it is served: PASS, an answer (a
    list of frame parts), an :class:`AnswerThenClose`, or a coroutine giving one of these (a
    login step, or a request that waits for the one before it)."""
    key = header.request_api_key
    auth: SaslAuthenticator | None = node.sasl
    if auth is None:
        if key in SASL_APIS:  # a listener without SASL, as Kafka's KafkaApis answers
            return _illegal_state(header, "SASL is not enabled on this listener")
        return PASS
    session = auth.session(conn)
    if session.busy is not None:  # a login step is worked on: this request comes after it
        return _after(session.busy, node, conn, header, body)
    if session.state == COMPLETE:
        if key in SASL_APIS:
            return _illegal_state(
                header, "SaslAuthenticate request received after successful authentication"
            )
        return PASS
    if key == ApiKey.SASL_HANDSHAKE and session.state in (INITIAL, HANDSHAKE):
        return auth.handshake(conn, session, header, body)
    if key == ApiKey.SASL_AUTHENTICATE and session.state == AUTHENTICATE:
        return auth.authenticate(conn, session, header, body)
    if conn.principal.kind == "node":  # a node by its TLS certificate: no login needed
        conn.max_frame_bytes = auth.max_frame_bytes
        return PASS
    if key == ApiKey.API_VERSIONS and session.state == INITIAL:
        session.state = HANDSHAKE
        return PASS
    name = ApiKey(key).name
    if session.state == AUTHENTICATE and key in (ApiKey.API_VERSIONS, ApiKey.SASL_HANDSHAKE):
        return auth.close_after(
            conn,
            _illegal_state(header, ""),
            f"unexpected {name} request during SASL authentication (ILLEGAL_SASL_STATE)",
        )
    during = "authentication" if session.state == AUTHENTICATE else "handshake"
    return auth.close_after(conn, None, f"unexpected {name} request during SASL {during}")


async def _after(busy: asyncio.Future[None], node: Any, conn: Any, header: Any, body: Any) -> Any:
    await busy
    gated = gate(node, conn, header, body)
    if asyncio.iscoroutine(gated):
        gated = await gated
    return gated
