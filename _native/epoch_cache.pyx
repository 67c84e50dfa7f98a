# cython: language_level=3
"""The leader-epoch cache in native code: (epoch, start offset) entries, both columns strictly
increasing, answering the two questions of KIP-595 fetch validation and KIP-279 truncation by
binary search:

- "where does epoch E end?"  -> end_offset_for(E, log_end_offset)
- "which epoch wrote offset O?" -> epoch_for_offset(O)

The rules are those of Kafka's LeaderEpochFileCache; persistence is done by the Python
wrapper (raftcore.epoch_cache).
"""

cimport cython
from cpython.mem cimport PyMem_Free, PyMem_Realloc
from cpython.object cimport PyObject, PyTypeObject
from libc.stdint cimport int32_t, int64_t

cdef extern from "Python.h":
    ctypedef struct PyStructSequence_Field:
        const char *name
        const char *doc
    ctypedef struct PyStructSequence_Desc:
        const char *name
        const char *doc
        PyStructSequence_Field *fields
        int n_in_sequence
    PyTypeObject *PyStructSequence_NewType(PyStructSequence_Desc *desc) except NULL
    object PyStructSequence_New(PyTypeObject *tp)
    void PyStructSequence_SET_ITEM(PyObject *p, Py_ssize_t pos, PyObject *o)
    PyObject *PyLong_FromLongLong(long long v) except NULL


cdef PyStructSequence_Field _fields[3]
_fields[0].name = "epoch"
_fields[0].doc = "the largest known epoch <= the asked one (-1: none)"
_fields[1].name = "end_offset"
_fields[1].doc = "the offset where that epoch ends (-1: unknown)"
_fields[2].name = NULL
_fields[2].doc = NULL

cdef PyStructSequence_Desc _desc
_desc.name = "raftcore.EpochEndOffset"
_desc.doc = "(epoch, end_offset): the answer to 'where does this epoch end?'"
_desc.fields = _fields
_desc.n_in_sequence = 2

cdef PyTypeObject *_EpochEndOffsetType = PyStructSequence_NewType(&_desc)
EpochEndOffset = <object>_EpochEndOffsetType

UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1


cdef inline object _result(int64_t epoch, int64_t offset):
    r = PyStructSequence_New(_EpochEndOffsetType)
    # SET_ITEM steals the new references made by PyLong_FromLongLong.
    PyStructSequence_SET_ITEM(<PyObject *>r, 0, PyLong_FromLongLong(epoch))
    PyStructSequence_SET_ITEM(<PyObject *>r, 1, PyLong_FromLongLong(offset))
    return r


@cython.final
cdef class EpochCache:
    """(epoch, start offset) pairs, sorted, both strictly increasing."""
    cdef int32_t *epochs
    cdef int64_t *starts
    cdef Py_ssize_t n
    cdef Py_ssize_t cap

    def __cinit__(self):
        self.epochs = NULL
        self.starts = NULL
        self.n = 0
        self.cap = 0

    def __init__(self):
        pass  # takes no arguments: a stray one is a TypeError, not silently ignored

    def __dealloc__(self):
        PyMem_Free(self.epochs)
        PyMem_Free(self.starts)

    cdef int _reserve(self, Py_ssize_t need) except -1:
        cdef Py_ssize_t cap = self.cap if self.cap else 8
        cdef void *e
        cdef void *s
        if need <= self.cap:
            return 0
        while cap < need:
            cap *= 2
        e = PyMem_Realloc(self.epochs, cap * sizeof(int32_t))
        if e == NULL:
            raise MemoryError()
        self.epochs = <int32_t *>e
        s = PyMem_Realloc(self.starts, cap * sizeof(int64_t))
        if s == NULL:
            raise MemoryError()
        self.starts = <int64_t *>s
        self.cap = cap
        return 0

    cdef inline Py_ssize_t _upper_epoch(self, int64_t epoch) noexcept:
        """Index of the first entry whose epoch is > epoch."""
        cdef Py_ssize_t lo = 0, hi = self.n, mid
        while lo < hi:
            mid = (lo + hi) >> 1
            if self.epochs[mid] <= epoch:
                lo = mid + 1
            else:
                hi = mid
        return lo

    cdef inline Py_ssize_t _upper_start(self, int64_t offset) noexcept:
        """Index of the first entry whose start offset is > offset."""
        cdef Py_ssize_t lo = 0, hi = self.n, mid
        while lo < hi:
            mid = (lo + hi) >> 1
            if self.starts[mid] <= offset:
                lo = mid + 1
            else:
                hi = mid
        return lo

    def assign(self, int64_t epoch, int64_t start_offset):
        """Record that ``epoch`` starts at ``start_offset``. Returns whether the cache changed.

        Nothing changes when the latest entry already has this epoch at an offset <= the given
        one. Otherwise entries that would break monotonicity -- an epoch >= the new epoch or a
        start >= the new start -- are dropped from the end first (Kafka's rule).
        """
        if epoch < 0 or start_offset < 0:
            raise ValueError(
                f"epoch cache entry ({epoch}, {start_offset}): epoch and offset must be >= 0")
        if epoch > 0x7FFFFFFF:
            raise ValueError(f"epoch {epoch} does not fit in 32 bits")
        if self.n and self.epochs[self.n - 1] == epoch and start_offset >= self.starts[self.n - 1]:
            return False
        while self.n and (self.epochs[self.n - 1] >= epoch or self.starts[self.n - 1] >= start_offset):
            self.n -= 1
        self._reserve(self.n + 1)
        self.epochs[self.n] = <int32_t>epoch
        self.starts[self.n] = start_offset
        self.n += 1
        return True

    def end_offset_for(self, int64_t epoch, int64_t log_end_offset):
        """Where ``epoch`` ends, as Kafka's LeaderEpochFileCache.endOffsetFor answers it:

        - the latest epoch ends at the log end offset;
        - an epoch below every entry: (epoch, start of the first entry);
        - between entries: (the largest epoch <= it, start of the next larger epoch);
        - -1 (undefined), or above every entry, or an empty cache: (-1, -1).
        """
        cdef Py_ssize_t hi
        if epoch == -1 or self.n == 0:
            return _result(-1, -1)
        if self.epochs[self.n - 1] == epoch:
            return _result(epoch, log_end_offset)
        hi = self._upper_epoch(epoch)
        if hi == self.n:
            return _result(-1, -1)
        if hi == 0:
            return _result(epoch, self.starts[0])
        return _result(self.epochs[hi - 1], self.starts[hi])

    def epoch_for_offset(self, int64_t offset):
        """The epoch of the entry with the greatest start offset <= ``offset`` (-1 if none)."""
        cdef Py_ssize_t i = self._upper_start(offset)
        return self.epochs[i - 1] if i else -1

    def truncate_from_end(self, int64_t end_offset):
        """Drop entries whose start offset is >= ``end_offset`` (after the log was truncated
        there). A negative offset changes nothing. Returns whether the cache changed."""
        cdef Py_ssize_t keep
        if end_offset < 0 or self.n == 0 or self.starts[self.n - 1] < end_offset:
            return False
        keep = self._upper_start(end_offset - 1)
        self.n = keep
        return True

    def truncate_from_start(self, int64_t start_offset):
        """Drop entries whose start offset is <= ``start_offset`` and re-add the last of them
        at ``start_offset`` (the log start moved there). Returns whether the cache changed."""
        cdef Py_ssize_t k, i
        cdef int32_t last_epoch
        if self.n == 0 or self.starts[0] > start_offset:
            return False
        k = self._upper_start(start_offset)  # entries [0, k) start at or before start_offset
        last_epoch = self.epochs[k - 1]
        if k == 1 and self.starts[0] == start_offset:
            return False
        for i in range(k, self.n):
            self.epochs[i - k + 1] = self.epochs[i]
            self.starts[i - k + 1] = self.starts[i]
        self.n = self.n - k + 1
        self.epochs[0] = last_epoch
        self.starts[0] = start_offset
        return True

    def clear(self):
        self.n = 0

    def __len__(self):
        return self.n

    @property
    def latest_epoch(self):
        """The latest epoch, or -1 when empty."""
        return self.epochs[self.n - 1] if self.n else -1

    @property
    def latest_start_offset(self):
        return self.starts[self.n - 1] if self.n else -1

    @property
    def earliest_epoch(self):
        return self.epochs[0] if self.n else -1

    def entries(self):
        """The entries as a list of (epoch, start offset), oldest first."""
        return [(self.epochs[i], self.starts[i]) for i in range(self.n)]

    def copy(self):
        cdef EpochCache c = EpochCache()
        for i in range(self.n):
            c.assign(self.epochs[i], self.starts[i])
        return c

    def __eq__(self, other):
        if not isinstance(other, EpochCache):
            return NotImplemented
        return self.entries() == other.entries()

    def __repr__(self):
        return f"EpochCache({self.entries()!r})"
