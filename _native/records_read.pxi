# Part of records.pyx (included): RecordBatch views, iter_batches and the record parser.

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


cdef RecordBatch _make_batch(_Buffer owner, Py_ssize_t offset, const BatchHeader *h,
                             Py_ssize_t base_position):
    cdef RecordBatch b = RecordBatch.__new__(RecordBatch)
    b.owner = owner
    b.p = owner.data() + offset
    b.offset = offset
    b.size_in_bytes = h.size
    b.position = base_position + offset
    b.base_offset = h.base_offset
    b.partition_leader_epoch = h.partition_leader_epoch
    b.crc = h.crc
    b.attributes = h.attributes
    b.last_offset_delta = h.last_offset_delta
    b.base_timestamp = h.base_timestamp
    b.max_timestamp = h.max_timestamp
    b.producer_id = h.producer_id
    b.producer_epoch = h.producer_epoch
    b.base_sequence = h.base_sequence
    b.record_count = h.record_count
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
        cdef BatchHeader h
        if self.pos >= self.end:
            raise StopIteration
        _check_header(self.buf.data() + self.pos, self.end - self.pos,
                      self.base_position + self.pos, &h)
        load_batch_header_details(self.buf.data() + self.pos, &h)
        batch = _make_batch(self.buf, self.pos, &h, self.base_position)
        self.pos += h.size
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
