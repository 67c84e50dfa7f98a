# cython: language_level=3
"""Kafka record batch v2 (magic 2): encoder, reader, and batch scanning for the log.

Byte layout of a batch (big-endian integers; Kafka's DefaultRecordBatch):

    0  BaseOffset int64         8  Length int32 (batch size - 12)   12 PartitionLeaderEpoch int32
    16 Magic int8 (= 2)         17 CRC uint32 (CRC-32C of bytes 21..end)
    21 Attributes int16         23 LastOffsetDelta int32            27 BaseTimestamp int64
    35 MaxTimestamp int64       43 ProducerId int64                 51 ProducerEpoch int16
    53 BaseSequence int32       57 RecordsCount int32               61 records (maybe compressed)

Attributes: bits 0-2 compression (0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd), bit 3 timestamp
type (1 = LogAppendTime), bit 4 transactional, bit 5 control.

A record: Length varint, Attributes int8, TimestampDelta varlong, OffsetDelta varint,
KeyLength varint (-1 = null), Key, ValueLength varint (-1 = null), Value, HeadersCount varint,
then per header KeyLength varint, Key (UTF-8), ValueLength varint (-1 = null), Value. All
varints are zig-zag encoded.

Every length read from a buffer is checked against the end of the readable range before it is
used; a violation raises CorruptRecordError naming the byte position.
"""

cimport cython
from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_FillInfo, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytes cimport (
    PyBytes_AS_STRING,
    PyBytes_CheckExact,
    PyBytes_FromStringAndSize,
    PyBytes_GET_SIZE,
)
from cpython.object cimport PyObject
from cpython.pyport cimport PY_SSIZE_T_MAX
from cpython.unicode cimport PyUnicode_AsUTF8AndSize, PyUnicode_DecodeUTF8
from libc.stdint cimport (
    INT32_MAX,
    int16_t,
    int32_t,
    int64_t,
    uint8_t,
    uint16_t,
    uint32_t,
    uint64_t,
)
from libc.string cimport memcpy
from libc.time cimport time_t

from crc32c_impl cimport rc_crc32c, rc_crc32c_init
from wire cimport (
    load_i16,
    load_i32,
    load_i64,
    load_u16,
    load_u32,
    read_varint,
    read_varlong,
    store_u16,
    store_u32,
    store_u64,
    varint_size,
    varlong_size,
    write_varint,
    write_varlong,
)

import threading
import zlib

import numpy as np
import zstandard

from raftcore.compression import CodecError, compress_lz4, compress_snappy, decompress_lz4, decompress_snappy
from raftcore.errors import CorruptRecordError


cdef extern from "bytesbuf.h":
    ctypedef struct rc_bytesbuf:
        PyObject *obj
        Py_ssize_t len
        Py_ssize_t cap
    int rc_bb_init(rc_bytesbuf *b, Py_ssize_t cap) except -1
    int rc_bb_reserve(rc_bytesbuf *b, Py_ssize_t extra) except -1
    char *rc_bb_data(rc_bytesbuf *b)
    object rc_bb_finish(rc_bytesbuf *b)
    void rc_bb_free(rc_bytesbuf *b)

cdef extern from "<time.h>" nogil:
    ctypedef int clockid_t
    cdef struct timespec:
        time_t tv_sec
        long tv_nsec
    int clock_gettime(clockid_t clk, timespec *ts)
    clockid_t CLOCK_REALTIME


rc_crc32c_init()

# ---- format constants ------------------------------------------------------------------------

cdef enum:
    BASE_OFFSET_OFF = 0
    LENGTH_OFF = 8
    EPOCH_OFF = 12
    MAGIC_OFF = 16
    CRC_OFF = 17
    ATTRIBUTES_OFF = 21
    LAST_OFFSET_DELTA_OFF = 23
    BASE_TIMESTAMP_OFF = 27
    MAX_TIMESTAMP_OFF = 35
    PRODUCER_ID_OFF = 43
    PRODUCER_EPOCH_OFF = 51
    BASE_SEQUENCE_OFF = 53
    RECORDS_COUNT_OFF = 57
    HEADER_SIZE = 61           # RECORD_BATCH_OVERHEAD
    LOG_OVERHEAD = 12          # BaseOffset + Length
    MIN_RECORD_SIZE = 7        # length, attributes, ts delta, offset delta, key, value, headers
    CODEC_MASK = 0x07
    TIMESTAMP_TYPE_FLAG = 0x08
    TRANSACTIONAL_FLAG = 0x10
    CONTROL_FLAG = 0x20

# Smallest batch worth releasing the GIL for while computing its CRC.
cdef enum:
    NOGIL_CRC_BYTES = 65536

MAGIC = 2
RECORD_BATCH_OVERHEAD = HEADER_SIZE
COMPRESSION_NONE = 0
COMPRESSION_GZIP = 1
COMPRESSION_SNAPPY = 2
COMPRESSION_LZ4 = 3
COMPRESSION_ZSTD = 4
COMPRESSION_NAMES = ("none", "gzip", "snappy", "lz4", "zstd")
_COMPRESSION_CODES = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}

# Kafka's defaults: gzip uses Deflater.DEFAULT_COMPRESSION (6), zstd level 3.
GZIP_LEVEL = 6
ZSTD_LEVEL = 3

# A compressed batch may not expand beyond this many bytes: a corrupt or hostile batch must not
# be able to exhaust memory. Kafka's own limit on a batch is far below it.
cdef Py_ssize_t _max_decompressed = 256 * 1024 * 1024


def set_max_decompressed_size(Py_ssize_t size):
    """Set the largest decompressed size accepted for one batch (default 256 MiB)."""
    global _max_decompressed
    if size <= 0:
        raise ValueError(f"max decompressed size must be positive, got {size}")
    _max_decompressed = size


def get_max_decompressed_size():
    return _max_decompressed


cdef object _tls = threading.local()


cdef object _zstd_compressor():
    c = getattr(_tls, "zstd_c", None)
    if c is None:
        c = _tls.zstd_c = zstandard.ZstdCompressor(level=ZSTD_LEVEL)
    return c


cdef object _zstd_decompressor():
    d = getattr(_tls, "zstd_d", None)
    if d is None:
        d = _tls.zstd_d = zstandard.ZstdDecompressor()
    return d


cdef int64_t _now_ms() noexcept nogil:
    cdef timespec ts
    clock_gettime(CLOCK_REALTIME, &ts)
    return <int64_t>ts.tv_sec * 1000 + ts.tv_nsec // 1000000


cdef object _corrupt(str message, Py_ssize_t position):
    return CorruptRecordError(f"{message} (at byte position {position})", position)


# ---- buffers ---------------------------------------------------------------------------------

@cython.final
cdef class _Buffer:
    """Holds a Py_buffer of the caller's object for as long as batches read from it live, and
    re-exports it as plain bytes."""
    cdef Py_buffer view
    cdef bint acquired
    cdef readonly object obj

    def __cinit__(self, obj):
        if isinstance(obj, str):
            raise TypeError("record batches are read from a bytes-like object, not str")
        PyObject_GetBuffer(obj, &self.view, PyBUF_SIMPLE)
        self.acquired = True
        self.obj = obj

    def __dealloc__(self):
        if self.acquired:
            PyBuffer_Release(&self.view)

    def __getbuffer__(self, Py_buffer *buffer, int flags):
        PyBuffer_FillInfo(buffer, self, self.view.buf, self.view.len, 1, flags)

    def __releasebuffer__(self, Py_buffer *buffer):
        pass

    cdef inline const uint8_t *data(self) noexcept:
        return <const uint8_t *>self.view.buf

    cdef inline Py_ssize_t length(self) noexcept:
        return self.view.len


cdef int _value_ref(object obj, const uint8_t **data, Py_ssize_t *size, Py_buffer *view,
                    bint *release, str what) except -1:
    """Point at the bytes of a key, value or header value (None gives size -1)."""
    if obj is None:
        data[0] = NULL
        size[0] = -1
        return 0
    if PyBytes_CheckExact(obj):
        data[0] = <const uint8_t *>PyBytes_AS_STRING(obj)
        size[0] = PyBytes_GET_SIZE(obj)
    elif isinstance(obj, str):
        raise TypeError(f"record {what} must be bytes or None, not str")
    else:
        PyObject_GetBuffer(obj, view, PyBUF_SIMPLE)
        release[0] = True
        data[0] = <const uint8_t *>view.buf
        size[0] = view.len
    if size[0] > INT32_MAX:
        raise ValueError(f"record {what} of {size[0]} bytes is larger than a batch can hold")
    return 0


# ---- encoder ---------------------------------------------------------------------------------

cdef int _codec_of(object compression) except -1:
    if isinstance(compression, int):
        if 0 <= compression <= 4:
            return compression
    else:
        code = _COMPRESSION_CODES.get(compression)
        if code is not None:
            return code
    raise ValueError(
        f"compression must be one of 'none', 'gzip', 'snappy', 'lz4', 'zstd', "
        f"got {compression!r}"
    )


@cython.final
cdef class BatchBuilder:
    """Encodes records into one record batch v2 without a Python object per field.

    ``append`` adds one record; ``extend`` adds (key, value) / (key, value, headers) tuples;
    ``extend_kv`` adds parallel lists of keys and values; ``build`` returns the batch bytes.
    Records get consecutive offset deltas from 0; their timestamps default to ``timestamp_ms``
    (the wall clock when the builder was made, if not given).
    """
    cdef rc_bytesbuf buf
    cdef int64_t base_offset
    cdef int64_t default_timestamp
    cdef int64_t base_timestamp
    cdef int64_t max_timestamp
    cdef int64_t producer_id
    cdef int32_t leader_epoch
    cdef int32_t base_sequence
    cdef int32_t count
    cdef int16_t producer_epoch
    cdef int codec
    cdef bint control
    cdef bint built

    def __cinit__(self):
        self.buf.obj = NULL

    def __init__(self, *, int64_t base_offset=0, int32_t leader_epoch=0, compression="none",
                 timestamp_ms=None, bint control=False, int64_t producer_id=-1,
                 int16_t producer_epoch=-1, int32_t base_sequence=-1,
                 Py_ssize_t size_hint=0):
        if base_offset < 0:
            raise ValueError(f"base_offset must be >= 0, got {base_offset}")
        if leader_epoch < -1:
            raise ValueError(f"leader_epoch must be >= -1, got {leader_epoch}")
        self.codec = _codec_of(compression)
        self.base_offset = base_offset
        self.leader_epoch = leader_epoch
        self.control = control
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.base_sequence = base_sequence
        self.default_timestamp = _now_ms() if timestamp_ms is None else <int64_t>timestamp_ms
        self.count = 0
        self.built = False
        if size_hint < 0:
            size_hint = 0
        rc_bb_init(&self.buf, HEADER_SIZE + size_hint)
        self.buf.len = HEADER_SIZE

    def __dealloc__(self):
        rc_bb_free(&self.buf)

    @property
    def record_count(self):
        return self.count

    @property
    def uncompressed_size(self):
        """Bytes the batch takes before compression."""
        return self.buf.len

    cdef int _check_open(self) except -1:
        if self.built:
            raise RuntimeError("BatchBuilder.build() was already called")
        if self.count == INT32_MAX:
            raise ValueError("a record batch holds at most 2**31-1 records")
        return 0

    cdef int _headers_size(self, object headers, list checked, int32_t *hcount) except -1:
        """Size the headers and collect them into ``checked`` as (key, None-or-bytes) pairs:
        the write pass reads that list, never ``headers`` again, so a one-shot iterable or a
        value resized meanwhile cannot make it write other bytes than were counted."""
        cdef Py_ssize_t total = 0
        cdef Py_ssize_t klen, vlen, n = 0
        cdef const char *kdata
        cdef const uint8_t *vdata
        cdef Py_buffer view
        cdef bint release
        for h in headers:
            if len(h) != 2:
                raise ValueError(f"a header is a (key, value) pair, got {h!r}")
            hk, hv = h
            if isinstance(hk, str):
                kdata = PyUnicode_AsUTF8AndSize(hk, &klen)
            elif PyBytes_CheckExact(hk):
                klen = PyBytes_GET_SIZE(hk)
            else:
                raise TypeError(f"a header key must be str, got {type(hk).__name__}")
            release = False
            try:
                _value_ref(hv, &vdata, &vlen, &view, &release, "header value")
                if release:  # a buffer object: keep a private, immutable copy
                    hv = PyBytes_FromStringAndSize(<const char *>vdata, vlen)
            finally:
                if release:
                    PyBuffer_Release(&view)
            checked.append((hk, hv))
            total += varint_size(<int32_t>klen) + klen + varint_size(<int32_t>vlen)
            if vlen > 0:
                total += vlen
            n += 1
            if total > INT32_MAX or n > INT32_MAX:
                raise ValueError("record headers are larger than a batch can hold")
        hcount[0] = <int32_t>n
        return <int>total

    cdef uint8_t *_write_headers(self, uint8_t *p, list headers) except NULL:
        cdef Py_ssize_t klen, vlen
        cdef const char *kdata
        cdef const uint8_t *vdata
        cdef Py_buffer view
        cdef bint release
        for hk, hv in headers:
            if isinstance(hk, str):
                kdata = PyUnicode_AsUTF8AndSize(hk, &klen)
            else:
                kdata = PyBytes_AS_STRING(hk)
                klen = PyBytes_GET_SIZE(hk)
            p = write_varint(p, <int32_t>klen)
            memcpy(p, kdata, klen)
            p += klen
            release = False
            _value_ref(hv, &vdata, &vlen, &view, &release, "header value")
            p = write_varint(p, <int32_t>vlen)
            if vlen > 0:
                memcpy(p, vdata, vlen)
                p += vlen
            if release:
                PyBuffer_Release(&view)
        return p

    cdef int _append(self, object key, object value, object headers,
                     int64_t timestamp) except -1:
        cdef const uint8_t *kdata
        cdef const uint8_t *vdata
        cdef Py_ssize_t klen, vlen, body, hsize = 0
        cdef int32_t hcount = 0
        cdef int64_t ts_delta, base_timestamp
        cdef Py_buffer kview, vview
        cdef bint krel = False, vrel = False
        cdef uint8_t *p
        cdef list checked_headers = None
        self._check_open()
        # The batch's timestamps change only once the record is written (a refused record
        # must leave the batch as it was).
        base_timestamp = timestamp if self.count == 0 else self.base_timestamp
        ts_delta = timestamp - base_timestamp
        if headers:
            checked_headers = []
            hsize = self._headers_size(headers, checked_headers, &hcount)
        _value_ref(key, &kdata, &klen, &kview, &krel, "key")
        if self.control and klen < 4:
            if krel:
                PyBuffer_Release(&kview)
            raise ValueError(
                f"a control record's key is a version int16 and a type int16 (4 bytes), got "
                f"{'null' if klen < 0 else f'{klen} bytes'}")
        try:
            _value_ref(value, &vdata, &vlen, &vview, &vrel, "value")
            body = (1 + varlong_size(ts_delta) + varint_size(self.count)
                    + varint_size(<int32_t>klen) + (klen if klen > 0 else 0)
                    + varint_size(<int32_t>vlen) + (vlen if vlen > 0 else 0)
                    + varint_size(hcount) + hsize)
            if body > INT32_MAX - 5:
                raise ValueError(f"a record of {body} bytes is larger than a batch can hold")
            rc_bb_reserve(&self.buf, varint_size(<int32_t>body) + body)
            p = <uint8_t *>rc_bb_data(&self.buf) + self.buf.len
            p = write_varint(p, <int32_t>body)
            p[0] = 0  # record attributes: unused
            p = write_varlong(p + 1, ts_delta)
            p = write_varint(p, self.count)
            p = write_varint(p, <int32_t>klen)
            if klen > 0:
                memcpy(p, kdata, klen)
                p += klen
            p = write_varint(p, <int32_t>vlen)
            if vlen > 0:
                memcpy(p, vdata, vlen)
                p += vlen
            p = write_varint(p, hcount)
            if hcount:
                p = self._write_headers(p, checked_headers)
            self.buf.len = p - <uint8_t *>rc_bb_data(&self.buf)
            if self.count == 0:
                self.base_timestamp = timestamp
                self.max_timestamp = timestamp
            elif timestamp > self.max_timestamp:
                self.max_timestamp = timestamp
            self.count += 1
        finally:
            if krel:
                PyBuffer_Release(&kview)
            if vrel:
                PyBuffer_Release(&vview)
        return 0

    def append(self, key, value, headers=None, timestamp_ms=None):
        """Add one record. ``key``/``value``: bytes-like or None; ``headers``: (str, bytes)
        pairs; ``timestamp_ms``: the record's create time (default: the builder's)."""
        self._append(key, value, headers,
                     self.default_timestamp if timestamp_ms is None else <int64_t>timestamp_ms)

    def extend(self, records):
        """Add records given as (key, value) or (key, value, headers) tuples."""
        cdef Py_ssize_t n
        cdef int64_t ts = self.default_timestamp
        for rec in records:
            n = len(rec)
            if n == 2:
                self._append(rec[0], rec[1], None, ts)
            elif n == 3:
                self._append(rec[0], rec[1], rec[2], ts)
            else:
                raise ValueError(
                    f"a record is (key, value) or (key, value, headers), got {n} items"
                )

    def extend_kv(self, keys, values):
        """Add records from parallel sequences of keys and values (``keys`` may be None for
        null keys)."""
        cdef Py_ssize_t i, n = len(values)
        cdef int64_t ts = self.default_timestamp
        if keys is None:
            for i in range(n):
                self._append(None, values[i], None, ts)
            return
        if len(keys) != n:
            raise ValueError(f"{len(keys)} keys but {n} values")
        if isinstance(keys, list) and isinstance(values, list):
            for i in range(n):
                self._append((<list>keys)[i], (<list>values)[i], None, ts)
        else:
            for i in range(n):
                self._append(keys[i], values[i], None, ts)

    def build(self):
        """Finish the batch and return its bytes (CRC filled in). The builder is spent."""
        cdef uint8_t *p
        cdef Py_ssize_t total
        cdef int16_t attributes
        cdef object out
        self._check_open()
        if self.count == 0:
            raise ValueError("a record batch needs at least one record")
        self.built = True
        if self.codec != COMPRESSION_NONE:
            payload = PyBytes_FromStringAndSize(
                rc_bb_data(&self.buf) + HEADER_SIZE, self.buf.len - HEADER_SIZE)
            compressed = _compress(self.codec, payload)
            total = HEADER_SIZE + len(compressed)
            out = PyBytes_FromStringAndSize(NULL, total)
            p = <uint8_t *>PyBytes_AS_STRING(out)
            memcpy(p + HEADER_SIZE, PyBytes_AS_STRING(compressed), total - HEADER_SIZE)
            rc_bb_free(&self.buf)
        else:
            total = self.buf.len
            out = rc_bb_finish(&self.buf)
            p = <uint8_t *>PyBytes_AS_STRING(out)
        if total - LOG_OVERHEAD > INT32_MAX:
            raise ValueError(f"a record batch of {total} bytes exceeds the 2 GiB format limit")
        attributes = <int16_t>self.codec
        if self.control:
            attributes |= CONTROL_FLAG
        store_u64(p + BASE_OFFSET_OFF, <uint64_t>self.base_offset)
        store_u32(p + LENGTH_OFF, <uint32_t>(total - LOG_OVERHEAD))
        store_u32(p + EPOCH_OFF, <uint32_t>self.leader_epoch)
        p[MAGIC_OFF] = 2
        store_u16(p + ATTRIBUTES_OFF, <uint16_t>attributes)
        store_u32(p + LAST_OFFSET_DELTA_OFF, <uint32_t>(self.count - 1))
        store_u64(p + BASE_TIMESTAMP_OFF, <uint64_t>self.base_timestamp)
        store_u64(p + MAX_TIMESTAMP_OFF, <uint64_t>self.max_timestamp)
        store_u64(p + PRODUCER_ID_OFF, <uint64_t>self.producer_id)
        store_u16(p + PRODUCER_EPOCH_OFF, <uint16_t>self.producer_epoch)
        store_u32(p + BASE_SEQUENCE_OFF, <uint32_t>self.base_sequence)
        store_u32(p + RECORDS_COUNT_OFF, <uint32_t>self.count)
        store_u32(p + CRC_OFF, _crc_of(p, total))
        return out


cdef uint32_t _crc_of(const uint8_t *batch, Py_ssize_t size) noexcept:
    """CRC-32C of a batch as stored at byte 17: it covers attributes to the end."""
    cdef uint32_t crc
    if size - ATTRIBUTES_OFF >= NOGIL_CRC_BYTES:
        with nogil:
            crc = rc_crc32c(0, batch + ATTRIBUTES_OFF, size - ATTRIBUTES_OFF)
        return crc
    return rc_crc32c(0, batch + ATTRIBUTES_OFF, size - ATTRIBUTES_OFF)


cdef object _compress(int codec, bytes payload):
    if codec == COMPRESSION_GZIP:
        c = zlib.compressobj(GZIP_LEVEL, zlib.DEFLATED, 31)  # 31: gzip framing, as Kafka
        return c.compress(payload) + c.flush()
    if codec == COMPRESSION_ZSTD:
        return _zstd_compressor().compress(payload)
    if codec == COMPRESSION_LZ4:
        return compress_lz4(payload)
    if codec == COMPRESSION_SNAPPY:
        return compress_snappy(payload)
    raise AssertionError(codec)


def encode_batch(records, *, int64_t base_offset=0, int32_t leader_epoch=0, compression="none",
                 timestamp_ms=None, bint control=False, int64_t producer_id=-1,
                 int16_t producer_epoch=-1, int32_t base_sequence=-1):
    """Encode records into one Kafka record batch v2 and return its bytes.

    ``records``: an iterable of (key, value) or (key, value, headers); key and value are
    bytes-like or None, headers a list of (str, bytes-or-None). Offsets run from
    ``base_offset``; every record gets ``timestamp_ms`` (default: now).
    """
    cdef BatchBuilder b = BatchBuilder(
        base_offset=base_offset, leader_epoch=leader_epoch, compression=compression,
        timestamp_ms=timestamp_ms, control=control, producer_id=producer_id,
        producer_epoch=producer_epoch, base_sequence=base_sequence)
    b.extend(records)
    return b.build()


def encode_batch_kv(keys, values, *, int64_t base_offset=0, int32_t leader_epoch=0,
                    compression="none", timestamp_ms=None, bint control=False,
                    int64_t producer_id=-1, int16_t producer_epoch=-1,
                    int32_t base_sequence=-1):
    """Like ``encode_batch``, from parallel lists of keys (or None) and values."""
    cdef BatchBuilder b = BatchBuilder(
        base_offset=base_offset, leader_epoch=leader_epoch, compression=compression,
        timestamp_ms=timestamp_ms, control=control, producer_id=producer_id,
        producer_epoch=producer_epoch, base_sequence=base_sequence)
    b.extend_kv(keys, values)
    return b.build()


# ---- reader ----------------------------------------------------------------------------------

@cython.freelist(256)
@cython.final
cdef class Record:
    """One record of a batch: ``offset``, ``timestamp`` (ms), ``key`` and ``value`` (bytes or
    None) and ``headers`` (a tuple of (str, bytes-or-None) pairs)."""
    cdef readonly int64_t offset
    cdef readonly int64_t timestamp
    cdef readonly object key
    cdef readonly object value
    cdef readonly tuple headers

    def __repr__(self):
        return (f"Record(offset={self.offset}, timestamp={self.timestamp}, key={self.key!r}, "
                f"value={self.value!r}, headers={self.headers!r})")

    def __eq__(self, other):
        cdef Record o
        if not isinstance(other, Record):
            return NotImplemented
        o = <Record>other
        return (self.offset == o.offset and self.timestamp == o.timestamp
                and self.key == o.key and self.value == o.value and self.headers == o.headers)

    def __hash__(self):
        return hash((self.offset, self.timestamp, self.key, self.value, self.headers))


cdef tuple _EMPTY = ()


@cython.final
cdef class RecordBatch:
    """A view of one record batch inside a caller's buffer.

    Header fields are read without decoding records. ``validate()`` checks the CRC;
    ``records()`` iterates the records (checking the CRC first, once).
    """
    cdef _Buffer owner
    cdef const uint8_t *p
    cdef Py_ssize_t offset      # of the batch inside owner
    cdef readonly Py_ssize_t size_in_bytes
    cdef readonly Py_ssize_t position
    cdef readonly int64_t base_offset
    cdef readonly int32_t partition_leader_epoch
    cdef readonly uint32_t crc
    cdef readonly int16_t attributes
    cdef readonly int32_t last_offset_delta
    cdef readonly int64_t base_timestamp
    cdef readonly int64_t max_timestamp
    cdef readonly int64_t producer_id
    cdef readonly int16_t producer_epoch
    cdef readonly int32_t base_sequence
    cdef readonly int32_t record_count
    cdef int crc_state  # 0 unknown, 1 valid, -1 invalid

    def __init__(self):
        raise TypeError("RecordBatch objects come from iter_batches()")

    @property
    def magic(self):
        return 2

    @property
    def last_offset(self):
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self):
        return self.base_offset + self.last_offset_delta + 1

    @property
    def is_control(self):
        return (self.attributes & CONTROL_FLAG) != 0

    @property
    def is_transactional(self):
        return (self.attributes & TRANSACTIONAL_FLAG) != 0

    @property
    def compression(self):
        """"none", "gzip", "snappy", "lz4" or "zstd"."""
        cdef int codec = self.attributes & CODEC_MASK
        return COMPRESSION_NAMES[codec] if codec < 5 else f"unknown({codec})"

    @property
    def timestamp_type(self):
        """0 for CreateTime, 1 for LogAppendTime."""
        return 1 if self.attributes & TIMESTAMP_TYPE_FLAG else 0

    @property
    def buffer(self):
        """The batch's bytes, as a zero-copy memoryview."""
        return memoryview(self.owner)[self.offset:self.offset + self.size_in_bytes]

    def to_bytes(self):
        return PyBytes_FromStringAndSize(<const char *>self.p, self.size_in_bytes)

    def compute_crc(self):
        """The CRC-32C of the batch's bytes as they are now."""
        return _crc_of(self.p, self.size_in_bytes)

    def is_valid(self):
        """True when the stored CRC matches the batch's bytes."""
        if self.crc_state == 0:
            self.crc_state = 1 if _crc_of(self.p, self.size_in_bytes) == self.crc else -1
        return self.crc_state == 1

    def validate(self):
        """Raise CorruptRecordError unless the stored CRC matches the batch's bytes."""
        if not self.is_valid():
            raise _corrupt(
                f"record batch at offset {self.base_offset} has CRC {self.crc:#010x} but its "
                f"bytes give {_crc_of(self.p, self.size_in_bytes):#010x}",
                self.position)

    def records(self):
        """Iterate the batch's records, after checking its CRC."""
        self.validate()
        return _RecordIterator._new(self)

    def __iter__(self):
        return self.records()

    def __len__(self):
        return self.record_count

    @property
    def control_type(self):
        """For a control batch, the type of its first record's key (ControlRecordType value:
        0 ABORT, 1 COMMIT, 2 LEADER_CHANGE, 3 SNAPSHOT_HEADER, 4 SNAPSHOT_FOOTER,
        5 KRAFT_VERSION, 6 KRAFT_VOTERS); None for a data batch."""
        if not self.is_control:
            return None
        for record in self.records():
            key = record.key
            if key is None or len(key) < 4:
                raise _corrupt(f"control record at offset {record.offset} has a key of "
                               f"{0 if key is None else len(key)} bytes, need 4", self.position)
            return load_i16(<const uint8_t *>PyBytes_AS_STRING(key) + 2)
        raise _corrupt(f"control batch at offset {self.base_offset} has no records",
                       self.position)

    def __repr__(self):
        return (f"RecordBatch(base_offset={self.base_offset}, last_offset={self.last_offset}, "
                f"epoch={self.partition_leader_epoch}, records={self.record_count}, "
                f"size={self.size_in_bytes}, compression={self.compression!r}, "
                f"control={self.is_control})")


cdef int _check_header(const uint8_t *p, Py_ssize_t avail, Py_ssize_t position,
                       Py_ssize_t *size_out) except -1:
    """Check that a whole, structurally sound batch starts at p, with avail readable bytes."""
    cdef int32_t length, last_delta, count
    cdef Py_ssize_t size
    cdef int16_t attributes
    if avail < LOG_OVERHEAD:
        raise _corrupt(f"truncated record batch: {avail} bytes left, a batch header needs "
                       f"{HEADER_SIZE}", position)
    length = load_i32(p + LENGTH_OFF)
    if length < HEADER_SIZE - LOG_OVERHEAD:
        raise _corrupt(f"record batch length {length} is below the minimum "
                       f"{HEADER_SIZE - LOG_OVERHEAD}", position)
    size = <Py_ssize_t>length + LOG_OVERHEAD
    if size > avail:
        raise _corrupt(f"truncated record batch: its length says {size} bytes but only "
                       f"{avail} remain", position)
    if p[MAGIC_OFF] != 2:
        raise _corrupt(f"record batch magic is {p[MAGIC_OFF]}, only magic 2 is supported",
                       position)
    last_delta = load_i32(p + LAST_OFFSET_DELTA_OFF)
    count = load_i32(p + RECORDS_COUNT_OFF)
    attributes = load_i16(p + ATTRIBUTES_OFF)
    if count < 0 or last_delta < 0:
        raise _corrupt(f"record batch has record count {count} and last offset delta "
                       f"{last_delta}", position)
    if load_i64(p + BASE_OFFSET_OFF) < 0:
        raise _corrupt(f"record batch has negative base offset "
                       f"{load_i64(p + BASE_OFFSET_OFF)}", position)
    if (attributes & CODEC_MASK) == 0 and <int64_t>count * MIN_RECORD_SIZE > size - HEADER_SIZE:
        raise _corrupt(f"record batch claims {count} records in {size - HEADER_SIZE} bytes",
                       position)
    size_out[0] = size
    return 0


cdef RecordBatch _make_batch(_Buffer owner, Py_ssize_t offset, Py_ssize_t size,
                             Py_ssize_t base_position):
    cdef const uint8_t *p = owner.data() + offset
    cdef RecordBatch b = RecordBatch.__new__(RecordBatch)
    b.owner = owner
    b.p = p
    b.offset = offset
    b.size_in_bytes = size
    b.position = base_position + offset
    b.base_offset = load_i64(p + BASE_OFFSET_OFF)
    b.partition_leader_epoch = load_i32(p + EPOCH_OFF)
    b.crc = load_u32(p + CRC_OFF)
    b.attributes = load_i16(p + ATTRIBUTES_OFF)
    b.last_offset_delta = load_i32(p + LAST_OFFSET_DELTA_OFF)
    b.base_timestamp = load_i64(p + BASE_TIMESTAMP_OFF)
    b.max_timestamp = load_i64(p + MAX_TIMESTAMP_OFF)
    b.producer_id = load_i64(p + PRODUCER_ID_OFF)
    b.producer_epoch = load_i16(p + PRODUCER_EPOCH_OFF)
    b.base_sequence = load_i32(p + BASE_SEQUENCE_OFF)
    b.record_count = load_i32(p + RECORDS_COUNT_OFF)
    b.crc_state = 0
    return b


@cython.final
cdef class _BatchIterator:
    cdef _Buffer buf
    cdef Py_ssize_t pos
    cdef Py_ssize_t end
    cdef Py_ssize_t base_position

    def __iter__(self):
        return self

    def __next__(self):
        cdef Py_ssize_t size
        if self.pos >= self.end:
            raise StopIteration
        _check_header(self.buf.data() + self.pos, self.end - self.pos,
                      self.base_position + self.pos, &size)
        batch = _make_batch(self.buf, self.pos, size, self.base_position)
        self.pos += size
        return batch


def iter_batches(buffer, Py_ssize_t base_position=0):
    """Iterate the record batches of ``buffer`` (any bytes-like object), in order.

    Each RecordBatch is a zero-copy view and keeps the buffer alive. A truncated or malformed
    batch raises CorruptRecordError naming its byte position (plus ``base_position``, for
    buffers cut from a larger file).
    """
    cdef _BatchIterator it = _BatchIterator.__new__(_BatchIterator)
    it.buf = _Buffer(buffer)
    it.pos = 0
    it.end = it.buf.length()
    it.base_position = base_position
    return it


cdef object _decompress(int codec, const uint8_t *data, Py_ssize_t size, Py_ssize_t position):
    cdef object src = PyBytes_FromStringAndSize(<const char *>data, size)
    cdef Py_ssize_t limit = _max_decompressed
    if codec == COMPRESSION_GZIP:
        try:
            d = zlib.decompressobj(47)  # gzip or zlib framing, detected from the header
            # One byte more than the limit shows an overflow (without overflowing Py_ssize_t).
            out = d.decompress(src, limit + 1 if limit < PY_SSIZE_T_MAX else limit)
        except zlib.error as exc:
            raise _corrupt(f"gzip payload does not decompress: {exc}", position) from None
        if len(out) > limit:
            raise _corrupt(f"gzip payload expands beyond {limit} bytes", position)
        if not d.eof:
            raise _corrupt("gzip payload is truncated", position)
        return out
    if codec == COMPRESSION_ZSTD:
        # A bounded streaming read: a frame may or may not declare its content size (Kafka's
        # Java producer does not), and a hostile one must not expand without limit. A truncated
        # frame yields short output, which the record parser then refuses (too few records).
        try:
            declared = zstandard.frame_content_size(src)
            chunk = declared + 1 if 0 <= declared <= limit else 1 << 20
            reader = _zstd_decompressor().stream_reader(src, read_across_frames=True)
            parts = []
            total = 0
            while True:
                piece = reader.read(chunk)
                if not piece:
                    break
                total += len(piece)
                if total > limit:
                    raise _corrupt(f"zstd payload expands beyond {limit} bytes", position)
                parts.append(piece)
        except zstandard.ZstdError as exc:
            raise _corrupt(f"zstd payload does not decompress: {exc}", position) from None
        return parts[0] if len(parts) == 1 else b"".join(parts)
    if codec > COMPRESSION_ZSTD:
        # No Kafka codec has this id, so the batch is corrupt.
        raise _corrupt(f"record batch has unknown compression codec id {codec}", position)
    try:  # snappy or lz4 (raftcore.compression)
        if codec == COMPRESSION_SNAPPY:
            return decompress_snappy(src, limit)
        return decompress_lz4(src, limit)
    except CodecError as exc:
        raise _corrupt(str(exc), position) from None


def decompress_records(int codec, data, Py_ssize_t position=0):
    """The records of a compressed batch payload (the bytes after its 61-byte header),
    decompressed by codec id within the decompression limit. Raises CorruptRecordError for a
    payload that does not decompress or expands beyond the limit (``position`` is
    reported)."""
    cdef Py_buffer view
    if codec < 0 or codec > CODEC_MASK:
        raise ValueError(f"a compression codec id is 0..7, got {codec}")
    PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
    try:
        if codec == COMPRESSION_NONE:
            return PyBytes_FromStringAndSize(<const char *>view.buf, view.len)
        return _decompress(codec, <const uint8_t *>view.buf, view.len, position)
    finally:
        PyBuffer_Release(&view)


@cython.final
cdef class _RecordIterator:
    cdef RecordBatch batch
    cdef object payload          # decompressed records, when the batch is compressed
    cdef const uint8_t *start
    cdef const uint8_t *p
    cdef const uint8_t *end
    cdef int32_t remaining
    cdef int32_t prev_delta
    cdef bint log_append_time

    @staticmethod
    cdef _RecordIterator _new(RecordBatch batch):
        cdef _RecordIterator it = _RecordIterator.__new__(_RecordIterator)
        cdef int codec = batch.attributes & CODEC_MASK
        it.batch = batch
        if codec == COMPRESSION_NONE:
            it.payload = None
            it.start = batch.p + HEADER_SIZE
            it.end = batch.p + batch.size_in_bytes
        else:
            it.payload = _decompress(codec, batch.p + HEADER_SIZE,
                                     batch.size_in_bytes - HEADER_SIZE, batch.position)
            it.start = <const uint8_t *>PyBytes_AS_STRING(it.payload)
            it.end = it.start + PyBytes_GET_SIZE(it.payload)
        it.p = it.start
        it.remaining = batch.record_count
        it.prev_delta = -1
        it.log_append_time = (batch.attributes & TIMESTAMP_TYPE_FLAG) != 0
        return it

    def __iter__(self):
        return self

    cdef Py_ssize_t _where(self, const uint8_t *q) noexcept:
        if self.payload is None:
            return self.batch.position + (q - self.batch.p)
        return self.batch.position  # inside a compressed payload: report the batch

    cdef object _bad(self, str what, const uint8_t *q):
        where = "" if self.payload is None else f" (byte {q - self.start} of the decompressed records)"
        return _corrupt(f"record batch at offset {self.batch.base_offset}: {what}{where}",
                        self._where(q))

    def __next__(self):
        cdef const uint8_t *p = self.p
        cdef const uint8_t *rec_start = p
        cdef const uint8_t *rec_end
        cdef const uint8_t *q
        cdef int32_t length, offset_delta, klen, vlen, hcount, hklen, hvlen, i
        cdef int64_t ts_delta
        cdef Record r
        cdef list header_list
        if self.remaining == 0:
            if p != self.end:
                raise self._bad(f"{self.end - p} bytes follow the last of "
                                f"{self.batch.record_count} records", p)
            raise StopIteration
        q = read_varint(p, self.end, &length)
        if q == NULL:
            raise self._bad("truncated record length", p)
        if length < MIN_RECORD_SIZE - 1 or length > self.end - q:
            raise self._bad(f"record length {length} does not fit in the batch "
                            f"({self.end - q} bytes left)", p)
        p = q
        rec_end = p + length
        p += 1  # attributes (unused)
        p = read_varlong(p, rec_end, &ts_delta)
        if p == NULL:
            raise self._bad("bad record timestamp delta", rec_start)
        q = read_varint(p, rec_end, &offset_delta)
        if q == NULL:
            raise self._bad("bad record offset delta", p)
        if offset_delta <= self.prev_delta or offset_delta > self.batch.last_offset_delta:
            raise self._bad(f"record offset delta {offset_delta} is out of order (previous "
                            f"{self.prev_delta}, last {self.batch.last_offset_delta})", p)
        p = q
        r = Record.__new__(Record)
        r.offset = self.batch.base_offset + offset_delta
        r.timestamp = (self.batch.max_timestamp if self.log_append_time
                       else self.batch.base_timestamp + ts_delta)
        q = read_varint(p, rec_end, &klen)
        if q == NULL or klen < -1 or klen > rec_end - q:
            raise self._bad(f"record key length does not fit in the record", p)
        p = q
        if klen >= 0:
            r.key = PyBytes_FromStringAndSize(<const char *>p, klen)
            p += klen
        else:
            r.key = None
        q = read_varint(p, rec_end, &vlen)
        if q == NULL or vlen < -1 or vlen > rec_end - q:
            raise self._bad(f"record value length does not fit in the record", p)
        p = q
        if vlen >= 0:
            r.value = PyBytes_FromStringAndSize(<const char *>p, vlen)
            p += vlen
        else:
            r.value = None
        q = read_varint(p, rec_end, &hcount)
        if q == NULL or hcount < 0 or hcount > rec_end - q:
            raise self._bad(f"bad record header count", p)
        p = q
        if hcount == 0:
            r.headers = _EMPTY
        else:
            header_list = []
            for i in range(hcount):
                q = read_varint(p, rec_end, &hklen)
                if q == NULL or hklen < 0 or hklen > rec_end - q:
                    raise self._bad("record header key length does not fit in the record", p)
                p = q
                try:
                    hk = PyUnicode_DecodeUTF8(<const char *>p, hklen, NULL)
                except UnicodeDecodeError:
                    raise self._bad("record header key is not UTF-8", p) from None
                p += hklen
                q = read_varint(p, rec_end, &hvlen)
                if q == NULL or hvlen < -1 or hvlen > rec_end - q:
                    raise self._bad("record header value length does not fit in the record",
                                    p)
                p = q
                if hvlen >= 0:
                    hv = PyBytes_FromStringAndSize(<const char *>p, hvlen)
                    p += hvlen
                else:
                    hv = None
                header_list.append((hk, hv))
            r.headers = tuple(header_list)
        if p != rec_end:
            raise self._bad(f"record length {length} disagrees with its fields "
                            f"({rec_end - p} bytes unread)", rec_start)
        self.p = rec_end
        self.prev_delta = offset_delta
        self.remaining -= 1
        return r


# ---- scanning (for the log: validation on append, recovery, reads) --------------------------

@cython.final
cdef class BatchScan:
    """What ``scan_batches`` found: one entry per whole, valid batch, in numpy arrays, and
    where (and why) the scan stopped early, if it did."""
    cdef readonly Py_ssize_t count
    cdef readonly Py_ssize_t start
    cdef readonly Py_ssize_t valid_end
    cdef readonly object error
    cdef readonly Py_ssize_t error_position
    cdef readonly object positions       # int64: byte position of each batch
    cdef readonly object sizes           # int64
    cdef readonly object base_offsets    # int64
    cdef readonly object last_offsets    # int64
    cdef readonly object epochs          # int32: partition leader epoch
    cdef readonly object max_timestamps  # int64
    cdef readonly object attributes      # int16
    cdef readonly object producer_ids    # int64
    cdef readonly object producer_epochs # int16
    cdef readonly object base_sequences  # int32
    cdef readonly Py_ssize_t discontinuity
    cdef readonly list epoch_starts

    @property
    def discontinuity_reason(self):
        """Why batch ``discontinuity`` does not follow the one before it (None if all do)."""
        cdef Py_ssize_t k = self.discontinuity
        if k < 0:
            return None
        prev_last = int(self.last_offsets[k - 1])
        base = int(self.base_offsets[k])
        if base != prev_last + 1:
            return f"batch at offset {base} does not follow offset {prev_last}"
        return (f"leader epoch drops from {int(self.epochs[k - 1])} to {int(self.epochs[k])} "
                f"at offset {base}")

    def __repr__(self):
        return (f"BatchScan(count={self.count}, start={self.start}, valid_end={self.valid_end}, "
                f"error={self.error!r})")

    def raise_error(self):
        """Raise the scan's error as a CorruptRecordError, if it stopped on one."""
        if self.error is not None:
            raise CorruptRecordError(self.error, self.error_position)


def scan_batches(buffer, Py_ssize_t start=0, Py_ssize_t end=-1, *, bint check_crc=True,
                 Py_ssize_t base_position=0):
    """Walk the batches in ``buffer[start:end]`` and describe each one, stopping at the first
    truncated, malformed or (with ``check_crc``) CRC-failing batch.

    Never raises for bad data: the result carries ``error`` and ``error_position`` (plus
    ``base_position``) instead, and ``valid_end``, the position just after the last good batch.
    This is what recovery needs to cut a torn tail, and what an append needs to refuse bad
    input.

    The scan also reports the log's order rules over the batches it accepted:
    ``discontinuity`` is the index of the first batch whose base offset does not follow the
    previous batch's last offset or whose leader epoch is lower than the previous one (-1 if
    none), and ``epoch_starts`` lists (epoch, base offset) for the first batch and every batch
    whose epoch differs from the one before it.
    """
    cdef _Buffer buf = _Buffer(buffer)
    cdef const uint8_t *data = buf.data()
    cdef Py_ssize_t n = buf.length()
    cdef Py_ssize_t pos, size, count = 0, i
    cdef int32_t length
    cdef str error = None
    cdef Py_ssize_t error_pos = -1
    cdef BatchScan scan = BatchScan.__new__(BatchScan)
    if end < 0 or end > n:
        end = n
    if start < 0 or start > end:
        raise ValueError(f"scan start {start} is outside the buffer (0..{end})")
    # First pass: how many batches are structurally whole.
    pos = start
    while pos < end:
        try:
            _check_header(data + pos, end - pos, base_position + pos, &size)
        except CorruptRecordError as exc:
            error = str(exc)
            error_pos = base_position + pos
            break
        pos += size
        count += 1
    positions = np.empty(count, dtype=np.int64)
    sizes = np.empty(count, dtype=np.int64)
    base_offsets = np.empty(count, dtype=np.int64)
    last_offsets = np.empty(count, dtype=np.int64)
    epochs = np.empty(count, dtype=np.int32)
    max_timestamps = np.empty(count, dtype=np.int64)
    attributes = np.empty(count, dtype=np.int16)
    producer_ids = np.empty(count, dtype=np.int64)
    producer_epochs = np.empty(count, dtype=np.int16)
    base_sequences = np.empty(count, dtype=np.int32)
    cdef int64_t[::1] v_pos = positions
    cdef int64_t[::1] v_size = sizes
    cdef int64_t[::1] v_base = base_offsets
    cdef int64_t[::1] v_last = last_offsets
    cdef int32_t[::1] v_epoch = epochs
    cdef int64_t[::1] v_ts = max_timestamps
    cdef int16_t[::1] v_attr = attributes
    cdef int64_t[::1] v_pid = producer_ids
    cdef int16_t[::1] v_pepoch = producer_epochs
    cdef int32_t[::1] v_bseq = base_sequences
    cdef Py_ssize_t bad = -1
    cdef Py_ssize_t discontinuity = -1
    cdef const uint8_t *p
    # Second pass: fill in, checking CRCs.
    with nogil:
        pos = start
        for i in range(count):
            p = data + pos
            size = <Py_ssize_t>load_i32(p + LENGTH_OFF) + LOG_OVERHEAD
            if check_crc and rc_crc32c(0, p + ATTRIBUTES_OFF, size - ATTRIBUTES_OFF) != load_u32(p + CRC_OFF):
                bad = i
                break
            v_pos[i] = base_position + pos
            v_size[i] = size
            v_base[i] = load_i64(p + BASE_OFFSET_OFF)
            v_last[i] = v_base[i] + load_i32(p + LAST_OFFSET_DELTA_OFF)
            v_epoch[i] = load_i32(p + EPOCH_OFF)
            v_ts[i] = load_i64(p + MAX_TIMESTAMP_OFF)
            v_attr[i] = load_i16(p + ATTRIBUTES_OFF)
            v_pid[i] = load_i64(p + PRODUCER_ID_OFF)
            v_pepoch[i] = load_i16(p + PRODUCER_EPOCH_OFF)
            v_bseq[i] = load_i32(p + BASE_SEQUENCE_OFF)
            if discontinuity < 0 and i > 0 and (
                    v_base[i] != v_last[i - 1] + 1 or v_epoch[i] < v_epoch[i - 1]):
                discontinuity = i
            pos += size
    if bad >= 0:
        p = data + pos
        error_pos = base_position + pos
        error = (f"record batch at offset {load_i64(p + BASE_OFFSET_OFF)} fails its CRC check "
                 f"(at byte position {error_pos})")
        count = bad
        positions = positions[:count]
        sizes = sizes[:count]
        base_offsets = base_offsets[:count]
        last_offsets = last_offsets[:count]
        epochs = epochs[:count]
        max_timestamps = max_timestamps[:count]
        attributes = attributes[:count]
        producer_ids = producer_ids[:count]
        producer_epochs = producer_epochs[:count]
        base_sequences = base_sequences[:count]
    scan.count = count
    scan.start = base_position + start
    scan.valid_end = base_position + pos
    scan.error = error
    scan.error_position = error_pos
    scan.positions = positions
    scan.sizes = sizes
    scan.base_offsets = base_offsets
    scan.last_offsets = last_offsets
    scan.epochs = epochs
    scan.max_timestamps = max_timestamps
    scan.attributes = attributes
    scan.producer_ids = producer_ids
    scan.producer_epochs = producer_epochs
    scan.base_sequences = base_sequences
    scan.discontinuity = discontinuity if discontinuity < count else -1
    starts = []
    for i in range(count):
        if i == 0 or v_epoch[i] != v_epoch[i - 1]:
            starts.append((v_epoch[i], v_base[i]))
    scan.epoch_starts = starts
    return scan


def find_batch(buffer, int64_t target_offset, Py_ssize_t start=0, Py_ssize_t end=-1):
    """Position of the first batch in ``buffer[start:end]`` whose last offset is >=
    ``target_offset`` (``end`` when there is none). Walks headers only."""
    cdef _Buffer buf = _Buffer(buffer)
    cdef const uint8_t *data = buf.data()
    cdef Py_ssize_t pos, size
    if end < 0 or end > buf.length():
        end = buf.length()
    if start < 0:
        raise ValueError(f"find_batch start {start} is negative")
    pos = start
    while pos < end:
        _check_header(data + pos, end - pos, pos, &size)
        if load_i64(data + pos) + load_i32(data + pos + LAST_OFFSET_DELTA_OFF) >= target_offset:
            return pos
        pos += size
    return end


def span_batches(buffer, Py_ssize_t start, Py_ssize_t end, Py_ssize_t max_bytes):
    """End position of the longest run of whole batches from ``start`` that fits in
    ``max_bytes`` -- but at least one batch, so that a reader always makes progress."""
    cdef _Buffer buf = _Buffer(buffer)
    cdef const uint8_t *data = buf.data()
    cdef Py_ssize_t pos, size
    if end < 0 or end > buf.length():
        end = buf.length()
    if start < 0:
        raise ValueError(f"span_batches start {start} is negative")
    pos = start
    while pos < end:
        _check_header(data + pos, end - pos, pos, &size)
        if pos > start and pos + size - start > max_bytes:
            break
        pos += size
    return pos


def check_batch_crcs(buffer, Py_ssize_t start=0, Py_ssize_t end=-1):
    """Position of the first batch in ``buffer[start:end]`` that is malformed or fails its CRC
    check, or -1 when every batch is sound. Runs without the GIL."""
    cdef _Buffer buf = _Buffer(buffer)
    cdef const uint8_t *data = buf.data()
    cdef Py_ssize_t pos, size, bad = -1
    cdef int32_t length
    if end < 0 or end > buf.length():
        end = buf.length()
    if start < 0 or start > end:
        raise ValueError(f"check start {start} is outside the buffer (0..{end})")
    with nogil:
        pos = start
        while pos < end:
            if end - pos < HEADER_SIZE:
                bad = pos
                break
            length = load_i32(data + pos + LENGTH_OFF)
            size = <Py_ssize_t>length + LOG_OVERHEAD
            if length < HEADER_SIZE - LOG_OVERHEAD or size > end - pos or data[pos + MAGIC_OFF] != 2:
                bad = pos
                break
            if rc_crc32c(0, data + pos + ATTRIBUTES_OFF, size - ATTRIBUTES_OFF) != load_u32(data + pos + CRC_OFF):
                bad = pos
                break
            pos += size
    return bad


def restamp_batches(buffer, int64_t base_offset, int32_t leader_epoch):
    """A copy of the batches in ``buffer`` given consecutive offsets from ``base_offset`` and the
    partition leader epoch ``leader_epoch`` -- what a leader does to batches a producer sent.
    Both fields lie outside the CRC, which stays valid. Returns (bytes, next offset). Raises
    CorruptRecordError for malformed batches (the CRCs are not checked here)."""
    cdef _Buffer buf = _Buffer(buffer)
    cdef Py_ssize_t n = buf.length(), pos = 0, size
    cdef int64_t offset = base_offset
    out = PyBytes_FromStringAndSize(<const char *>buf.data(), n)
    cdef uint8_t *p = <uint8_t *>PyBytes_AS_STRING(out)
    while pos < n:
        _check_header(p + pos, n - pos, pos, &size)
        store_u64(p + pos + BASE_OFFSET_OFF, <uint64_t>offset)
        store_u32(p + pos + EPOCH_OFF, <uint32_t>leader_epoch)
        offset += <int64_t>load_i32(p + pos + LAST_OFFSET_DELTA_OFF) + 1
        pos += size
    return out, offset
