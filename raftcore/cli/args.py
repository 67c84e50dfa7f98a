"""Argument types for the ``raftcore`` command line.

Each is an argparse ``type=`` function: it returns the parsed value or raises
``argparse.ArgumentTypeError``, so a bad value ends in argparse's one-line
``raftcore CMD: error: --opt: ... (see raftcore CMD --help)`` and exit status 2 (see
:class:`ArgumentParser`), never in a traceback.
Address-like options keep their text form (validated and normalised), because the commands
hand them on as text (the Spark options take ``bootstrap`` as a string).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import NoReturn

from raftcore.endpoints import parse_endpoint, parse_voters
from raftcore.errors import CommandLineError  # defined below the CLI: security raises it too

__all__ = [
    "ArgumentParser",
    "bootstrap_list",
    "endpoint",
    "node_id",
    "CommandLineError",
    "non_negative_int",
    "port",
    "positive_float",
    "positive_int",
    "start_position",
    "voter_list",
]


def _int(text: str) -> int:
    """An integer; ``_`` or ``,`` may group digits (``200_000``, ``1,000,000``)."""
    cleaned = text.strip().replace("_", "").replace(",", "")
    if not cleaned.lstrip("+-").isdigit():
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}")
    return int(cleaned)


def non_negative_int(text: str) -> int:
    """An integer >= 0 (an offset, a size that may be zero: 0 turns the setting off)."""
    value = _int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def positive_int(text: str) -> int:
    """An integer >= 1 (a count, a size, a timeout)."""
    value = _int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def off_or_positive_int(text: str) -> int:
    """-1 (off, as Kafka writes it) or an integer >= 1 (a retention limit)."""
    value = _int(text)
    if value != -1 and value < 1:
        raise argparse.ArgumentTypeError(f"must be -1 (off) or >= 1, got {value}")
    return value


def map_size(text: str) -> int:
    """An LMDB map size: at least 1 MiB (a smaller map cannot hold the state machine's
    tables, and LMDB's MDB_MAP_FULL at start read like a bug)."""
    value = _int(text)
    if value < 1 << 20:
        raise argparse.ArgumentTypeError(f"must be >= 1048576 (1 MiB), got {value}")
    return value


def port(text: str) -> int:
    """A TCP port, 1 to 65535."""
    value = _int(text)
    if not 1 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"a port is 1 to 65535, got {value}")
    return value


def positive_float(text: str) -> float:
    """A number > 0 (seconds)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
    return value


def node_id(text: str) -> int:
    """A node id: an integer >= 0, as Kafka's node.id."""
    value = _int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"a node id must be >= 0, got {value}")
    return value


def start_position(text: str) -> str | int:
    """Where a consumer starts: ``earliest``, ``latest`` or an offset >= 0."""
    if text in ("earliest", "latest"):
        return text
    try:
        value = _int(text)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(
            f"expected earliest, latest or an offset >= 0, got {text!r}"
        ) from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"an offset must be >= 0, got {value}")
    return value


def endpoint(text: str) -> str:
    """``host:port`` with a port in 1..65535 (IPv6 as ``[::1]:9091``), as given."""
    try:
        parse_endpoint(text.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(_endpoint_problem(text.strip())) from None
    return text.strip()


def bootstrap_list(text: str) -> str:
    """``host:port[,host:port...]``: at least one, each checked; returned joined by commas."""
    items = [item.strip() for item in text.split(",") if item.strip()]
    if not items:
        raise argparse.ArgumentTypeError("expected host:port[,host:port...], got nothing")
    for item in items:
        endpoint(item)
    return ",".join(items)


def voter_list(text: str) -> str:
    """Kafka's ``controller.quorum.voters``: ``1@host:port,2@host:port,...``."""
    for item in filter(None, (part.strip() for part in text.split(","))):
        node, sep, address = item.partition("@")
        if not sep or not node.strip().isdigit():
            raise argparse.ArgumentTypeError(f"expected id@host:port, got {item!r}")
        try:
            parse_endpoint(address)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"voter {node}: {_endpoint_problem(address)}"
            ) from None
    try:
        parse_voters(text)  # duplicates, an empty list
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def _endpoint_problem(text: str) -> str:
    """Why ``text`` is not ``host:port``, in the user's terms."""
    host, sep, port = text.rpartition(":")
    if not sep or not port:
        return f"expected host:port, got {text!r} (no port)"
    if not host:
        return f"expected host:port, got {text!r} (no host)"
    if not port.isdigit():
        return f"expected host:port, got {text!r} (the port is not a number)"
    return f"expected host:port, got {text!r} (the port must be in 1..65535)"


# ---- every command's parser -------------------------------------------------------------------


class ArgumentParser(argparse.ArgumentParser):
    """argparse's parser, whose usage errors are one line: ``raftcore CMD: error: --opt: what
    is wrong (see raftcore CMD --help)``, exit status 2. argparse printed the whole usage (25
    lines for ``raftcore node``) before the line that mattered. The subcommands' parsers are
    of this class too (argparse makes them of their parent's class)."""

    command = False  # a (sub)command's parser: set by raftcore.cli for every one below the top

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        """A command's parser names its own unrecognized arguments (argparse left them to the
        top parser, whose error named no command)."""
        parsed, extras = super().parse_known_args(args, namespace)
        if extras and self.command:
            self.error(f"unrecognized arguments: {' '.join(extras)}")
        return parsed, extras

    def error(self, message: str) -> NoReturn:
        # "argument --voters: expected ..." -> "--voters: expected ..."
        message = message.removeprefix("argument ")
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


class DefaultsHelpFormatter(argparse.HelpFormatter):
    """Help that shows each option's default, as ``(default: X)``, unless its text already
    speaks of its default or it has none worth showing (None, False, suppressed)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = action.default
        if (
            "default" in text
            or default is None
            or default is False
            or default is argparse.SUPPRESS
            or isinstance(action, argparse._HelpAction)
            or not (action.option_strings or action.nargs in ("?", "*"))
        ):
            return text
        return f"{text} (default: {str(default).replace('%', '%%')})".lstrip()


def every_parser(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    """``parser`` and every (sub)command parser below it, depth first."""
    found = [parser]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in dict.fromkeys(action.choices.values()):  # aliases share a parser
                found.extend(every_parser(child))
    return found
