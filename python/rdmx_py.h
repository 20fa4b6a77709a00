/*
 * rdmx Python module — what its files share (docs/PYTHON.md).
 *
 * Locking: a client's (or channel's) mutex serializes everything that
 * touches its worker, KV client or regions. Lock order: the mutex, then
 * the GIL. Nothing waits for the mutex while holding the GIL (so the GIL
 * is free during every wait); code holding the mutex may take the GIL for
 * a moment (close) but runs no Python code meanwhile (no export released,
 * no object freed), which might want the mutex again. Members marked "GIL"
 * are read and written only with the GIL held.
 */
#ifndef RDMX_PY_H
#define RDMX_PY_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <pthread.h>

#include <rdmx/rdmx.h>

/* A registered buffer. Refcounted under the GIL: the client's table holds
 * one reference while it is registered, each operation using it one more
 * for its duration; the last release deregisters it and leaves the table. */
typedef struct pyreg {
    unsigned refs;      /* GIL */
    int removed;        /* GIL: unregistered; found by no new operation */
    char *addr;         /* start of the region; immutable */
    size_t length;      /* its length; immutable */
    rdmx_mr_t *mr;      /* set NULL under the mutex: by close (with the
                           GIL too), or by the last release */
    Py_buffer view;     /* GIL; the export kept, view.obj NULL for a raw
                           pointer registration */
} pyreg_t;

typedef struct {
    PyObject_HEAD
    pthread_mutex_t lock;  /* one operation at a time */
    rdmx_context_t *ctx;   /* mutex */
    rdmx_worker_t *w;      /* mutex; no progress thread */
    rdmx_kv_t *kv;         /* mutex */
    int closed;            /* written with the GIL and the mutex held */
    int timeout_ms;        /* immutable: operations' deadline */
    pyreg_t **regs;        /* GIL: the registered buffers */
    size_t nregs, regs_cap;
    char *eval_out;        /* mutex: eval's output buffer, made on demand */
} pyclient_t;

extern PyTypeObject pyclient_type;
extern PyTypeObject pychannel_type;

/* --- module.c ------------------------------------------------------------ */

/* Raise the exception of @status with @detail (may be NULL or ""). Returns
 * NULL. */
PyObject *rdmx_py_raise(rdmx_status_t status, const char *detail);
/* The same for rdmx.TooBig with the size needed. */
PyObject *rdmx_py_raise_too_big(size_t needed, const char *detail);
/* Add the exception classes and status constants to @m. */
int rdmx_py_errors_init(PyObject *m);

/* A key's bytes: str (UTF-8) or bytes; valid while @obj lives. 0 or -1
 * with TypeError. */
int rdmx_py_key(PyObject *obj, const char **key_p, size_t *klen_p);

/* Keys of a batch: references held, so another thread cannot free them
 * while the GIL is released. */
typedef struct {
    size_t n;
    PyObject **objs;
    const char **keys;
    size_t *klens;
} rdmx_py_keys_t;

int rdmx_py_keys_get(PyObject *seq, rdmx_py_keys_t *k);
void rdmx_py_keys_release(rdmx_py_keys_t *k);

/* A non-negative integer (any object with __index__); (size_t)-1 with an
 * exception. */
size_t rdmx_py_size(PyObject *obj);

/* A sequence of n non-negative integers, or a contiguous array of n
 * native 64-bit integers (numpy int64 / uint64: copied at once), into a
 * new array (PyMem_Free it); -1 with an exception. */
int rdmx_py_sizes(PyObject *seq, const char *what, size_t n, size_t **out_p);

/* The transport argument (None or a name) into context params. */
int rdmx_py_transport(PyObject *obj, rdmx_context_params_t *cp);

/* Progress @w until *@done reaches @want: poll for RDMX_SPIN_US (default
 * 50 us) after the last event, then sleep on the worker's fd (100 ms at
 * most at a time). The operations waited for must all complete by themselves (they
 * carry deadlines). Called with the owner's mutex held, without the GIL. */
void rdmx_py_wait(rdmx_worker_t *w, volatile size_t *done, size_t want);

/* --- client.c ------------------------------------------------------------ */

/* Release the GIL and take the client's mutex; fails (GIL held again,
 * rdmx.Invalid raised) if the client is closed. Returns the thread state
 * for rdmx_py_leave, NULL on failure. */
PyThreadState *rdmx_py_enter(pyclient_t *c);
/* Release the mutex and take the GIL back. */
void rdmx_py_leave(pyclient_t *c, PyThreadState *ts);

/* --- buffers.c ----------------------------------------------------------- */

PyObject *rdmx_py_register_buffer(pyclient_t *c, PyObject *args);
PyObject *rdmx_py_unregister_buffer(pyclient_t *c, PyObject *args);
/* The registered region holding [p, p + len), with a reference taken;
 * NULL if none. GIL. */
pyreg_t *rdmx_py_reg_find(pyclient_t *c, const void *p, size_t len);
/* Drop a reference; the last deregisters the region (waiting for the
 * mutex without the GIL) and releases the export. GIL. */
void rdmx_py_reg_put(pyclient_t *c, pyreg_t *r);
/* close(), with the GIL and the mutex held: deregister every region and
 * drop the table's references. */
void rdmx_py_regs_close(pyclient_t *c);
/* close(), with the GIL, after the mutex was released: release the exports
 * of the regions no operation holds any more. */
void rdmx_py_regs_sweep(pyclient_t *c);

/* --- batch.c ------------------------------------------------------------- */

PyObject *rdmx_py_get_into(pyclient_t *c, PyObject *args);
PyObject *rdmx_py_put_from(pyclient_t *c, PyObject *args);
PyObject *rdmx_py_batch_get_into(pyclient_t *c, PyObject *args);
PyObject *rdmx_py_batch_put_from(pyclient_t *c, PyObject *args);


#endif /* RDMX_PY_H */
