/*
 * kv_fill — the rdmx side of bench/kv-item-memory.sh: store COUNT items
 * into rdmx-kvd, as the script's memcached filler does there.
 *
 *   kv_fill SERVERS COUNT KEY_BYTES VALUE_BYTES
 *
 * Keys are "k" and the item's number, zero-padded to KEY_BYTES bytes
 * (distinct for COUNT < 10^(KEY_BYTES - 1)); values VALUE_BYTES bytes of
 * 'v'. Items go in rdmx_kv_mput batches of 1024 (values inline), SET, no
 * TTL, no flags. Exit status 0 when every item was stored; a failed item
 * prints its status and stops.
 *
 * Build (bench/kv-item-memory.sh does this, after make):
 *   cc -O2 -I include -I build/include -o kv_fill bench/kv_fill.c \
 *      -L build/lib -Wl,-rpath,build/lib -lrdmx
 */
#define _GNU_SOURCE
#include <rdmx/rdmx.h>

#include "kv_client.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BATCH   1024
#define KEY_MAX 250

int main(int argc, char **argv)
{
    kv_client_t c = {NULL, NULL, NULL};
    rdmx_kv_mput_t *items = NULL;
    char *keys = NULL, *value = NULL;
    size_t count, klen, vlen, done = 0;
    int rc = 1;
    rdmx_status_t st;

    if (argc != 5) {
        fprintf(stderr, "usage: kv_fill SERVERS COUNT KEY_BYTES "
                        "VALUE_BYTES\n");
        return 2;
    }
    count = strtoul(argv[2], NULL, 10);
    klen = strtoul(argv[3], NULL, 10);
    vlen = strtoul(argv[4], NULL, 10);
    if (count == 0 || klen < 8 || klen > KEY_MAX) {
        fprintf(stderr, "kv_fill: COUNT > 0 and KEY_BYTES 8..%d\n", KEY_MAX);
        return 2;
    }
    items = calloc(BATCH, sizeof(*items));
    keys = malloc((size_t)BATCH * (klen + 1));
    value = malloc(vlen + 1);
    if (items == NULL || keys == NULL || value == NULL) {
        fprintf(stderr, "kv_fill: out of memory\n");
        goto out;
    }
    memset(value, 'v', vlen + 1);
    if ((st = kv_client_open(&c, argv[1])) != RDMX_OK) {
        fprintf(stderr, "kv_fill: set-up: %s: %s\n", rdmx_status_name(st),
                rdmx_error_detail());
        goto out;
    }
    while (done < count) {
        size_t n = count - done < BATCH ? count - done : BATCH;
        for (size_t i = 0; i < n; i++) {
            char *k = keys + i * (klen + 1);
            snprintf(k, klen + 1, "k%0*zu", (int)(klen - 1), done + i);
            memset(&items[i], 0, sizeof(items[i]));
            items[i].key = k;
            items[i].klen = klen;
            items[i].value = value;
            items[i].vlen = vlen;
        }
        st = rdmx_kv_mput(c.kv, items, n);
        for (size_t i = 0; st == RDMX_OK && i < n; i++)
            st = items[i].status;
        if (st != RDMX_OK) {
            fprintf(stderr, "kv_fill: put after %zu items: %s: %s\n", done,
                    rdmx_status_name(st), rdmx_error_detail());
            goto out;
        }
        done += n;
    }
    printf("kv_fill count=%zu key=%zu value=%zu\n", done, klen, vlen);
    rc = 0;
out:
    kv_client_close(&c);
    free(value);
    free(keys);
    free(items);
    return rc;
}
