# cython: language_level=3
"""Validation of record batches v2 by walking their bytes: every record of every batch is
checked without creating a Python object per record (Kafka's LogValidator, with the checks of
DefaultRecord.readFrom and DefaultRecordBatch's iterator).

``validate_batches`` answers None, or a fault: (kind, batch index, record index, reason). The
kind says who is to blame, and the Python face (raftcore.produce_validation) turns it into
Kafka's error code:

- FAULT_CORRUPT: the framing or the CRC is wrong, so the bytes are not what the client wrote
  (damage on the way can do that, and a retry can cure it). Kafka: CorruptRecordException.
- FAULT_INVALID: the CRC is right but the client wrote something malformed or not allowed; a
  retry sends the same bytes. Kafka: InvalidRecordException.
- FAULT_TOO_LARGE: a batch above the size limit. Kafka: RecordTooLargeException.
- FAULT_UNSUPPORTED_CODEC: not reported since raftcore reads every Kafka codec (kept for
  callers that map it).

With ``client`` set (a produce request) the rules for clients apply as well: a non-empty
request, magic 2 only, no control or transactional batches, a positive record count with
lastOffsetDelta = count - 1, offset deltas exactly 0..count-1 in order, a base sequence for
an idempotent batch. Without it (batches a leader replicates, control batches included) the
check is structural: every record decodes, offset deltas increase within 0..lastOffsetDelta,
and the record count is the number of records present. Either way a batch that passes can be
read whole by ``raftcore.records``.

Every length read from the buffer is checked against the end of the batch or record before
it is used: a corrupt byte is a fault, never a read out of bounds.
"""

cimport cython
from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE
from libc.stdint cimport int8_t, int32_t, int64_t, uint8_t, uint32_t

from batch_header cimport (
    BH_BAD_MAGIC,
    BH_NEGATIVE_LENGTH,
    BH_OK,
    BH_SHORT_LENGTH,
    BH_TRUNCATED_BATCH,
    BH_TRUNCATED_HEADER,
    CODEC_MASK,
    CONTROL_FLAG,
    HEADER_SIZE,
    LOG_OVERHEAD,
    TRANSACTIONAL_FLAG,
    BatchHeader,
    batch_crc,
    load_batch_header_details,
    parse_batch_header,
)
from crc32c_impl cimport rc_crc32c_init
from wire cimport read_varint, read_varlong

from raftcore._native.records import decompress_records

from raftcore.errors import CorruptRecordError

rc_crc32c_init()

cdef enum:
    # Batches at least this large are checked without the GIL.
    NOGIL_BYTES = 65536

cdef enum Kind:
    K_CORRUPT = 1
    K_INVALID = 2
    K_TOO_LARGE = 3
    K_UNSUPPORTED_CODEC = 4

FAULT_CORRUPT = K_CORRUPT
FAULT_INVALID = K_INVALID
FAULT_TOO_LARGE = K_TOO_LARGE
FAULT_UNSUPPORTED_CODEC = K_UNSUPPORTED_CODEC

# What went wrong; _describe turns (what, a, b) into words.
cdef enum What:
    W_NO_BATCHES
    W_TRUNCATED_HEADER        # a: bytes left
    W_TRUNCATED_BATCH         # a: batch size by its length field, b: bytes left
    W_OLD_MAGIC               # a: magic
    W_BAD_MAGIC               # a: magic
    W_SHORT_LENGTH            # a: length field
    W_TOO_LARGE               # a: size, b: limit
    W_CRC                     # a: stored, b: computed
    W_NEGATIVE_BASE_OFFSET    # a: base offset
    W_UNKNOWN_CODEC           # a: codec id
    W_UNSUPPORTED_CODEC       # a: codec id
    W_CONTROL
    W_TRANSACTIONAL
    W_BAD_COUNT               # a: count, b: last offset delta
    W_COUNT_VS_DELTA          # a: count, b: last offset delta
    W_NO_SEQUENCE             # a: base sequence, b: producer id
    W_UNDECOMPRESSABLE        # message in the fault's text
    W_MISSING_RECORDS         # a: count, b: records present
    W_TRAILING_BYTES          # a: bytes left over, b: count
    W_LENGTH_VARINT
    W_LENGTH_PAST_END         # a: record length, b: bytes left
    W_FIELD_VARINT            # a: field
    W_FIELD_PAST_END          # a: field, b: its length
    W_BAD_NULL_LENGTH         # a: field, b: its length
    W_DELTA_NOT_SEQUENTIAL    # a: offset delta, b: expected
    W_DELTA_OUT_OF_ORDER      # a: offset delta, b: previous
    W_DELTA_PAST_LAST         # a: offset delta, b: last offset delta
    W_NEGATIVE_HEADER_COUNT   # a: count
    W_HEADER_COUNT_PAST_END   # a: count, b: bytes left
    W_NULL_HEADER_KEY         # a: header index
    W_HEADER_KEY_NOT_UTF8     # a: header index
    W_LENGTH_MISMATCH         # a: record length, b: bytes its fields take

cdef enum Field:
    F_ATTRIBUTES
    F_TIMESTAMP_DELTA
    F_OFFSET_DELTA
    F_KEY_LENGTH
    F_KEY
    F_VALUE_LENGTH
    F_VALUE
    F_HEADER_COUNT
    F_HEADER_KEY_LENGTH
    F_HEADER_KEY
    F_HEADER_VALUE_LENGTH
    F_HEADER_VALUE

cdef tuple FIELD_NAMES = (
    "attributes", "timestamp delta", "offset delta", "key length", "key", "value length",
    "value", "header count", "header key length", "header key", "header value length",
    "header value",
)

cdef struct Fault:
    int kind
    What what
    Py_ssize_t record     # index of the record in its batch; -1: the batch itself
    Py_ssize_t position   # of the problem: in the request, or in the decompressed records
    int64_t a
    int64_t b
    int header            # index of the record header involved, or -1


cdef inline int _fault(Fault *f, int kind, What what, int64_t a, int64_t b) noexcept nogil:
    f.kind = kind
    f.what = what
    f.a = a
    f.b = b
    return -1


cdef bint _utf8_valid(const uint8_t *s, Py_ssize_t n) noexcept nogil:
    """Well-formed UTF-8 as Python's strict decoder wants it (Unicode table 3-7): no overlong
    forms, no surrogates, nothing above U+10FFFF."""
    cdef Py_ssize_t i = 0
    cdef uint8_t c, c1, lo, hi
    while i < n:
        c = s[i]
        if c < 0x80:
            i += 1
            continue
        if c < 0xC2 or c > 0xF4:
            return False
        if c < 0xE0:
            if i + 1 >= n or (s[i + 1] & 0xC0) != 0x80:
                return False
            i += 2
            continue
        if i + 1 >= n:
            return False
        c1 = s[i + 1]
        lo = 0x80
        hi = 0xBF
        if c == 0xE0:
            lo = 0xA0
        elif c == 0xED:
            hi = 0x9F
        elif c == 0xF0:
            lo = 0x90
        elif c == 0xF4:
            hi = 0x8F
        if c1 < lo or c1 > hi:
            return False
        if c < 0xF0:
            if i + 2 >= n or (s[i + 2] & 0xC0) != 0x80:
                return False
            i += 3
        else:
            if i + 3 >= n or (s[i + 2] & 0xC0) != 0x80 or (s[i + 3] & 0xC0) != 0x80:
                return False
            i += 4
    return True


cdef int _bad(Fault *f, What what, int64_t a, int64_t b, int32_t record, int header,
              const uint8_t *at, const uint8_t *start) noexcept nogil:
    """Fill in a record-level fault (always FAULT_INVALID: the CRC vouched for the bytes)."""
    f.record = record
    f.header = header
    f.position = at - start
    return _fault(f, K_INVALID, what, a, b)


cdef int _walk_records(const uint8_t *start, const uint8_t *end, int32_t count,
                       int32_t last_delta, bint client, Fault *f) noexcept nogil:
    """Check the ``count`` records in [start, end): 0, or -1 with ``f`` filled in (its
    position relative to ``start``). Nothing is stored in ``f`` until a fault is found, so
    the loop runs in registers."""
    cdef const uint8_t *p = start
    cdef const uint8_t *q
    cdef const uint8_t *rec_end
    cdef int32_t i, j, length, delta, prev = -1, n, hcount
    cdef int64_t ts_delta
    for i in range(count):
        if p >= end:
            return _bad(f, W_MISSING_RECORDS, count, i, i, -1, p, start)
        q = read_varint(p, end, &length)
        if q == NULL:
            return _bad(f, W_LENGTH_VARINT, 0, 0, i, -1, p, start)
        if length < 0 or length > end - q:
            return _bad(f, W_LENGTH_PAST_END, length, end - q, i, -1, p, start)
        rec_end = q + length
        p = q
        if p >= rec_end:
            return _bad(f, W_FIELD_PAST_END, F_ATTRIBUTES, 1, i, -1, p, start)
        p += 1  # record attributes: unused, and not checked (neither does Kafka)
        q = read_varlong(p, rec_end, &ts_delta)
        if q == NULL:
            return _bad(f, W_FIELD_VARINT, F_TIMESTAMP_DELTA, 0, i, -1, p, start)
        p = q
        q = read_varint(p, rec_end, &delta)
        if q == NULL:
            return _bad(f, W_FIELD_VARINT, F_OFFSET_DELTA, 0, i, -1, p, start)
        if client:
            if delta != i:
                return _bad(f, W_DELTA_NOT_SEQUENTIAL, delta, i, i, -1, p, start)
        elif delta <= prev:
            return _bad(f, W_DELTA_OUT_OF_ORDER, delta, prev, i, -1, p, start)
        elif delta > last_delta:
            return _bad(f, W_DELTA_PAST_LAST, delta, last_delta, i, -1, p, start)
        prev = delta
        p = q
        # key, then value: a length (-1: null) and that many bytes
        for j in range(2):
            q = read_varint(p, rec_end, &n)
            if q == NULL:
                return _bad(f, W_FIELD_VARINT, F_KEY_LENGTH + 2 * j, 0, i, -1, p, start)
            if n < -1:
                return _bad(f, W_BAD_NULL_LENGTH, F_KEY_LENGTH + 2 * j, n, i, -1, p, start)
            if n > rec_end - q:
                return _bad(f, W_FIELD_PAST_END, F_KEY + 2 * j, n, i, -1, p, start)
            p = q + (n if n > 0 else 0)
        q = read_varint(p, rec_end, &hcount)
        if q == NULL:
            return _bad(f, W_FIELD_VARINT, F_HEADER_COUNT, 0, i, -1, p, start)
        if hcount < 0:
            return _bad(f, W_NEGATIVE_HEADER_COUNT, hcount, 0, i, -1, p, start)
        if hcount > rec_end - q:
            return _bad(f, W_HEADER_COUNT_PAST_END, hcount, rec_end - q, i, -1, p, start)
        p = q
        for j in range(hcount):
            q = read_varint(p, rec_end, &n)
            if q == NULL:
                return _bad(f, W_FIELD_VARINT, F_HEADER_KEY_LENGTH, 0, i, j, p, start)
            if n < 0:
                return _bad(f, W_NULL_HEADER_KEY, j, n, i, j, p, start)
            if n > rec_end - q:
                return _bad(f, W_FIELD_PAST_END, F_HEADER_KEY, n, i, j, p, start)
            if not _utf8_valid(q, n):
                return _bad(f, W_HEADER_KEY_NOT_UTF8, j, 0, i, j, q, start)
            p = q + n
            q = read_varint(p, rec_end, &n)
            if q == NULL:
                return _bad(f, W_FIELD_VARINT, F_HEADER_VALUE_LENGTH, 0, i, j, p, start)
            if n < -1:
                return _bad(f, W_BAD_NULL_LENGTH, F_HEADER_VALUE_LENGTH, n, i, j, p, start)
            if n > rec_end - q:
                return _bad(f, W_FIELD_PAST_END, F_HEADER_VALUE, n, i, j, p, start)
            p = q + (n if n > 0 else 0)
        if p != rec_end:
            return _bad(f, W_LENGTH_MISMATCH, length, length - (rec_end - p), i, -1, p, start)
    if p != end:
        return _bad(f, W_TRAILING_BYTES, end - p, count, -1, -1, p, start)
    return 0


cdef int _check_header(const uint8_t *p, Py_ssize_t avail, bint client, Py_ssize_t max_bytes,
                       BatchHeader *h, Fault *f) noexcept nogil:
    """Parse the header of the batch at p (batch_header.pxd) and check it and its CRC: 0, or
    -1 with ``f`` filled. The kind of each fault follows Kafka: framing and CRC faults are
    CORRUPT (the bytes are not what the client wrote), the rest INVALID."""
    cdef int count, last_delta, codec, magic
    cdef uint32_t crc
    cdef int problem = parse_batch_header(p, avail, h)
    f.record = -1
    if problem == BH_TRUNCATED_HEADER:
        return _fault(f, K_CORRUPT, W_TRUNCATED_HEADER, avail, 0)
    if problem == BH_NEGATIVE_LENGTH or problem == BH_TRUNCATED_BATCH:
        return _fault(f, K_CORRUPT, W_TRUNCATED_BATCH, h.size, avail)
    if problem == BH_BAD_MAGIC:
        magic = <int8_t>h.magic
        if magic == 0 or magic == 1:
            return _fault(f, K_INVALID, W_OLD_MAGIC, magic, 0)
        return _fault(f, K_CORRUPT, W_BAD_MAGIC, magic, 0)
    if problem == BH_SHORT_LENGTH:
        return _fault(f, K_CORRUPT, W_SHORT_LENGTH, h.length, 0)
    if 0 < max_bytes < h.size:
        return _fault(f, K_TOO_LARGE, W_TOO_LARGE, h.size, max_bytes)
    crc = batch_crc(p, h.size)
    if crc != h.crc:
        return _fault(f, K_CORRUPT, W_CRC, h.crc, crc)
    if h.base_offset < 0:  # outside the CRC, like the length
        return _fault(f, K_CORRUPT, W_NEGATIVE_BASE_OFFSET, h.base_offset, 0)
    # From here on the CRC vouches for the bytes: the client wrote them so.
    codec = h.attributes & CODEC_MASK
    if codec > 4:
        return _fault(f, K_INVALID, W_UNKNOWN_CODEC, codec, 0)
    count = h.record_count
    last_delta = h.last_offset_delta
    if count < 0 or last_delta < 0 or count > <int64_t>last_delta + 1:
        return _fault(f, K_INVALID, W_BAD_COUNT, count, last_delta)
    if client:
        load_batch_header_details(p, h)
        if h.attributes & CONTROL_FLAG:
            return _fault(f, K_INVALID, W_CONTROL, 0, 0)
        if h.attributes & TRANSACTIONAL_FLAG:
            return _fault(f, K_INVALID, W_TRANSACTIONAL, 0, 0)
        if count == 0 or last_delta != count - 1:
            return _fault(f, K_INVALID, W_COUNT_VS_DELTA, count, last_delta)
        if h.producer_id >= 0 and h.base_sequence < 0:
            return _fault(f, K_INVALID, W_NO_SEQUENCE, h.base_sequence, h.producer_id)
    return 0


cdef str _describe(Fault *f, str detail):
    cdef What w = f.what
    cdef int64_t a = f.a, b = f.b
    if w == W_NO_BATCHES:
        return "the request holds no record batch"
    if w == W_TRUNCATED_HEADER:
        return f"truncated batch header: {a} bytes left, a header needs {HEADER_SIZE}"
    if w == W_TRUNCATED_BATCH:
        return f"truncated batch: its length field says {a} bytes, {b} remain"
    if w == W_OLD_MAGIC:
        return (f"magic {a}: message format v{a} is refused, Produce v3 and later carry only "
                f"magic 2 batches")
    if w == W_BAD_MAGIC:
        return f"magic {a} is no Kafka message format"
    if w == W_SHORT_LENGTH:
        return f"batch length {a} is below the minimum {HEADER_SIZE - LOG_OVERHEAD}"
    if w == W_TOO_LARGE:
        return f"a batch of {a} bytes exceeds the limit of {b} bytes"
    if w == W_CRC:
        return f"CRC mismatch: stored {a:#010x}, the bytes give {b:#010x}"
    if w == W_NEGATIVE_BASE_OFFSET:
        return f"negative base offset {a}"
    if w == W_UNKNOWN_CODEC:
        return f"unknown compression codec id {a}"
    if w == W_UNSUPPORTED_CODEC:
        return f"{('snappy', 'lz4')[a - 2]} compression is not supported (none, gzip, zstd)"
    if w == W_CONTROL:
        return "clients may not write control batches"
    if w == W_TRANSACTIONAL:
        return "transactional batches are not supported"
    if w == W_BAD_COUNT:
        return (f"record count {a} does not fit lastOffsetDelta {b} (count must be 0.."
                f"lastOffsetDelta+1)")
    if w == W_COUNT_VS_DELTA:
        return (f"record count {a} with lastOffsetDelta {b}: a produced batch has count >= 1 "
                f"and lastOffsetDelta = count - 1")
    if w == W_NO_SEQUENCE:
        return f"base sequence {a} for producer id {b}: an idempotent batch needs one >= 0"
    if w == W_UNDECOMPRESSABLE:
        return f"compressed records: {detail}"
    if w == W_MISSING_RECORDS:
        return f"the header counts {a} records, only {b} are present"
    if w == W_TRAILING_BYTES:
        return f"{a} bytes follow the last of the {b} records the header counts"
    if w == W_LENGTH_VARINT:
        return "record length is not a varint within the batch"
    if w == W_LENGTH_PAST_END:
        return f"record length {a} runs past the batch ({b} bytes left)"
    cdef str field = FIELD_NAMES[a] if 0 <= a < len(FIELD_NAMES) else ""
    if f.header >= 0 and field.startswith("header"):
        field = f"header {f.header} {field[7:]}"
    if w == W_FIELD_VARINT:
        return f"{field} is not a varint within the record"
    if w == W_FIELD_PAST_END:
        return f"{field} of {b} bytes runs past the record's end"
    if w == W_BAD_NULL_LENGTH:
        return f"{field} {b} (only -1, null, may be negative)"
    if w == W_DELTA_NOT_SEQUENTIAL:
        return f"offset delta {a} where {b} was expected (offset deltas run 0..count-1)"
    if w == W_DELTA_OUT_OF_ORDER:
        return f"offset delta {a} does not follow offset delta {b}"
    if w == W_DELTA_PAST_LAST:
        return f"offset delta {a} is beyond lastOffsetDelta {b}"
    if w == W_NEGATIVE_HEADER_COUNT:
        return f"negative header count {a}"
    if w == W_HEADER_COUNT_PAST_END:
        return f"header count {a} cannot fit in the {b} bytes left in the record"
    if w == W_NULL_HEADER_KEY:
        return f"header {a} has key length {b}: header keys may not be null"
    if w == W_HEADER_KEY_NOT_UTF8:
        return f"header {a} key is not valid UTF-8"
    if w == W_LENGTH_MISMATCH:
        return f"record length {a} disagrees with its fields, which take {b} bytes"
    return f"fault {<int>w}"


cdef tuple _result(Fault *f, Py_ssize_t batch, Py_ssize_t batch_pos, bint inside,
                   str detail=None):
    where = f"batch {batch}" if batch >= 0 else "request"
    if f.record >= 0:
        where += f", record {f.record}"
    if inside:
        at = f"byte {f.position} of the decompressed records of the batch at byte {batch_pos}"
    elif f.record >= 0:
        at = f"byte {batch_pos + HEADER_SIZE + f.position}"
    else:
        at = f"byte {batch_pos}" if f.what != W_TRAILING_BYTES else \
            f"byte {batch_pos + HEADER_SIZE + f.position}"
    if f.what == W_UNDECOMPRESSABLE:  # the decompressor's message names the position
        return (f.kind, batch, f.record, f"{where}: {_describe(f, detail)}")
    return (f.kind, batch, f.record, f"{where}: {_describe(f, detail)} (at {at})")


def validate_batches(buffer, *, bint client=True, Py_ssize_t max_batch_bytes=0):
    """None when every batch in ``buffer`` is sound and every one of its records is well
    formed (and, with ``client``, allowed from a producer); otherwise the first fault found:
    (kind, batch index, record index or -1 for the batch, reason). ``max_batch_bytes`` > 0
    limits each batch's size. See the module docstring for the kinds and rules."""
    cdef Py_buffer view
    cdef Fault f
    cdef const uint8_t *data
    cdef const uint8_t *p
    cdef Py_ssize_t n, pos = 0, size, batch = 0
    cdef BatchHeader h
    cdef int codec, rc
    cdef int32_t count, last_delta
    PyObject_GetBuffer(buffer, &view, PyBUF_SIMPLE)
    try:
        data = <const uint8_t *>view.buf
        n = view.len
        f.header = -1
        f.record = -1
        f.position = 0
        if n == 0 and client:
            _fault(&f, K_INVALID, W_NO_BATCHES, 0, 0)
            return _result(&f, -1, 0, False)
        while pos < n:
            p = data + pos
            if n - pos >= NOGIL_BYTES:
                with nogil:
                    rc = _check_header(p, n - pos, client, max_batch_bytes, &h, &f)
            else:
                rc = _check_header(p, n - pos, client, max_batch_bytes, &h, &f)
            if rc < 0:
                return _result(&f, batch, pos, False)
            size = h.size
            codec = h.attributes & CODEC_MASK
            count = h.record_count
            last_delta = h.last_offset_delta
            if codec == 0:
                if size >= NOGIL_BYTES:
                    with nogil:
                        rc = _walk_records(p + HEADER_SIZE, p + size, count, last_delta,
                                           client, &f)
                else:
                    rc = _walk_records(p + HEADER_SIZE, p + size, count, last_delta, client,
                                       &f)
                if rc < 0:
                    return _result(&f, batch, pos, False)
            else:
                try:
                    payload = decompress_records(
                        codec, memoryview(buffer).cast("B")[pos + HEADER_SIZE:pos + size], pos)
                except CorruptRecordError as exc:
                    _fault(&f, K_INVALID, W_UNDECOMPRESSABLE, 0, 0)
                    return _result(&f, batch, pos, False, str(exc))
                rc = _walk_records(<const uint8_t *>PyBytes_AS_STRING(payload),
                                   <const uint8_t *>PyBytes_AS_STRING(payload)
                                   + PyBytes_GET_SIZE(payload),
                                   count, last_delta, client, &f)
                if rc < 0:
                    return _result(&f, batch, pos, True)
            pos += size
            batch += 1
        return None
    finally:
        PyBuffer_Release(&view)
