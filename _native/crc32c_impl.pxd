# cython: language_level=3
from libc.stdint cimport uint32_t

cdef extern from "crc32c_impl.h" nogil:
    void rc_crc32c_init()
    uint32_t rc_crc32c(uint32_t value, const void *buf, size_t length)
    uint32_t rc_crc32c_software(uint32_t value, const void *buf, size_t length)
    uint32_t rc_crc32c_hardware(uint32_t value, const void *buf, size_t length)
    int rc_crc32c_hardware_available()
    const char *rc_crc32c_implementation()
