# cython: language_level=3
"""Byte-level helpers shared by the native modules: big-endian loads and stores, and the
zig-zag varints of Kafka's record format. Every reader takes the end of the readable range and
reports truncation instead of reading past it."""

from libc.stdint cimport int16_t, int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t


cdef inline uint16_t load_u16(const uint8_t *p) noexcept nogil:
    return <uint16_t>((<uint16_t>p[0] << 8) | p[1])

cdef inline uint32_t load_u32(const uint8_t *p) noexcept nogil:
    return ((<uint32_t>p[0] << 24) | (<uint32_t>p[1] << 16) |
            (<uint32_t>p[2] << 8) | <uint32_t>p[3])

cdef inline uint64_t load_u64(const uint8_t *p) noexcept nogil:
    return (<uint64_t>load_u32(p) << 32) | load_u32(p + 4)

cdef inline int16_t load_i16(const uint8_t *p) noexcept nogil:
    return <int16_t>load_u16(p)

cdef inline int32_t load_i32(const uint8_t *p) noexcept nogil:
    return <int32_t>load_u32(p)

cdef inline int64_t load_i64(const uint8_t *p) noexcept nogil:
    return <int64_t>load_u64(p)

cdef inline void store_u16(uint8_t *p, uint16_t v) noexcept nogil:
    p[0] = <uint8_t>(v >> 8)
    p[1] = <uint8_t>v

cdef inline void store_u32(uint8_t *p, uint32_t v) noexcept nogil:
    p[0] = <uint8_t>(v >> 24)
    p[1] = <uint8_t>(v >> 16)
    p[2] = <uint8_t>(v >> 8)
    p[3] = <uint8_t>v

cdef inline void store_u64(uint8_t *p, uint64_t v) noexcept nogil:
    store_u32(p, <uint32_t>(v >> 32))
    store_u32(p + 4, <uint32_t>v)


# ---- zig-zag varints (protobuf style, as Kafka's ByteUtils.writeVarint/writeVarlong) ----------

cdef inline int varint_size(int32_t value) noexcept nogil:
    cdef uint32_t v = (<uint32_t>value << 1) ^ <uint32_t>(value >> 31)
    cdef int n = 1
    while v >= 0x80:
        v >>= 7
        n += 1
    return n

cdef inline int varlong_size(int64_t value) noexcept nogil:
    cdef uint64_t v = (<uint64_t>value << 1) ^ <uint64_t>(value >> 63)
    cdef int n = 1
    while v >= 0x80:
        v >>= 7
        n += 1
    return n

cdef inline uint8_t *write_varint(uint8_t *p, int32_t value) noexcept nogil:
    cdef uint32_t v = (<uint32_t>value << 1) ^ <uint32_t>(value >> 31)
    while v >= 0x80:
        p[0] = <uint8_t>(v | 0x80)
        p += 1
        v >>= 7
    p[0] = <uint8_t>v
    return p + 1

cdef inline uint8_t *write_varlong(uint8_t *p, int64_t value) noexcept nogil:
    cdef uint64_t v = (<uint64_t>value << 1) ^ <uint64_t>(value >> 63)
    while v >= 0x80:
        p[0] = <uint8_t>(v | 0x80)
        p += 1
        v >>= 7
    p[0] = <uint8_t>v
    return p + 1

# Readers return the position after the varint, or NULL when the varint runs past `end` or is
# longer than its type allows (5 bytes for 32 bits, 10 for 64).

cdef inline const uint8_t *read_varint(const uint8_t *p, const uint8_t *end,
                                       int32_t *out) noexcept nogil:
    cdef uint32_t raw = 0
    cdef int shift = 0
    cdef uint8_t b
    while p < end:
        b = p[0]
        p += 1
        raw |= <uint32_t>(b & 0x7F) << shift
        if b < 0x80:
            if shift == 28 and b > 0x0F:
                return NULL
            out[0] = <int32_t>((raw >> 1) ^ (0 - (raw & 1)))
            return p
        shift += 7
        if shift > 28:
            return NULL
    return NULL

cdef inline const uint8_t *read_varlong(const uint8_t *p, const uint8_t *end,
                                        int64_t *out) noexcept nogil:
    cdef uint64_t raw = 0
    cdef int shift = 0
    cdef uint8_t b
    while p < end:
        b = p[0]
        p += 1
        raw |= <uint64_t>(b & 0x7F) << shift
        if b < 0x80:
            if shift == 63 and b > 0x01:
                return NULL
            out[0] = <int64_t>((raw >> 1) ^ (0 - (raw & 1)))
            return p
        shift += 7
        if shift > 63:
            return NULL
    return NULL
