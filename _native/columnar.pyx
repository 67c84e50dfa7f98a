# cython: language_level=3
"""Columnar decode of record batches v2: a buffer of consecutive batches into flat numpy
arrays laid out as Arrow arrays, without a Python object per record.

``decode_columns`` makes two passes over the batches of ``buffer[start:end]``:

1. measure: check each batch header and CRC-32C, decompress a compressed batch (the codec's
   own path, :func:`raftcore._native.records.decompress_records`), and walk its records with
   every rule of the record reader (``RecordBatch.records()``): every length against the end
   of its record, offset deltas increasing within LastOffsetDelta, a record's Length equal to
   its fields, header keys UTF-8, exactly RecordsCount records and no byte after them. The
   pass counts records, headers and the bytes of keys, values and headers.
2. fill, without the GIL: the same walk writes the columns into arrays of exactly the measured
   sizes. The walk is one function for both passes, so the rules cannot drift apart; in the
   fill pass it also checks every write against the measured sizes, so a buffer changed by
   another thread between the passes gives an error, never a write out of bounds.

Control batches (attribute bit 5) are CRC-checked and then left out, unless
``include_control``. A truncated or malformed batch raises CorruptRecordError naming its byte
position, as ``iter_batches`` does (a partial batch at the end of the buffer included).
"""

cimport cython
from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE
from cpython.mem cimport PyMem_Free, PyMem_Realloc
from libc.stdint cimport INT32_MAX, int16_t, int32_t, int64_t, uint8_t, uint32_t
from libc.string cimport memcpy

from batch_header cimport (
    BH_OK,
    CODEC_MASK,
    CONTROL_FLAG,
    HEADER_SIZE,
    MIN_RECORD_SIZE,
    TIMESTAMP_TYPE_FLAG,
    BatchHeader,
    batch_crc,
    batch_header_problem,
    batch_header_rules,
    load_batch_header_details,
    parse_batch_header,
)
from crc32c_impl cimport rc_crc32c_init
from wire cimport read_varint, read_varlong

import numpy as np

from raftcore._native.records import decompress_records
from raftcore.errors import CorruptRecordError

rc_crc32c_init()

# The most bytes one Arrow binary (int32 offsets) array can hold.
MAX_ARRAY_BYTES = INT32_MAX


cdef object _corrupt(str message, Py_ssize_t position):
    return CorruptRecordError(f"{message} (at byte position {position})", position)


# ---- the walk (both passes) ------------------------------------------------------------------

cdef struct Sizes:
    int64_t records
    int64_t key_bytes
    int64_t value_bytes
    int64_t headers
    int64_t hkey_bytes
    int64_t hvalue_bytes


cdef struct Out:
    # Capacities: the sizes measured by the first pass.
    Sizes cap
    # Cursors: what has been written.
    Sizes at
    int64_t key_nulls
    int64_t value_nulls
    int64_t hvalue_nulls
    int64_t *offset
    int32_t *leader_epoch
    int64_t *timestamp
    int64_t *batch_base_offset
    int32_t *key_offsets
    uint8_t *key_data
    uint8_t *key_valid
    int32_t *value_offsets
    uint8_t *value_data
    uint8_t *value_valid
    int32_t *header_offsets
    int32_t *hkey_offsets
    uint8_t *hkey_data
    int32_t *hvalue_offsets
    uint8_t *hvalue_data
    uint8_t *hvalue_valid


cdef struct Batch:
    const uint8_t *start       # first record (inside the decompressed payload if compressed)
    const uint8_t *end
    int64_t base_offset
    int64_t max_timestamp
    int64_t base_timestamp
    int32_t leader_epoch
    int32_t count
    int32_t last_delta
    bint log_append_time


cdef bint _utf8_ok(const uint8_t *s, Py_ssize_t n) noexcept nogil:
    """Strict UTF-8, as Python's decoder: no overlong forms, no surrogates, nothing above
    U+10FFFF."""
    cdef Py_ssize_t i = 0
    cdef uint8_t c, c1
    while i < n:
        c = s[i]
        if c < 0x80:
            i += 1
        elif c < 0xC2:
            return False
        elif c < 0xE0:
            if n - i < 2 or (s[i + 1] & 0xC0) != 0x80:
                return False
            i += 2
        elif c < 0xF0:
            if n - i < 3:
                return False
            c1 = s[i + 1]
            if (c1 & 0xC0) != 0x80 or (s[i + 2] & 0xC0) != 0x80:
                return False
            if (c == 0xE0 and c1 < 0xA0) or (c == 0xED and c1 >= 0xA0):
                return False
            i += 3
        elif c < 0xF5:
            if n - i < 4:
                return False
            c1 = s[i + 1]
            if ((c1 & 0xC0) != 0x80 or (s[i + 2] & 0xC0) != 0x80
                    or (s[i + 3] & 0xC0) != 0x80):
                return False
            if (c == 0xF0 and c1 < 0x90) or (c == 0xF4 and c1 >= 0x90):
                return False
            i += 4
        else:
            return False
    return True


cdef inline void _set_valid(uint8_t *bitmap, int64_t i) noexcept nogil:
    bitmap[i >> 3] |= <uint8_t>(1 << (i & 7))


cdef const char *_walk(const Batch *b, Sizes *sizes, Out *o,
                       const uint8_t **fault_at) noexcept nogil:
    """Walk the records of one batch. With ``o`` NULL, add what they hold to ``sizes``; else
    write them to ``o``. Returns NULL, or what is wrong (and where, in ``fault_at``)."""
    cdef const uint8_t *p = b.start
    cdef const uint8_t *end = b.end
    cdef const uint8_t *q
    cdef const uint8_t *rec_start
    cdef const uint8_t *rec_end
    cdef int32_t length, offset_delta, klen, vlen, hcount, hklen, hvlen, i, h
    cdef int32_t prev_delta = -1
    cdef int64_t ts_delta, row = 0
    cdef bint fill = o != NULL
    for i in range(b.count):
        rec_start = p
        fault_at[0] = p
        q = read_varint(p, end, &length)
        if q == NULL:
            return "truncated record length"
        if length < MIN_RECORD_SIZE - 1 or length > end - q:
            return "record length does not fit in the batch"
        p = q
        rec_end = p + length
        p += 1  # attributes (unused)
        p = read_varlong(p, rec_end, &ts_delta)
        if p == NULL:
            return "bad record timestamp delta"
        fault_at[0] = p
        q = read_varint(p, rec_end, &offset_delta)
        if q == NULL:
            return "bad record offset delta"
        if offset_delta <= prev_delta or offset_delta > b.last_delta:
            return "record offset delta is out of order"
        p = q
        fault_at[0] = p
        q = read_varint(p, rec_end, &klen)
        if q == NULL or klen < -1 or klen > rec_end - q:
            return "record key length does not fit in the record"
        p = q
        if fill:
            row = o.at.records
            if row >= o.cap.records or (klen > 0 and klen > o.cap.key_bytes - o.at.key_bytes):
                return "buffer changed while it was decoded"
            o.offset[row] = b.base_offset + offset_delta
            o.leader_epoch[row] = b.leader_epoch
            o.timestamp[row] = b.max_timestamp if b.log_append_time else b.base_timestamp + ts_delta
            o.batch_base_offset[row] = b.base_offset
            if klen >= 0:
                memcpy(o.key_data + o.at.key_bytes, p, klen)
                o.at.key_bytes += klen
                _set_valid(o.key_valid, row)
            else:
                o.key_nulls += 1
            o.key_offsets[row + 1] = <int32_t>o.at.key_bytes
        elif klen > 0:
            sizes.key_bytes += klen
        if klen > 0:
            p += klen
        fault_at[0] = p
        q = read_varint(p, rec_end, &vlen)
        if q == NULL or vlen < -1 or vlen > rec_end - q:
            return "record value length does not fit in the record"
        p = q
        if fill:
            if vlen > 0 and vlen > o.cap.value_bytes - o.at.value_bytes:
                return "buffer changed while it was decoded"
            if vlen >= 0:
                memcpy(o.value_data + o.at.value_bytes, p, vlen)
                o.at.value_bytes += vlen
                _set_valid(o.value_valid, row)
            else:
                o.value_nulls += 1
            o.value_offsets[row + 1] = <int32_t>o.at.value_bytes
        elif vlen > 0:
            sizes.value_bytes += vlen
        if vlen > 0:
            p += vlen
        fault_at[0] = p
        q = read_varint(p, rec_end, &hcount)
        if q == NULL or hcount < 0 or hcount > rec_end - q:
            return "bad record header count"
        p = q
        for h in range(hcount):
            fault_at[0] = p
            q = read_varint(p, rec_end, &hklen)
            if q == NULL or hklen < 0 or hklen > rec_end - q:
                return "record header key length does not fit in the record"
            p = q
            if fill:
                if (o.at.headers >= o.cap.headers
                        or hklen > o.cap.hkey_bytes - o.at.hkey_bytes):
                    return "buffer changed while it was decoded"
                memcpy(o.hkey_data + o.at.hkey_bytes, p, hklen)
                o.at.hkey_bytes += hklen
                o.hkey_offsets[o.at.headers + 1] = <int32_t>o.at.hkey_bytes
            else:
                fault_at[0] = p
                if not _utf8_ok(p, hklen):
                    return "record header key is not UTF-8"
                sizes.hkey_bytes += hklen
                sizes.headers += 1
            p += hklen
            fault_at[0] = p
            q = read_varint(p, rec_end, &hvlen)
            if q == NULL or hvlen < -1 or hvlen > rec_end - q:
                return "record header value length does not fit in the record"
            p = q
            if fill:
                if hvlen > 0 and hvlen > o.cap.hvalue_bytes - o.at.hvalue_bytes:
                    return "buffer changed while it was decoded"
                if hvlen >= 0:
                    memcpy(o.hvalue_data + o.at.hvalue_bytes, p, hvlen)
                    o.at.hvalue_bytes += hvlen
                    _set_valid(o.hvalue_valid, o.at.headers)
                else:
                    o.hvalue_nulls += 1
                o.hvalue_offsets[o.at.headers + 1] = <int32_t>o.at.hvalue_bytes
                o.at.headers += 1
            elif hvlen > 0:
                sizes.hvalue_bytes += hvlen
            if hvlen > 0:
                p += hvlen
        if p != rec_end:
            fault_at[0] = rec_start
            return "record length disagrees with its fields"
        if fill:
            o.header_offsets[row + 1] = <int32_t>o.at.headers
            o.at.records += 1
        else:
            sizes.records += 1
        prev_delta = offset_delta
    if p != end:
        fault_at[0] = p
        return "bytes follow the last record"
    return NULL


# ---- the batch headers -----------------------------------------------------------------------

cdef inline int _check_header(const uint8_t *p, Py_ssize_t avail, Py_ssize_t position,
                              BatchHeader *h) except -1:
    """The checks of ``iter_batches`` on a batch header (batch_header.pxd, the same words)."""
    cdef int problem = parse_batch_header(p, avail, h)
    if problem == BH_OK:
        problem = batch_header_rules(h)
    if problem != BH_OK:
        raise _corrupt(batch_header_problem(problem, h, avail), position)
    return 0


cdef inline bint _over(const Sizes *s, int64_t max_bytes) noexcept:
    return (s.key_bytes > max_bytes or s.value_bytes > max_bytes or s.hkey_bytes > max_bytes
            or s.hvalue_bytes > max_bytes or s.headers > max_bytes or s.records > max_bytes)


# ---- the result ------------------------------------------------------------------------------

@cython.final
cdef class Columns:
    """The columns ``decode_columns`` filled, as numpy arrays in Arrow's layouts.

    Per record: ``offset`` (int64), ``leader_epoch`` (int32, the batch's partition leader
    epoch), ``timestamp`` (int64 ms: base timestamp + delta, or the batch's max timestamp for
    LogAppendTime), ``batch_base_offset`` (int64). Keys and values as Arrow binary:
    ``key_offsets`` (int32, records + 1), ``key_data`` (uint8), ``key_validity`` (uint8 bitmap,
    LSB first; ``key_nulls`` null keys), likewise ``value_*``. Headers as Arrow
    list<struct<key: string, value: binary>>: ``header_offsets`` (int32, records + 1) into the
    header arrays ``header_key_offsets``/``header_key_data`` and ``header_value_offsets``/
    ``header_value_data``/``header_value_validity`` (``header_value_nulls`` nulls).

    ``end`` is where decoding stopped (the end of the range, unless a limit stopped it at a
    batch boundary); ``batches`` counts the batches read, left-out control batches included.
    """
    cdef readonly Py_ssize_t num_records
    cdef readonly Py_ssize_t num_headers
    cdef readonly Py_ssize_t batches
    cdef readonly Py_ssize_t end
    cdef readonly Py_ssize_t key_nulls
    cdef readonly Py_ssize_t value_nulls
    cdef readonly Py_ssize_t header_value_nulls
    cdef readonly object offset
    cdef readonly object leader_epoch
    cdef readonly object timestamp
    cdef readonly object batch_base_offset
    cdef readonly object key_offsets
    cdef readonly object key_data
    cdef readonly object key_validity
    cdef readonly object value_offsets
    cdef readonly object value_data
    cdef readonly object value_validity
    cdef readonly object header_offsets
    cdef readonly object header_key_offsets
    cdef readonly object header_key_data
    cdef readonly object header_value_offsets
    cdef readonly object header_value_data
    cdef readonly object header_value_validity

    def __repr__(self):
        return (f"Columns(records={self.num_records}, headers={self.num_headers}, "
                f"batches={self.batches}, end={self.end})")


cdef object _bitmap(int64_t n):
    return np.zeros((n + 7) >> 3, dtype=np.uint8)


cdef object _offsets(int64_t n):
    a = np.empty(n + 1, dtype=np.int32)
    a[0] = 0
    return a


cdef void _add(const Sizes *one, Sizes *total) noexcept:
    total.records += one.records
    total.key_bytes += one.key_bytes
    total.value_bytes += one.value_bytes
    total.headers += one.headers
    total.hkey_bytes += one.hkey_bytes
    total.hvalue_bytes += one.hvalue_bytes


cdef void _sub(const Sizes *one, Sizes *total) noexcept:
    total.records -= one.records
    total.key_bytes -= one.key_bytes
    total.value_bytes -= one.value_bytes
    total.headers -= one.headers
    total.hkey_bytes -= one.hkey_bytes
    total.hvalue_bytes -= one.hvalue_bytes


cdef void *_grow(void *old, Py_ssize_t n) except NULL:
    cdef void *p = PyMem_Realloc(old, n * sizeof(Batch))
    if p == NULL:
        raise MemoryError()
    return p


cdef int _raise_fault(const char *fault, const uint8_t *at, const Batch *b, object payload,
                      const uint8_t *data, Py_ssize_t base_position,
                      Py_ssize_t pos) except -1:
    what = fault.decode("ascii")
    if payload is None:
        raise _corrupt(f"record batch at offset {b.base_offset}: {what}",
                       base_position + (at - data))
    raise _corrupt(f"record batch at offset {b.base_offset}: {what} (byte {at - b.start} of "
                   f"the decompressed records)", base_position + pos)


cdef Columns _allocate(const Sizes *s, Out *o):
    """Arrays of exactly the measured sizes, and ``o`` pointing into them."""
    cdef Columns c = Columns.__new__(Columns)
    c.num_records = s.records
    c.num_headers = s.headers
    c.offset = np.empty(s.records, dtype=np.int64)
    c.leader_epoch = np.empty(s.records, dtype=np.int32)
    c.timestamp = np.empty(s.records, dtype=np.int64)
    c.batch_base_offset = np.empty(s.records, dtype=np.int64)
    c.key_offsets = _offsets(s.records)
    c.key_data = np.empty(s.key_bytes, dtype=np.uint8)
    c.key_validity = _bitmap(s.records)
    c.value_offsets = _offsets(s.records)
    c.value_data = np.empty(s.value_bytes, dtype=np.uint8)
    c.value_validity = _bitmap(s.records)
    c.header_offsets = _offsets(s.records)
    c.header_key_offsets = _offsets(s.headers)
    c.header_key_data = np.empty(s.hkey_bytes, dtype=np.uint8)
    c.header_value_offsets = _offsets(s.headers)
    c.header_value_data = np.empty(s.hvalue_bytes, dtype=np.uint8)
    c.header_value_validity = _bitmap(s.headers)
    o.cap = s[0]
    o.at = Sizes(0, 0, 0, 0, 0, 0)
    o.key_nulls = o.value_nulls = o.hvalue_nulls = 0
    o.offset = _i64(c.offset)
    o.leader_epoch = _i32(c.leader_epoch)
    o.timestamp = _i64(c.timestamp)
    o.batch_base_offset = _i64(c.batch_base_offset)
    o.key_offsets = _i32(c.key_offsets)
    o.key_data = _u8(c.key_data)
    o.key_valid = _u8(c.key_validity)
    o.value_offsets = _i32(c.value_offsets)
    o.value_data = _u8(c.value_data)
    o.value_valid = _u8(c.value_validity)
    o.header_offsets = _i32(c.header_offsets)
    o.hkey_offsets = _i32(c.header_key_offsets)
    o.hkey_data = _u8(c.header_key_data)
    o.hvalue_offsets = _i32(c.header_value_offsets)
    o.hvalue_data = _u8(c.header_value_data)
    o.hvalue_valid = _u8(c.header_value_validity)
    return c


cdef inline uint8_t *_u8(object a) except? NULL:
    cdef uint8_t[::1] v = a
    return &v[0] if v.shape[0] > 0 else NULL


cdef inline int32_t *_i32(object a) except? NULL:
    cdef int32_t[::1] v = a
    return &v[0] if v.shape[0] > 0 else NULL


cdef inline int64_t *_i64(object a) except? NULL:
    cdef int64_t[::1] v = a
    return &v[0] if v.shape[0] > 0 else NULL


def decode_columns(buffer, Py_ssize_t start=0, Py_ssize_t end=-1, *,
                   bint include_control=False, bint check_crc=True,
                   Py_ssize_t max_records=-1, int64_t max_bytes=MAX_ARRAY_BYTES,
                   Py_ssize_t base_position=0):
    """Decode the record batches of ``buffer[start:end]`` into :class:`Columns`.

    ``max_records`` (if >= 0) stops before the batch that would pass that many records, but
    after at least one batch. ``max_bytes`` (at most 2**31 - 1, the int32 offsets of Arrow
    binary) bounds the keys, values, header keys and header values: decoding stops before the
    batch that would pass it, and a single batch above it is a ValueError. ``base_position``
    is added to the byte positions in errors (for buffers cut from a file).
    """
    cdef Py_buffer view
    if isinstance(buffer, str):
        raise TypeError("record batches are read from a bytes-like object, not str")
    if max_bytes < 0 or max_bytes > MAX_ARRAY_BYTES:
        raise ValueError(f"max_bytes must be 0..{MAX_ARRAY_BYTES}, got {max_bytes}")
    PyObject_GetBuffer(buffer, &view, PyBUF_SIMPLE)
    try:
        if end < 0 or end > view.len:
            end = view.len
        if start < 0 or start > end:
            raise ValueError(f"decode start {start} is outside the buffer (0..{end})")
        return _decode(buffer, <const uint8_t *>view.buf, start, end, include_control, check_crc,
                       max_records, max_bytes, base_position)
    finally:
        PyBuffer_Release(&view)


cdef Columns _decode(object owner, const uint8_t *data, Py_ssize_t start, Py_ssize_t end,
                     bint include_control, bint check_crc, Py_ssize_t max_records,
                     int64_t max_bytes, Py_ssize_t base_position):
    cdef Sizes total, one
    cdef Out o
    cdef Batch *kept = NULL
    cdef Py_ssize_t nkept = 0, capacity = 0, pos = start, size, nbatches = 0, i
    cdef Batch b
    cdef BatchHeader h
    cdef const uint8_t *p
    cdef const uint8_t *fault_at = NULL
    cdef const char *fault = NULL
    cdef int codec
    cdef uint32_t crc
    cdef list payloads = []      # decompressed records, alive until the fill is done
    cdef Columns c
    total = Sizes(0, 0, 0, 0, 0, 0)
    try:
        # Pass 1: headers, CRCs, decompression, and the full record walk (measuring).
        while pos < end:
            p = data + pos
            _check_header(p, end - pos, base_position + pos, &h)
            size = h.size
            b.base_offset = h.base_offset
            if check_crc:
                crc = batch_crc(p, size)
                if crc != h.crc:
                    raise _corrupt(f"record batch at offset {b.base_offset} has CRC "
                                   f"{h.crc:#010x} but its bytes give {crc:#010x}",
                                   base_position + pos)
            if (h.attributes & CONTROL_FLAG) and not include_control:
                pos += size
                nbatches += 1
                continue
            if max_records >= 0 and nkept > 0 and total.records + h.record_count > max_records:
                break
            codec = h.attributes & CODEC_MASK
            payload = None
            if codec == 0:
                b.start = p + HEADER_SIZE
                b.end = p + size
            else:
                payload = decompress_records(
                    codec, memoryview(owner)[pos + HEADER_SIZE:pos + size], base_position + pos)
                b.start = <const uint8_t *>PyBytes_AS_STRING(payload)
                b.end = b.start + PyBytes_GET_SIZE(payload)
            load_batch_header_details(p, &h)
            b.leader_epoch = h.partition_leader_epoch
            b.count = h.record_count
            b.last_delta = h.last_offset_delta
            b.base_timestamp = h.base_timestamp
            b.max_timestamp = h.max_timestamp
            b.log_append_time = (h.attributes & TIMESTAMP_TYPE_FLAG) != 0
            one = Sizes(0, 0, 0, 0, 0, 0)
            fault = _walk(&b, &one, NULL, &fault_at)
            if fault != NULL:
                _raise_fault(fault, fault_at, &b, payload, data, base_position, pos)
            if _over(&one, max_bytes):
                raise ValueError(
                    f"record batch at offset {b.base_offset} (byte position "
                    f"{base_position + pos}) holds more than {max_bytes} bytes of keys, "
                    f"values or headers: more than one Arrow binary array can hold")
            _add(&one, &total)
            if _over(&total, max_bytes):
                _sub(&one, &total)
                break
            if payload is not None:
                payloads.append(payload)
            if nkept == capacity:
                capacity = 16 if capacity == 0 else capacity * 2
                kept = <Batch *>_grow(kept, capacity)
            kept[nkept] = b
            nkept += 1
            nbatches += 1
            pos += size
        c = _allocate(&total, &o)
        c.batches = nbatches
        c.end = pos
        # Pass 2: fill.
        with nogil:
            for i in range(nkept):
                fault = _walk(&kept[i], NULL, &o, &fault_at)
                if fault != NULL:
                    break
        if fault != NULL or o.at.records != total.records or o.at.headers != total.headers:
            raise RuntimeError("the buffer changed while its record batches were decoded")
        c.key_nulls = o.key_nulls
        c.value_nulls = o.value_nulls
        c.header_value_nulls = o.hvalue_nulls
        return c
    finally:
        PyMem_Free(kept)
