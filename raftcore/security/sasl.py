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

Who a connection is: ``conn.principal`` becomes ``User:<name>`` after a login, or
``Node:node-<id>`` when a node logged in with the inter-node password (the nodes of a cluster
share it: ``sasl_node_password``; the users file cannot hold ``node-<id>`` names). A
connection whose TLS certificate already made it a node (SASL_SSL) need not log in. Who may
send raft RPCs is decided in :mod:`raftcore.security.authorization`, for SASL and TLS alike.
"""

from __future__ import annotations

import hmac
import logging
import secrets
import weakref
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from raftcore.error_codes import Errors
from raftcore.errors import RaftcoreError
from raftcore.log_limit import RepeatLimiter
from raftcore.protocol.api import ApiKey, encode_response, response_spec
from raftcore.security.config import ListenerSecurity, Principal
from raftcore.security.scram import ScramCredential, ScramError, ScramServer, make_credential
from raftcore.security.users import MECHANISMS, NODE_USER, UserStore

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
    """A login refused; ``message`` is what the client is told."""

    def __init__(self, message: str, log: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.log = log or message


@dataclass(frozen=True, slots=True)
class AnswerThenClose:
    """A handler's result: write this answer, then close the connection (Kafka sends an
    authentication failure's answer, then closes)."""

    parts: list[bytes | memoryview]
    reason: str


def check_listener(security: ListenerSecurity) -> None:
    """Refuse a SASL listener that cannot work: no users file, a mechanism we do not have, or
    raft RPCs that no node could be authorized to send (SASL_PLAINTEXT without the inter-node
    password; SASL_SSL with neither that password nor client certificates)."""
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
    node_password = getattr(security, "sasl_node_password", None)
    certificates = security.uses_tls and security.ssl_client_auth in ("required", "requested")
    if not node_password and not certificates:
        raise SaslConfigError(
            f"on a {security.protocol} listener the nodes must prove who they are for raft "
            "RPCs: give the inter-node password (--sasl-node-password-file, the same on every "
            "node)" + ("" if not security.uses_tls else ", or require client certificates")
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
    __slots__ = ("mechanism", "scram", "state", "username")

    def __init__(self) -> None:
        self.state = INITIAL
        self.mechanism = ""
        self.scram: ScramServer | None = None
        self.username = ""  # once the state is COMPLETE


class SaslAuthenticator:
    """A SASL listener's logins: the users (re-read when the file changes), the inter-node
    credentials, and each connection's progress."""

    def __init__(
        self, security: ListenerSecurity, node_id: int, voters: Any, *, prefix: str = ""
    ) -> None:
        check_listener(security)
        assert security.sasl_users_file is not None
        self.security = security
        self.mechanisms = list(security.sasl_mechanisms)
        self.node_id = node_id
        self.voters = frozenset(voters)
        self.prefix = prefix
        self.users = UserStore(security.sasl_users_file, prefix=prefix)
        self._node_password: str | None = getattr(security, "sasl_node_password", None) or None
        # Made once: the nodes' SCRAM credentials (a fresh salt per process is fine: the
        # client derives its keys from the salt it is sent).
        self._node_scram: dict[str, ScramCredential] = {}
        if self._node_password:
            for m in self.mechanisms:
                if m.startswith("SCRAM-"):
                    self._node_scram[m] = make_credential(m, self._node_password)
        self._fake_salt_key = secrets.token_bytes(32)
        self._sessions: weakref.WeakKeyDictionary[Any, _Session] = weakref.WeakKeyDictionary()
        self.logins = 0
        self.failures = 0
        self._failed_logins = RepeatLimiter(LOGIN_FAILURE_LOG_EVERY_S)
        self.max_frame_bytes = 100 * 1024 * 1024  # the node's, once logged in (for_node)

    @classmethod
    def for_node(cls, config: Any, prefix: str = "") -> SaslAuthenticator | None:
        security = config.security
        if not security.uses_sasl:
            return None
        auth = cls(security, config.node_id, config.voters, prefix=prefix)
        auth.max_frame_bytes = config.max_frame_bytes
        return auth

    # ---- the inter-node login (client side, for PeerConnection) ----------------------------------

    @property
    def peer_login(self) -> Callable[[Any, Any], Awaitable[None]] | None:
        """What a PeerConnection runs on each new connection to log in as this node, or None
        when nodes prove who they are by their certificates."""
        if not self._node_password:
            return None
        from raftcore.security.sasl_client import raw_login

        preferred = ("SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN")
        mechanism = next(m for m in preferred if m in self.mechanisms)
        username, password = f"node-{self.node_id}", self._node_password

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
            return AnswerThenClose(
                encode_response(ApiKey.SASL_HANDSHAKE, version, header.correlation_id, answer),
                f"SASL mechanism {body.mechanism!r} is not enabled",
            )
        session.state = AUTHENTICATE
        session.mechanism = body.mechanism
        if body.mechanism.startswith("SCRAM-"):
            session.scram = ScramServer(
                body.mechanism,
                lambda name: self._scram_credential(body.mechanism, name),
                fake_salt_key=self._fake_salt_key,
            )
        answer = cls(error_code=Errors.NONE, mechanisms=self.mechanisms)
        return encode_response(ApiKey.SASL_HANDSHAKE, version, header.correlation_id, answer)

    def _scram_credential(self, mechanism: str, name: str) -> ScramCredential | None:
        if NODE_USER.fullmatch(name):
            return self._node_scram.get(mechanism) if self._node_id_of(name) is not None else None
        user = self.users.get(name)
        return None if user is None else user.scram.get(mechanism)

    def _node_id_of(self, name: str) -> int | None:
        m = NODE_USER.fullmatch(name)
        if m is None or not self._node_password:
            return None
        # Any node id: the voter set changes at run time, and a node joining the cluster
        # fetches as an observer before it is a voter. The inter-node password is what makes
        # it a node.
        return int(m.group(1))

    def principal(self, name: str) -> Principal:
        node_id = self._node_id_of(name)
        if node_id is not None:
            return Principal("node", name, node_id=node_id)
        return Principal("user", name)

    def authenticate(self, conn: Any, session: _Session, header: Any, body: Any) -> Any:
        cls = response_spec(ApiKey.SASL_AUTHENTICATE).cls
        version = header.request_api_version
        try:
            token = self._evaluate(session, bytes(body.auth_bytes))
        except SaslLoginFailed as exc:
            self.failures += 1
            address = getattr(conn, "address", str(conn.peer))
            host = address.rpartition(":")[0] or address
            line = f"{self.prefix} failed {session.mechanism} login from {address}: {exc.log}"
            left_out = self._failed_logins.admit((host, session.mechanism, exc.log))
            if left_out is None:  # a client retrying a wrong password: once per 30 s
                logger.debug("%s", line)
            else:
                logger.info("%s%s", line, RepeatLimiter.since(left_out, host))
            answer = cls(
                error_code=Errors.SASL_AUTHENTICATION_FAILED,
                error_message=exc.message,
                auth_bytes=b"",
                session_lifetime_ms=0,
            )
            return AnswerThenClose(
                encode_response(ApiKey.SASL_AUTHENTICATE, version, header.correlation_id, answer),
                f"authentication failed: {exc.log}",
            )
        if session.state == COMPLETE:
            conn.principal = self.principal(session.username)
            conn.max_frame_bytes = self.max_frame_bytes
            self.logins += 1
            logger.info(
                "%s %s logged in from %s (%s)",
                self.prefix,
                conn.principal,
                getattr(conn, "address", conn.peer),
                session.mechanism,
            )
        answer = cls(
            error_code=Errors.NONE, error_message=None, auth_bytes=token, session_lifetime_ms=0
        )
        return encode_response(ApiKey.SASL_AUTHENTICATE, version, header.correlation_id, answer)

    def _evaluate(self, session: _Session, token: bytes) -> bytes:
        """The server's token for the client's; sets the connection's state (and principal,
        through the caller) once the client proved who it is."""
        if session.mechanism == "PLAIN":
            _, username, password = parse_plain(token)
            if not self._plain_matches(username, password):
                raise SaslLoginFailed(
                    PLAIN_FAILED, f"user {username!r}: wrong password or no such user"
                )
            session.state, session.username = COMPLETE, username
            return b""
        scram = session.scram
        assert scram is not None
        try:
            answer = scram.step(token)
        except ScramError as exc:
            message = (
                AUTHZID_DIFFERS
                if "authorization id" in str(exc)
                else SCRAM_FAILED + session.mechanism
            )
            raise SaslLoginFailed(message, str(exc)) from None
        if scram.complete:
            assert scram.username is not None
            session.state, session.username = COMPLETE, scram.username
        return answer

    def _plain_matches(self, username: str, password: str) -> bool:
        if NODE_USER.fullmatch(username):
            if self._node_id_of(username) is None or self._node_password is None:
                return False
            return hmac.compare_digest(password.encode(), self._node_password.encode())
        user = self.users.get(username)
        if user is None or user.plain is None:
            return False
        return user.plain.matches(password)


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
    list of frame parts), or an :class:`AnswerThenClose`. Raises CloseConnection to close
    without an answer."""
    key = header.request_api_key
    auth: SaslAuthenticator | None = node.sasl
    if auth is None:
        if key in SASL_APIS:  # a listener without SASL, as Kafka's KafkaApis answers
            return _illegal_state(header, "SASL is not enabled on this listener")
        return PASS
    session = auth.session(conn)
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
    from raftcore.node.transport import CloseConnection

    name = ApiKey(key).name
    if session.state == AUTHENTICATE and key in (ApiKey.API_VERSIONS, ApiKey.SASL_HANDSHAKE):
        return AnswerThenClose(
            _illegal_state(header, ""),
            f"unexpected {name} request during SASL authentication (ILLEGAL_SASL_STATE)",
        )
    during = "authentication" if session.state == AUTHENTICATE else "handshake"
    raise CloseConnection(f"unexpected {name} request during SASL {during}")
