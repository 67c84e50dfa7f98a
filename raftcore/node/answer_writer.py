"""Frames written to a transport: small ones whole, large ones in pieces.

A large answer (a Fetch's records are views of the log's mmap) is handed to the transport a
piece of :data:`PIECE_BYTES` at a time, and only while the transport is under its high-water
mark (:class:`~raftcore.node.transport.ServerConnection` goes on at ``resume_writing``). A
transport takes whatever it is given: asyncio's TLS layer encrypts a whole write into its
memory BIO and then copies that into the socket transport's buffer (one Fetch over a 292 MiB
segment raised a node's memory by 1.16 GiB), and on Python 3.11 the plain transport copies the
unsent rest of a write into a bytearray. Written in pieces, a connection holds about one piece
plus the high-water marks, whatever the answer's size, and the views are never joined into a
copy of it (runs of small parts between them are, up to a piece: fewer writes).
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Iterator, Sequence

__all__ = ["JOIN_BELOW", "PIECE_BYTES", "frame_pieces", "write_frame"]

_SIZE = struct.Struct(">i")
PIECE_BYTES = 256 * 1024  # answers of this size and more are written in pieces of this size
JOIN_BELOW = 64 * 1024  # parts smaller than this are joined with their neighbours


def write_frame(
    writer: asyncio.StreamWriter, parts: Sequence[bytes | memoryview], size: int | None = None
) -> None:
    """Write one frame at once; small frames go out as one piece, larger ones without joining
    their parts. ``size``: the parts' total length, if the caller has it."""
    if size is None:
        size = sum(len(p) for p in parts)
    header = _SIZE.pack(size)
    if size < JOIN_BELOW:
        writer.write(header + b"".join(parts))
    else:
        writer.write(header)
        for part in parts:
            writer.write(part)


def frame_pieces(
    parts: Sequence[bytes | memoryview], size: int, piece: int = PIECE_BYTES
) -> Iterator[bytes | memoryview]:
    """The frame (size and parts) as pieces of at most ``piece`` bytes: large parts cut into
    views, runs of small ones joined."""
    run: list[bytes | memoryview] = [_SIZE.pack(size)]
    run_bytes = 4
    for part in parts:
        n = len(part)
        if n < JOIN_BELOW and run_bytes + n <= piece:
            run.append(part)
            run_bytes += n
            continue
        if run:
            yield b"".join(run)
            run, run_bytes = [], 0
        if n < JOIN_BELOW:
            run, run_bytes = [part], n
            continue
        view = memoryview(part)
        for at in range(0, n, piece):
            yield view[at : at + piece]
    if run:
        yield b"".join(run)
