/*
 * rdmx Python module: rdmx.Channel — plain RPC calls to an rdmx RPC server
 * over a channel on a context and worker of its own, one call at a time
 * under its mutex (docs/PYTHON.md).
 */
#include "rdmx_py.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    PyObject_HEAD
    pthread_mutex_t lock;  /* one call at a time */
    rdmx_context_t *ctx;   /* mutex */
    rdmx_worker_t *w;      /* mutex; no progress thread */
    rdmx_channel_t *ch;    /* mutex */
    int closed;            /* written with the GIL and the mutex held */
    int timeout_ms;        /* immutable: the calls' default deadline */
} pychannel_t;

/* The result of one call, filled by its callback. */
typedef struct {
    volatile size_t done;
    rdmx_status_t status;
    char *data; /* malloc'd copy of the response */
    size_t length;
    char message[512];
} call_wait_t;

static void call_cb(const rdmx_call_result_t *r, void *arg)
{
    call_wait_t *cw = arg;

    cw->status = r->status;
    if (r->status == RDMX_OK) {
        cw->data = malloc(r->length + 1);
        if (cw->data == NULL)
            cw->status = RDMX_ERR_NO_MEMORY;
        else if (r->length != 0)
            memcpy(cw->data, r->data, r->length);
        cw->length = r->length;
    }
    snprintf(cw->message, sizeof(cw->message), "%s",
             r->message != NULL ? r->message : "");
    cw->done = 1;
}

static PyObject *channel_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
    pychannel_t *c = (pychannel_t *)type->tp_alloc(type, 0);

    if (c == NULL)
        return NULL;
    pthread_mutex_init(&c->lock, NULL);
    c->closed = 1; /* until __init__ succeeds */
    return (PyObject *)c;
}

static int channel_init(pychannel_t *c, PyObject *args, PyObject *kw)
{
    static char *names[] = {"address", "timeout_ms", "transport", NULL};
    const char *address;
    PyObject *transport = Py_None;
    int timeout_ms = 5000;
    rdmx_context_params_t cp = {0};
    rdmx_worker_params_t wp = {0};
    rdmx_channel_params_t chp = {0};
    rdmx_status_t st;
    char detail[512] = "";

    if (!PyArg_ParseTupleAndKeywords(args, kw, "s|iO", names, &address,
                                     &timeout_ms, &transport))
        return -1;
    if (c->ch != NULL) {
        rdmx_py_raise(RDMX_ERR_INVALID, "channel already initialized");
        return -1;
    }
    if (rdmx_py_transport(transport, &cp) < 0)
        return -1;
    cp.field_mask |= RDMX_CONTEXT_PARAM_FIELD_NAME;
    cp.name = "rdmx-python";
    chp.field_mask = RDMX_CHANNEL_PARAM_FIELD_TIMEOUT;
    chp.timeout_ms = timeout_ms;
    c->timeout_ms = timeout_ms;

    Py_BEGIN_ALLOW_THREADS
    st = rdmx_context_create(&cp, &c->ctx);
    if (st == RDMX_OK)
        st = rdmx_worker_create(c->ctx, &wp, &c->w);
    if (st == RDMX_OK)
        st = rdmx_channel_create(c->w, address, &chp, &c->ch);
    if (st != RDMX_OK) {
        snprintf(detail, sizeof(detail), "%s", rdmx_error_detail());
        if (c->w != NULL)
            rdmx_worker_destroy(c->w);
        if (c->ctx != NULL)
            rdmx_context_destroy(c->ctx);
        c->w = NULL;
        c->ctx = NULL;
    }
    Py_END_ALLOW_THREADS
    if (st != RDMX_OK) {
        rdmx_py_raise(st, detail);
        return -1;
    }
    c->closed = 0;
    return 0;
}

/* As the client's: wait for the mutex without the GIL, mark the channel
 * closed with both, tear down without the GIL. */
static void channel_close_(pychannel_t *c)
{
    PyThreadState *ts;

    if (c->ctx == NULL)
        return;
    ts = PyEval_SaveThread();
    pthread_mutex_lock(&c->lock);
    PyEval_RestoreThread(ts);
    if (c->ctx == NULL) { /* another thread closed it meanwhile */
        pthread_mutex_unlock(&c->lock);
        return;
    }
    c->closed = 1;
    ts = PyEval_SaveThread();
    if (c->ch != NULL)
        rdmx_channel_destroy(c->ch);
    if (c->w != NULL)
        rdmx_worker_destroy(c->w);
    rdmx_context_destroy(c->ctx);
    c->ch = NULL;
    c->w = NULL;
    c->ctx = NULL;
    pthread_mutex_unlock(&c->lock);
    PyEval_RestoreThread(ts);
}

static void channel_dealloc(pychannel_t *c)
{
    channel_close_(c);
    pthread_mutex_destroy(&c->lock);
    Py_TYPE(c)->tp_free((PyObject *)c);
}

/* Release the GIL, take the mutex; NULL (exception set) when closed. */
static PyThreadState *channel_enter(pychannel_t *c)
{
    PyThreadState *ts = PyEval_SaveThread();

    pthread_mutex_lock(&c->lock);
    if (!c->closed)
        return ts;
    pthread_mutex_unlock(&c->lock);
    PyEval_RestoreThread(ts);
    rdmx_py_raise(RDMX_ERR_INVALID, "channel is closed");
    return NULL;
}

static void channel_leave(pychannel_t *c, PyThreadState *ts)
{
    pthread_mutex_unlock(&c->lock);
    PyEval_RestoreThread(ts);
}

static PyObject *channel_call(pychannel_t *c, PyObject *args, PyObject *kw)
{
    static char *names[] = {"method", "payload", "timeout_ms", NULL};
    const char *method;
    PyObject *tobj = Py_None, *out;
    Py_buffer payload = {0};
    rdmx_call_params_t p = {0};
    call_wait_t *cw;
    PyThreadState *ts;
    rdmx_status_t st;

    if (!PyArg_ParseTupleAndKeywords(args, kw, "s|y*O", names, &method,
                                     &payload, &tobj))
        return NULL;
    p.field_mask = RDMX_CALL_PARAM_FIELD_CB | RDMX_CALL_PARAM_FIELD_TIMEOUT;
    p.cb = call_cb;
    p.timeout_ms = tobj == Py_None ? c->timeout_ms : (int)PyLong_AsLong(tobj);
    if (PyErr_Occurred() ||
        (cw = PyMem_Calloc(1, sizeof(*cw))) == NULL) {
        if (!PyErr_Occurred())
            PyErr_NoMemory();
        if (payload.obj != NULL)
            PyBuffer_Release(&payload);
        return NULL;
    }
    p.arg = cw;
    if ((ts = channel_enter(c)) != NULL) {
        st = rdmx_call_nb(c->ch, method, payload.buf, (size_t)payload.len, &p,
                          NULL);
        if (st == RDMX_INPROGRESS) {
            rdmx_py_wait(c->w, &cw->done, 1);
        } else {
            cw->status = st;
            snprintf(cw->message, sizeof(cw->message), "%s",
                     rdmx_error_detail());
        }
        channel_leave(c, ts);
    }
    if (payload.obj != NULL)
        PyBuffer_Release(&payload);
    if (ts == NULL) {
        PyMem_Free(cw);
        return NULL;
    }
    out = cw->status == RDMX_OK
              ? PyBytes_FromStringAndSize(cw->data, (Py_ssize_t)cw->length)
              : rdmx_py_raise(cw->status, cw->message);
    free(cw->data);
    PyMem_Free(cw);
    return out;
}

static PyObject *channel_wait_ready(pychannel_t *c, PyObject *args,
                                    PyObject *kw)
{
    static char *names[] = {"timeout_ms", NULL};
    PyObject *tobj = Py_None;
    int timeout_ms;
    PyThreadState *ts;
    rdmx_status_t st;
    char detail[512] = "";

    if (!PyArg_ParseTupleAndKeywords(args, kw, "|O", names, &tobj))
        return NULL;
    timeout_ms = tobj == Py_None ? c->timeout_ms : (int)PyLong_AsLong(tobj);
    if (PyErr_Occurred() || (ts = channel_enter(c)) == NULL)
        return NULL;
    st = rdmx_channel_wait_ready(c->ch, timeout_ms);
    if (st != RDMX_OK)
        snprintf(detail, sizeof(detail), "%s", rdmx_error_detail());
    channel_leave(c, ts);
    if (st != RDMX_OK)
        return rdmx_py_raise(st, detail);
    Py_RETURN_NONE;
}

static PyObject *channel_close(pychannel_t *c, PyObject *unused)
{
    channel_close_(c);
    Py_RETURN_NONE;
}

static PyObject *channel_enter_ctx(pychannel_t *c, PyObject *unused)
{
    if (c->closed)
        return rdmx_py_raise(RDMX_ERR_INVALID, "channel is closed");
    Py_INCREF(c);
    return (PyObject *)c;
}

static PyObject *channel_exit_ctx(pychannel_t *c, PyObject *args)
{
    channel_close_(c);
    Py_RETURN_FALSE;
}

static PyMethodDef channel_methods[] = {
    {"call", (PyCFunction)(void (*)(void))channel_call,
     METH_VARARGS | METH_KEYWORDS,
     "call(method, payload=b'', timeout_ms=None) -> bytes: call a handler "
     "and return its response."},
    {"wait_ready", (PyCFunction)(void (*)(void))channel_wait_ready,
     METH_VARARGS | METH_KEYWORDS,
     "wait_ready(timeout_ms=None): wait until connected."},
    {"close", (PyCFunction)channel_close, METH_NOARGS,
     "close(): cancel nothing in flight (calls are one at a time) and "
     "release the connection."},
    {"__enter__", (PyCFunction)channel_enter_ctx, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)channel_exit_ctx, METH_VARARGS, NULL},
    {NULL, NULL, 0, NULL},
};

PyTypeObject pychannel_type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "rdmx.Channel",
    .tp_doc = "Channel(address, timeout_ms=5000, transport=None): an RPC "
              "channel to an rdmx RPC server (docs/PYTHON.md).",
    .tp_basicsize = sizeof(pychannel_t),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = channel_new,
    .tp_init = (initproc)channel_init,
    .tp_dealloc = (destructor)channel_dealloc,
    .tp_methods = channel_methods,
};
