/* A bytes object grown in place while it is written, then shrunk to its final length, so that
 * an encoder hands Python its result without a final copy. Only valid while the bytes object has
 * a single reference (ours). */
#ifndef RAFTCORE_BYTESBUF_H
#define RAFTCORE_BYTESBUF_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

typedef struct {
    PyObject *obj; /* owned; NULL after finish or on failure */
    Py_ssize_t len;
    Py_ssize_t cap;
} rc_bytesbuf;

static inline char *rc_bb_data(rc_bytesbuf *b) { return PyBytes_AS_STRING(b->obj); }

static inline int rc_bb_init(rc_bytesbuf *b, Py_ssize_t cap) {
    if (cap < 64) cap = 64;
    b->obj = PyBytes_FromStringAndSize(NULL, cap);
    b->len = 0;
    b->cap = cap;
    return b->obj ? 0 : -1;
}

/* Make room for `extra` more bytes; returns -1 with MemoryError/OverflowError set on failure. */
static inline int rc_bb_reserve(rc_bytesbuf *b, Py_ssize_t extra) {
    if (extra < 0 || b->len > PY_SSIZE_T_MAX - extra) {
        PyErr_SetString(PyExc_OverflowError, "record batch too large");
        return -1;
    }
    Py_ssize_t need = b->len + extra;
    if (need <= b->cap) return 0;
    Py_ssize_t cap = b->cap;
    while (cap < need) cap = (cap > PY_SSIZE_T_MAX / 2) ? need : cap * 2;
    if (_PyBytes_Resize(&b->obj, cap) < 0) { /* frees obj and sets it NULL on failure */
        b->cap = 0;
        return -1;
    }
    b->cap = cap;
    return 0;
}

/* Hands over the bytes object, shrunk to len. */
static inline PyObject *rc_bb_finish(rc_bytesbuf *b) {
    if (b->len != b->cap && _PyBytes_Resize(&b->obj, b->len) < 0) return NULL;
    PyObject *r = b->obj;
    b->obj = NULL;
    return r;
}

static inline void rc_bb_free(rc_bytesbuf *b) { Py_CLEAR(b->obj); }

#endif
