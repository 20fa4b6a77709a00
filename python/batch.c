/*
 * rdmx Python module: zero-copy reads and writes into caller memory —
 * get_into, put_from and their batches, in the buffer forms (an object and
 * offsets) and Mooncake Store's pointer forms (addresses in registered
 * memory). batch_get and batch_put are the one place a batch reaches the C
 * client.
 */
#include "rdmx_py.h"

#include <stdlib.h>
#include <string.h>

/* One key of a batch: the key, its slot (GET) or value (PUT) and the
 * region holding it in (NULL: a buffer that is not registered); the
 * outcome out. */
typedef rdmx_kv_batch_item_t batch_item_t;

/* Requests of one batch in flight at once: within a channel's default
 * credits (256), so none waits in its queue. */
#define BATCH_WINDOW 128

typedef struct {
    volatile size_t done; /* requests completed */
} batch_run_t;

typedef struct {
    batch_run_t *run;
    batch_item_t *item;
    int put;
} batch_op_t;

static void batch_cb(rdmx_status_t status, const rdmx_kv_meta_t *meta,
                     void *arg)
{
    batch_op_t *op = arg;

    op->item->status = status;
    if (op->put)
        op->item->length = status == RDMX_OK ? op->item->size : 0;
    else
        op->item->length = meta != NULL ? meta->length : 0;
    op->run->done++;
}

/*
 * A batch with a slot outside every registered buffer (the buffer form on
 * an unregistered object): the values travel inside the messages, key by
 * key. Run a batch of GETs (@put 0) or PUTs (@put 1) to the end: at most
 * BATCH_WINDOW non-blocking requests in flight, each with its item's
 * region, then progress until every one completed; each item gets its
 * status and length. Bounded by the requests' deadlines (the client's
 * timeout_ms each). Returns RDMX_OK, or RDMX_ERR_NO_MEMORY with no
 * request sent.
 */
static rdmx_status_t batch_run(rdmx_kv_t *kv, rdmx_worker_t *w,
                               batch_item_t *items, size_t n, int put)
{
    batch_run_t run = {0};
    batch_op_t *ops = malloc((n + 1) * sizeof(*ops));
    size_t next = 0, started = 0;

    if (ops == NULL)
        return RDMX_ERR_NO_MEMORY;
    while (next < n) {
        while (next < n && started - run.done < BATCH_WINDOW) {
            batch_item_t *it = &items[next];
            rdmx_kv_op_params_t p = {0};
            rdmx_status_t st;

            ops[next].run = &run;
            ops[next].item = it;
            ops[next].put = put;
            p.field_mask = RDMX_KV_OP_PARAM_FIELD_CB;
            p.cb = batch_cb;
            p.arg = &ops[next];
            if (it->mr != NULL) {
                p.field_mask |= RDMX_KV_OP_PARAM_FIELD_MR;
                p.mr = it->mr;
            }
            st = put ? rdmx_kv_put_nb(kv, it->key, it->klen, it->buf,
                                      it->size, &p)
                     : rdmx_kv_get_nb(kv, it->key, it->klen, it->buf,
                                      it->size, &p);
            if (st == RDMX_ERR_NO_RESOURCE)
                break; /* progress, then retry */
            if (st == RDMX_INPROGRESS) {
                started++;
            } else {
                it->status = st;
                it->length = 0;
            }
            next++;
        }
        if (next < n) {
            if (started > run.done)
                rdmx_py_wait(w, &run.done, run.done + 1);
            else
                rdmx_worker_progress(w);
        }
    }
    rdmx_py_wait(w, &run.done, started);
    free(ops);
    return RDMX_OK;
}

static int all_registered(const batch_item_t *items, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (items[i].mr == NULL)
            return 0;
    return 1;
}

/*
 * The batch operations of the module, each issued here alone: read each
 * item's key into its slot / store each slot under its key. In registered
 * memory they are the C client's zero-copy batches (the server writes or
 * reads every slot itself, one request per server). Mutex held, no GIL.
 */
static rdmx_status_t batch_get(pyclient_t *c, batch_item_t *items, size_t n)
{
    if (n > 0 && all_registered(items, n))
        return rdmx_kv_batch_get(c->kv, items, n, NULL);
    return batch_run(c->kv, c->w, items, n, 0);
}

static rdmx_status_t batch_put(pyclient_t *c, batch_item_t *items, size_t n)
{
    rdmx_status_t st;

    if (n == 0 || !all_registered(items, n))
        return batch_run(c->kv, c->w, items, n, 1);
    st = rdmx_kv_batch_put(c->kv, items, n, NULL);
    for (size_t i = 0; i < n; i++) /* a stored value's length: all of it */
        items[i].length = items[i].status == RDMX_OK ? items[i].size : 0;
    return st;
}

/* --- the regions an operation holds --------------------------------------- */

typedef struct {
    pyreg_t **r;
    size_t n, cap;
} held_t;

/* The region holding [p, p + len), from those already held or the table
 * (then held too); NULL if none, or on no memory (exception set, *err_p). */
static pyreg_t *held_find(pyclient_t *c, held_t *h, const void *p, size_t len,
                          int *err_p)
{
    const char *s = p;
    pyreg_t *r;

    for (size_t i = 0; i < h->n; i++) {
        r = h->r[i];
        if (r->mr != NULL && s >= r->addr && len <= r->length &&
            (size_t)(s - r->addr) <= r->length - len)
            return r;
    }
    if ((r = rdmx_py_reg_find(c, p, len)) == NULL)
        return NULL;
    if (h->n == h->cap) {
        size_t cap = h->cap ? h->cap * 2 : 4;
        pyreg_t **m = PyMem_Realloc(h->r, cap * sizeof(*m));
        if (m == NULL) {
            rdmx_py_reg_put(c, r);
            PyErr_NoMemory();
            *err_p = 1;
            return NULL;
        }
        h->r = m;
        h->cap = cap;
    }
    h->r[h->n++] = r;
    return r;
}

static void held_release(pyclient_t *c, held_t *h)
{
    for (size_t i = 0; i < h->n; i++)
        rdmx_py_reg_put(c, h->r[i]);
    PyMem_Free(h->r);
    memset(h, 0, sizeof(*h));
}

/* --- single keys -------------------------------------------------------- */

/* The memory of a single-key operation: (buf, offset[, size]) or (ptr,
 * size). @write: the server writes it (GET). Sets *p_p, *len_p and, with
 * a registered region, *reg_p (held). */
static int single_slot(pyclient_t *c, PyObject *buf, PyObject *a2,
                       PyObject *a3, int write, Py_buffer *view,
                       char **p_p, size_t *len_p, pyreg_t **reg_p)
{
    size_t off = 0, len;

    *reg_p = NULL;
    if (PyLong_Check(buf)) {
        char *p = PyLong_AsVoidPtr(buf);
        if (p == NULL && PyErr_Occurred())
            return -1;
        if (a2 == NULL || (a3 != NULL && a3 != Py_None)) {
            PyErr_SetString(PyExc_TypeError,
                            "pointer form: (key, ptr, size)");
            return -1;
        }
        if ((len = rdmx_py_size(a2)) == (size_t)-1 && PyErr_Occurred())
            return -1;
        if ((*reg_p = rdmx_py_reg_find(c, p, len)) == NULL) {
            rdmx_py_raise(RDMX_ERR_INVALID,
                          "ptr .. ptr + size is not in a registered buffer");
            return -1;
        }
        *p_p = p;
        *len_p = len;
        return 0;
    }
    if (PyObject_GetBuffer(buf, view, write ? PyBUF_WRITABLE : PyBUF_SIMPLE) <
        0)
        return -1;
    if (a2 != NULL && a2 != Py_None &&
        (off = rdmx_py_size(a2)) == (size_t)-1 && PyErr_Occurred())
        goto fail;
    if (off > (size_t)view->len) {
        rdmx_py_raise(RDMX_ERR_OUT_OF_RANGE, "offset past the buffer's end");
        goto fail;
    }
    len = (size_t)view->len - off;
    if (a3 != NULL && a3 != Py_None) {
        size_t size = rdmx_py_size(a3);
        if (size == (size_t)-1 && PyErr_Occurred())
            goto fail;
        if (size > len) {
            rdmx_py_raise(RDMX_ERR_OUT_OF_RANGE,
                          "offset + size past the buffer's end");
            goto fail;
        }
        len = size;
    }
    *p_p = (char *)view->buf + off;
    *len_p = len;
    *reg_p = rdmx_py_reg_find(c, *p_p, len);
    return 0;
fail:
    PyBuffer_Release(view);
    return -1;
}

PyObject *rdmx_py_get_into(pyclient_t *c, PyObject *args)
{
    PyObject *kobj, *buf, *a2 = NULL;
    const char *key;
    size_t klen, cap;
    char *p, detail[512] = "";
    Py_buffer view = {0};
    pyreg_t *reg;
    rdmx_kv_op_params_t prm = {0};
    rdmx_kv_meta_t meta = {0};
    PyThreadState *ts;
    rdmx_status_t st = RDMX_OK;

    if (!PyArg_ParseTuple(args, "OO|O:get_into", &kobj, &buf, &a2) ||
        rdmx_py_key(kobj, &key, &klen) < 0)
        return NULL;
    if (single_slot(c, buf, a2, NULL, 1, &view, &p, &cap, &reg) < 0)
        return NULL;
    if (reg != NULL) {
        prm.field_mask = RDMX_KV_OP_PARAM_FIELD_MR;
        prm.mr = reg->mr;
    }
    if ((ts = rdmx_py_enter(c)) != NULL) {
        st = rdmx_kv_get(c->kv, key, klen, p, cap, &prm, &meta);
        if (st != RDMX_OK)
            snprintf(detail, sizeof(detail), "%s", rdmx_error_detail());
        rdmx_py_leave(c, ts);
    }
    if (reg != NULL)
        rdmx_py_reg_put(c, reg);
    if (view.obj != NULL)
        PyBuffer_Release(&view);
    if (ts == NULL)
        return NULL;
    if (st == RDMX_OK)
        return PyLong_FromSize_t(meta.length);
    if (st == RDMX_ERR_NOT_FOUND)
        return PyLong_FromLong(st);
    if (st == RDMX_ERR_TOO_BIG)
        return rdmx_py_raise_too_big(meta.length, detail);
    return rdmx_py_raise(st, detail);
}

PyObject *rdmx_py_put_from(pyclient_t *c, PyObject *args)
{
    PyObject *kobj, *buf, *a2 = NULL, *a3 = NULL;
    const char *key;
    size_t klen, len;
    char *p, detail[512] = "";
    Py_buffer view = {0};
    pyreg_t *reg;
    rdmx_kv_op_params_t prm = {0};
    PyThreadState *ts;
    rdmx_status_t st = RDMX_OK;

    if (!PyArg_ParseTuple(args, "OO|OO:put_from", &kobj, &buf, &a2, &a3) ||
        rdmx_py_key(kobj, &key, &klen) < 0)
        return NULL;
    if (single_slot(c, buf, a2, a3, 0, &view, &p, &len, &reg) < 0)
        return NULL;
    if (reg != NULL) {
        prm.field_mask = RDMX_KV_OP_PARAM_FIELD_MR;
        prm.mr = reg->mr;
    }
    if ((ts = rdmx_py_enter(c)) != NULL) {
        st = rdmx_kv_put(c->kv, key, klen, p, len, &prm, NULL);
        if (st != RDMX_OK)
            snprintf(detail, sizeof(detail), "%s", rdmx_error_detail());
        rdmx_py_leave(c, ts);
    }
    if (reg != NULL)
        rdmx_py_reg_put(c, reg);
    if (view.obj != NULL)
        PyBuffer_Release(&view);
    if (ts == NULL)
        return NULL;
    if (st != RDMX_OK)
        return rdmx_py_raise(st, detail);
    Py_RETURN_NONE;
}

/* --- batches -------------------------------------------------------------- */

/* (keys, buf, offsets, sizes) or (keys, ptrs, sizes) into items, with the
 * keys, the export and the regions held; then the batch; then the list. */
static PyObject *batch_call(pyclient_t *c, PyObject *args, int put)
{
    PyObject *kobj, *a1, *a2, *a3 = NULL, *out = NULL;
    rdmx_py_keys_t keys = {0};
    Py_buffer view = {0};
    size_t *offs = NULL, *sizes = NULL;
    batch_item_t *items = NULL;
    held_t held = {0};
    int ptr_form, err = 0;
    PyThreadState *ts;
    rdmx_status_t st = RDMX_OK;

    if (!PyArg_ParseTuple(args, put ? "OOO|O:batch_put_from"
                                    : "OOO|O:batch_get_into",
                          &kobj, &a1, &a2, &a3))
        return NULL;
    ptr_form = a3 == NULL;
    if (ptr_form && !PyList_Check(a1) && !PyTuple_Check(a1) &&
        PyObject_CheckBuffer(a1) && !PyObject_CheckBuffer(a2)) {
        /* (keys, buf, offsets): a buffer form without its sizes */
        PyErr_SetString(PyExc_TypeError,
                        put ? "batch_put_from(keys, buf, offsets, sizes) or "
                              "batch_put_from(keys, ptrs, sizes)"
                            : "batch_get_into(keys, buf, offsets, sizes) or "
                              "batch_get_into(keys, ptrs, sizes)");
        return NULL;
    }
    if (rdmx_py_keys_get(kobj, &keys) < 0)
        return NULL;
    if (rdmx_py_sizes(ptr_form ? a1 : a2, ptr_form ? "ptrs" : "offsets",
                      keys.n, &offs) < 0 ||
        rdmx_py_sizes(ptr_form ? a2 : a3, "sizes", keys.n, &sizes) < 0)
        goto out;
    if (!ptr_form &&
        PyObject_GetBuffer(a1, &view, put ? PyBUF_SIMPLE : PyBUF_WRITABLE) < 0)
        goto out;
    if ((items = PyMem_Calloc(keys.n + 1, sizeof(*items))) == NULL) {
        PyErr_NoMemory();
        goto out;
    }
    for (size_t i = 0; i < keys.n; i++) {
        batch_item_t *it = &items[i];
        pyreg_t *r;
        char detail[128];

        it->key = keys.keys[i];
        it->klen = keys.klens[i];
        it->size = sizes[i];
        if (ptr_form) {
            it->buf = (void *)(uintptr_t)offs[i];
        } else {
            if (offs[i] > (size_t)view.len ||
                sizes[i] > (size_t)view.len - offs[i]) {
                snprintf(detail, sizeof(detail),
                         "slot %zu (offset %zu, size %zu) past the buffer's "
                         "end (%zd bytes)",
                         i, offs[i], sizes[i], view.len);
                rdmx_py_raise(RDMX_ERR_OUT_OF_RANGE, detail);
                goto out;
            }
            it->buf = (char *)view.buf + offs[i];
        }
        r = held_find(c, &held, it->buf, it->size, &err);
        if (err)
            goto out;
        if (r == NULL && ptr_form) {
            snprintf(detail, sizeof(detail),
                     "ptrs[%zu] .. + sizes[%zu] is not in a registered "
                     "buffer",
                     i, i);
            rdmx_py_raise(RDMX_ERR_INVALID, detail);
            goto out;
        }
        it->mr = r != NULL ? r->mr : NULL;
    }
    if ((ts = rdmx_py_enter(c)) == NULL)
        goto out;
    st = put ? batch_put(c, items, keys.n) : batch_get(c, items, keys.n);
    rdmx_py_leave(c, ts);
    if (st != RDMX_OK) {
        rdmx_py_raise(st, "batch");
        goto out;
    }
    if ((out = PyList_New((Py_ssize_t)keys.n)) == NULL)
        goto out;
    for (size_t i = 0; i < keys.n; i++) {
        PyObject *v = items[i].status == RDMX_OK
                          ? PyLong_FromSize_t(items[i].length)
                          : PyLong_FromLong(items[i].status);
        if (v == NULL) {
            Py_CLEAR(out);
            goto out;
        }
        PyList_SET_ITEM(out, (Py_ssize_t)i, v);
    }
out:
    held_release(c, &held);
    if (view.obj != NULL)
        PyBuffer_Release(&view);
    PyMem_Free(items);
    PyMem_Free(offs);
    PyMem_Free(sizes);
    rdmx_py_keys_release(&keys);
    return out;
}

PyObject *rdmx_py_batch_get_into(pyclient_t *c, PyObject *args)
{
    return batch_call(c, args, 0);
}

PyObject *rdmx_py_batch_put_from(pyclient_t *c, PyObject *args)
{
    return batch_call(c, args, 1);
}
