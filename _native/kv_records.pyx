# cython: language_level=3
"""The (key, value) pairs of one record batch, for key/value state machines.

``decode_kv_pairs`` walks the records of one batch and returns their keys and values as a list
of ``(key, value)`` tuples: no Record object, no timestamp; headers are skipped (their lengths
checked, their keys checked as UTF-8, as the Record path decodes them).

The record rules are those of :mod:`raftcore._native.records` (Kafka's DefaultRecord): every
length is checked against the end of the batch before it is used, offset deltas increase and
stay within LastOffsetDelta, a record's Length equals its fields, no byte follows the last
record, and the CRC-32C covers the batch. A violation raises CorruptRecordError naming the byte
position, never reads outside the buffer.

Conditions: a header whose key starts with ``raftcore.if-`` is a write's condition (the key/value
store's compare-and-set, :mod:`raftcore.statemachine.conditions`). Such headers are reported in
``conditions``, which stays None for a batch without them: a record without headers pays nothing
for this, one with headers a length test and a 12-byte compare per header.

Key rule of the key/value records: a key is 1 to ``max_key_size`` bytes (LMDB's limit, 511,
by default). A record with a null, empty or longer key is not a pair: it is reported in
``skipped`` with its offset and why, so that every replica skips the same records.
"""

cimport cython
from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.unicode cimport PyUnicode_DecodeUTF8
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t

from batch_header cimport (
    BASE_OFFSET_OFF,
    BH_BAD_MAGIC,
    BH_OK,
    BH_TOO_MANY_RECORDS,
    CODEC_MASK,
    CONTROL_FLAG,
    CRC_OFF,
    HEADER_SIZE,
    LENGTH_OFF,
    MAGIC_OFF,
    MIN_RECORD_SIZE,
    RECORDS_COUNT_OFF,
    BatchHeader,
    batch_crc,
    batch_header_problem,
    batch_header_rules,
    parse_batch_header,
)
from libc.string cimport memcmp, memcpy

from crc32c_impl cimport rc_crc32c, rc_crc32c_init
from wire cimport read_varint, read_varlong

from raftcore._native.records import decompress_records
from raftcore.errors import CorruptRecordError

rc_crc32c_init()

DEFAULT_MAX_KEY_SIZE = 511

# Header keys that are a write's condition (raftcore.statemachine.conditions names them).
cdef const char *CONDITION_PREFIX = b"raftcore.if-"
cdef Py_ssize_t CONDITION_PREFIX_LEN = 12


cdef object _corrupt(str message, Py_ssize_t position):
    return CorruptRecordError(f"{message} (at byte position {position})", position)


@cython.final
cdef class KvPairs:
    """What ``decode_kv_pairs`` found in one batch.

    - ``pairs``: ``(key, value)`` per record at or after ``from_offset``, in offset order;
      ``value`` is None for a delete (a null value);
    - ``deletes``: how many of ``pairs`` have a null value;
    - ``skipped``: ``(offset, reason)`` of each record whose key breaks the key rule;
    - ``records``: records at or after ``from_offset`` (pairs and skipped ones);
    - ``base_offset`` and ``last_offset`` of the batch;
    - ``conditions``: None, or ``(pair index, offset, header key, header value)`` for each
      ``raftcore.if-*`` header of a record in ``pairs`` (value None for a null one).
    """
    cdef readonly list pairs
    cdef readonly Py_ssize_t deletes
    cdef readonly list skipped
    cdef readonly Py_ssize_t records
    cdef readonly int64_t base_offset
    cdef readonly int64_t last_offset
    cdef readonly object conditions

    def __repr__(self):
        return (f"KvPairs({self.base_offset}..{self.last_offset}, pairs={len(self.pairs)}, "
                f"deletes={self.deletes}, skipped={len(self.skipped)})")


def decode_kv_pairs(buffer, int64_t from_offset=0, Py_ssize_t max_key_size=DEFAULT_MAX_KEY_SIZE,
                    bint check_crc=True, bint seal=False):
    """The (key, value) pairs of the records of ``buffer`` -- exactly one record batch -- at
    offsets >= ``from_offset``. See the module docstring for the rules and :class:`KvPairs`
    for the result. A control batch has no key/value records: it is refused (ValueError).

    With ``seal`` every value comes sealed, as the LMDB state machine stores it: CRC-32C of
    key and value (4 bytes, big-endian), then the value (``raftcore._native.crc32c``'s
    ``seal_value``), made in the one copy the value takes anyway."""
    cdef Py_buffer view
    cdef KvPairs out
    if isinstance(buffer, str):
        raise TypeError("a record batch is bytes-like, not str")
    if max_key_size < 1:
        raise ValueError(f"max_key_size must be at least 1, got {max_key_size}")
    PyObject_GetBuffer(buffer, &view, PyBUF_SIMPLE)
    try:
        out = _decode(buffer, <const uint8_t *>view.buf, view.len, from_offset, max_key_size,
                      check_crc, seal)
    finally:
        PyBuffer_Release(&view)
    return out


cdef KvPairs _decode(object owner, const uint8_t *b, Py_ssize_t size, int64_t from_offset,
                     Py_ssize_t max_key_size, bint check_crc, bint seal):
    cdef BatchHeader h
    cdef int problem
    cdef uint32_t crc
    cdef int codec
    cdef object payload = None
    cdef const uint8_t *start
    cdef const uint8_t *end
    cdef KvPairs out
    # The header as every reader of batches parses it (batch_header.pxd); the positions name
    # the field at fault inside the one batch.
    if size < HEADER_SIZE:
        raise _corrupt(f"a record batch needs {HEADER_SIZE} bytes of header, got {size}", 0)
    problem = parse_batch_header(b, size, &h)
    if problem == BH_BAD_MAGIC:
        raise _corrupt(batch_header_problem(problem, &h, size), MAGIC_OFF)
    if problem != BH_OK or h.size != size:
        raise _corrupt(f"record batch length {h.length} does not match its {size} bytes "
                       f"(one whole batch expected)", LENGTH_OFF)
    problem = batch_header_rules(&h)
    if problem != BH_OK:
        raise _corrupt(batch_header_problem(problem, &h, size),
                       RECORDS_COUNT_OFF if problem == BH_TOO_MANY_RECORDS else BASE_OFFSET_OFF)
    if check_crc:
        crc = batch_crc(b, size)
        if crc != h.crc:
            raise _corrupt(f"record batch at offset {h.base_offset} has CRC {h.crc:#010x} but "
                           f"its bytes give {crc:#010x}", CRC_OFF)
    if h.attributes & CONTROL_FLAG:
        raise ValueError(f"record batch at offset {h.base_offset} is a control batch: it holds "
                         "no key/value records")
    codec = h.attributes & CODEC_MASK
    if codec == 0:
        start = b + HEADER_SIZE
        end = b + size
    else:
        payload = decompress_records(codec, memoryview(owner)[HEADER_SIZE:size], 0)
        start = <const uint8_t *>PyBytes_AS_STRING(payload)
        end = start + PyBytes_GET_SIZE(payload)
    out = KvPairs.__new__(KvPairs)
    out.pairs = []
    out.skipped = []
    out.deletes = 0
    out.records = 0
    out.conditions = None
    out.base_offset = h.base_offset
    out.last_offset = h.base_offset + h.last_offset_delta
    _walk(out, b, start, end, payload is not None, h.base_offset, h.last_offset_delta,
          h.record_count, from_offset, max_key_size, seal)
    return out


cdef int _walk(KvPairs out, const uint8_t *batch, const uint8_t *start, const uint8_t *end,
               bint compressed, int64_t base_offset, int32_t last_delta, int32_t count,
               int64_t from_offset, Py_ssize_t max_key_size, bint seal) except -1:
    cdef const uint8_t *p = start
    cdef const uint8_t *q
    cdef const uint8_t *rec_start
    cdef const uint8_t *rec_end
    cdef const uint8_t *kp
    cdef int32_t length = 0, offset_delta = 0, klen = 0, vlen = 0, hcount = 0
    cdef int32_t hklen = 0, hvlen = 0, i, h
    cdef int32_t prev_delta = -1
    cdef int64_t ts_delta, offset
    cdef bint wanted
    cdef uint32_t sealed_crc
    cdef unsigned char *vp
    cdef const uint8_t *kp_h
    cdef list pairs = out.pairs
    cdef object key, value
    cdef list found
    for i in range(count):
        found = None
        rec_start = p
        q = read_varint(p, end, &length)
        if q == NULL:
            _bad(batch, start, p, compressed, base_offset, "truncated record length")
        if length < MIN_RECORD_SIZE - 1 or length > end - q:
            _bad(batch, start, p, compressed, base_offset,
                 f"record length {length} does not fit in the batch ({end - q} bytes left)")
        p = q
        rec_end = p + length
        p += 1  # attributes (unused)
        p = read_varlong(p, rec_end, &ts_delta)
        if p == NULL:
            _bad(batch, start, rec_start, compressed, base_offset, "bad record timestamp delta")
        q = read_varint(p, rec_end, &offset_delta)
        if q == NULL:
            _bad(batch, start, p, compressed, base_offset, "bad record offset delta")
        if offset_delta <= prev_delta or offset_delta > last_delta:
            _bad(batch, start, p, compressed, base_offset,
                 f"record offset delta {offset_delta} is out of order (previous {prev_delta}, "
                 f"last {last_delta})")
        p = q
        offset = base_offset + offset_delta
        wanted = offset >= from_offset
        q = read_varint(p, rec_end, &klen)
        if q == NULL or klen < -1 or klen > rec_end - q:
            _bad(batch, start, p, compressed, base_offset,
                 "record key length does not fit in the record")
        p = q
        kp = p
        if klen > 0:
            p += klen
        q = read_varint(p, rec_end, &vlen)
        if q == NULL or vlen < -1 or vlen > rec_end - q:
            _bad(batch, start, p, compressed, base_offset,
                 "record value length does not fit in the record")
        p = q
        value = None
        if vlen >= 0:
            if wanted and seal:
                value = PyBytes_FromStringAndSize(NULL, vlen + 4)
                vp = <unsigned char *>PyBytes_AS_STRING(value)
                sealed_crc = rc_crc32c(rc_crc32c(0, kp, <size_t>(klen if klen > 0 else 0)),
                                       p, <size_t>vlen)
                vp[0] = (sealed_crc >> 24) & 0xFF
                vp[1] = (sealed_crc >> 16) & 0xFF
                vp[2] = (sealed_crc >> 8) & 0xFF
                vp[3] = sealed_crc & 0xFF
                memcpy(vp + 4, p, <size_t>vlen)
            elif wanted:
                value = PyBytes_FromStringAndSize(<const char *>p, vlen)
            p += vlen
        q = read_varint(p, rec_end, &hcount)
        if q == NULL or hcount < 0 or hcount > rec_end - q:
            _bad(batch, start, p, compressed, base_offset, "bad record header count")
        p = q
        for h in range(hcount):
            q = read_varint(p, rec_end, &hklen)
            if q == NULL or hklen < 0 or hklen > rec_end - q:
                _bad(batch, start, p, compressed, base_offset,
                     "record header key length does not fit in the record")
            p = q
            if not _is_utf8(p, hklen):
                _bad(batch, start, p, compressed, base_offset, "record header key is not UTF-8")
            kp_h = p
            p += hklen
            q = read_varint(p, rec_end, &hvlen)
            if q == NULL or hvlen < -1 or hvlen > rec_end - q:
                _bad(batch, start, p, compressed, base_offset,
                     "record header value length does not fit in the record")
            if hklen >= CONDITION_PREFIX_LEN and memcmp(kp_h, CONDITION_PREFIX,
                                                        CONDITION_PREFIX_LEN) == 0:
                if found is None:
                    found = []
                found.append((PyUnicode_DecodeUTF8(<const char *>kp_h, hklen, NULL),
                              None if hvlen < 0 else
                              PyBytes_FromStringAndSize(<const char *>q, hvlen)))
            p = q + (hvlen if hvlen > 0 else 0)
        if p != rec_end:
            _bad(batch, start, rec_start, compressed, base_offset,
                 f"record length {length} disagrees with its fields ({rec_end - p} bytes unread)")
        p = rec_end
        prev_delta = offset_delta
        if not wanted:
            continue
        out.records += 1
        if klen < 1 or klen > max_key_size:
            out.skipped.append((offset, "a null key" if klen < 0 else
                                f"a key of {klen} bytes (keys are 1..{max_key_size} bytes)"))
            continue
        key = PyBytes_FromStringAndSize(<const char *>kp, klen)
        if value is None:
            out.deletes += 1
        if found is not None:
            if out.conditions is None:
                out.conditions = []
            for name, raw in found:
                out.conditions.append((len(pairs), offset, name, raw))
        pairs.append((key, value))
    if p != end:
        _bad(batch, start, p, compressed, base_offset,
             f"{end - p} bytes follow the last of {count} records")
    return 0


cdef bint _is_utf8(const uint8_t *p, int32_t n):
    """Header keys are strings (as the Record path decodes them): ASCII at C speed, anything
    else through Python's UTF-8 decoder."""
    cdef int32_t i
    for i in range(n):
        if p[i] >= 0x80:
            try:
                PyUnicode_DecodeUTF8(<const char *>p, n, NULL)
            except UnicodeDecodeError:
                return False
            return True
    return True


cdef int _bad(const uint8_t *batch, const uint8_t *start, const uint8_t *at, bint compressed,
              int64_t base_offset, str what) except -1:
    if compressed:
        raise _corrupt(f"record batch at offset {base_offset}: {what} (byte {at - start} of the "
                       "decompressed records)", 0)
    raise _corrupt(f"record batch at offset {base_offset}: {what}", at - batch)
