/*
 * rdmx Python module: rdmx.Client — a KV client on a context and worker of
 * its own, its mutex (rdmx_py_enter / rdmx_py_leave), and the operations
 * on single keys and on servers. Zero-copy and batches are in batch.c,
 * registered buffers in buffers.c.
 */
#include "rdmx_py.h"

#include <stdlib.h>
#include <string.h>

/* First guess of a value's size for get(); a larger value is read again
 * into a buffer of its size. */
#define GET_FIRST_CAPACITY 65536
/* The largest lambda output a server sends by default (docs/LAMBDA.md,
 * max_output). */
#define EVAL_OUT_CAPACITY (16u << 20)
#define STATS_CAPACITY 65536

/* Keep the detail of the last error of this thread: rdmx_error_detail() is
 * only valid until the next rdmx call. */
typedef struct {
    char text[512];
} detail_t;

static void detail_take(detail_t *d)
{
    snprintf(d->text, sizeof(d->text), "%s", rdmx_error_detail());
}

PyThreadState *rdmx_py_enter(pyclient_t *c)
{
    PyThreadState *ts = PyEval_SaveThread();

    pthread_mutex_lock(&c->lock);
    if (!c->closed)
        return ts;
    pthread_mutex_unlock(&c->lock);
    PyEval_RestoreThread(ts);
    rdmx_py_raise(RDMX_ERR_INVALID, "client is closed");
    return NULL;
}

void rdmx_py_leave(pyclient_t *c, PyThreadState *ts)
{
    pthread_mutex_unlock(&c->lock);
    PyEval_RestoreThread(ts);
}

static PyObject *client_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
    pyclient_t *c = (pyclient_t *)type->tp_alloc(type, 0);

    if (c == NULL)
        return NULL;
    pthread_mutex_init(&c->lock, NULL);
    c->closed = 1; /* until __init__ succeeds */
    return (PyObject *)c;
}

/* servers as one string, or a sequence of "host:port" strings joined. */
static PyObject *servers_string(PyObject *servers)
{
    PyObject *sep, *joined;

    if (PyUnicode_Check(servers)) {
        Py_INCREF(servers);
        return servers;
    }
    if ((sep = PyUnicode_FromString(",")) == NULL)
        return NULL;
    joined = PyUnicode_Join(sep, servers);
    Py_DECREF(sep);
    return joined;
}

static int client_init(pyclient_t *c, PyObject *args, PyObject *kw)
{
    static char *names[] = {"servers", "replicas", "timeout_ms", "transport",
                            NULL};
    PyObject *servers, *transport = Py_None, *joined;
    unsigned replicas = 1;
    int timeout_ms = 5000;
    rdmx_context_params_t cp = {0};
    rdmx_worker_params_t wp = {0};
    rdmx_kv_params_t kp = {0};
    rdmx_status_t st;
    const char *list;
    detail_t d;

    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|IiO", names, &servers,
                                     &replicas, &timeout_ms, &transport))
        return -1;
    if (c->kv != NULL) {
        rdmx_py_raise(RDMX_ERR_INVALID, "client already initialized");
        return -1;
    }
    if (rdmx_py_transport(transport, &cp) < 0)
        return -1;
    if ((joined = servers_string(servers)) == NULL)
        return -1;
    if ((list = PyUnicode_AsUTF8(joined)) == NULL) {
        Py_DECREF(joined);
        return -1;
    }
    cp.field_mask |= RDMX_CONTEXT_PARAM_FIELD_NAME;
    cp.name = "rdmx-python";
    kp.field_mask = RDMX_KV_PARAM_FIELD_REPLICAS | RDMX_KV_PARAM_FIELD_TIMEOUT;
    kp.replicas = replicas;
    kp.timeout_ms = timeout_ms;
    c->timeout_ms = timeout_ms;

    Py_BEGIN_ALLOW_THREADS
    st = rdmx_context_create(&cp, &c->ctx);
    if (st == RDMX_OK)
        st = rdmx_worker_create(c->ctx, &wp, &c->w);
    if (st == RDMX_OK)
        st = rdmx_kv_create(c->w, list, &kp, &c->kv);
    if (st != RDMX_OK) {
        detail_take(&d);
        if (c->w != NULL)
            rdmx_worker_destroy(c->w);
        if (c->ctx != NULL)
            rdmx_context_destroy(c->ctx);
        c->w = NULL;
        c->ctx = NULL;
    }
    Py_END_ALLOW_THREADS
    Py_DECREF(joined);
    if (st != RDMX_OK) {
        rdmx_py_raise(st, d.text);
        return -1;
    }
    c->closed = 0;
    return 0;
}

/* Close: wait for the mutex without the GIL (so after any operation in
 * flight); with both, mark the client closed and deregister the regions;
 * then, with the mutex alone, destroy the KV client, the worker and the
 * context; last, with the GIL alone, release the buffers' exports. */
static void client_close_(pyclient_t *c)
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
    rdmx_py_regs_close(c);
    ts = PyEval_SaveThread();
    if (c->kv != NULL)
        rdmx_kv_destroy(c->kv);
    if (c->w != NULL)
        rdmx_worker_destroy(c->w);
    rdmx_context_destroy(c->ctx);
    c->kv = NULL;
    c->w = NULL;
    c->ctx = NULL;
    free(c->eval_out);
    c->eval_out = NULL;
    pthread_mutex_unlock(&c->lock);
    PyEval_RestoreThread(ts);
    rdmx_py_regs_sweep(c);
}

static void client_dealloc(pyclient_t *c)
{
    client_close_(c);
    PyMem_Free(c->regs);
    pthread_mutex_destroy(&c->lock);
    Py_TYPE(c)->tp_free((PyObject *)c);
}

static PyObject *client_close(pyclient_t *c, PyObject *unused)
{
    client_close_(c);
    Py_RETURN_NONE;
}

static PyObject *client_enter(pyclient_t *c, PyObject *unused)
{
    if (c->closed)
        return rdmx_py_raise(RDMX_ERR_INVALID, "client is closed");
    Py_INCREF(c);
    return (PyObject *)c;
}

static PyObject *client_exit(pyclient_t *c, PyObject *args)
{
    client_close_(c);
    Py_RETURN_FALSE;
}

static PyObject *client_wait_ready(pyclient_t *c, PyObject *args,
                                   PyObject *kw)
{
    static char *names[] = {"timeout_ms", NULL};
    PyObject *tobj = Py_None;
    int timeout_ms;
    PyThreadState *ts;
    rdmx_status_t st;
    detail_t d;

    if (!PyArg_ParseTupleAndKeywords(args, kw, "|O", names, &tobj))
        return NULL;
    timeout_ms = tobj == Py_None ? c->timeout_ms : (int)PyLong_AsLong(tobj);
    if (PyErr_Occurred())
        return NULL;
    if ((ts = rdmx_py_enter(c)) == NULL)
        return NULL;
    st = rdmx_kv_wait_ready(c->kv, timeout_ms);
    detail_take(&d);
    rdmx_py_leave(c, ts);
    if (st != RDMX_OK)
        return rdmx_py_raise(st, d.text);
    Py_RETURN_NONE;
}

static PyObject *client_servers(pyclient_t *c, PyObject *unused)
{
    unsigned n;
    PyThreadState *ts;

    if ((ts = rdmx_py_enter(c)) == NULL)
        return NULL;
    n = rdmx_kv_servers(c->kv);
    rdmx_py_leave(c, ts);
    return PyLong_FromUnsignedLong(n);
}

static PyObject *client_get(pyclient_t *c, PyObject *arg)
{
    const char *key;
    size_t klen, cap = GET_FIRST_CAPACITY;

    if (rdmx_py_key(arg, &key, &klen) < 0)
        return NULL;
    for (int attempt = 0;; attempt++) {
        PyObject *out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)cap);
        rdmx_kv_meta_t meta = {0};
        PyThreadState *ts;
        rdmx_status_t st;
        detail_t d;

        if (out == NULL)
            return NULL;
        if ((ts = rdmx_py_enter(c)) == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        st = rdmx_kv_get(c->kv, key, klen, PyBytes_AS_STRING(out), cap, NULL,
                         &meta);
        if (st != RDMX_OK)
            detail_take(&d);
        rdmx_py_leave(c, ts);
        if (st == RDMX_OK) {
            if (_PyBytes_Resize(&out, (Py_ssize_t)meta.length) < 0)
                return NULL;
            return out;
        }
        Py_DECREF(out);
        if (st == RDMX_ERR_NOT_FOUND)
            Py_RETURN_NONE;
        /* Larger than the first guess: once more with its size (again if
         * it grew meanwhile). */
        if (st == RDMX_ERR_TOO_BIG && meta.length > cap && attempt < 8) {
            cap = meta.length;
            continue;
        }
        if (st == RDMX_ERR_TOO_BIG)
            return rdmx_py_raise_too_big(meta.length, d.text);
        return rdmx_py_raise(st, d.text);
    }
}

static PyObject *client_put(pyclient_t *c, PyObject *args, PyObject *kw)
{
    static char *names[] = {"key", "value", "ttl_ms", NULL};
    PyObject *kobj, *vobj;
    unsigned ttl_ms = 0;
    const char *key, *value;
    size_t klen, vlen;
    Py_buffer view = {0};
    rdmx_kv_op_params_t p = {0};
    pyreg_t *reg = NULL;
    PyThreadState *ts;
    rdmx_status_t st = RDMX_OK;
    detail_t d;

    if (!PyArg_ParseTupleAndKeywords(args, kw, "OO|I", names, &kobj, &vobj,
                                     &ttl_ms) ||
        rdmx_py_key(kobj, &key, &klen) < 0)
        return NULL;
    if (PyUnicode_Check(vobj)) {
        Py_ssize_t n;
        if ((value = PyUnicode_AsUTF8AndSize(vobj, &n)) == NULL)
            return NULL;
        vlen = (size_t)n;
    } else {
        if (PyObject_GetBuffer(vobj, &view, PyBUF_SIMPLE) < 0)
            return NULL;
        value = view.buf;
        vlen = (size_t)view.len;
        /* From a registered buffer: the server pulls it (zero-copy). */
        if ((reg = rdmx_py_reg_find(c, value, vlen)) != NULL) {
            p.field_mask |= RDMX_KV_OP_PARAM_FIELD_MR;
            p.mr = reg->mr;
        }
    }
    if (ttl_ms != 0) {
        p.field_mask |= RDMX_KV_OP_PARAM_FIELD_TTL;
        p.ttl_ms = ttl_ms;
    }
    if ((ts = rdmx_py_enter(c)) != NULL) {
        st = rdmx_kv_put(c->kv, key, klen, value, vlen, &p, NULL);
        if (st != RDMX_OK)
            detail_take(&d);
        rdmx_py_leave(c, ts);
    }
    if (reg != NULL)
        rdmx_py_reg_put(c, reg);
    if (view.obj != NULL)
        PyBuffer_Release(&view);
    if (ts == NULL)
        return NULL;
    if (st != RDMX_OK)
        return rdmx_py_raise(st, d.text);
    Py_RETURN_NONE;
}

/* delete and exists: True on RDMX_OK, False on a miss. */
static PyObject *keyed_bool(pyclient_t *c, PyObject *arg, int del)
{
    const char *key;
    size_t klen;
    PyThreadState *ts;
    rdmx_status_t st;
    detail_t d;

    if (rdmx_py_key(arg, &key, &klen) < 0 || (ts = rdmx_py_enter(c)) == NULL)
        return NULL;
    st = del ? rdmx_kv_delete(c->kv, key, klen, 0)
             : rdmx_kv_exists(c->kv, key, klen);
    if (st != RDMX_OK)
        detail_take(&d);
    rdmx_py_leave(c, ts);
    if (st == RDMX_OK)
        Py_RETURN_TRUE;
    if (st == RDMX_ERR_NOT_FOUND)
        Py_RETURN_FALSE;
    return rdmx_py_raise(st, d.text);
}

static PyObject *client_delete(pyclient_t *c, PyObject *arg)
{
    return keyed_bool(c, arg, 1);
}

static PyObject *client_exists(pyclient_t *c, PyObject *arg)
{
    return keyed_bool(c, arg, 0);
}

static PyObject *client_incr(pyclient_t *c, PyObject *args)
{
    PyObject *kobj;
    long long delta;
    const char *key;
    size_t klen;
    uint64_t value = 0, mag;
    PyThreadState *ts;
    rdmx_status_t st;
    detail_t d;

    if (!PyArg_ParseTuple(args, "OL", &kobj, &delta) ||
        rdmx_py_key(kobj, &key, &klen) < 0)
        return NULL;
    mag = delta < 0 ? (uint64_t)0 - (uint64_t)delta : (uint64_t)delta;
    if ((ts = rdmx_py_enter(c)) == NULL)
        return NULL;
    st = rdmx_kv_incr(c->kv, key, klen, mag, delta < 0, &value);
    if (st != RDMX_OK)
        detail_take(&d);
    rdmx_py_leave(c, ts);
    if (st != RDMX_OK)
        return rdmx_py_raise(st, d.text);
    return PyLong_FromUnsignedLongLong(value);
}

/* "name value\n" lines into a dict; values that are whole numbers become
 * int. */
static PyObject *stats_dict(const char *text)
{
    PyObject *dict = PyDict_New();

    while (dict != NULL && *text != '\0') {
        const char *nl = strchr(text, '\n'), *sp;
        size_t len = nl != NULL ? (size_t)(nl - text) : strlen(text);
        PyObject *k, *v = NULL;

        sp = memchr(text, ' ', len);
        if (sp != NULL) {
            char num[32], *end;
            size_t vlen = len - (size_t)(sp + 1 - text);
            k = PyUnicode_FromStringAndSize(text, sp - text);
            if (vlen > 0 && vlen < sizeof(num)) {
                memcpy(num, sp + 1, vlen);
                num[vlen] = '\0';
                unsigned long long u = strtoull(num, &end, 10);
                if (*end == '\0' && num[0] != '-')
                    v = PyLong_FromUnsignedLongLong(u);
            }
            if (v == NULL)
                v = PyUnicode_FromStringAndSize(sp + 1, (Py_ssize_t)vlen);
            if (k == NULL || v == NULL || PyDict_SetItem(dict, k, v) < 0)
                Py_CLEAR(dict);
            Py_XDECREF(k);
            Py_XDECREF(v);
        }
        text += len + (nl != NULL);
    }
    return dict;
}

static PyObject *client_stats(pyclient_t *c, PyObject *args, PyObject *kw)
{
    static char *names[] = {"server", NULL};
    unsigned server = 0;
    char *buf;
    PyThreadState *ts;
    rdmx_status_t st;
    PyObject *out;
    detail_t d;

    if (!PyArg_ParseTupleAndKeywords(args, kw, "|I", names, &server))
        return NULL;
    if ((buf = PyMem_RawMalloc(STATS_CAPACITY)) == NULL)
        return PyErr_NoMemory();
    if ((ts = rdmx_py_enter(c)) == NULL) {
        PyMem_RawFree(buf);
        return NULL;
    }
    st = rdmx_kv_stats(c->kv, server, buf, STATS_CAPACITY);
    if (st != RDMX_OK)
        detail_take(&d);
    rdmx_py_leave(c, ts);
    out = st == RDMX_OK ? stats_dict(buf) : rdmx_py_raise(st, d.text);
    PyMem_RawFree(buf);
    return out;
}

/* A sequence of str / bytes into NUL-terminated strings (references kept
 * in @k); bytes with a NUL inside are refused. */
static int cstrings(PyObject *seq, rdmx_py_keys_t *k, const char *what)
{
    if (rdmx_py_keys_get(seq, k) < 0)
        return -1;
    for (size_t i = 0; i < k->n; i++)
        if (strlen(k->keys[i]) != k->klens[i]) {
            char detail[64];
            snprintf(detail, sizeof(detail), "eval: %s[%zu] holds a NUL", what,
                     i);
            rdmx_py_keys_release(k);
            rdmx_py_raise(RDMX_ERR_INVALID, detail);
            return -1;
        }
    return 0;
}

static PyObject *client_eval(pyclient_t *c, PyObject *args, PyObject *kw)
{
    static char *names[] = {"source", "keys", "args", NULL};
    PyObject *sobj, *kobj = NULL, *aobj = NULL, *out = NULL;
    rdmx_py_keys_t keys = {0}, argv = {0};
    rdmx_kv_eval_params_t p = {0};
    const char *src;
    char *copy = NULL;
    size_t slen, out_len = 0;
    PyThreadState *ts;
    rdmx_status_t st;
    detail_t d;

    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|OO", names, &sobj, &kobj,
                                     &aobj) ||
        rdmx_py_key(sobj, &src, &slen) < 0)
        return NULL;
    if (kobj != NULL && cstrings(kobj, &keys, "keys") < 0)
        return NULL;
    if (aobj != NULL && cstrings(aobj, &argv, "args") < 0)
        goto out;
    p.field_mask =
        RDMX_KV_EVAL_PARAM_FIELD_KEYS | RDMX_KV_EVAL_PARAM_FIELD_ARGS;
    p.keys = keys.keys;
    p.nkeys = (unsigned)keys.n;
    p.args = argv.keys;
    p.nargs = (unsigned)argv.n;
    if ((ts = rdmx_py_enter(c)) == NULL)
        goto out;
    if (c->eval_out == NULL &&
        (c->eval_out = malloc(EVAL_OUT_CAPACITY)) == NULL)
        st = RDMX_ERR_NO_MEMORY;
    else
        st = rdmx_kv_eval(c->kv, src, slen, &p, c->eval_out,
                          EVAL_OUT_CAPACITY, &out_len);
    /* The output buffer is the client's: copy it before the mutex goes
     * (the raw allocator needs no GIL). */
    if (st == RDMX_OK && (copy = PyMem_RawMalloc(out_len + 1)) == NULL)
        st = RDMX_ERR_NO_MEMORY;
    if (st == RDMX_OK)
        memcpy(copy, c->eval_out, out_len);
    else
        detail_take(&d);
    rdmx_py_leave(c, ts);
    if (st == RDMX_OK) {
        out = PyBytes_FromStringAndSize(copy, (Py_ssize_t)out_len);
        PyMem_RawFree(copy);
    }
    if (st == RDMX_ERR_TOO_BIG)
        rdmx_py_raise_too_big(out_len, d.text);
    else if (st != RDMX_OK)
        rdmx_py_raise(st, d.text);
out:
    rdmx_py_keys_release(&keys);
    rdmx_py_keys_release(&argv);
    return out;
}

static PyObject *client_prefix_hits(pyclient_t *c, PyObject *arg)
{
    rdmx_py_keys_t k;
    size_t hits = 0;
    PyThreadState *ts;
    rdmx_status_t st = RDMX_OK;
    detail_t d;

    if (rdmx_py_keys_get(arg, &k) < 0)
        return NULL;
    if ((ts = rdmx_py_enter(c)) != NULL) {
        st = rdmx_kv_prefix_hits(c->kv, (const void *const *)k.keys, k.klens,
                                 k.n, &hits);
        if (st != RDMX_OK)
            detail_take(&d);
        rdmx_py_leave(c, ts);
    }
    rdmx_py_keys_release(&k);
    if (ts == NULL)
        return NULL;
    if (st != RDMX_OK)
        return rdmx_py_raise(st, d.text);
    return PyLong_FromSize_t(hits);
}

/* A multi-get of no bytes per key: one round trip per server; a present
 * key answers RDMX_OK (empty value) or RDMX_ERR_TOO_BIG. */
static PyObject *client_batch_is_exist(pyclient_t *c, PyObject *arg)
{
    rdmx_py_keys_t k;
    rdmx_kv_mget_t *items;
    PyObject *out = NULL;
    PyThreadState *ts;
    rdmx_status_t st = RDMX_OK;
    detail_t d;

    if (rdmx_py_keys_get(arg, &k) < 0)
        return NULL;
    if ((items = PyMem_Calloc(k.n + 1, sizeof(*items))) == NULL) {
        rdmx_py_keys_release(&k);
        return PyErr_NoMemory();
    }
    for (size_t i = 0; i < k.n; i++) {
        items[i].key = k.keys[i];
        items[i].klen = k.klens[i];
    }
    if ((ts = rdmx_py_enter(c)) != NULL) {
        st = k.n > 0 ? rdmx_kv_mget(c->kv, items, k.n) : RDMX_OK;
        detail_take(&d);
        rdmx_py_leave(c, ts);
    }
    if (ts == NULL)
        goto out;
    if ((out = PyList_New((Py_ssize_t)k.n)) == NULL)
        goto out;
    for (size_t i = 0; i < k.n; i++) {
        rdmx_status_t s = items[i].status;
        if (s != RDMX_OK && s != RDMX_ERR_TOO_BIG && s != RDMX_ERR_NOT_FOUND) {
            /* A server failed: the whole answer is unknown. */
            Py_CLEAR(out);
            rdmx_py_raise(s, st != RDMX_OK ? d.text : "");
            goto out;
        }
        PyList_SET_ITEM(out, (Py_ssize_t)i,
                        PyBool_FromLong(s != RDMX_ERR_NOT_FOUND));
    }
out:
    PyMem_Free(items);
    rdmx_py_keys_release(&k);
    return out;
}

static PyObject *client_register_buffer(pyclient_t *c, PyObject *args)
{
    return rdmx_py_register_buffer(c, args);
}

static PyObject *client_unregister_buffer(pyclient_t *c, PyObject *args)
{
    return rdmx_py_unregister_buffer(c, args);
}

static PyObject *client_get_into(pyclient_t *c, PyObject *args)
{
    return rdmx_py_get_into(c, args);
}

static PyObject *client_put_from(pyclient_t *c, PyObject *args)
{
    return rdmx_py_put_from(c, args);
}

static PyObject *client_batch_get_into(pyclient_t *c, PyObject *args)
{
    return rdmx_py_batch_get_into(c, args);
}

static PyObject *client_batch_put_from(pyclient_t *c, PyObject *args)
{
    return rdmx_py_batch_put_from(c, args);
}

#define M_(name, flags, doc)                                                   \
    {#name, (PyCFunction)(void (*)(void))client_##name, flags, doc}
static PyMethodDef client_methods[] = {
    M_(close, METH_NOARGS,
       "close(): release the connections and every registered buffer."),
    M_(wait_ready, METH_VARARGS | METH_KEYWORDS,
       "wait_ready(timeout_ms=None): wait until every server is connected."),
    M_(servers, METH_NOARGS, "servers() -> int: the number of servers."),
    M_(get, METH_O, "get(key) -> bytes | None"),
    M_(put, METH_VARARGS | METH_KEYWORDS,
       "put(key, value, ttl_ms=0): store value (bytes-like or str)."),
    M_(delete, METH_O, "delete(key) -> bool: whether the key was there."),
    M_(exists, METH_O, "exists(key) -> bool"),
    M_(incr, METH_VARARGS,
       "incr(key, delta) -> int: add delta (negative: subtract, floor 0)."),
    M_(stats, METH_VARARGS | METH_KEYWORDS,
       "stats(server=0) -> dict: the server's counters."),
    M_(eval, METH_VARARGS | METH_KEYWORDS,
       "eval(source, keys=(), args=()) -> bytes: run a Lua function on the "
       "server owning keys[0]."),
    M_(prefix_hits, METH_O,
       "prefix_hits(keys) -> int: present keys before the first miss."),
    M_(batch_is_exist, METH_O, "batch_is_exist(keys) -> list[bool]"),
    M_(register_buffer, METH_VARARGS,
       "register_buffer(obj) or register_buffer(ptr, size): register memory "
       "for zero-copy transfers until unregister_buffer() or close()."),
    M_(unregister_buffer, METH_VARARGS,
       "unregister_buffer(obj_or_ptr)"),
    M_(get_into, METH_VARARGS,
       "get_into(key, buf, offset=0) or get_into(key, ptr, size) -> int: the "
       "length, or rdmx.ERR_NOT_FOUND on a miss."),
    M_(put_from, METH_VARARGS,
       "put_from(key, buf, offset=0, size=None) or put_from(key, ptr, size)"),
    M_(batch_get_into, METH_VARARGS,
       "batch_get_into(keys, buf, offsets, sizes) or batch_get_into(keys, "
       "ptrs, sizes) -> list[int]: per key the length or a negative status."),
    M_(batch_put_from, METH_VARARGS,
       "batch_put_from(keys, buf, offsets, sizes) or batch_put_from(keys, "
       "ptrs, sizes) -> list[int]: per key the length or a negative status."),
    {"__enter__", (PyCFunction)client_enter, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)client_exit, METH_VARARGS, NULL},
    {NULL, NULL, 0, NULL},
};
#undef M_

PyTypeObject pyclient_type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "rdmx.Client",
    .tp_doc = "Client(servers, replicas=1, timeout_ms=5000, transport=None): "
              "a KV cache client of rdmx-kvd servers (docs/PYTHON.md). One "
              "operation at a time; any thread may call.",
    .tp_basicsize = sizeof(pyclient_t),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = client_new,
    .tp_init = (initproc)client_init,
    .tp_dealloc = (destructor)client_dealloc,
    .tp_methods = client_methods,
};
