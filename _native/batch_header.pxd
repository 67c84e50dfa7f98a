# cython: language_level=3
"""The header of a Kafka record batch v2, parsed in one place for every native module that
reads batches (records, columnar, kv_records, validation).

Byte layout (big-endian integers; Kafka's DefaultRecordBatch):

    0  BaseOffset int64         8  Length int32 (batch size - 12)   12 PartitionLeaderEpoch int32
    16 Magic int8 (= 2)         17 CRC uint32 (CRC-32C of bytes 21..end)
    21 Attributes int16         23 LastOffsetDelta int32            27 BaseTimestamp int64
    35 MaxTimestamp int64       43 ProducerId int64                 51 ProducerEpoch int16
    53 BaseSequence int32       57 RecordsCount int32               61 records (maybe compressed)

``parse_batch_header`` frames a batch and loads the fields that walking and checking need: it
reads no byte it has not first shown to lie inside the readable range, and answers a BH_*
code instead of raising, so it runs without the GIL and each caller words the problem its
own way (``batch_header_problem`` gives the words of the record reader).
``load_batch_header_details`` loads the other fields (epoch, timestamps, producer), for the
readers that report them; a walk over headers only (find_batch) skips them.
``batch_header_rules`` adds the rules on the header's fields that hold whatever the CRC says.
The CRC is the caller's to check (``batch_crc``), before or after the rules as its own
contract requires.
"""

from libc.stdint cimport int16_t, int32_t, int64_t, uint8_t, uint32_t

from crc32c_impl cimport rc_crc32c
from wire cimport load_i16, load_i32, load_i64, load_u32

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
    UP_TO_MAGIC = 17           # the bytes that say how long a batch is and which format
    MIN_RECORD_SIZE = 7        # length, attributes, ts delta, offset delta, key, value, headers
    CODEC_MASK = 0x07
    TIMESTAMP_TYPE_FLAG = 0x08
    TRANSACTIONAL_FLAG = 0x10
    CONTROL_FLAG = 0x20

# What is wrong with a batch header, in the order the checks run (0: nothing).
cdef enum:
    BH_OK = 0
    BH_TRUNCATED_HEADER        # fewer than 17 bytes: not even the length and the magic
    BH_NEGATIVE_LENGTH
    BH_TRUNCATED_BATCH         # the length runs past the readable bytes
    BH_BAD_MAGIC               # anything but 2 (0 and 1 are the legacy message sets)
    BH_SHORT_LENGTH            # shorter than the 61-byte header
    BH_BAD_COUNTS              # negative RecordsCount or LastOffsetDelta
    BH_NEGATIVE_BASE_OFFSET
    BH_TOO_MANY_RECORDS        # uncompressed, and RecordsCount records cannot fit


cdef struct BatchHeader:
    # parse_batch_header: the first three once 17 bytes are there, the rest on BH_OK
    Py_ssize_t size            # Length + 12: the bytes of the whole batch
    int32_t length
    uint8_t magic
    int64_t base_offset
    uint32_t crc
    int16_t attributes
    int32_t last_offset_delta
    int32_t record_count
    # load_batch_header_details, after BH_OK
    int32_t partition_leader_epoch
    int64_t base_timestamp
    int64_t max_timestamp
    int64_t producer_id
    int16_t producer_epoch
    int32_t base_sequence


cdef inline int parse_batch_header(const uint8_t *p, Py_ssize_t avail,
                                   BatchHeader *h) noexcept nogil:
    """Frame the batch at ``p`` (``avail`` readable bytes) and load its header into ``h``.

    BH_OK means a whole batch of ``h.size`` (61..avail) bytes with magic 2 starts at ``p``
    and the fields above the details in ``BatchHeader`` are loaded. Otherwise a BH_* code;
    ``h.length``, ``h.size`` and ``h.magic`` are loaded once 17 bytes are there, and the other
    fields are not.
    Legacy message sets (magic 0 and 1) also keep their size at byte 8 and their magic at
    byte 16 but may be shorter than 61 bytes: the magic is checked before the minimum
    length, so that one is reported as what it is."""
    if avail < UP_TO_MAGIC:
        h.size = -1
        return BH_TRUNCATED_HEADER
    h.length = load_i32(p + LENGTH_OFF)
    h.size = <Py_ssize_t>h.length + LOG_OVERHEAD
    h.magic = p[MAGIC_OFF]
    if h.length < 0:
        return BH_NEGATIVE_LENGTH
    if h.size > avail:
        return BH_TRUNCATED_BATCH
    if h.magic != 2:
        return BH_BAD_MAGIC
    if h.size < HEADER_SIZE:
        return BH_SHORT_LENGTH
    # HEADER_SIZE <= size <= avail: the whole header is readable.
    h.base_offset = load_i64(p + BASE_OFFSET_OFF)
    h.crc = load_u32(p + CRC_OFF)
    h.attributes = load_i16(p + ATTRIBUTES_OFF)
    h.last_offset_delta = load_i32(p + LAST_OFFSET_DELTA_OFF)
    h.record_count = load_i32(p + RECORDS_COUNT_OFF)
    return BH_OK


cdef inline void load_batch_header_details(const uint8_t *p, BatchHeader *h) noexcept nogil:
    """Load the rest of the header of a batch parse_batch_header answered BH_OK for (so its
    61 bytes are readable)."""
    h.partition_leader_epoch = load_i32(p + EPOCH_OFF)
    h.base_timestamp = load_i64(p + BASE_TIMESTAMP_OFF)
    h.max_timestamp = load_i64(p + MAX_TIMESTAMP_OFF)
    h.producer_id = load_i64(p + PRODUCER_ID_OFF)
    h.producer_epoch = load_i16(p + PRODUCER_EPOCH_OFF)
    h.base_sequence = load_i32(p + BASE_SEQUENCE_OFF)


cdef inline int batch_header_rules(const BatchHeader *h) noexcept nogil:
    """The rules on a parsed header's fields that any reader of the records relies on: counts
    are not negative, offsets are not negative, and (uncompressed) the records counted can
    fit in the batch, at 7 bytes or more each. BH_OK or a BH_* code."""
    if h.record_count < 0 or h.last_offset_delta < 0:
        return BH_BAD_COUNTS
    if h.base_offset < 0:
        return BH_NEGATIVE_BASE_OFFSET
    if ((h.attributes & CODEC_MASK) == 0
            and <int64_t>h.record_count * MIN_RECORD_SIZE > h.size - HEADER_SIZE):
        return BH_TOO_MANY_RECORDS
    return BH_OK


cdef inline uint32_t batch_crc(const uint8_t *p, Py_ssize_t size) noexcept nogil:
    """The CRC-32C of the batch of ``size`` bytes at ``p`` as stored at byte 17: it covers
    the attributes to the end (``size`` >= 61, as parse_batch_header guarantees)."""
    return rc_crc32c(0, p + ATTRIBUTES_OFF, <size_t>(size - ATTRIBUTES_OFF))


cdef inline str batch_header_problem(int code, const BatchHeader *h, Py_ssize_t avail):
    """The record reader's words for a BH_* code (the caller adds the byte position)."""
    if code == BH_TRUNCATED_HEADER:
        return (f"truncated record batch: {avail} bytes left, a batch header needs "
                f"{HEADER_SIZE}")
    if code == BH_NEGATIVE_LENGTH or code == BH_SHORT_LENGTH:
        return (f"record batch length {h.length} is below the minimum "
                f"{HEADER_SIZE - LOG_OVERHEAD}")
    if code == BH_TRUNCATED_BATCH:
        return (f"truncated record batch: its length says {h.size} bytes but only {avail} "
                f"remain")
    if code == BH_BAD_MAGIC:
        return f"record batch magic is {h.magic}, only magic 2 is supported"
    if code == BH_BAD_COUNTS:
        return (f"record batch has record count {h.record_count} and last offset delta "
                f"{h.last_offset_delta}")
    if code == BH_NEGATIVE_BASE_OFFSET:
        return f"record batch has negative base offset {h.base_offset}"
    if code == BH_TOO_MANY_RECORDS:
        return (f"record batch claims {h.record_count} records in {h.size - HEADER_SIZE} "
                f"bytes")
    return f"record batch header fault {code}"
