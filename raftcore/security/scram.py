"""SCRAM (RFC 5802) with SHA-256 and SHA-512 (RFC 7677), as Kafka speaks it (KIP-84): client
and server, hashlib and hmac only.

The exchange, client first::

    client-first  n,,n=<user>,r=<client nonce>           (gs2 header "n,,": no channel binding)
    server-first  r=<client nonce><server nonce>,s=<salt, base64>,i=<iterations>
    client-final  c=biws,r=<the same nonce>,p=<proof, base64>   (biws = base64("n,,"))
    server-final  v=<server signature, base64>

The server keeps no password, only what RFC 5802 calls the stored key and the server key
(:class:`ScramCredential`), as Kafka keeps SCRAM credentials: ``StoredKey = H(ClientKey)``
lets it check the client's proof, ``ServerKey`` lets it prove itself in turn. KIP-84 refuses
fewer than 4096 iterations; so do both ends here. New credentials get 8192
(:data:`DEFAULT_ITERATIONS`). Kafka's SCRAM extensions (``tokenauth``, for
delegation tokens) are not served: a client asking for them fails to log in. Usernames are the
SCRAM ``saslname`` (``=2C`` for a comma, ``=3D`` for an equals sign); like Kafka, no SASLprep.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets
from collections.abc import Callable
from dataclasses import dataclass

__all__ = [
    "DEFAULT_ITERATIONS",
    "MECHANISMS",
    "MIN_ITERATIONS",
    "SALT_BYTES",
    "ScramClient",
    "ScramCredential",
    "ScramError",
    "ScramServer",
    "make_credential",
]

# mechanism name -> hashlib name. SCRAM-SHA-1 only checks the generic code against RFC 5802's
# example: no listener offers it (raftcore.security.users.MECHANISMS).
MECHANISMS = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512", "SCRAM-SHA-1": "sha1"}
MIN_ITERATIONS = 4096  # KIP-84 (and RFC 7677's recommendation): the fewest accepted
DEFAULT_ITERATIONS = 8192  # what new credentials get (raftcore users add)
SALT_BYTES = 32  # the salt new credentials get
MAX_ITERATIONS = 1_000_000  # a client will not spend longer than this for a server


class ScramError(ValueError):
    """A SCRAM message that does not parse or does not verify. The text is for logs; a peer is
    told less (see :mod:`raftcore.security.sasl`)."""


@dataclass(frozen=True, slots=True)
class ScramCredential:
    """What a server keeps for one user and one mechanism (RFC 5802 section 3)."""

    salt: bytes
    iterations: int
    stored_key: bytes
    server_key: bytes


def _hash(mechanism: str) -> str:
    try:
        return MECHANISMS[mechanism]
    except KeyError:
        raise ScramError(f"unknown SCRAM mechanism {mechanism!r}") from None


def salted_password(mechanism: str, password: str, salt: bytes, iterations: int) -> bytes:
    """RFC 5802's Hi(): PBKDF2 with HMAC of the mechanism's hash, one block long."""
    return hashlib.pbkdf2_hmac(_hash(mechanism), password.encode("utf-8"), salt, iterations)


def _hmac(mechanism: str, key: bytes, msg: bytes) -> bytes:
    return hmac.new(key, msg, _hash(mechanism)).digest()


def _h(mechanism: str, data: bytes) -> bytes:
    return hashlib.new(_hash(mechanism), data).digest()


def _expand(key: bytes, label: bytes, size: int) -> bytes:
    """``size`` bytes of HMAC-SHA-256(key, label || counter) blocks (HKDF-Expand's shape)."""
    out = b""
    block = 0
    while len(out) < size:
        block += 1
        out += hmac.new(key, label + block.to_bytes(4, "big"), "sha256").digest()
    return out[:size]


def _xor(a: bytes, b: bytes) -> bytes:
    return bytes(x ^ y for x, y in zip(a, b, strict=True))


def credential_from_salted(
    mechanism: str, salted: bytes, salt: bytes, iterations: int
) -> ScramCredential:
    client_key = _hmac(mechanism, salted, b"Client Key")
    return ScramCredential(
        salt=salt,
        iterations=iterations,
        stored_key=_h(mechanism, client_key),
        server_key=_hmac(mechanism, salted, b"Server Key"),
    )


def make_credential(
    mechanism: str,
    password: str,
    *,
    iterations: int = DEFAULT_ITERATIONS,
    salt: bytes | None = None,
) -> ScramCredential:
    """A new credential for ``password`` (a random salt of :data:`SALT_BYTES` unless given)."""
    if iterations < MIN_ITERATIONS:
        raise ScramError(f"{iterations} iterations is below the minimum {MIN_ITERATIONS} (KIP-84)")
    salt = secrets.token_bytes(SALT_BYTES) if salt is None else salt
    salted = salted_password(mechanism, password, salt, iterations)
    return credential_from_salted(mechanism, salted, salt, iterations)


# ---- message parsing --------------------------------------------------------------------------


def _b64(text: str, what: str) -> bytes:
    try:
        return base64.b64decode(text.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError):
        raise ScramError(f"the {what} is not base64") from None


def _attributes(message: str, what: str) -> list[tuple[str, str]]:
    out = []
    for part in message.split(","):
        if len(part) < 2 or part[1] != "=" or not part[0].isalpha():
            raise ScramError(f"malformed attribute {part[:20]!r} in the {what}")
        out.append((part[0], part[2:]))
    return out


def _decode_saslname(name: str) -> str:
    # RFC 5802: "=" appears only as "=2C" (",") or "=3D" ("=")
    out = []
    i = 0
    while i < len(name):
        if name[i] == "=":
            code = name[i + 1 : i + 3]
            if code == "2C":
                out.append(",")
            elif code == "3D":
                out.append("=")
            else:
                raise ScramError("a username holds '=' not followed by 2C or 3D")
            i += 3
        else:
            out.append(name[i])
            i += 1
    return "".join(out)


def _encode_saslname(name: str) -> str:
    return name.replace("=", "=3D").replace(",", "=2C")


def _valid_nonce(nonce: str) -> bool:
    # printable ASCII except ","
    return bool(nonce) and all(0x21 <= ord(c) <= 0x7E and c != "," for c in nonce)


@dataclass(frozen=True, slots=True)
class ClientFirst:
    gs2_header: str  # "n,," or "n,a=<authzid>,"
    authzid: str
    username: str
    nonce: str
    bare: str  # the message without the gs2 header: part of the AuthMessage
    extensions: dict[str, str]


def parse_client_first(message: bytes) -> ClientFirst:
    try:
        text = message.decode("utf-8")
    except UnicodeDecodeError:
        raise ScramError("the client-first message is not UTF-8") from None
    parts = text.split(",", 2)
    if len(parts) != 3:
        raise ScramError("the client-first message has no gs2 header")
    flag, authz, bare = parts
    if flag.startswith("p="):
        raise ScramError("channel binding is not supported")
    if flag not in ("n", "y"):
        raise ScramError(f"bad gs2 channel-binding flag {flag[:10]!r}")
    authzid = ""
    if authz:
        if not authz.startswith("a="):
            raise ScramError("bad gs2 authzid")
        authzid = _decode_saslname(authz[2:])
    attrs = _attributes(bare, "client-first message")
    if attrs and attrs[0][0] == "m":
        raise ScramError("mandatory extensions are not supported")
    if len(attrs) < 2 or attrs[0][0] != "n" or attrs[1][0] != "r":
        raise ScramError("the client-first message must start n=<user>,r=<nonce>")
    username = _decode_saslname(attrs[0][1])
    nonce = attrs[1][1]
    if not username:
        raise ScramError("empty username")
    if not _valid_nonce(nonce):
        raise ScramError("bad client nonce")
    return ClientFirst(f"{flag},{authz},", authzid, username, nonce, bare, dict(attrs[2:]))


# ---- server ------------------------------------------------------------------------------------


class ScramServer:
    """One server side of one exchange. ``step(client_first)`` gives the server-first message,
    ``step(client_final)`` the server-final one (and sets ``username``); any failure raises
    ScramError. ``lookup(username)`` gives the user's ScramCredential or None; an unknown user
    gets a made-up credential and fails only at the proof, after the same work as a wrong
    password: the exchange does not tell who exists. The made-up salt is an HMAC, keyed by
    ``fake_salt_key``, of the mechanism and the name: the same at every exchange (and on every
    node holding the key), and different for each mechanism, as a real user's salts are. It is
    ``fake_salt_bytes`` long and comes with ``fake_iterations``, which should be what the
    users of the mechanism have.
    """

    def __init__(
        self,
        mechanism: str,
        lookup: Callable[[str], ScramCredential | None],
        *,
        nonce: str | None = None,
        fake_salt_key: bytes | None = None,
        fake_iterations: int = DEFAULT_ITERATIONS,
        fake_salt_bytes: int = SALT_BYTES,
    ) -> None:
        _hash(mechanism)
        self.mechanism = mechanism
        self._lookup = lookup
        self._server_nonce = nonce if nonce is not None else secrets.token_urlsafe(24)
        self._fake_key = fake_salt_key if fake_salt_key is not None else secrets.token_bytes(32)
        self._fake_iterations = max(MIN_ITERATIONS, fake_iterations)
        self._fake_salt_bytes = max(1, fake_salt_bytes)
        self._first: ClientFirst | None = None
        self._server_first = ""
        self._credential: ScramCredential | None = None
        self.username: str | None = None  # set once the client proved who it is
        self.complete = False

    def step(self, token: bytes) -> bytes:
        if self.complete:
            raise ScramError("the exchange is already complete")
        if self._first is None:
            return self._server_first_message(token)
        return self._server_final_message(token)

    def _server_first_message(self, token: bytes) -> bytes:
        first = parse_client_first(token)
        if first.authzid and first.authzid != first.username:
            raise ScramError("an authorization id different from the username")
        if first.extensions.get("tokenauth", "false").lower() == "true":
            raise ScramError("delegation tokens (tokenauth) are not supported")
        credential = self._lookup(first.username)
        if credential is None:
            credential = self._made_up(first.username)
        elif credential.iterations < MIN_ITERATIONS:
            raise ScramError(f"{first.username}'s credential has too few iterations")
        self._first = first
        self._credential = credential
        salt_text = base64.b64encode(credential.salt).decode()
        self._server_first = (
            f"r={first.nonce}{self._server_nonce},s={salt_text},i={credential.iterations}"
        )
        return self._server_first.encode()

    def _made_up(self, username: str) -> ScramCredential:
        """A credential nobody's password matches, shaped like a real one: the proof is
        checked with the same work and fails at the comparison."""
        name = username.encode()
        label = b"salt\x00" + self.mechanism.encode() + b"\x00" + name
        salt = _expand(self._fake_key, label, self._fake_salt_bytes)
        size = len(_h(self.mechanism, b""))
        stored = _hmac(self.mechanism, self._fake_key, b"stored\x00" + name)[:size]
        server = _hmac(self.mechanism, self._fake_key, b"server\x00" + name)[:size]
        return ScramCredential(salt, self._fake_iterations, stored, server)

    def _server_final_message(self, token: bytes) -> bytes:
        first, credential = self._first, self._credential
        assert first is not None and credential is not None
        try:
            text = token.decode("utf-8")
        except UnicodeDecodeError:
            raise ScramError("the client-final message is not UTF-8") from None
        without_proof, sep, proof_text = text.rpartition(",p=")
        if not sep:
            raise ScramError("the client-final message has no proof")
        attrs = _attributes(without_proof, "client-final message")
        if len(attrs) < 2 or attrs[0][0] != "c" or attrs[1][0] != "r":
            raise ScramError("the client-final message must start c=...,r=...")
        if _b64(attrs[0][1], "channel binding") != first.gs2_header.encode():
            raise ScramError("the channel binding does not repeat the gs2 header")
        # Kafka checks that the nonce ENDS with the one it sent (ScramSaslServer), and kcat's
        # librdkafka sends its own nonce again in front of it: accepted, as Kafka does. The
        # fresh server nonce is still there, and the proof covers the message as sent.
        if not attrs[1][1].endswith(first.nonce + self._server_nonce):
            raise ScramError("the nonce does not end with the one the server sent")
        proof = _b64(proof_text, "proof")
        auth_message = f"{first.bare},{self._server_first},{without_proof}".encode()
        if not credential.stored_key or len(proof) != len(credential.stored_key):
            raise ScramError("invalid proof")
        signature = _hmac(self.mechanism, credential.stored_key, auth_message)
        client_key = _xor(proof, signature)
        if not hmac.compare_digest(_h(self.mechanism, client_key), credential.stored_key):
            raise ScramError("invalid proof")
        self.username = first.username
        self.complete = True
        server_signature = _hmac(self.mechanism, credential.server_key, auth_message)
        return b"v=" + base64.b64encode(server_signature)


# ---- client ------------------------------------------------------------------------------------


class ScramClient:
    """One client side of one exchange: ``first()``, then ``final(server_first)``, then
    ``verify(server_final)`` (raises ScramError unless the server proved it knows the
    credential)."""

    def __init__(
        self, mechanism: str, username: str, password: str, *, nonce: str | None = None
    ) -> None:
        _hash(mechanism)
        self.mechanism = mechanism
        self.username = username
        self.password = password
        self.nonce = nonce if nonce is not None else secrets.token_urlsafe(24)
        self._bare = f"n={_encode_saslname(username)},r={self.nonce}"
        self._server_signature: bytes | None = None

    def first(self) -> bytes:
        return f"n,,{self._bare}".encode()

    def final(self, server_first: bytes) -> bytes:
        try:
            text = server_first.decode("utf-8")
        except UnicodeDecodeError:
            raise ScramError("the server-first message is not UTF-8") from None
        attrs = _attributes(text, "server-first message")
        if attrs and attrs[0][0] == "e":
            raise ScramError(f"the server refused: {attrs[0][1]}")
        if len(attrs) < 3 or [a[0] for a in attrs[:3]] != ["r", "s", "i"]:
            raise ScramError("the server-first message must be r=...,s=...,i=...")
        nonce = attrs[0][1]
        if not nonce.startswith(self.nonce) or len(nonce) == len(self.nonce):
            raise ScramError("the server's nonce does not extend the client's")
        if not _valid_nonce(nonce):
            raise ScramError("bad server nonce")
        salt = _b64(attrs[1][1], "salt")
        try:
            iterations = int(attrs[2][1])
        except ValueError:
            raise ScramError("the iteration count is not a number") from None
        if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
            raise ScramError(
                f"the server asks for {iterations} iterations "
                f"({MIN_ITERATIONS}..{MAX_ITERATIONS} accepted)"
            )
        salted = salted_password(self.mechanism, self.password, salt, iterations)
        client_key = _hmac(self.mechanism, salted, b"Client Key")
        stored_key = _h(self.mechanism, client_key)
        without_proof = f"c=biws,r={nonce}"
        auth_message = f"{self._bare},{text},{without_proof}".encode()
        proof = _xor(client_key, _hmac(self.mechanism, stored_key, auth_message))
        server_key = _hmac(self.mechanism, salted, b"Server Key")
        self._server_signature = _hmac(self.mechanism, server_key, auth_message)
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()

    def verify(self, server_final: bytes) -> None:
        if self._server_signature is None:
            raise ScramError("no client-final message was sent")
        text = server_final.decode("utf-8", "replace")
        if text.startswith("e="):
            raise ScramError(f"the server refused: {text[2:]}")
        if not text.startswith("v="):
            raise ScramError("the server-final message has no verifier")
        if not hmac.compare_digest(_b64(text[2:], "server signature"), self._server_signature):
            raise ScramError("the server's signature is wrong (it does not know the credential)")
