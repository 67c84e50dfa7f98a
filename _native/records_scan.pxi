# Part of records.pyx (included): batch walks for the log (validation on append, recovery,
# reads).

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


cdef struct _ScanColumns:
    int64_t *pos
    int64_t *size
    int64_t *base
    int64_t *last
    int32_t *epoch
    int64_t *ts
    int16_t *attr
    int64_t *pid
    int16_t *pepoch
    int32_t *bseq


cdef struct _ScanEnd:
    Py_ssize_t pos           # just after the last batch filled in
    Py_ssize_t bad           # index of the batch that failed (-1: none)
    Py_ssize_t discontinuity
    int problem
    BatchHeader h            # the header of the failed batch


cdef void _fill_scan(const uint8_t *data, Py_ssize_t start, Py_ssize_t end, Py_ssize_t count,
                     bint check_crc, Py_ssize_t base_position, _ScanColumns *c,
                     _ScanEnd *out) noexcept nogil:
    """scan_batches' second pass: fill in each of ``count`` batches, checking CRCs. The headers
    are parsed again rather than trusted: another thread may have changed the bytes since the
    first pass."""
    cdef Py_ssize_t pos = start, i
    cdef const uint8_t *p
    cdef BatchHeader h
    cdef int problem = BH_OK
    for i in range(count):
        p = data + pos
        problem = parse_batch_header(p, end - pos, &h)
        if problem == BH_OK:
            problem = batch_header_rules(&h)
        if problem != BH_OK or (check_crc and batch_crc(p, h.size) != h.crc):
            out.bad = i
            break
        load_batch_header_details(p, &h)
        c.pos[i] = base_position + pos
        c.size[i] = h.size
        c.base[i] = h.base_offset
        c.last[i] = h.base_offset + h.last_offset_delta
        c.epoch[i] = h.partition_leader_epoch
        c.ts[i] = h.max_timestamp
        c.attr[i] = h.attributes
        c.pid[i] = h.producer_id
        c.pepoch[i] = h.producer_epoch
        c.bseq[i] = h.base_sequence
        if out.discontinuity < 0 and i > 0 and (
                c.base[i] != c.last[i - 1] + 1 or c.epoch[i] < c.epoch[i - 1]):
            out.discontinuity = i
        pos += h.size
    out.pos = pos
    out.problem = problem
    out.h = h



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
    cdef Py_ssize_t pos, count = 0, i
    cdef BatchHeader h
    cdef int problem = BH_OK
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
        problem = parse_batch_header(data + pos, end - pos, &h)
        if problem == BH_OK:
            problem = batch_header_rules(&h)
        if problem != BH_OK:
            error_pos = base_position + pos
            error = f"{batch_header_problem(problem, &h, end - pos)} (at byte position {error_pos})"
            break
        pos += h.size
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
    cdef _ScanColumns cols
    cdef _ScanEnd done
    done.pos = start
    done.bad = -1
    done.discontinuity = -1
    done.problem = BH_OK
    if count > 0:
        cols.pos = &v_pos[0]
        cols.size = &v_size[0]
        cols.base = &v_base[0]
        cols.last = &v_last[0]
        cols.epoch = &v_epoch[0]
        cols.ts = &v_ts[0]
        cols.attr = &v_attr[0]
        cols.pid = &v_pid[0]
        cols.pepoch = &v_pepoch[0]
        cols.bseq = &v_bseq[0]
        # The GIL is let go only for much to walk: a thread that gives it up may wait long to
        # have it back (the fsync thread runs Python between its fsyncs), which cost a
        # 1-record Produce more than its scan.
        if end - start >= NOGIL_CRC_BYTES:
            with nogil:
                _fill_scan(data, start, end, count, check_crc, base_position, &cols, &done)
        else:
            _fill_scan(data, start, end, count, check_crc, base_position, &cols, &done)
    pos = done.pos
    h = done.h
    problem = done.problem
    cdef Py_ssize_t bad = done.bad
    cdef Py_ssize_t discontinuity = done.discontinuity
    if bad >= 0:
        error_pos = base_position + pos
        if problem != BH_OK:
            error = (f"{batch_header_problem(problem, &h, end - pos)} "
                     f"(at byte position {error_pos})")
        else:
            error = (f"record batch at offset {h.base_offset} fails its CRC check "
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
    cdef Py_ssize_t pos
    cdef BatchHeader h
    if end < 0 or end > buf.length():
        end = buf.length()
    if start < 0:
        raise ValueError(f"find_batch start {start} is negative")
    pos = start
    while pos < end:
        _check_header(data + pos, end - pos, pos, &h)
        if h.base_offset + h.last_offset_delta >= target_offset:
            return pos
        pos += h.size
    return end


def span_batches(buffer, Py_ssize_t start, Py_ssize_t end, Py_ssize_t max_bytes):
    """End position of the longest run of whole batches from ``start`` that fits in
    ``max_bytes`` -- but at least one batch, so that a reader always makes progress."""
    cdef _Buffer buf = _Buffer(buffer)
    cdef const uint8_t *data = buf.data()
    cdef Py_ssize_t pos
    cdef BatchHeader h
    if end < 0 or end > buf.length():
        end = buf.length()
    if start < 0:
        raise ValueError(f"span_batches start {start} is negative")
    pos = start
    while pos < end:
        _check_header(data + pos, end - pos, pos, &h)
        if pos > start and pos + h.size - start > max_bytes:
            break
        pos += h.size
    return pos


def check_batch_crcs(buffer, Py_ssize_t start=0, Py_ssize_t end=-1):
    """Position of the first batch in ``buffer[start:end]`` that is malformed or fails its CRC
    check, or -1 when every batch is sound. Runs without the GIL."""
    cdef _Buffer buf = _Buffer(buffer)
    cdef const uint8_t *data = buf.data()
    cdef Py_ssize_t pos, bad = -1
    cdef BatchHeader h
    if end < 0 or end > buf.length():
        end = buf.length()
    if start < 0 or start > end:
        raise ValueError(f"check start {start} is outside the buffer (0..{end})")
    with nogil:
        pos = start
        while pos < end:
            # Framing and CRC only: the callers scanned these batches (with the header rules)
            # before, and ask whether their bytes are still the ones the CRCs vouch for.
            if (parse_batch_header(data + pos, end - pos, &h) != BH_OK
                    or batch_crc(data + pos, h.size) != h.crc):
                bad = pos
                break
            pos += h.size
    return bad


def restamp_batches(buffer, int64_t base_offset, int32_t leader_epoch):
    """A copy of the batches in ``buffer`` given consecutive offsets from ``base_offset`` and the
    partition leader epoch ``leader_epoch`` -- what a leader does to batches a producer sent.
    Both fields lie outside the CRC, which stays valid. Returns (bytes, next offset). Raises
    CorruptRecordError for malformed batches (the CRCs are not checked here)."""
    cdef _Buffer buf = _Buffer(buffer)
    cdef Py_ssize_t n = buf.length(), pos = 0
    cdef BatchHeader h
    cdef int64_t offset = base_offset
    out = PyBytes_FromStringAndSize(<const char *>buf.data(), n)
    cdef uint8_t *p = <uint8_t *>PyBytes_AS_STRING(out)
    while pos < n:
        _check_header(p + pos, n - pos, pos, &h)
        store_u64(p + pos + BASE_OFFSET_OFF, <uint64_t>offset)
        store_u32(p + pos + EPOCH_OFF, <uint32_t>leader_epoch)
        offset += <int64_t>h.last_offset_delta + 1
        pos += h.size
    return out, offset


def restamp_scanned(buffer, BatchScan scan, int64_t base_offset, int32_t leader_epoch):
    """Give the batches ``scan`` describes (a scan of ``buffer`` from position 0, without an
    error) consecutive offsets from ``base_offset`` and the leader epoch ``leader_epoch`` -- what
    a leader does to batches a producer sent -- writing both fields where they lie: in
    ``buffer`` itself when it is writable, else in a copy. Both lie outside the CRC, which stays
    valid. The scan is brought up to date (offsets, epochs, epoch starts), so the batches need
    no walk again. Returns (the restamped buffer, next offset).

    Each batch's header is parsed again at its scanned position and must give the scanned size:
    a scan that is not this buffer's is a CorruptRecordError, never a write out of bounds."""
    cdef Py_buffer view
    cdef Py_ssize_t i, pos, n, count = scan.count
    cdef BatchHeader h
    cdef int64_t offset = base_offset
    cdef uint8_t *p
    if scan.error is not None:
        raise CorruptRecordError(f"cannot restamp batches that failed their scan: {scan.error}",
                                 scan.error_position)
    out = buffer
    try:
        PyObject_GetBuffer(out, &view, PyBUF_WRITABLE)
    except BufferError:  # read-only (bytes): the copy is written
        out = bytearray(buffer)
        PyObject_GetBuffer(out, &view, PyBUF_WRITABLE)
    cdef int64_t[::1] v_pos = scan.positions
    cdef int64_t[::1] v_size = scan.sizes
    cdef int64_t[::1] v_base = scan.base_offsets
    cdef int64_t[::1] v_last = scan.last_offsets
    cdef int32_t[::1] v_epoch = scan.epochs
    try:
        p = <uint8_t *>view.buf
        n = view.len
        for i in range(count):
            pos = v_pos[i]
            if (pos < 0 or pos > n or parse_batch_header(p + pos, n - pos, &h) != BH_OK
                    or h.size != v_size[i]):
                raise CorruptRecordError(
                    f"batch {i} of the scan is not at byte position {pos} of the buffer", pos)
            store_u64(p + pos + BASE_OFFSET_OFF, <uint64_t>offset)
            store_u32(p + pos + EPOCH_OFF, <uint32_t>leader_epoch)
            v_last[i] = offset + h.last_offset_delta
            v_base[i] = offset
            v_epoch[i] = leader_epoch
            offset += <int64_t>h.last_offset_delta + 1
    finally:
        PyBuffer_Release(&view)
    scan.epoch_starts = [(leader_epoch, base_offset)] if count else []
    scan.discontinuity = -1
    return out, offset
