/*
 * lambda_loop — the lambda engine's own cost per call, in process: eval
 * FILE (default "return nil") once, then call it by id N times through
 * rdmx_lambda_engine_call, and print the time per call. Run under
 * `valgrind --tool=callgrind` for instruction counts (docs/PERFORMANCE.md,
 * "Lambda call overhead"):
 *
 *   cc -O2 -g -o lambda_loop bench/lambda_loop.c -Iinclude -Ibuild/include \
 *       -Lbuild/lib -lrdmx -Wl,-rpath,build/lib
 *   ./lambda_loop N [FILE]
 */
#include <rdmx/lambda.h>

#include "bench.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char src[1 << 20];

int main(int argc, char **argv)
{
    rdmx_lambda_engine_t *e;
    rdmx_lambda_result_t r;
    uint8_t id[RDMX_LAMBDA_ID_LEN];
    uint64_t t0, t1;
    long i, n;

    if (argc < 2 || (n = atol(argv[1])) <= 0) {
        fprintf(stderr, "usage: %s N [FILE]\n", argv[0]);
        return 2;
    }
    if (argc > 2) {
        FILE *f = fopen(argv[2], "r");
        size_t len;
        if (f == NULL) {
            perror(argv[2]);
            return 1;
        }
        len = fread(src, 1, sizeof(src) - 1, f);
        fclose(f);
        src[len] = '\0';
    } else {
        strcpy(src, "return nil");
    }
    if (rdmx_lambda_engine_create(NULL, &e) != RDMX_OK) {
        fprintf(stderr, "engine: %s\n", rdmx_error_detail());
        return 1;
    }
    if (rdmx_lambda_engine_eval(e, src, strlen(src), NULL, &r) != RDMX_OK) {
        fprintf(stderr, "eval: %s\n", r.message);
        return 1;
    }
    memcpy(id, r.id, sizeof(id));
    rdmx_lambda_result_free(&r);
    t0 = now_ns();
    for (i = 0; i < n; i++) {
        if (rdmx_lambda_engine_call(e, id, NULL, &r) != RDMX_OK) {
            fprintf(stderr, "call: %s\n", r.message);
            return 1;
        }
        rdmx_lambda_result_free(&r);
    }
    t1 = now_ns();
    printf("%.3f us per call (%ld calls)\n",
           (double)(t1 - t0) / 1e3 / (double)n, n);
    rdmx_lambda_engine_destroy(e);
    return 0;
}
