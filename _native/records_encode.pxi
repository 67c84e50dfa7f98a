# Part of records.pyx (included): the encoder.

cdef int64_t _now_ms() noexcept nogil:
    cdef timespec ts
    clock_gettime(CLOCK_REALTIME, &ts)
    return <int64_t>ts.tv_sec * 1000 + ts.tv_nsec // 1000000


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
            crc = batch_crc(batch, size)
        return crc
    return batch_crc(batch, size)


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
