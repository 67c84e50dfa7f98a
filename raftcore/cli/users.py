"""``raftcore users add|delete|list|add-node|delete-node FILE``: the SASL users file of the
nodes (:mod:`raftcore.security.users`), and the ``--sasl-*`` options of ``raftcore node``.

``add`` reads the password from a prompt (twice, on a terminal) or, with ``--password-stdin``,
from the first line of standard input; never from the command line, where ``ps`` would show
it. ``add-node FILE ID --password-out PATH`` makes a random password for node ID, writes it to
PATH (mode 0600: that node's ``--sasl-node-password-file``) and its credentials to FILE;
``add-node FILE shared --password-stdin`` keeps the credentials of a password the nodes share
(while a cluster moves to per-node credentials: docs/security.md). The file keeps no
password: PLAIN's PBKDF2 hash and SCRAM's salted keys. Nodes re-read the file when it
changes, so no restart is needed.

Exit codes: 0 done; 1 the file could not be read or written; 2 a usage error (no such user,
a reserved name, passwords that differ).
"""

from __future__ import annotations

import argparse
import dataclasses
import getpass
import os
import secrets
import sys
from pathlib import Path
from typing import Any

from raftcore.security.scram import DEFAULT_ITERATIONS, MIN_ITERATIONS
from raftcore.security.users import (
    MECHANISMS,
    NODE_USER,
    BadUserError,
    UsersFile,
    UsersFileError,
    make_node_user,
    make_user,
    node_user,
    read_users,
    read_users_file,
    write_users_file,
)

__all__ = ["add_sasl_node_options", "add_users_commands", "sasl_listener_security"]


def _contents(path: Path, *, missing_ok: bool) -> UsersFile:
    if missing_ok and not path.exists():
        return UsersFile()
    return read_users_file(path)


def _password(args: argparse.Namespace, name: str) -> str:
    if args.password_stdin:
        line = sys.stdin.readline()
        return line[:-1] if line.endswith("\n") else line
    if not sys.stdin.isatty():
        raise _Usage("no terminal to ask for the password: pass --password-stdin")
    first = getpass.getpass(f"Password for {name}: ")
    if getpass.getpass("Again: ") != first:
        raise _Usage("the passwords differ")
    return first


class _Usage(BadUserError):
    pass


def _mechanisms(args: argparse.Namespace) -> tuple[str, ...]:
    return tuple(m.strip() for m in args.mechanisms.split(",") if m.strip())


def _cmd_add(args: argparse.Namespace) -> int:
    path = Path(args.file)
    contents = _contents(path, missing_ok=True)
    user = make_user(
        args.name,
        _password(args, args.name),
        mechanisms=_mechanisms(args),
        iterations=args.iterations,
    )
    verb = "replaced" if args.name in contents.users else "added"
    users = {**contents.users, args.name: user}
    write_users_file(path, dataclasses.replace(contents, users=users))
    print(f"{verb} {args.name} ({', '.join(user.mechanisms)}) in {path}")
    return 0


def _cmd_delete(args: argparse.Namespace) -> int:
    path = Path(args.file)
    contents = _contents(path, missing_ok=False)
    if NODE_USER.fullmatch(args.name):
        raise _Usage(f"{args.name} is a node's: raftcore users delete-node {path} ID")
    if args.name not in contents.users:
        raise _Usage(f"no user {args.name!r} in {path}")
    users = {n: u for n, u in contents.users.items() if n != args.name}
    write_users_file(path, dataclasses.replace(contents, users=users))
    print(f"deleted {args.name} from {path}")
    return 0


def _cmd_list(args: argparse.Namespace) -> int:
    path = Path(args.file)
    contents = _contents(path, missing_ok=False)
    for name, user in sorted(contents.clients.items()):
        print(f"{name}\t{','.join(user.mechanisms)}")
    nodes = {n: u for n, u in contents.users.items() if n not in contents.clients}
    for name, user in sorted(nodes.items(), key=lambda item: int(item[0][5:])):
        print(f"{name}\t{','.join(user.mechanisms)}\t(node {name[5:]}'s own)")
    if contents.shared_node is not None:
        mechanisms = ",".join(contents.shared_node.mechanisms)
        print(f"shared\t{mechanisms}\t(the password shared by nodes without their own)")
    return 0


def _node(text: str) -> int | None:
    """A node id, or None for ``shared``."""
    if text == "shared":
        return None
    if not text.isdigit():
        raise _Usage(f"a node id (0, 1, 2...) or 'shared', got {text!r}")
    return int(text)


def _write_password(path: Path, password: str, force: bool) -> None:
    """Write ``password`` to ``path`` (mode 0600, a new file unless ``force``)."""
    flags = os.O_WRONLY | os.O_CREAT | (os.O_TRUNC if force else os.O_EXCL)
    try:
        fd = os.open(path, flags, 0o600)
    except FileExistsError:
        raise _Usage(f"{path} exists (--force to overwrite it)") from None
    except OSError as exc:
        raise UsersFileError(f"cannot write {path}: {exc.strerror}") from None
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        os.fchmod(f.fileno(), 0o600)
        f.write(password + "\n")
        f.flush()
        os.fsync(f.fileno())


def _cmd_add_node(args: argparse.Namespace) -> int:
    path = Path(args.file)
    node_id = _node(args.node)
    if (args.password_out is None) == (not args.password_stdin):
        raise _Usage("give --password-out FILE (a new random password) or --password-stdin")
    if node_id is None and args.password_out is not None:
        raise _Usage("the shared password is the one the nodes hold already: --password-stdin")
    contents = _contents(path, missing_ok=True)
    out = None if args.password_out is None else Path(args.password_out)
    if out is not None:
        if out.exists() and not args.force:
            raise _Usage(f"{out} exists (--force to overwrite it)")
        password = secrets.token_urlsafe(32)
    else:
        password = _password(args, "the nodes" if node_id is None else node_user(node_id))
    user = make_node_user(
        node_id, password, mechanisms=_mechanisms(args), iterations=args.iterations
    )
    if out is not None:  # the credentials are good: now the password file
        _write_password(out, password, args.force)
    mechanisms = ", ".join(user.mechanisms)
    if node_id is None:
        verb = "replaced" if contents.shared_node is not None else "added"
        write_users_file(path, dataclasses.replace(contents, shared_node=user))
        print(f"{verb} the shared node password ({mechanisms}) in {path}")
        return 0
    name = node_user(node_id)
    verb = "replaced" if name in contents.users else "added"
    write_users_file(path, dataclasses.replace(contents, users={**contents.users, name: user}))
    print(f"{verb} {name} ({mechanisms}) in {path}")
    if args.password_out is not None:
        print(
            f"node {node_id}'s password is in {args.password_out} (mode 0600): give it to "
            f"node {node_id} only, as --sasl-node-password-file; copy {path} to every node"
        )
    return 0


def _cmd_delete_node(args: argparse.Namespace) -> int:
    path = Path(args.file)
    node_id = _node(args.node)
    contents = _contents(path, missing_ok=False)
    if node_id is None:
        if contents.shared_node is None:
            raise _Usage(f"no shared node password in {path}")
        write_users_file(path, dataclasses.replace(contents, shared_node=None))
        print(f"deleted the shared node password from {path}")
        return 0
    name = node_user(node_id)
    if name not in contents.users:
        raise _Usage(f"no credentials of {name} in {path}")
    users = {n: u for n, u in contents.users.items() if n != name}
    write_users_file(path, dataclasses.replace(contents, users=users))
    print(f"deleted {name} from {path}")
    return 0


def _run(func: Any) -> Any:
    def run(args: argparse.Namespace) -> int:
        try:
            return int(func(args))
        except UsersFileError as exc:
            print(f"raftcore users: {exc}", file=sys.stderr)
            return 2 if isinstance(exc, BadUserError) else 1

    return run


def _mechanism_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--mechanisms",
        default=",".join(MECHANISMS),
        help=f"credentials to keep (default: {','.join(MECHANISMS)})",
    )
    p.add_argument(
        "--iterations",
        type=int,
        default=DEFAULT_ITERATIONS,
        help=f"PBKDF2 / SCRAM iterations (default {DEFAULT_ITERATIONS}; at least "
        f"{MIN_ITERATIONS}, KIP-84)",
    )


def add_users_commands(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "users", help="the SASL users file of the nodes (add, delete, list, add-node, delete-node)"
    )
    users = p.add_subparsers(dest="users_command", required=True, metavar="ACTION")

    a = users.add_parser("add", help="add a user, or replace its password")
    a.add_argument("file", help="the users file (created, mode 0600, if missing)")
    a.add_argument("name", help="the username")
    a.add_argument(
        "--password-stdin", action="store_true", help="read the password from stdin's first line"
    )
    _mechanism_options(a)
    a.set_defaults(func=_run(_cmd_add))

    d = users.add_parser("delete", help="remove a user")
    d.add_argument("file")
    d.add_argument("name")
    d.set_defaults(func=_run(_cmd_delete))

    a = users.add_parser("list", help="the users, the nodes' credentials and their mechanisms")
    a.add_argument("file")
    a.set_defaults(func=_run(_cmd_list))

    n = users.add_parser(
        "add-node",
        help="give a node its own credentials (node-<id>), or keep the shared node password's",
    )
    n.add_argument("file", help="the users file (created, mode 0600, if missing)")
    n.add_argument("node", metavar="ID|shared", help="the node's id, or 'shared'")
    n.add_argument(
        "--password-out",
        default=None,
        metavar="FILE",
        help="make a random password and write it to FILE (mode 0600): the node's "
        "--sasl-node-password-file",
    )
    n.add_argument(
        "--password-stdin", action="store_true", help="read the password from stdin's first line"
    )
    n.add_argument("--force", action="store_true", help="overwrite the --password-out file")
    _mechanism_options(n)
    n.set_defaults(func=_run(_cmd_add_node))

    d = users.add_parser("delete-node", help="remove a node's credentials, or the shared ones")
    d.add_argument("file")
    d.add_argument("node", metavar="ID|shared")
    d.set_defaults(func=_run(_cmd_delete_node))


# ---- raftcore node --sasl-* ----------------------------------------------------------------------


def add_sasl_node_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("SASL for clients (KIP-43; see docs/security.md)")
    g.add_argument(
        "--sasl-users",
        default=None,
        metavar="FILE",
        help="the users file (raftcore users add): the listener then requires a SASL login "
        "(SASL_PLAINTEXT, or SASL_SSL over TLS)",
    )
    g.add_argument(
        "--sasl-mechanisms",
        default=",".join(MECHANISMS),
        help=f"the mechanisms offered (default: {','.join(MECHANISMS)})",
    )
    g.add_argument(
        "--sasl-node-password-file",
        default=None,
        metavar="FILE",
        help="this node's password (first line), which it logs in to the other nodes with as "
        "node-<id> on SASL_PLAINTEXT (raftcore users add-node ID --password-out FILE writes "
        "one; not needed on SASL_SSL, where the node's certificate says who it is)",
    )


def sasl_listener_security(args: argparse.Namespace, base: Any) -> Any:
    """``base`` (a ListenerSecurity) with the ``--sasl-*`` options applied: ``--sasl-users``
    turns PLAINTEXT into SASL_PLAINTEXT and SSL into SASL_SSL. ValueError for a configuration
    that cannot work (see :func:`raftcore.security.sasl.check_listener`)."""
    from raftcore.security.sasl import check_listener

    mechanisms = tuple(m.strip() for m in args.sasl_mechanisms.split(",") if m.strip())
    password = None
    if args.sasl_node_password_file:
        try:
            text = Path(args.sasl_node_password_file).read_text(encoding="utf-8")
        except OSError as exc:
            raise ValueError(
                f"cannot read {args.sasl_node_password_file}: {exc.strerror}"
            ) from None
        password = text.splitlines()[0] if text.strip() else ""
        if not password:
            raise ValueError(f"{args.sasl_node_password_file} holds no password")
    security = base
    if args.sasl_users:
        protocol = {"PLAINTEXT": "SASL_PLAINTEXT", "SSL": "SASL_SSL"}.get(
            base.protocol, base.protocol
        )
        security = dataclasses.replace(
            base,
            protocol=protocol,
            sasl_users_file=Path(args.sasl_users),
            sasl_mechanisms=mechanisms,
            sasl_node_password=password,
        )
    elif base.uses_sasl:
        raise ValueError(f"a {base.protocol} listener needs --sasl-users FILE")
    check_listener(security)
    if security.sasl_users_file is not None:
        try:
            read_users(security.sasl_users_file)  # said now, in one line, not at start
        except UsersFileError as exc:
            raise ValueError(str(exc)) from None
    return security
