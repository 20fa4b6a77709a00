/*
 * rdmx Python module: registered buffers. A client keeps a table of the
 * regions it registered (rdmx_mem_register on its context), each holding
 * the buffer export of its object until unregistered or closed, and finds
 * the region that holds an operation's memory (docs/PYTHON.md, "Buffer
 * lifetime").
 */
#include "rdmx_py.h"

#include <string.h>

/* Peers may read a registered buffer (PUT: the server pulls) and write it
 * (GET: the server pushes). */
#define REG_ACCESS (RDMX_ACCESS_READ | RDMX_ACCESS_WRITE)

static int table_add(pyclient_t *c, pyreg_t *r)
{
    if (c->nregs == c->regs_cap) {
        size_t cap = c->regs_cap ? c->regs_cap * 2 : 8;
        pyreg_t **n = PyMem_Realloc(c->regs, cap * sizeof(*n));
        if (n == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        c->regs = n;
        c->regs_cap = cap;
    }
    c->regs[c->nregs++] = r;
    return 0;
}

static void table_del(pyclient_t *c, pyreg_t *r)
{
    for (size_t i = 0; i < c->nregs; i++)
        if (c->regs[i] == r) {
            c->regs[i] = c->regs[--c->nregs];
            return;
        }
}

/* Free @r, whose last reference went: out of the table, its region
 * deregistered under the mutex (waited for without the GIL) unless close
 * released it with the context, then the export released with the mutex
 * free (that may run Python code). GIL held on entry and return. */
static void reg_free(pyclient_t *c, pyreg_t *r)
{
    table_del(c, r);
    if (r->mr != NULL) {
        Py_BEGIN_ALLOW_THREADS
        pthread_mutex_lock(&c->lock);
        if (!c->closed)
            rdmx_mem_deregister(r->mr);
        r->mr = NULL;
        pthread_mutex_unlock(&c->lock);
        Py_END_ALLOW_THREADS
    }
    if (r->view.obj != NULL)
        PyBuffer_Release(&r->view);
    PyMem_Free(r);
}

void rdmx_py_reg_put(pyclient_t *c, pyreg_t *r)
{
    if (--r->refs == 0)
        reg_free(c, r);
}

pyreg_t *rdmx_py_reg_find(pyclient_t *c, const void *p, size_t len)
{
    const char *s = p;

    if (c->closed)
        return NULL;
    for (size_t i = 0; i < c->nregs; i++) {
        pyreg_t *r = c->regs[i];
        if (!r->removed && r->mr != NULL && s >= r->addr &&
            len <= r->length && (size_t)(s - r->addr) <= r->length - len) {
            r->refs++;
            return r;
        }
    }
    return NULL;
}

/* The registration of exactly [addr, addr + len) (len 0: any length), not
 * yet removed. */
static pyreg_t *reg_exact(pyclient_t *c, const void *addr, size_t len)
{
    for (size_t i = 0; i < c->nregs; i++) {
        pyreg_t *r = c->regs[i];
        if (!r->removed && r->addr == addr && (len == 0 || r->length == len))
            return r;
    }
    return NULL;
}

PyObject *rdmx_py_register_buffer(pyclient_t *c, PyObject *args)
{
    PyObject *obj, *size_obj = NULL;
    pyreg_t *r;
    rdmx_status_t st;
    char detail[256];

    if (!PyArg_ParseTuple(args, "O|O:register_buffer", &obj, &size_obj))
        return NULL;
    if ((r = PyMem_Calloc(1, sizeof(*r))) == NULL)
        return PyErr_NoMemory();
    if (size_obj != NULL) {
        /* Mooncake's form: raw memory the caller keeps alive. */
        void *p = PyLong_AsVoidPtr(obj);
        size_t n = rdmx_py_size(size_obj);
        if (PyErr_Occurred())
            goto fail;
        r->addr = p;
        r->length = n;
    } else {
        if (PyLong_Check(obj)) {
            PyErr_SetString(PyExc_TypeError,
                            "register_buffer(ptr, size): size is required "
                            "with a pointer");
            goto fail;
        }
        if (PyObject_GetBuffer(obj, &r->view, PyBUF_WRITABLE) < 0)
            goto fail;
        r->addr = r->view.buf;
        r->length = (size_t)r->view.len;
    }
    if (r->addr == NULL || r->length == 0) {
        rdmx_py_raise(RDMX_ERR_INVALID, "register_buffer: empty buffer");
        goto fail;
    }
    if (c->closed) {
        rdmx_py_raise(RDMX_ERR_INVALID, "client is closed");
        goto fail;
    }
    if (reg_exact(c, r->addr, r->length) != NULL) {
        /* Registered already: once is enough. */
        if (r->view.obj != NULL)
            PyBuffer_Release(&r->view);
        PyMem_Free(r);
        Py_RETURN_NONE;
    }
    /* The mutex is waited for without the GIL; the export keeps the
     * memory in place meanwhile. */
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&c->lock);
    st = c->closed ? RDMX_ERR_INVALID
                   : rdmx_mem_register(c->ctx, r->addr, r->length,
                                       REG_ACCESS, &r->mr);
    if (st != RDMX_OK)
        snprintf(detail, sizeof(detail), "%s",
                 c->closed ? "client is closed" : rdmx_error_detail());
    pthread_mutex_unlock(&c->lock);
    Py_END_ALLOW_THREADS
    if (st == RDMX_OK && c->closed) {
        /* closed meanwhile: the context took the region with it */
        r->mr = NULL;
        st = RDMX_ERR_INVALID;
        snprintf(detail, sizeof(detail), "client is closed");
    }
    if (st != RDMX_OK) {
        rdmx_py_raise(st, detail);
        goto fail;
    }
    if (reg_exact(c, r->addr, r->length) != NULL) {
        /* another thread registered the same memory meanwhile */
        reg_free(c, r);
        Py_RETURN_NONE;
    }
    r->refs = 1;
    if (table_add(c, r) < 0) {
        reg_free(c, r);
        return NULL;
    }
    Py_RETURN_NONE;
fail:
    if (r->view.obj != NULL)
        PyBuffer_Release(&r->view);
    PyMem_Free(r);
    return NULL;
}

PyObject *rdmx_py_unregister_buffer(pyclient_t *c, PyObject *args)
{
    PyObject *obj;
    pyreg_t *r;
    void *addr;
    size_t len = 0;

    if (!PyArg_ParseTuple(args, "O:unregister_buffer", &obj))
        return NULL;
    if (PyLong_Check(obj)) {
        if ((addr = PyLong_AsVoidPtr(obj)) == NULL && PyErr_Occurred())
            return NULL;
    } else {
        /* By its memory: any object exporting the same bytes matches. */
        Py_buffer view;
        if (PyObject_GetBuffer(obj, &view, PyBUF_SIMPLE) < 0)
            return NULL;
        addr = view.buf;
        len = (size_t)view.len;
        PyBuffer_Release(&view);
    }
    if ((r = reg_exact(c, addr, len)) == NULL)
        return rdmx_py_raise(RDMX_ERR_NOT_FOUND,
                             "unregister_buffer: not a registered buffer");
    r->removed = 1;
    rdmx_py_reg_put(c, r);
    Py_RETURN_NONE;
}

void rdmx_py_regs_close(pyclient_t *c)
{
    for (size_t i = 0; i < c->nregs; i++) {
        pyreg_t *r = c->regs[i];
        if (r->mr != NULL)
            rdmx_mem_deregister(r->mr);
        r->mr = NULL;
        if (!r->removed) {
            r->removed = 1;
            r->refs--; /* the table's; freed by rdmx_py_regs_sweep */
        }
    }
}

void rdmx_py_regs_sweep(pyclient_t *c)
{
    for (size_t i = c->nregs; i-- > 0;) {
        pyreg_t *r = c->regs[i];
        if (r->refs == 0)
            reg_free(c, r); /* (r->mr is NULL: no mutex taken) */
    }
}
