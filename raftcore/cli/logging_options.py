"""Logging for the ``raftcore`` command line: ``-v/--verbose``, ``--log-level LEVEL`` and
``--log-format text|json`` on every command, before or after its name.

The top-level parser holds the real defaults; each command's parser gets copies whose default
is ``argparse.SUPPRESS``, so an option given before the command name is not overwritten by the
command parser's default (argparse copies every attribute a subparser sets onto the result).
"""

from __future__ import annotations

import argparse
import datetime
import json
import logging
import sys

__all__ = ["LEVELS", "JsonFormatter", "add_logging_options", "configure_logging", "debugging"]

LEVELS = ("debug", "info", "warning", "error", "critical")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def _level(text: str) -> str:
    if text.lower() not in LEVELS:
        raise argparse.ArgumentTypeError(f"expected one of {', '.join(LEVELS)}, got {text!r}")
    return text.lower()


def add_logging_options(parser: argparse.ArgumentParser, *, top: bool) -> None:
    """Add the logging options to ``parser`` (``top``: with their defaults; else suppressed,
    for a command's parser). A parser that has them already is left alone."""
    if "--log-level" in parser._option_string_actions:
        return
    default = (lambda value: value) if top else (lambda value: argparse.SUPPRESS)
    group = parser.add_argument_group("logging")
    group.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        default=default(False),
        help="debug logging, and a traceback with an unexpected error (as --log-level debug)",
    )
    group.add_argument(
        "--log-level",
        type=_level,
        default=default(None),
        metavar="LEVEL",
        help=f"log at this level and above: {', '.join(LEVELS)} (default: warning; info for "
        "`raftcore node`)",
    )
    group.add_argument(
        "--log-format",
        choices=("text", "json"),
        default=default("text"),
        help="text lines, or one JSON object per line (time, level, logger, message, exc_info)",
    )


def _chosen_level(args: argparse.Namespace, default: str) -> int:
    name = getattr(args, "log_level", None)
    if name is None:
        name = "debug" if getattr(args, "verbose", False) else default
    return int(getattr(logging, name.upper()))


def debugging(args: argparse.Namespace) -> bool:
    """Whether the user asked for debug output (then an unexpected error shows its traceback)."""
    return _chosen_level(args, "warning") <= logging.DEBUG


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ``time`` (UTC, ISO 8601 with milliseconds), ``level``,
    ``logger``, ``message``, and ``exc_info`` (the formatted traceback) when there is one."""

    def format(self, record: logging.LogRecord) -> str:
        stamp = datetime.datetime.fromtimestamp(record.created, datetime.timezone.utc)
        line = {
            "time": stamp.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            line["exc_info"] = self.formatException(record.exc_info)
        elif record.exc_text:
            line["exc_info"] = record.exc_text
        return json.dumps(line, ensure_ascii=False)


def configure_logging(args: argparse.Namespace, default_level: str = "warning") -> None:
    """The root logger as the options say: level, and text or JSON lines on stderr. Like
    ``logging.basicConfig``, it leaves alone a root logger that someone else configured (an
    application calling :func:`raftcore.cli.main`, a test runner); a second call replaces what
    the first installed."""
    root = logging.getLogger()
    ours = [h for h in root.handlers if getattr(h, "raftcore_cli", False)]
    if len(ours) < len(root.handlers):
        return
    for old in ours:
        root.removeHandler(old)
    handler = logging.StreamHandler(sys.stderr)
    handler.raftcore_cli = True  # type: ignore[attr-defined]
    if getattr(args, "log_format", "text") == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter(TEXT_FORMAT))
    root.addHandler(handler)
    root.setLevel(_chosen_level(args, default_level))
