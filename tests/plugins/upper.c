/*
 * Sample native plugin for the lambda engine (docs/LAMBDA.md, "Native
 * plugins"); tests/test_lambda_sandbox.c loads it.
 *
 * Build: cc -shared -fPIC -I include -o upper.so tests/plugins/upper.c
 * (no -lrdmx: the engine hands over function pointers).
 *
 *   "upper"       the input in upper case (ASCII)
 *   "upper.fail"  fails with RDMX_ERR_INVALID and a message
 */
#include <rdmx/lambda.h>

#include <ctype.h>

static rdmx_status_t upper(const void *input, size_t length,
                           rdmx_lambda_output_t *out, void *arg)
{
    const unsigned char *p = input;
    char buf[256];
    size_t i = 0;
    (void)arg;
    while (i < length) {
        size_t n = length - i < sizeof(buf) ? length - i : sizeof(buf), j;
        rdmx_status_t st;
        for (j = 0; j < n; j++)
            buf[j] = (char)toupper(p[i + j]);
        st = rdmx_lambda_output_append(out, buf, n);
        if (st != RDMX_OK)
            return st; /* RDMX_ERR_TOO_BIG past max_output */
        i += n;
    }
    return RDMX_OK;
}

static rdmx_status_t fail(const void *input, size_t length,
                          rdmx_lambda_output_t *out, void *arg)
{
    (void)input;
    (void)length;
    (void)arg;
    rdmx_lambda_output_error(out, "upper.fail: fails on purpose");
    return RDMX_ERR_INVALID;
}

__attribute__((visibility("default"))) int
rdmx_lambda_plugin_init(rdmx_lambda_registry_t *registry)
{
    if (registry->abi != RDMX_LAMBDA_PLUGIN_ABI)
        return -1;
    if (rdmx_lambda_register_native(registry, "upper", upper, NULL) !=
        RDMX_OK)
        return -1;
    if (rdmx_lambda_register_native(registry, "upper.fail", fail, NULL) !=
        RDMX_OK)
        return -1;
    return 0;
}
