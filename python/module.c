/*
 * rdmx Python module: set-up, status constants, the exception classes, and
 * the argument helpers the other files share (docs/PYTHON.md).
 */
#include "rdmx_py.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Exception classes by status; [0] is rdmx.Error. Set once at import. */
#define NSTATUS 32
static PyObject *exc_by_status[NSTATUS];

/* The subclasses: status, Python name, a built-in base beside rdmx.Error
 * (NULL: none). */
static const struct {
    rdmx_status_t status;
    const char *name;
    PyObject **builtin;
} exc_table[] = {
    {RDMX_ERR_INVALID, "Invalid", &PyExc_ValueError},
    {RDMX_ERR_NO_MEMORY, "NoMemory", NULL},
    {RDMX_ERR_NO_RESOURCE, "NoResource", NULL},
    {RDMX_ERR_TIMEOUT, "TimeoutError", &PyExc_TimeoutError},
    {RDMX_ERR_CANCELED, "Canceled", NULL},
    {RDMX_ERR_NOT_FOUND, "NotFound", NULL},
    {RDMX_ERR_TOO_BIG, "TooBig", NULL},
    {RDMX_ERR_CONN_REFUSED, "ConnectionRefused", &PyExc_ConnectionRefusedError},
    {RDMX_ERR_CONN_RESET, "ConnectionReset", &PyExc_ConnectionResetError},
    {RDMX_ERR_CONN_CLOSED, "ConnectionClosed", &PyExc_ConnectionError},
    {RDMX_ERR_UNREACHABLE, "Unreachable", &PyExc_ConnectionError},
    {RDMX_ERR_DENIED, "Denied", &PyExc_PermissionError},
    {RDMX_ERR_BUSY, "Busy", NULL},
    {RDMX_ERR_EXISTS, "Exists", NULL},
};

static PyObject *exc_class(rdmx_status_t status)
{
    int i = -(int)status;

    if (i > 0 && i < NSTATUS && exc_by_status[i] != NULL)
        return exc_by_status[i];
    return exc_by_status[0];
}

/* Build the exception of @status and set it; @needed >= 0 also sets the
 * `length` attribute (rdmx.TooBig). */
static PyObject *raise_with(rdmx_status_t status, const char *detail,
                            Py_ssize_t needed)
{
    PyObject *cls = exc_class(status), *exc, *v;
    const char *name = rdmx_status_name(status);

    if (detail == NULL)
        detail = "";
    exc = PyObject_CallFunction(cls, "s", "");
    if (exc == NULL)
        return NULL;
    /* str(e): "RDMX_ERR_TIMEOUT: timed out: <detail>" */
    v = detail[0] != '\0'
            ? PyUnicode_FromFormat("%s: %s: %s", name, rdmx_strerror(status),
                                   detail)
            : PyUnicode_FromFormat("%s: %s", name, rdmx_strerror(status));
    if (v == NULL)
        goto fail;
    {
        PyObject *a = PyTuple_Pack(1, v);
        Py_DECREF(v);
        if (a == NULL || PyObject_SetAttrString(exc, "args", a) < 0) {
            Py_XDECREF(a);
            goto fail;
        }
        Py_DECREF(a);
    }
    if ((v = PyLong_FromLong(status)) == NULL ||
        PyObject_SetAttrString(exc, "status", v) < 0)
        goto fail_v;
    Py_DECREF(v);
    if ((v = PyUnicode_FromString(name)) == NULL ||
        PyObject_SetAttrString(exc, "name", v) < 0)
        goto fail_v;
    Py_DECREF(v);
    if ((v = PyUnicode_DecodeUTF8(detail, (Py_ssize_t)strlen(detail),
                                  "replace")) == NULL ||
        PyObject_SetAttrString(exc, "detail", v) < 0)
        goto fail_v;
    Py_DECREF(v);
    if (needed >= 0) {
        if ((v = PyLong_FromSsize_t(needed)) == NULL ||
            PyObject_SetAttrString(exc, "length", v) < 0)
            goto fail_v;
        Py_DECREF(v);
    }
    PyErr_SetObject(cls, exc);
    Py_DECREF(exc);
    return NULL;
fail_v:
    Py_XDECREF(v);
fail:
    Py_DECREF(exc);
    return NULL;
}

PyObject *rdmx_py_raise(rdmx_status_t status, const char *detail)
{
    return raise_with(status, detail, -1);
}

PyObject *rdmx_py_raise_too_big(size_t needed, const char *detail)
{
    return raise_with(RDMX_ERR_TOO_BIG, detail, (Py_ssize_t)needed);
}

int rdmx_py_errors_init(PyObject *m)
{
    PyObject *err;

    err = PyErr_NewExceptionWithDoc(
        "rdmx.Error",
        "An rdmx operation failed: status (int), name (the status's C name) "
        "and detail (what went wrong).",
        NULL, NULL);
    if (err == NULL || PyModule_AddObjectRef(m, "Error", err) < 0)
        return -1;
    exc_by_status[0] = err;
    for (size_t i = 0; i < sizeof(exc_table) / sizeof(exc_table[0]); i++) {
        char qual[64];
        PyObject *bases, *cls;

        snprintf(qual, sizeof(qual), "rdmx.%s", exc_table[i].name);
        bases = exc_table[i].builtin != NULL
                    ? PyTuple_Pack(2, err, *exc_table[i].builtin)
                    : PyTuple_Pack(1, err);
        if (bases == NULL)
            return -1;
        cls = PyErr_NewException(qual, bases, NULL);
        Py_DECREF(bases);
        if (cls == NULL || PyModule_AddObjectRef(m, exc_table[i].name, cls) < 0)
            return -1;
        exc_by_status[-(int)exc_table[i].status] = cls;
    }

    /* rdmx.OK, rdmx.ERR_NOT_FOUND, ...: the C names without "RDMX_". */
#define RDMX_PY_CONST_(name, value, desc)                                      \
    if (PyModule_AddIntConstant(m, &#name[5], value) < 0)                      \
        return -1;
    RDMX_STATUS_LIST(RDMX_PY_CONST_)
#undef RDMX_PY_CONST_
    return 0;
}

size_t rdmx_py_size(PyObject *obj)
{
    PyObject *i = PyNumber_Index(obj);
    size_t v;

    if (i == NULL)
        return (size_t)-1;
    v = PyLong_AsSize_t(i);
    Py_DECREF(i);
    return v;
}

int rdmx_py_key(PyObject *obj, const char **key_p, size_t *klen_p)
{
    Py_ssize_t len;

    if (PyUnicode_Check(obj)) {
        const char *s = PyUnicode_AsUTF8AndSize(obj, &len);
        if (s == NULL)
            return -1;
        *key_p = s;
    } else if (PyBytes_Check(obj)) {
        *key_p = PyBytes_AS_STRING(obj);
        len = PyBytes_GET_SIZE(obj);
    } else {
        PyErr_Format(PyExc_TypeError, "a key is str or bytes, not %.100s",
                     Py_TYPE(obj)->tp_name);
        return -1;
    }
    *klen_p = (size_t)len;
    return 0;
}

int rdmx_py_keys_get(PyObject *seq, rdmx_py_keys_t *k)
{
    PyObject *fast;
    Py_ssize_t n;

    memset(k, 0, sizeof(*k));
    if (PyUnicode_Check(seq) || PyBytes_Check(seq)) {
        /* (a sequence too, of its characters: surely a mistake) */
        PyErr_SetString(PyExc_TypeError,
                        "keys must be a sequence of keys, not one key");
        return -1;
    }
    if ((fast = PySequence_Fast(seq, "keys must be a sequence")) == NULL)
        return -1;
    n = PySequence_Fast_GET_SIZE(fast);
    k->objs = PyMem_Calloc((size_t)n + 1, sizeof(*k->objs));
    k->keys = PyMem_Calloc((size_t)n + 1, sizeof(*k->keys));
    k->klens = PyMem_Calloc((size_t)n + 1, sizeof(*k->klens));
    if (k->objs == NULL || k->keys == NULL || k->klens == NULL) {
        PyErr_NoMemory();
        goto fail;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *o = PySequence_Fast_GET_ITEM(fast, i);
        if (rdmx_py_key(o, &k->keys[i], &k->klens[i]) < 0)
            goto fail;
        Py_INCREF(o);
        k->objs[i] = o;
        k->n = (size_t)i + 1;
    }
    Py_DECREF(fast);
    return 0;
fail:
    Py_DECREF(fast);
    rdmx_py_keys_release(k);
    return -1;
}

void rdmx_py_keys_release(rdmx_py_keys_t *k)
{
    for (size_t i = 0; i < k->n; i++)
        Py_DECREF(k->objs[i]);
    PyMem_Free(k->objs);
    PyMem_Free(k->keys);
    PyMem_Free(k->klens);
    memset(k, 0, sizeof(*k));
}

/* The array fast path of rdmx_py_sizes: a contiguous buffer of n native
 * 64-bit integers (a numpy int64 or uint64 array). 1 if @seq is not one. */
static int sizes_array(PyObject *seq, const char *what, size_t n,
                       size_t **out_p)
{
    Py_buffer v;
    const char *f;
    size_t *out;
    int rc = -1;

    if (PyList_Check(seq) || PyTuple_Check(seq) || !PyObject_CheckBuffer(seq))
        return 1;
    if (PyObject_GetBuffer(seq, &v, PyBUF_FORMAT | PyBUF_C_CONTIGUOUS) < 0) {
        PyErr_Clear();
        return 1;
    }
    f = v.format != NULL ? v.format : "B";
    if (*f == '@' || *f == '=' || *f == '<')
        f++;
    if (v.itemsize != 8 || f[0] == '\0' || f[1] != '\0' ||
        strchr("qQlLnN", f[0]) == NULL) {
        PyBuffer_Release(&v);
        return 1;
    }
    if ((size_t)v.len / 8 != n) {
        char detail[128];
        snprintf(detail, sizeof(detail), "%s has %zd items for %zu keys",
                 what, v.len / 8, n);
        rdmx_py_raise(RDMX_ERR_INVALID, detail);
        goto out;
    }
    if ((out = PyMem_Calloc(n + 1, sizeof(*out))) == NULL) {
        PyErr_NoMemory();
        goto out;
    }
    memcpy(out, v.buf, n * sizeof(*out));
    if (strchr("qln", f[0]) != NULL)
        for (size_t i = 0; i < n; i++)
            if ((int64_t)out[i] < 0) {
                PyErr_Format(PyExc_OverflowError, "%s[%zu] is negative",
                             what, i);
                PyMem_Free(out);
                goto out;
            }
    *out_p = out;
    rc = 0;
out:
    PyBuffer_Release(&v);
    return rc;
}

int rdmx_py_sizes(PyObject *seq, const char *what, size_t n, size_t **out_p)
{
    PyObject *fast;
    size_t *out;
    int rc;

    if ((rc = sizes_array(seq, what, n, out_p)) <= 0)
        return rc;
    if ((fast = PySequence_Fast(seq, "expected a sequence of integers")) ==
        NULL)
        return -1;
    if ((size_t)PySequence_Fast_GET_SIZE(fast) != n) {
        char detail[128];
        snprintf(detail, sizeof(detail), "%s has %zd items for %zu keys",
                 what, PySequence_Fast_GET_SIZE(fast), n);
        Py_DECREF(fast);
        rdmx_py_raise(RDMX_ERR_INVALID, detail);
        return -1;
    }
    if ((out = PyMem_Calloc(n + 1, sizeof(*out))) == NULL) {
        Py_DECREF(fast);
        PyErr_NoMemory();
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        size_t v = rdmx_py_size(PySequence_Fast_GET_ITEM(fast, i));
        if (v == (size_t)-1 && PyErr_Occurred()) {
            PyMem_Free(out);
            Py_DECREF(fast);
            return -1;
        }
        out[i] = v;
    }
    Py_DECREF(fast);
    *out_p = out;
    return 0;
}

int rdmx_py_transport(PyObject *obj, rdmx_context_params_t *cp)
{
    const char *name;
    rdmx_status_t st;

    if (obj == NULL || obj == Py_None)
        return 0;
    if ((name = PyUnicode_AsUTF8(obj)) == NULL)
        return -1;
    st = rdmx_transport_parse(name, &cp->transport);
    if (st != RDMX_OK) {
        rdmx_py_raise(st, rdmx_error_detail());
        return -1;
    }
    cp->field_mask |= RDMX_CONTEXT_PARAM_FIELD_TRANSPORT;
    return 0;
}

static uint64_t now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* How long rdmx_py_wait polls after the last event before it sleeps, as
 * the C library's blocking calls: RDMX_SPIN_US from the environment (0:
 * sleep at once), default 50 us. Set at import. */
static uint64_t wait_spin_ns = 50000;

static void wait_spin_init(void)
{
    const char *env = getenv("RDMX_SPIN_US");
    char *end;
    unsigned long us;

    if (env == NULL || *env == '\0')
        return;
    us = strtoul(env, &end, 10);
    if (*end == '\0' && us <= 1000000)
        wait_spin_ns = (uint64_t)us * 1000;
}

void rdmx_py_wait(rdmx_worker_t *w, volatile size_t *done, size_t want)
{
    uint64_t idle_since = 0;
    unsigned spins = 0;

    while (*done < want) {
        uint64_t now;
        if (rdmx_worker_progress(w) > 0) {
            idle_since = 0;
            continue;
        }
        if (wait_spin_ns != 0 && (++spins & 63) != 0)
            continue;
        now = now_ns();
        if (idle_since == 0)
            idle_since = now;
        if (now - idle_since >= wait_spin_ns)
            rdmx_worker_wait(w, 100);
    }
}

static PyObject *py_version(PyObject *self, PyObject *unused)
{
    return PyUnicode_FromString(rdmx_version());
}

static PyObject *py_status_name(PyObject *self, PyObject *arg)
{
    long v = PyLong_AsLong(arg);

    if (v == -1 && PyErr_Occurred())
        return NULL;
    return PyUnicode_FromString(rdmx_status_name((rdmx_status_t)v));
}

static PyMethodDef module_methods[] = {
    {"version", py_version, METH_NOARGS,
     "version() -> str: librdmx's version."},
    {"status_name", py_status_name, METH_O,
     "status_name(status) -> str: the C name of an rdmx status "
     "(\"RDMX_ERR_NOT_FOUND\")."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = "rdmx",
    .m_doc = "rdmx: the KV cache client and RPC channels (docs/PYTHON.md).",
    .m_size = -1,
    .m_methods = module_methods,
};

PyMODINIT_FUNC PyInit_rdmx(void)
{
    PyObject *m = PyModule_Create(&module_def);

    if (m == NULL)
        return NULL;
    wait_spin_init();
    if (rdmx_py_errors_init(m) < 0 || PyType_Ready(&pyclient_type) < 0 ||
        PyType_Ready(&pychannel_type) < 0 ||
        PyModule_AddObjectRef(m, "Client", (PyObject *)&pyclient_type) < 0 ||
        PyModule_AddObjectRef(m, "Channel", (PyObject *)&pychannel_type) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
