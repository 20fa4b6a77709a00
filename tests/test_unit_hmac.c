/*
 * rdmx__hmac (src/core/auth.c) against RFC 4231's HMAC-SHA256 test
 * vectors, through each of its paths: a thread's first key, the same key
 * again (its keyed context only reset), a switch to another key and back,
 * a key longer than the cached 64 bytes (a context of its own each time),
 * a message in several parts, and four threads each signing with its own
 * and a shared key at once (each thread's context is its own).
 */
#include "harness.h"
#include "core/internal.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

typedef struct {
    unsigned char key[131];
    size_t key_len;
    const char *msg;
    const char *mac; /* hex */
} vector_t;

static vector_t v[3];

static void vectors(void)
{
    memset(v[0].key, 0x0b, 20);
    v[0].key_len = 20;
    v[0].msg = "Hi There";
    v[0].mac = "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32"
               "cff7";
    memcpy(v[1].key, "Jefe", 4);
    v[1].key_len = 4;
    v[1].msg = "what do ya want for nothing?";
    v[1].mac = "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec"
               "3843";
    memset(v[2].key, 0xaa, 131);
    v[2].key_len = 131;
    v[2].msg = "Test Using Larger Than Block-Size Key - Hash Key First";
    v[2].mac = "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee3"
               "7f54";
}

/* Is the MAC of vector @i, its message cut into @nparts pieces, right? */
static int sign_ok(unsigned i, unsigned nparts)
{
    const vector_t *x = &v[i];
    size_t len = strlen(x->msg), at = 0;
    rdmx_iov_t parts[4];
    unsigned char out[RDMX_MAC_SIZE];
    char hex[2 * RDMX_MAC_SIZE + 1];

    for (unsigned k = 0; k < nparts; k++) {
        size_t n = k + 1 == nparts ? len - at : len / nparts;
        parts[k].base = x->msg + at;
        parts[k].len = n;
        at += n;
    }
    if (rdmx__hmac(x->key, x->key_len, parts, nparts, out) != RDMX_OK)
        return 0;
    for (unsigned k = 0; k < RDMX_MAC_SIZE; k++)
        snprintf(hex + 2 * k, 3, "%02x", out[k]);
    return strcmp(hex, x->mac) == 0;
}

static void *signer(void *arg)
{
    unsigned mine = (unsigned)(uintptr_t)arg % 3;
    long bad = 0;

    for (int r = 0; r < 2000; r++)
        bad += !sign_ok(mine, 1) + !sign_ok(0, 2) + !sign_ok(mine, 1);
    return (void *)bad;
}

int main(void)
{
    pthread_t t[4];

    vectors();
    CHECK(sign_ok(0, 1)); /* a first key */
    CHECK(sign_ok(0, 1)); /* the same again */
    CHECK(sign_ok(0, 3)); /* in parts */
    CHECK(sign_ok(1, 1)); /* another key */
    CHECK(sign_ok(0, 1)); /* and back */
    CHECK(sign_ok(2, 1)); /* longer than cached */
    CHECK(sign_ok(2, 4));
    CHECK(sign_ok(0, 1)); /* the cached one is still right */
    CHECK(sign_ok(1, 2));
    for (uintptr_t i = 0; i < 4; i++)
        CHECK(pthread_create(&t[i], NULL, signer, (void *)i) == 0);
    for (int i = 0; i < 4; i++) {
        void *bad;
        CHECK(pthread_join(t[i], &bad) == 0);
        CHECKF(bad == NULL, "thread %d: %ld wrong MACs", i, (long)bad);
    }
    printf("ok\n");
    return 0;
}
