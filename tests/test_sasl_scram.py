"""SCRAM's maths (RFC 5802, RFC 7677, KIP-84), SASL/PLAIN's message (RFC 4616), the users file
and ``raftcore users``, the client's ``--command-config`` file: no node, no network."""

from __future__ import annotations

import base64
import logging
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

import raftcore
from raftcore.security.client_config import load_client_security
from raftcore.security.sasl import SaslLoginFailed, parse_plain
from raftcore.security.scram import ScramClient, ScramError, ScramServer, make_credential
from raftcore.security.users import (
    UsersFileError,
    UserStore,
    loose_mode,
    make_user,
    read_users,
    read_users_file,
    write_users,
)

pytestmark = pytest.mark.slow

# ---- RFC 7677 section 3 (SCRAM-SHA-256) and RFC 5802 section 5 (SCRAM-SHA-1) ---------------

RFC7677 = {
    "client_nonce": "rOprNGfwEbeRWgbNEkqO",
    "server_nonce": "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0",
    "client_first": b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO",
    "server_first": b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
    b"s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096",
    "client_final": b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
    b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=",
    "server_final": b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=",
    "salt": "W22ZaJ0SNY7soEsUEjb6gQ==",
}


def test_scram_sha_256_client_sends_rfc_7677s_messages_and_accepts_its_server_signature():
    client = ScramClient("SCRAM-SHA-256", "user", "pencil", nonce=RFC7677["client_nonce"])
    assert client.first() == RFC7677["client_first"]
    assert client.final(RFC7677["server_first"]) == RFC7677["client_final"]
    client.verify(RFC7677["server_final"])  # raises if the signature were wrong


def test_scram_sha_256_server_from_stored_keys_answers_rfc_7677s_exchange():
    """The server holds only StoredKey/ServerKey (from the RFC's salt), never the password."""
    salt = base64.b64decode(RFC7677["salt"])
    cred = make_credential("SCRAM-SHA-256", "pencil", salt=salt, iterations=4096)
    server = ScramServer("SCRAM-SHA-256", {"user": cred}.get, nonce=RFC7677["server_nonce"])
    assert server.step(RFC7677["client_first"]) == RFC7677["server_first"]
    assert server.step(RFC7677["client_final"]) == RFC7677["server_final"]
    assert server.complete and server.username == "user"


def test_scram_sha_1_follows_rfc_5802s_example_with_the_same_generic_code():
    client = ScramClient("SCRAM-SHA-1", "user", "pencil", nonce="fyko+d2lbbFgONRv9qkxdawL")
    assert client.first() == b"n,,n=user,r=fyko+d2lbbFgONRv9qkxdawL"
    final = client.final(b"r=fyko+d2lbbFgONRv9qkxdawL3rfcNHYJY1ZVvWVs7j,s=QSXCR+Q6sek8bf92,i=4096")
    assert final == (
        b"c=biws,r=fyko+d2lbbFgONRv9qkxdawL3rfcNHYJY1ZVvWVs7j,p=v0X8v3Bz2T0CJGbJQyF0X+HI4Ts="
    )
    client.verify(b"v=rmF9pqV8S7suAoZWja4dJRkFsKQ=")


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_client_and_server_agree_and_a_wrong_password_fails_at_the_proof(mechanism):
    cred = make_credential(mechanism, "s3cret", iterations=4096)
    lookup = {"alice": cred}.get

    client = ScramClient(mechanism, "alice", "s3cret")
    server = ScramServer(mechanism, lookup)
    client.verify(server.step(client.final(server.step(client.first()))))
    assert server.username == "alice"

    client = ScramClient(mechanism, "alice", "wrong")
    server = ScramServer(mechanism, lookup)
    final = client.final(server.step(client.first()))
    with pytest.raises(ScramError, match="invalid proof"):
        server.step(final)
    assert server.username is None and not server.complete


def test_an_unknown_user_gets_a_stable_made_up_salt_and_fails_only_at_the_proof():
    """The exchange does not tell who exists: same shape of answer, failure at the end."""
    key = b"k" * 32
    firsts = []
    for _ in range(2):
        client = ScramClient("SCRAM-SHA-256", "mallory", "guess")
        server = ScramServer("SCRAM-SHA-256", {}.get, fake_salt_key=key)
        server_first = server.step(client.first())
        firsts.append(server_first.split(b",")[1:])  # salt and iterations
        with pytest.raises(ScramError, match="invalid proof"):
            server.step(client.final(server_first))
    assert firsts[0] == firsts[1] and firsts[0][1] == b"i=8192"  # what new credentials get


def test_the_server_nonce_must_extend_the_clients_and_the_client_final_must_repeat_it():
    client = ScramClient("SCRAM-SHA-256", "user", "pencil", nonce="abc")
    with pytest.raises(ScramError, match="does not extend"):
        client.final(b"r=xyzdef,s=QSXCR+Q6sek8bf92,i=4096")
    with pytest.raises(ScramError, match="does not extend"):
        client.final(b"r=abc,s=QSXCR+Q6sek8bf92,i=4096")  # nothing added by the server

    cred = make_credential("SCRAM-SHA-256", "pencil")
    server = ScramServer("SCRAM-SHA-256", {"user": cred}.get, nonce="SERVER")
    client = ScramClient("SCRAM-SHA-256", "user", "pencil", nonce="abc")
    final = client.final(server.step(client.first()))
    with pytest.raises(ScramError, match="nonce"):
        server.step(final.replace(b"r=abcSERVER", b"r=abcSERVEX"))


def test_a_client_final_nonce_that_repeats_the_client_nonce_in_front_is_accepted_as_kafka_does():
    """kcat's librdkafka sends r=<client nonce><server-first's whole nonce>; Kafka's server
    only checks that the nonce ends with the one it sent, so kcat logs in to Kafka."""
    import hashlib
    import hmac

    cred = make_credential("SCRAM-SHA-256", "pencil")
    server = ScramServer("SCRAM-SHA-256", {"user": cred}.get, nonce="SERVER")
    server_first = server.step(b"n,,n=user,r=abc")
    salted = hashlib.pbkdf2_hmac("sha256", b"pencil", cred.salt, cred.iterations)
    client_key = hmac.new(salted, b"Client Key", "sha256").digest()
    without_proof = b"c=biws,r=abcabcSERVER"  # the client nonce, then the server's whole nonce
    auth = b"n=user,r=abc," + server_first + b"," + without_proof
    signature = hmac.new(hashlib.sha256(client_key).digest(), auth, "sha256").digest()
    proof = bytes(x ^ y for x, y in zip(client_key, signature, strict=True))
    server.step(without_proof + b",p=" + base64.b64encode(proof))
    assert server.username == "user"


def test_kip_84_fewer_than_4096_iterations_are_refused_by_client_and_credential_maker():
    client = ScramClient("SCRAM-SHA-512", "user", "pencil", nonce="abc")
    with pytest.raises(ScramError, match="4096"):
        client.final(b"r=abcdef,s=QSXCR+Q6sek8bf92,i=4095")
    with pytest.raises(ScramError, match="minimum"):
        make_credential("SCRAM-SHA-512", "pencil", iterations=1000)


def test_the_gs2_header_n_is_required_and_repeated_in_the_channel_binding():
    cred = make_credential("SCRAM-SHA-256", "pencil")
    server = ScramServer("SCRAM-SHA-256", {"user": cred}.get)
    with pytest.raises(ScramError, match="channel binding"):
        server.step(b"p=tls-unique,,n=user,r=abc")
    server = ScramServer("SCRAM-SHA-256", {"user": cred}.get)
    client = ScramClient("SCRAM-SHA-256", "user", "pencil")
    final = client.final(server.step(client.first()))
    with pytest.raises(ScramError, match="gs2 header"):
        server.step(final.replace(b"c=biws", b"c=eSws"))  # "y,," instead of "n,,"


def test_an_authorization_id_other_than_the_username_is_refused():
    cred = make_credential("SCRAM-SHA-256", "pencil")
    server = ScramServer("SCRAM-SHA-256", {"user": cred}.get)
    with pytest.raises(ScramError, match="authorization id"):
        server.step(b"n,a=admin,n=user,r=abc")
    ScramServer("SCRAM-SHA-256", {"user": cred}.get).step(b"n,a=user,n=user,r=abc")


def test_a_client_detects_a_server_that_does_not_know_the_credential():
    client = ScramClient("SCRAM-SHA-256", "user", "pencil", nonce=RFC7677["client_nonce"])
    client.final(RFC7677["server_first"])
    with pytest.raises(ScramError, match="signature"):
        client.verify(b"v=" + base64.b64encode(b"\x00" * 32))


def test_usernames_with_comma_and_equals_are_escaped_as_saslnames():
    cred = make_credential("SCRAM-SHA-256", "pw")
    client = ScramClient("SCRAM-SHA-256", "a,b=c", "pw")
    assert b"n=a=2Cb=3Dc," in client.first()
    server = ScramServer("SCRAM-SHA-256", {"a,b=c": cred}.get)
    client.verify(server.step(client.final(server.step(client.first()))))
    assert server.username == "a,b=c"


# ---- SASL/PLAIN (RFC 4616) -------------------------------------------------------------------


def test_plain_message_is_authzid_nul_username_nul_password():
    assert parse_plain(b"\x00alice\x00pw") == ("", "alice", "pw")
    assert parse_plain(b"alice\x00alice\x00pw") == ("alice", "alice", "pw")


@pytest.mark.parametrize(
    ("token", "message"),
    [
        (b"\x00\x00pw", "username not specified"),
        (b"\x00alice\x00", "password not specified"),
        (b"alicepw", "expected 3 tokens, got 1"),
        (b"\x00a\x00b\x00c", "expected 3 tokens, got 4"),
        (b"admin\x00alice\x00pw", "authorization id that is different"),
    ],
)
def test_plain_refuses_empty_fields_and_another_authorization_id(token, message):
    with pytest.raises(SaslLoginFailed, match=message):
        parse_plain(token)


# ---- the users file ------------------------------------------------------------------------------


def test_the_users_file_keeps_no_password_and_its_credentials_verify(tmp_path):
    path = tmp_path / "users.json"
    write_users(path, {"alice": make_user("alice", "correct horse")})
    text = path.read_text()
    assert "correct horse" not in text
    assert base64.b64encode(b"correct horse").decode() not in text
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    alice = read_users(path)["alice"]
    assert alice.mechanisms == ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]
    assert alice.plain is not None and alice.plain.matches("correct horse")
    assert not alice.plain.matches("correct horse ")
    for mech, cred in alice.scram.items():
        client = ScramClient(mech, "alice", "correct horse")
        server = ScramServer(mech, {"alice": cred}.get)
        client.verify(server.step(client.final(server.step(client.first()))))


def test_node_names_are_kept_for_the_nodes(tmp_path):
    with pytest.raises(UsersFileError, match="kept for the nodes"):
        make_user("node-1", "pw")
    make_user("node-one", "pw")  # only node-<digits> is reserved


def test_a_group_or_world_readable_users_file_is_warned_about(tmp_path, caplog):
    path = tmp_path / "users.json"
    write_users(path, {"alice": make_user("alice", "pw")})
    assert loose_mode(path) is None
    os.chmod(path, 0o644)
    with caplog.at_level(logging.WARNING):
        UserStore(path, prefix="[node 1]")
    assert "mode 0644" in caplog.text and "chmod 600" in caplog.text


def test_the_user_store_rereads_a_changed_file_and_keeps_the_old_users_on_a_broken_one(
    tmp_path, caplog
):
    path = tmp_path / "users.json"
    write_users(path, {"alice": make_user("alice", "pw")})
    store = UserStore(path)
    assert store.get("bob") is None
    write_users(path, {"alice": make_user("alice", "pw"), "bob": make_user("bob", "pw2")})
    assert store.get("bob") is not None
    path.write_text("{not json")
    with caplog.at_level(logging.ERROR):
        assert store.get("bob") is not None
    assert "keeping the previous users" in caplog.text


def test_a_users_file_that_does_not_parse_is_named_in_the_error(tmp_path):
    path = tmp_path / "users.json"
    path.write_text('{"version": 1, "users": {"a": {"PLAIN": {"salt": "!!"}}}}')
    with pytest.raises(UsersFileError, match=str(path)):
        read_users(path)
    with pytest.raises(UsersFileError, match="cannot read"):
        read_users(tmp_path / "missing.json")


# ---- raftcore users ------------------------------------------------------------------------------


def _users_cli(tmp_path: Path, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(Path(raftcore.__file__).parent.parent))
    return subprocess.run(
        [sys.executable, "-m", "raftcore", "users", *args],
        input=stdin,
        check=False,
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=60,
    )


def test_raftcore_users_add_list_delete_with_the_password_from_stdin(tmp_path):
    path = tmp_path / "users.json"
    out = _users_cli(tmp_path, "add", str(path), "alice", "--password-stdin", stdin="pw1\n")
    assert out.returncode == 0, out.stderr
    assert "added alice" in out.stdout
    out = _users_cli(
        tmp_path,
        "add",
        str(path),
        "bob",
        "--password-stdin",
        "--mechanisms",
        "SCRAM-SHA-512",
        stdin="pw2\n",
    )
    assert out.returncode == 0, out.stderr
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert "pw1" not in path.read_text()
    out = _users_cli(tmp_path, "list", str(path))
    assert out.stdout.splitlines() == [
        "alice\tPLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        "bob\tSCRAM-SHA-512",
    ]
    assert read_users(path)["alice"].plain.matches("pw1")  # type: ignore[union-attr]
    out = _users_cli(tmp_path, "delete", str(path), "alice")
    assert out.returncode == 0 and sorted(read_users(path)) == ["bob"]
    out = _users_cli(tmp_path, "delete", str(path), "alice")
    assert out.returncode == 2 and "no user 'alice'" in out.stderr
    out = _users_cli(tmp_path, "add", str(path), "node-2", "--password-stdin", stdin="x\n")
    assert out.returncode == 2 and "kept for the nodes" in out.stderr


def test_raftcore_users_add_without_a_terminal_asks_for_password_stdin(tmp_path):
    out = _users_cli(tmp_path, "add", str(tmp_path / "u.json"), "alice")
    assert out.returncode != 0 and "--password-stdin" in out.stderr
    assert not (tmp_path / "u.json").exists()


def test_new_credentials_get_8192_iterations_and_4096_is_still_the_least_accepted(tmp_path):
    """SCRAM and PLAIN credentials default to 8192 PBKDF2 iterations (twice KIP-84's
    minimum); 4096 is still accepted, 4095 is not."""
    path = tmp_path / "users.json"
    out = _users_cli(tmp_path, "add", str(path), "alice", "--password-stdin", stdin="pw\n")
    assert out.returncode == 0, out.stderr
    alice = read_users(path)["alice"]
    assert alice.plain is not None and alice.plain.iterations == 8192
    assert {m: c.iterations for m, c in alice.scram.items()} == {
        "SCRAM-SHA-256": 8192,
        "SCRAM-SHA-512": 8192,
    }
    assert make_user("bob", "pw").plain.iterations == 8192  # type: ignore[union-attr]
    assert make_credential("SCRAM-SHA-512", "pw").iterations == 8192
    out = _users_cli(
        tmp_path, "add", str(path), "bob", "--password-stdin", "--iterations", "4096", stdin="x\n"
    )
    assert out.returncode == 0, out.stderr
    assert read_users(path)["bob"].scram["SCRAM-SHA-256"].iterations == 4096
    out = _users_cli(
        tmp_path, "add", str(path), "carol", "--password-stdin", "--iterations", "4095", stdin="x\n"
    )
    assert out.returncode == 2 and "below the minimum 4096" in out.stderr


def test_raftcore_users_add_node_writes_a_new_password_for_that_node_only(tmp_path):
    """``add-node ID --password-out FILE``: a random password in FILE (0600, never over an
    existing one), node-<id>'s credentials in the users file; ``add-node shared`` keeps the
    shared password's; ``list`` names them; ``delete-node`` removes them. Users are kept."""
    path = tmp_path / "users.json"
    assert (
        _users_cli(tmp_path, "add", str(path), "alice", "--password-stdin", stdin="a\n").returncode
        == 0
    )
    for node_id in (1, 2):
        out = _users_cli(
            tmp_path, "add-node", str(path), str(node_id), "--password-out", f"n{node_id}"
        )
        assert out.returncode == 0, out.stderr
        assert f"added node-{node_id}" in out.stdout and "--sasl-node-password-file" in out.stdout
    passwords = {i: (tmp_path / f"n{i}").read_text().strip() for i in (1, 2)}
    assert len(set(passwords.values())) == 2 and all(len(p) >= 40 for p in passwords.values())
    assert all(stat.S_IMODE((tmp_path / f"n{i}").stat().st_mode) == 0o600 for i in (1, 2))
    out = _users_cli(tmp_path, "add-node", str(path), "1", "--password-out", "n1")
    assert out.returncode == 2 and "exists" in out.stderr
    assert (tmp_path / "n1").read_text().strip() == passwords[1]
    out = _users_cli(tmp_path, "add-node", str(path), "shared", "--password-stdin", stdin="s\n")
    assert out.returncode == 0, out.stderr
    contents = read_users_file(path)
    assert contents.node(1).plain.matches(passwords[1])  # type: ignore[union-attr]
    assert not contents.node(2).plain.matches(passwords[1])  # type: ignore[union-attr]
    assert contents.shared_node.plain.matches("s")  # type: ignore[union-attr]
    text = path.read_text()
    assert not any(p in text for p in passwords.values())
    assert _users_cli(tmp_path, "list", str(path)).stdout.splitlines() == [
        "alice\tPLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        "node-1\tPLAIN,SCRAM-SHA-256,SCRAM-SHA-512\t(node 1's own)",
        "node-2\tPLAIN,SCRAM-SHA-256,SCRAM-SHA-512\t(node 2's own)",
        "shared\tPLAIN,SCRAM-SHA-256,SCRAM-SHA-512\t"
        "(the password shared by nodes without their own)",
    ]
    assert _users_cli(tmp_path, "delete-node", str(path), "shared").returncode == 0
    assert _users_cli(tmp_path, "delete-node", str(path), "2").returncode == 0
    contents = read_users_file(path)
    assert sorted(contents.users) == ["alice", "node-1"] and contents.shared_node is None
    out = _users_cli(tmp_path, "delete", str(path), "node-1")
    assert out.returncode == 2 and "delete-node" in out.stderr


def test_no_password_or_key_shows_in_a_repr_or_str():
    """Config objects holding a password print it as ***: a log line or a traceback showing a
    ClientSecurity must not show the password."""
    from raftcore.security.config import ClientSecurity, ListenerSecurity
    from raftcore.security.users import UsersFile
    from raftcore.spark.job_source import JobSource
    from raftcore.spark.options import ReadOptions, WriteOptions

    client = ClientSecurity(
        protocol="SASL_SSL", sasl_mechanism="PLAIN", sasl_username="alice", sasl_password="hunter2"
    )
    shown = [
        client,
        ListenerSecurity(protocol="SASL_PLAINTEXT", sasl_node_password="hunter2"),
        ReadOptions(security=client),
        WriteOptions(bootstrap=(), security=client),
        JobSource(("h:1",), security=(("sasl.password", "hunter2"), ("sasl.username", "alice"))),
        UsersFile(salt_key=b"hunter2"),
    ]
    for obj in shown:
        for text in (repr(obj), str(obj)):
            assert "hunter2" not in text and "aHVudGVyMg" not in text, text
    assert "sasl_username='alice'" in repr(client) and "sasl_password='***'" in repr(client)
    assert "sasl_password" not in repr(ClientSecurity())  # not set: not shown


# ---- --command-config ----------------------------------------------------------------------------


def test_command_config_reads_librdkafka_style_sasl_settings(tmp_path):
    def config(text):
        path = tmp_path / "client.properties"
        path.write_text(text)
        return load_client_security(path)

    sec = config(
        "# a comment\nsecurity.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-512\n"
        "sasl.username=alice\nsasl.password=p=w d\n"
    )
    assert (sec.protocol, sec.sasl_mechanism, sec.sasl_username, sec.sasl_password) == (
        "SASL_PLAINTEXT",
        "SCRAM-SHA-512",
        "alice",
        "p=w d",
    )
    assert sec.uses_sasl
    with pytest.raises(ValueError, match=r"unknown property sasl\.jaas\.config"):
        config("sasl.jaas.config=x")
    with pytest.raises(ValueError, match=r"security\.protocol"):
        config("security.protocol=SASL_FOO")
