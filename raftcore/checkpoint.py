"""Small durable files: written whole to a temporary file, fsynced, renamed over the old one,
and the directory fsynced, so a reader sees the old or the new content and never a mix.

Text checkpoints follow Kafka's CheckpointFile layout: a version line, then content lines.
"""

from __future__ import annotations

import os
from pathlib import Path

from raftcore.errors import CorruptCheckpointError

TMP_SUFFIX = ".tmp"


def fsync_directory(directory: str | os.PathLike[str]) -> None:
    """Make a directory's entries (created, renamed, deleted files) durable."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomically(path: str | os.PathLike[str], data: bytes) -> None:
    """Replace ``path`` with ``data``: temp file, fsync, rename, fsync of the directory."""
    path = Path(path)
    tmp = path.with_name(path.name + TMP_SUFFIX)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    except OSError as exc:
        if exc.filename is None:
            exc.filename = str(tmp)  # a failed write names its file (a full disk, say)
        raise
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_directory(path.parent)


def write_checkpoint(path: str | os.PathLike[str], version: int, lines: list[str]) -> None:
    """Write a text checkpoint: the version on line 1, then ``lines``."""
    text = "".join(f"{line}\n" for line in [str(version), *lines])
    write_atomically(path, text.encode("utf-8"))


def read_checkpoint(path: str | os.PathLike[str], version: int) -> list[str] | None:
    """The content lines of a text checkpoint, or None when the file does not exist.

    Raises CorruptCheckpointError (naming the file) for an unreadable file or a version other
    than ``version``.
    """
    path = Path(path)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CorruptCheckpointError(f"{path}: not UTF-8 text ({exc})") from None
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if not lines:
        raise CorruptCheckpointError(f"{path}: empty checkpoint file")
    if lines[0].strip() != str(version):
        raise CorruptCheckpointError(f"{path}: checkpoint version {lines[0]!r}, expected {version}")
    return lines[1:]


def parse_ints(path: str | os.PathLike[str], line: str, lineno: int, count: int) -> list[int]:
    """Parse a line of ``count`` space-separated non-negative integers."""
    parts = line.split()
    if len(parts) != count:
        raise CorruptCheckpointError(
            f"{path}: line {lineno} is {line!r}, expected {count} integers"
        )
    try:
        values = [int(p) for p in parts]
    except ValueError:
        raise CorruptCheckpointError(
            f"{path}: line {lineno} is {line!r}, expected {count} integers"
        ) from None
    if any(v < 0 for v in values):
        raise CorruptCheckpointError(f"{path}: line {lineno} has a negative value: {line!r}")
    return values
