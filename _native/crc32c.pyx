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
