"""``raftcore users add|delete|list FILE``: the SASL users file of the nodes
(:mod:`raftcore.security.users`), and the ``--sasl-*`` options of ``raftcore node``.

``add`` reads the password from a prompt (twice, on a terminal) or, with ``--password-stdin``,
from the first line of standard input; never from the command line, where ``ps`` would show
it. The file keeps no password: PLAIN's PBKDF2 hash and SCRAM's salted keys. Nodes re-read
the file when it changes, so no restart is needed.

Exit codes: 0 done; 1 the file could not be read or written; 2 a usage error (no such user,
a reserved name, passwords that differ).
"""

from __future__ import annotations

import argparse
import dataclasses
import getpass
import sys
from pathlib import Path
from typing import Any

from raftcore.security.scram import MIN_ITERATIONS
from raftcore.security.users import (
    MECHANISMS,
    BadUserError,
    UsersFileError,
    make_user,
    read_users,
    write_users,
)

__all__ = ["add_sasl_node_options", "add_users_commands", "sasl_listener_security"]


def _users(path: Path, *, missing_ok: bool) -> dict[str, Any]:
    if missing_ok and not path.exists():
        return {}
    return read_users(path)


def _password(args: argparse.Namespace) -> str:
    if args.password_stdin:
        line = sys.stdin.readline()
        return line[:-1] if line.endswith("\n") else line
    if not sys.stdin.isatty():
        raise _Usage("no terminal to ask for the password: pass --password-stdin")
    first = getpass.getpass(f"Password for {args.name}: ")
    if getpass.getpass("Again: ") != first:
        raise _Usage("the passwords differ")
    return first


class _Usage(BadUserError):
    pass


def _cmd_add(args: argparse.Namespace) -> int:
    path = Path(args.file)
    users = _users(path, missing_ok=True)
    mechanisms = tuple(m.strip() for m in args.mechanisms.split(",") if m.strip())
    user = make_user(args.name, _password(args), mechanisms=mechanisms, iterations=args.iterations)
    verb = "replaced" if args.name in users else "added"
    users[args.name] = user
    write_users(path, users)
    print(f"{verb} {args.name} ({', '.join(user.mechanisms)}) in {path}")
    return 0


def _cmd_delete(args: argparse.Namespace) -> int:
    path = Path(args.file)
    users = _users(path, missing_ok=False)
    if args.name not in users:
        raise _Usage(f"no user {args.name!r} in {path}")
    del users[args.name]
    write_users(path, users)
    print(f"deleted {args.name} from {path}")
    return 0


def _cmd_list(args: argparse.Namespace) -> int:
    path = Path(args.file)
    users = _users(path, missing_ok=False)
    for name, user in sorted(users.items()):
        print(f"{name}\t{','.join(user.mechanisms)}")
    return 0


def _run(func: Any) -> Any:
    def run(args: argparse.Namespace) -> int:
        try:
            return int(func(args))
        except UsersFileError as exc:
            print(f"raftcore users: {exc}", file=sys.stderr)
            return 2 if isinstance(exc, BadUserError) else 1

    return run


def add_users_commands(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("users", help="the SASL users file of the nodes (add, delete, list)")
    users = p.add_subparsers(dest="users_command", required=True, metavar="ACTION")

    a = users.add_parser("add", help="add a user, or replace its password")
    a.add_argument("file", help="the users file (created, mode 0600, if missing)")
    a.add_argument("name", help="the username")
    a.add_argument(
        "--password-stdin", action="store_true", help="read the password from stdin's first line"
    )
    a.add_argument(
        "--mechanisms",
        default=",".join(MECHANISMS),
        help=f"credentials to keep (default: {','.join(MECHANISMS)})",
    )
    a.add_argument(
        "--iterations",
        type=int,
        default=MIN_ITERATIONS,
        help=f"PBKDF2 / SCRAM iterations (at least {MIN_ITERATIONS}, KIP-84)",
    )
    a.set_defaults(func=_run(_cmd_add))

    d = users.add_parser("delete", help="remove a user")
    d.add_argument("file")
    d.add_argument("name")
    d.set_defaults(func=_run(_cmd_delete))

    a = users.add_parser("list", help="the users and their mechanisms")
    a.add_argument("file")
    a.set_defaults(func=_run(_cmd_list))


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
        help="the inter-node password (first line; the same file on every node): nodes log in "
        "to each other as node-<id> with it",
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
