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
used; a violation raises CorruptRecordError naming the byte position. Batch headers are parsed
by ``batch_header.pxd``, shared with the other native modules that read batches.

One extension module, its source split by idea into included files:

    records_compression.pxi  codec ids, compress and decompress (with the expansion limit)
    records_encode.pxi       BatchBuilder, encode_batch, encode_batch_kv
    records_read.pxi         RecordBatch, iter_batches, Record and the record parser
    records_scan.pxi         scan_batches and the header walks the log uses
"""

cimport cython
from cpython.buffer cimport (
    PyBUF_SIMPLE,
    PyBUF_WRITABLE,
    PyBuffer_FillInfo,
    PyBuffer_Release,
    PyObject_GetBuffer,
)
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

from batch_header cimport (
    ATTRIBUTES_OFF,
    BASE_OFFSET_OFF,
    BASE_SEQUENCE_OFF,
    BASE_TIMESTAMP_OFF,
    BH_OK,
    CODEC_MASK,
    CONTROL_FLAG,
    CRC_OFF,
    EPOCH_OFF,
    HEADER_SIZE,
    LAST_OFFSET_DELTA_OFF,
    LENGTH_OFF,
    LOG_OVERHEAD,
    MAGIC_OFF,
    MAX_TIMESTAMP_OFF,
    MIN_RECORD_SIZE,
    PRODUCER_EPOCH_OFF,
    PRODUCER_ID_OFF,
    RECORDS_COUNT_OFF,
    TIMESTAMP_TYPE_FLAG,
    TRANSACTIONAL_FLAG,
    BatchHeader,
    batch_crc,
    batch_header_problem,
    batch_header_rules,
    load_batch_header_details,
    parse_batch_header,
)
from crc32c_impl cimport rc_crc32c_init
from wire cimport (
    load_i16,
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

# ---- format constants (the byte layout is in batch_header.pxd) -------------------------------

# Smallest batch worth releasing the GIL for while computing its CRC.
cdef enum:
    NOGIL_CRC_BYTES = 65536

MAGIC = 2
RECORD_BATCH_OVERHEAD = HEADER_SIZE


cdef object _corrupt(str message, Py_ssize_t position):
    return CorruptRecordError(f"{message} (at byte position {position})", position)


cdef inline int _check_header(const uint8_t *p, Py_ssize_t avail, Py_ssize_t position,
                              BatchHeader *h) except -1:
    """Check that a whole, structurally sound batch starts at p, with avail readable bytes,
    and load its header into h; CorruptRecordError naming ``position`` if not."""
    cdef int problem = parse_batch_header(p, avail, h)
    if problem == BH_OK:
        problem = batch_header_rules(h)
    if problem != BH_OK:
        raise _corrupt(batch_header_problem(problem, h, avail), position)
    return 0


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


include "records_compression.pxi"
include "records_encode.pxi"
include "records_read.pxi"
include "records_scan.pxi"
