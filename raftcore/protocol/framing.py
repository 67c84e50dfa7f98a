"""Kafka frames received with ``asyncio.BufferedProtocol``: the kernel (or the TLS layer)
writes straight into this module's buffers, and each whole frame is handed to a callback from
``buffer_updated``, with no coroutine and no loop hop per read.

- Small frames (under :data:`LARGE_FRAME`) are cut out of one reusable buffer: each is handed
  out as its own ``bytes`` (one copy), as the buffer is filled again by the next read.
- A large frame is received into a buffer of exactly its size, allocated once its size is
  known (and checked against the limit), and handed out whole, as a memoryview of it: the
  records in it are written once, by the kernel, and never copied by Python before the
  decoder and the log see them. Only what the read that carried the size also carried of it
  is moved there. The buffer is left uninitialised (``numpy.empty``: malloc): nothing
  zeroes it, so a peer that announces 100 MiB and sends nothing costs no resident memory (a
  ``bytearray`` of the size, zeroed at once, let a hostile client grow the node's heap by
  what it announced), while the allocator still hands the next frame warm pages (a fresh
  anonymous map per frame cost 2.5x the CPU of a bytearray in page faults).

A frame whose size is over the limit (or negative) ends the connection before anything is
allocated for it, with :class:`FrameTooLarge` (naming a TLS handshake when the bytes are one).
A server connection may also make a large frame wait for room in the node's request budget
(``admit``, :class:`~raftcore.node.connection_limits.RequestBudget`): the receiver then stops
reading until it is told there is room.

When the connection ends, the receiver lets go of its frames and of the callbacks into its
owner at once, and tells the stream protocol it replaced (:func:`take_over`): nothing of a
closed connection waits for the cyclic garbage collector.

The node's transport and the client's connections both receive through it. It is the one
module below the node that imports ``asyncio``: it is an ``asyncio.BufferedProtocol``, fed by a
transport its owner made; it opens no socket and starts no task, thread or timer.
"""

from __future__ import annotations

import asyncio
import struct
from collections import deque
from collections.abc import Callable
from typing import Any, cast

import numpy as np

__all__ = ["LARGE_FRAME", "FrameReceiver", "FrameTooLarge", "is_tls", "take_over"]

_SIZE = struct.Struct(">i")
LARGE_FRAME = 64 * 1024  # from this size on, a frame gets a buffer of its own


class FrameTooLarge(ConnectionError):
    pass


def is_tls(head: bytes | bytearray | memoryview) -> bool:
    """The first bytes of a TLS record: a handshake (22), version 3.x."""
    return head[0] == 0x16 and head[1] == 0x03


def too_large(head: bytes | bytearray | memoryview, size: int, limit: int) -> FrameTooLarge:
    hint = " (a TLS handshake: an SSL client on a PLAINTEXT listener?)" if is_tls(head) else ""
    return FrameTooLarge(f"frame of {size} bytes (limit {limit}){hint}")


class FrameReceiver(asyncio.BufferedProtocol):
    """Cuts the bytes of one connection into frames and calls ``on_frame`` with each (without
    its size), in order. ``on_lost`` is called once, when the connection ends: with None at a
    clean end of stream, else with the exception (FrameTooLarge included).

    :meth:`pause` stops the frames (the transport stops reading; frames already received wait
    here) until :meth:`resume`. ``on_writable`` is called when the transport, after holding
    more than its high-water mark of unsent bytes, is back under its low-water mark
    (``writing_paused`` says which).

    ``admit(size)`` (optional) is asked before a large frame's buffer is allocated: False
    leaves the frame unstarted and the transport not reading (``starved``) until
    :meth:`admit_again`. ``received`` counts the bytes received and ``frames`` the frames
    completed, for the connection's timeouts (:meth:`partial_frame`).
    """

    def __init__(
        self,
        on_frame: Callable[[Any], None],
        max_bytes: int | Callable[[], int],
        on_lost: Callable[[BaseException | None], None],
        *,
        on_writable: Callable[[], None] | None = None,
        admit: Callable[[int], bool] | None = None,
        large_frame: int = LARGE_FRAME,
    ) -> None:
        self.on_frame = on_frame
        self.max_bytes = max_bytes  # a function is asked for each frame (a SASL login's limit)
        self.on_lost = on_lost
        self.on_writable = on_writable
        self.admit = admit
        self.transport: Any = None
        self.paused = False
        self.starved = False  # a large frame waits for admit (the request budget)
        self.writing_paused = False
        self.lost = False
        self.received = 0  # bytes
        self.frames = 0  # completed
        self.replaced: Any = None  # the stream protocol take_over replaced, told of the end
        self.large_frame = large_frame  # from this size on, a frame gets its own buffer
        # for small frames: made at the first read (an idle connection has none), grown
        # (rarely) when a partial frame does not fit after a compaction
        self._buf = bytearray(0)
        self._view = memoryview(self._buf)
        self._start = 0  # the first byte not yet handed out
        self._end = 0  # the end of what was received
        self._big: memoryview | None = None  # the large frame being received, if any
        self._big_filled = 0
        self._held: deque[memoryview] = deque()  # whole large frames not handed out yet
        self._cutting = False  # inside _cut (a callback may pause, resume or close)

    # ---- the protocol ----------------------------------------------------------------------------

    def connection_made(self, transport: Any) -> None:
        self.transport = transport

    def get_buffer(self, sizehint: int) -> memoryview:
        big = self._big
        if big is not None:
            return big[self._big_filled :]
        if self.lost:  # a read the transport had under way: its bytes go nowhere
            return memoryview(bytearray(4096))
        if len(self._buf) - self._end < self.large_frame // 4:
            self._make_room()
        return self._view[self._end :]

    def buffer_updated(self, nbytes: int) -> None:
        if self.lost:
            return
        self.received += nbytes
        big = self._big
        if big is not None:
            self._big_filled += nbytes
            if self._big_filled < len(big):
                return
            self._big = None
            self.frames += 1
            self._held.append(big)
        else:
            self._end += nbytes
        self._cut()

    def eof_received(self) -> bool:
        return False  # the transport closes; connection_lost follows

    def connection_lost(self, exc: BaseException | None) -> None:
        self._lose(exc)

    def pause_writing(self) -> None:
        self.writing_paused = True

    def resume_writing(self) -> None:
        self.writing_paused = False
        if self.on_writable is not None and not self.lost:
            self.on_writable()

    # ---- flow control ----------------------------------------------------------------------------

    def pause(self) -> None:
        """Hand out no frame until :meth:`resume`; the transport stops reading."""
        if not self.paused:
            self.paused = True
            if self.transport is not None and not self.lost and not self.starved:
                self.transport.pause_reading()

    def resume(self) -> None:
        if self.paused:
            self.paused = False
            if self.transport is not None and not self.lost and not self.starved:
                self.transport.resume_reading()
            self._cut()  # the frames that waited here

    def admit_again(self) -> None:
        """``admit`` may say yes now: ask it again for the frame that waits."""
        if self.starved and not self.lost:
            self.starved = False
            if self.transport is not None and not self.paused:
                self.transport.resume_reading()
            self._cut()

    def partial_frame(self) -> int | None:
        """The number of the frame being received while part of it (its size, perhaps only
        some of it) has arrived and the rest is read for; None otherwise (between frames, or
        not reading: paused, starved, lost)."""
        if self.paused or self.starved or self.lost:
            return None
        if self._big is not None or self._end > self._start:
            return self.frames
        return None

    # ---- cutting ---------------------------------------------------------------------------------

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        """Bytes received before this protocol took the connection over (:func:`take_over`)."""
        view = memoryview(data)
        while view and not self.lost:
            buf = self.get_buffer(len(view))
            n = min(len(buf), len(view))
            buf[:n] = view[:n]
            self.buffer_updated(n)
            view = view[n:]

    def _cut(self) -> None:
        if self._cutting:
            return  # the loop below goes on (a callback resumed)
        self._cutting = True
        try:
            self._cut_frames()
        finally:
            self._cutting = False

    def _cut_frames(self) -> None:
        while not self.paused and not self.starved and not self.lost:
            if self._held:
                self.on_frame(self._held.popleft())
                continue
            buf, start, end = self._buf, self._start, self._end
            if end - start < 4:
                break
            (size,) = _SIZE.unpack_from(buf, start)
            limit = self.max_bytes() if callable(self.max_bytes) else self.max_bytes
            if size < 0 or size > limit:
                self.fail(too_large(buf[start : start + 4], size, limit))
                return
            if size >= self.large_frame:
                if self.admit is not None and not self.admit(size):
                    self.starved = True  # until admit_again; the frame stays unstarted
                    if self.transport is not None and not self.paused:
                        self.transport.pause_reading()
                    break
                have = min(end - start - 4, size)
                try:
                    big = np.empty(size, dtype=np.uint8).data  # memoryview, uncleared
                except MemoryError as exc:
                    self.fail(exc)
                    return
                big[:have] = self._view[start + 4 : start + 4 + have]
                self._start = start + 4 + have
                if have < size:  # the rest goes straight into it (get_buffer)
                    self._big = big
                    self._big_filled = have
                    break
                self.frames += 1
                self.on_frame(big)
                continue
            if end - start - 4 < size:
                break
            self._start = start + 4 + size
            self.frames += 1
            # A writable copy: a leader restamps produced batches where they lie in it.
            self.on_frame(bytearray(self._view[start + 4 : start + 4 + size]))
        if self._start == self._end:
            self._start = self._end = 0

    def _make_room(self) -> None:
        """Move what is left of a partial frame to the front of the buffer (it is shorter
        than ``large_frame`` plus its size, or it would be in a buffer of its own); double the
        buffer when that leaves too little room (the buffer starts at ``large_frame`` bytes,
        64 KiB per connection, at its first read), or when frames wait in it (paused)."""
        start, end = self._start, self._end
        if start > 0:
            self._buf[: end - start] = self._buf[start:end]
            self._start, self._end = 0, end - start
        if len(self._buf) - self._end < self.large_frame // 4:
            grown = bytearray(max(self.large_frame, 2 * len(self._buf)))
            grown[: self._end] = self._view[: self._end]
            self._buf, self._view = grown, memoryview(grown)

    def fail(self, exc: BaseException | None) -> None:
        """End the connection (``on_lost`` is told ``exc``)."""
        transport = self.transport
        self._lose(exc)
        if transport is not None:
            transport.close()

    def _lose(self, exc: BaseException | None) -> None:
        if not self.lost:
            self.lost = True
            on_lost = self.on_lost
            # Let go at once of what a closed connection held: its frames, and the callbacks
            # into its owner (a cycle through them would wait for the cyclic GC).
            self._big = None
            self._held.clear()
            self._buf = bytearray(0)
            self._view = memoryview(self._buf)
            self._start = self._end = 0
            self.on_frame = self.on_lost = _ignore
            self.on_writable = self.admit = None
            self.max_bytes = 0
            # and the transport: asyncio's TLS protocol keeps this receiver's get_buffer and
            # buffer_updated after the end (Python 3.11), so through it the TLS layer's
            # buffers (a 256 KiB read buffer, OpenSSL's) were in a cycle too
            self.transport = None
            try:
                on_lost(exc)
            finally:
                replaced, self.replaced = self.replaced, None
                if replaced is not None:  # the streams end as if they had seen it
                    replaced.connection_lost(exc)


def _ignore(_: Any) -> None:
    pass


def take_over(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, receiver: FrameReceiver
) -> None:
    """Move a connection opened with the streams API (plaintext or TLS, after a SASL login
    perhaps) to ``receiver``: the bytes the stream had received but nobody read yet are
    handed to it first, and an end of stream or a loss the stream saw is passed on."""
    transport = cast(asyncio.Transport, writer.transport)  # a stream's is read and write
    leftover = bytes(reader._buffer)  # type: ignore[attr-defined]  # read, but not consumed
    reader._buffer.clear()  # type: ignore[attr-defined]
    lost = transport.is_closing() or reader.exception() is not None
    receiver.replaced = transport.get_protocol()
    transport.set_protocol(receiver)
    receiver.connection_made(transport)
    if leftover:
        receiver.feed(leftover)
    if lost or reader.at_eof():
        receiver.fail(reader.exception())
    elif not receiver.paused and not transport.is_reading():
        transport.resume_reading()  # the stream had paused it (its buffer was full)
