# cython: language_level=3
"""CRC-32C over any contiguous buffer, with the hardware instruction when the CPU has one."""

from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from libc.stdint cimport uint32_t

from crc32c_impl cimport (
    rc_crc32c,
    rc_crc32c_hardware,
    rc_crc32c_hardware_available,
    rc_crc32c_implementation,
    rc_crc32c_init,
    rc_crc32c_software,
)

rc_crc32c_init()

# Below this size, releasing and re-taking the GIL costs more than the checksum.
cdef enum:
    NOGIL_THRESHOLD = 65536

ctypedef uint32_t (*crc_fn)(uint32_t, const void *, size_t) noexcept nogil


cdef uint32_t _run(crc_fn fn, object data, object value) except? 0xFFFFFFFF:
    cdef Py_buffer view
    cdef uint32_t v
    cdef uint32_t result
    if not 0 <= value <= 0xFFFFFFFF:
        raise ValueError(f"crc32c value must be an unsigned 32-bit integer, got {value!r}")
    v = <uint32_t>value
    if isinstance(data, str):
        raise TypeError("crc32c takes a bytes-like object, not str")
    PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
    try:
        if view.len >= NOGIL_THRESHOLD:
            with nogil:
                result = fn(v, view.buf, <size_t>view.len)
        else:
            result = fn(v, view.buf, <size_t>view.len)
    finally:
        PyBuffer_Release(&view)
    return result


def crc32c(data, value=0):
    """CRC-32C (Castagnoli) of ``data``, continuing from ``value`` (a previous result).

    ``data`` is any contiguous buffer: bytes, bytearray, memoryview, mmap, numpy array.
    ``crc32c(b, crc32c(a)) == crc32c(a + b)``.
    """
    return _run(rc_crc32c, data, value)


def crc32c_software(data, value=0):
    """The table-driven software CRC-32C, whatever the CPU (for tests and comparisons)."""
    return _run(rc_crc32c_software, data, value)


def crc32c_hardware(data, value=0):
    """The hardware CRC-32C; raises RuntimeError when this CPU has no CRC32C instruction."""
    if not rc_crc32c_hardware_available():
        raise RuntimeError("this CPU has no CRC32C instruction")
    return _run(rc_crc32c_hardware, data, value)


def implementation():
    """The implementation in use: "sse4.2", "armv8-crc" or "software"."""
    return rc_crc32c_implementation().decode()


def hardware_available():
    """True when this CPU has a CRC32C instruction that raftcore can use."""
    return bool(rc_crc32c_hardware_available())


# ---- sealed values: the LMDB state machine's checksummed value encoding -------------------
#
# A sealed value is CRC-32C(key || value), 4 bytes big-endian, followed by the value. The
# functions below take and give whole lists, so a batch costs one call, not one per record.

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from libc.string cimport memcpy

DEF SEAL_BYTES = 4


cdef inline uint32_t _pair_crc(const char *key, Py_ssize_t key_len, const char *value,
                               Py_ssize_t value_len) noexcept:
    return rc_crc32c(rc_crc32c(0, key, <size_t>key_len), value, <size_t>value_len)


cdef bytes _seal(bytes key, bytes value):
    cdef Py_ssize_t n = PyBytes_GET_SIZE(value)
    cdef bytes out = PyBytes_FromStringAndSize(NULL, n + SEAL_BYTES)
    cdef unsigned char *p = <unsigned char *>PyBytes_AS_STRING(out)
    cdef uint32_t crc = _pair_crc(PyBytes_AS_STRING(key), PyBytes_GET_SIZE(key),
                                  PyBytes_AS_STRING(value), n)
    p[0] = (crc >> 24) & 0xFF
    p[1] = (crc >> 16) & 0xFF
    p[2] = (crc >> 8) & 0xFF
    p[3] = crc & 0xFF
    memcpy(p + SEAL_BYTES, PyBytes_AS_STRING(value), <size_t>n)
    return out


cdef inline bint _intact(bytes key, bytes stored) noexcept:
    cdef Py_ssize_t n = PyBytes_GET_SIZE(stored)
    cdef const unsigned char *p
    cdef uint32_t crc
    if n < SEAL_BYTES:
        return False
    p = <const unsigned char *>PyBytes_AS_STRING(stored)
    crc = (<uint32_t>p[0] << 24) | (<uint32_t>p[1] << 16) | (<uint32_t>p[2] << 8) | p[3]
    return crc == _pair_crc(PyBytes_AS_STRING(key), PyBytes_GET_SIZE(key),
                            <const char *>p + SEAL_BYTES, n - SEAL_BYTES)


def seal_value(bytes key not None, bytes value not None):
    """``value`` sealed under ``key``: CRC-32C(key || value) (4 bytes, big-endian), then
    ``value``."""
    return _seal(key, value)


def seal_pairs(list pairs not None):
    """``[(key, value or None)]`` with every value sealed under its key (None stays None: a
    delete)."""
    cdef list out = []
    cdef object key, value
    for key, value in pairs:
        if value is None:
            out.append((key, None))
        else:
            out.append((key, _seal(<bytes?>key, <bytes?>value)))
    return out


def open_value(bytes key not None, bytes stored not None):
    """The value ``stored`` holds, or None when its checksum does not match ``key`` and the
    value (a damaged value)."""
    if not _intact(key, stored):
        return None
    return stored[SEAL_BYTES:]


def open_pairs(list pairs not None):
    """``([(key, value)], damaged)``: the values of the sealed ``pairs`` up to the first
    damaged one, and that one's index (-1 when every value is intact)."""
    cdef list out = []
    cdef Py_ssize_t i = 0
    cdef object key, stored
    for key, stored in pairs:
        if not _intact(<bytes?>key, <bytes?>stored):
            return out, i
        out.append((key, (<bytes>stored)[SEAL_BYTES:]))
        i += 1
    return out, -1
