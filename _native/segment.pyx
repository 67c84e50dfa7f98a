# cython: language_level=3
"""Native pieces of a log segment: a read-only memory map handing out zero-copy views, writes
that survive partial writes and EINTR without holding the GIL, and the sparse offset index.

The offset index (``.index`` file, Kafka's format) is a sequence of 8-byte entries, each a
big-endian int32 offset relative to the segment's base offset and a big-endian int32 byte
position in the ``.log`` file. An entry (r, p) says: the batch starting at position p holds
offsets up to base + r, so a reader looking for offset o may start scanning at the p of the
greatest entry with r <= o - base.
"""

cimport cython
from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_FillInfo, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from libc.errno cimport EINTR, errno
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t
from libc.string cimport strerror

from wire cimport load_i32, store_u32

import os

import numpy as np


from posix.mman cimport (
    MADV_SEQUENTIAL,
    MAP_ANONYMOUS,
    MAP_FAILED,
    MAP_FIXED,
    MAP_PRIVATE,
    MAP_SHARED,
    PROT_READ,
    madvise,
    mmap,
    munmap,
)
from posix.types cimport off_t
from posix.unistd cimport _SC_PAGESIZE, pwrite, sysconf

cdef Py_ssize_t PAGE = sysconf(_SC_PAGESIZE)


cdef inline Py_ssize_t _round_up(Py_ssize_t n) noexcept:
    return (n + PAGE - 1) // PAGE * PAGE


@cython.final
cdef class MappedFile:
    """A read-only shared mapping of a segment file.

    It maps ``capacity`` bytes, which may run past the end of the file so that appends need no
    remap; only ``[0, size)`` -- bytes known to be in the file -- is ever exported. ``retire``
    makes the mapping safe to outlive a truncation: pages past the new end are replaced by
    anonymous zero pages, so a view taken before the truncation never faults (it reads zeros
    where the truncated bytes were). A retired mapping is frozen; the segment maps afresh.
    """
    cdef uint8_t *addr
    cdef readonly Py_ssize_t capacity
    cdef readonly Py_ssize_t size
    cdef readonly int exports
    cdef readonly bint retired
    cdef object __weakref__

    def __cinit__(self, int fd, Py_ssize_t size, Py_ssize_t capacity=0):
        cdef void *p
        if size < 0:
            raise ValueError(f"mapping size must be >= 0, got {size}")
        if capacity < size:
            capacity = size
        capacity = _round_up(capacity)
        self.addr = NULL
        self.capacity = 0
        self.size = 0
        if capacity > 0:
            with nogil:
                p = mmap(NULL, <size_t>capacity, PROT_READ, MAP_SHARED, fd, 0)
            if p == MAP_FAILED:
                raise OSError(errno, f"mmap of {capacity} bytes failed: "
                                     f"{strerror(errno).decode()}")
            self.addr = <uint8_t *>p
            self.capacity = capacity
        self.size = size

    def __dealloc__(self):
        if self.addr != NULL:
            munmap(self.addr, <size_t>self.capacity)
            self.addr = NULL

    def __getbuffer__(self, Py_buffer *buffer, int flags):
        PyBuffer_FillInfo(buffer, self, self.addr, self.size, 1, flags)
        self.exports += 1

    def __releasebuffer__(self, Py_buffer *buffer):
        self.exports -= 1

    def __len__(self):
        return self.size

    def set_size(self, Py_ssize_t size):
        """Grow the exported range after an append (the bytes must already be in the file)."""
        if self.retired:
            raise ValueError("a retired mapping cannot grow")
        if size < self.size or size > self.capacity:
            raise ValueError(f"mapping size {size} is outside [{self.size}, {self.capacity}]")
        self.size = size

    def view(self, Py_ssize_t start, Py_ssize_t end):
        """A zero-copy memoryview of bytes [start, end)."""
        if start < 0 or end < start or end > self.size:
            raise IndexError(f"view [{start}, {end}) is outside the mapped {self.size} bytes")
        return memoryview(self)[start:end]

    def advise_sequential(self):
        if self.addr != NULL:
            madvise(self.addr, <size_t>self.capacity, MADV_SEQUENTIAL)

    def retire(self, Py_ssize_t new_size):
        """Freeze this mapping before its file is truncated to ``new_size``: pages wholly past
        the new end become anonymous zero pages, so outstanding views stay readable."""
        cdef Py_ssize_t keep
        cdef void *p
        if new_size < 0:
            raise ValueError(f"new size must be >= 0, got {new_size}")
        keep = _round_up(new_size)
        if self.addr != NULL and keep < self.capacity:
            p = mmap(self.addr + keep, <size_t>(self.capacity - keep), PROT_READ,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0)
            if p == MAP_FAILED:
                raise OSError(errno, f"cannot replace mapped pages before truncation: "
                                     f"{strerror(errno).decode()}")
        if new_size < self.size:
            self.size = new_size
        self.retired = True

    def __repr__(self):
        return (f"MappedFile(size={self.size}, capacity={self.capacity}, "
                f"exports={self.exports}, retired={self.retired})")


def write_at(int fd, data, off_t offset):
    """Write all of ``data`` at ``offset`` (positional; the file offset is not moved),
    retrying partial writes and EINTR, with the GIL released. Returns the bytes written."""
    cdef Py_buffer view
    cdef const uint8_t *p
    cdef Py_ssize_t left, total
    cdef Py_ssize_t n
    cdef int err = 0
    if offset < 0:
        raise ValueError(f"write offset must be >= 0, got {offset}")
    PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
    try:
        p = <const uint8_t *>view.buf
        total = view.len
        left = total
        with nogil:
            while left > 0:
                n = pwrite(fd, p, <size_t>left, offset)
                if n < 0:
                    if errno == EINTR:
                        continue
                    err = errno
                    break
                p += n
                left -= n
                offset += n
        if err:
            raise OSError(err, f"write of {total} bytes at position {offset} failed: "
                               f"{strerror(err).decode()}")
        return total
    finally:
        PyBuffer_Release(&view)


def index_floor_position(index, Py_ssize_t entries, int64_t relative_offset):
    """Binary search of the first ``entries`` entries of an offset index (big-endian int32
    pairs) for the greatest entry whose relative offset is <= ``relative_offset``. Returns that
    entry's position, or 0 when every entry is greater (or the index is empty)."""
    cdef Py_buffer view
    cdef const uint8_t *p
    cdef Py_ssize_t lo = 0, hi, mid
    cdef int32_t found = 0
    PyObject_GetBuffer(index, &view, PyBUF_SIMPLE)
    try:
        if entries < 0 or entries * 8 > view.len:
            raise ValueError(f"{entries} index entries do not fit in {view.len} bytes")
        p = <const uint8_t *>view.buf
        hi = entries
        # invariant: entries [0, lo) are <= target, entries [hi, n) are > target
        while lo < hi:
            mid = (lo + hi) >> 1
            if load_i32(p + mid * 8) <= relative_offset:
                lo = mid + 1
            else:
                hi = mid
        if lo > 0:
            found = load_i32(p + (lo - 1) * 8 + 4)
        return found
    finally:
        PyBuffer_Release(&view)


def check_index(index, Py_ssize_t segment_size):
    """Validate an offset index read from disk: whole entries, relative offsets and positions
    strictly increasing, positions inside the segment. Returns None when sound, else a reason."""
    cdef Py_buffer view
    cdef const uint8_t *p
    cdef Py_ssize_t i, n
    cdef int32_t rel, pos, prev_rel = -1, prev_pos = -1
    PyObject_GetBuffer(index, &view, PyBUF_SIMPLE)
    try:
        if view.len % 8:
            return f"index size {view.len} is not a multiple of 8"
        p = <const uint8_t *>view.buf
        n = view.len // 8
        for i in range(n):
            rel = load_i32(p + i * 8)
            pos = load_i32(p + i * 8 + 4)
            if rel <= prev_rel or pos <= prev_pos or rel < 0 or pos < 0:
                return f"index entry {i} ({rel}, {pos}) is out of order"
            if pos >= segment_size:
                return f"index entry {i} points at position {pos}, past the segment's end"
            prev_rel = rel
            prev_pos = pos
        return None
    finally:
        PyBuffer_Release(&view)


def index_entries(positions, sizes, last_offsets, int64_t base_offset,
                  int64_t bytes_since_last_entry, int64_t interval_bytes):
    """The sparse index entries for newly appended batches, by Kafka's rule: a batch gets an
    entry (its last offset, its position) when more than ``interval_bytes`` were appended
    since the previous entry. Returns (entries as bytes, bytes since the last entry)."""
    cdef const int64_t[::1] pos = positions
    cdef const int64_t[::1] size = sizes
    cdef const int64_t[::1] last = last_offsets
    cdef Py_ssize_t i, n = pos.shape[0], k = 0
    cdef int64_t since = bytes_since_last_entry
    cdef int64_t rel
    if size.shape[0] != n or last.shape[0] != n:
        raise ValueError("positions, sizes and last_offsets differ in length")
    out = PyBytes_FromStringAndSize(NULL, n * 8)
    cdef uint8_t *o = <uint8_t *>PyBytes_AS_STRING(out)
    for i in range(n):
        if since > interval_bytes:
            rel = last[i] - base_offset
            if rel < 0 or rel > 0x7FFFFFFF or pos[i] > 0x7FFFFFFF:
                raise ValueError(f"batch at position {pos[i]} with last offset {last[i]} "
                                 f"does not fit the index of segment {base_offset}")
            store_u32(o + k * 8, <uint32_t>rel)
            store_u32(o + k * 8 + 4, <uint32_t>pos[i])
            k += 1
            since = 0
        since += size[i]
    return out[:k * 8], since
