# Part of records.pyx (included): codec ids, compression and decompression of batch payloads.

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
