/*
 * Keyed hashes and random bytes (OpenSSL): the HMAC-SHA256 proofs of the
 * connection handshake (docs/PROTOCOL.md, "Authentication") and anything
 * else rdmx signs with a secret.
 */
#include "core/internal.h"

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/params.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

static EVP_MAC *hmac_alg;
static pthread_once_t hmac_once = PTHREAD_ONCE_INIT;
static pthread_key_t hmac_tls;
static int hmac_tls_ok;

/*
 * A thread's HMAC context, keyed for the key it used last. Keying is most
 * of an HMAC's cost in OpenSSL 3 (a context made, the key's two pads
 * hashed, the context freed: ~18,000 instructions for a descriptor's
 * 38 bytes, where the two hashes of the message take ~3,000), and a
 * process signs nearly everything with one key: its context's grant key
 * (a descriptor per lent buffer, mem.c). With the same key again the
 * context is only reset (EVP_MAC_init without a key keeps the key's pads).
 */
typedef struct {
    EVP_MAC_CTX *c;
    size_t key_len; /* 0: none yet */
    unsigned char key[64];
} hmac_keyed_t;

static void hmac_keyed_free(void *arg)
{
    hmac_keyed_t *k = arg;

    EVP_MAC_CTX_free(k->c);
    OPENSSL_cleanse(k->key, sizeof(k->key));
    free(k);
}

static void hmac_fetch(void)
{
    hmac_alg = EVP_MAC_fetch(NULL, "HMAC", NULL);
    hmac_tls_ok = pthread_key_create(&hmac_tls, hmac_keyed_free) == 0;
}

/* This thread's context keyed with @key, or NULL (then a fresh one). */
static EVP_MAC_CTX *hmac_keyed(const void *key, size_t key_len,
                               const OSSL_PARAM *params)
{
    hmac_keyed_t *k;

    if (!hmac_tls_ok || key_len == 0 || key_len > sizeof(k->key))
        return NULL;
    if ((k = pthread_getspecific(hmac_tls)) == NULL) {
        if ((k = calloc(1, sizeof(*k))) == NULL)
            return NULL;
        if ((k->c = EVP_MAC_CTX_new(hmac_alg)) == NULL ||
            pthread_setspecific(hmac_tls, k) != 0) {
            EVP_MAC_CTX_free(k->c);
            free(k);
            return NULL;
        }
    }
    if (k->key_len == key_len && CRYPTO_memcmp(k->key, key, key_len) == 0)
        return EVP_MAC_init(k->c, NULL, 0, NULL) ? k->c : NULL;
    k->key_len = 0;
    if (!EVP_MAC_init(k->c, key, key_len, params))
        return NULL;
    memcpy(k->key, key, key_len);
    k->key_len = key_len;
    return k->c;
}

rdmx_status_t rdmx__hmac(const void *key, size_t key_len,
                         const rdmx_iov_t *parts, unsigned nparts,
                         unsigned char out[RDMX_MAC_SIZE])
{
    OSSL_PARAM params[2];
    EVP_MAC_CTX *c, *fresh = NULL;
    size_t outlen = 0;
    int ok = 1;

    pthread_once(&hmac_once, hmac_fetch);
    if (hmac_alg == NULL)
        return rdmx__error(RDMX_ERR_INTERNAL, "HMAC-SHA256 unavailable");
    params[0] = OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST,
                                                 (char *)"SHA256", 0);
    params[1] = OSSL_PARAM_construct_end();
    if ((c = hmac_keyed(key, key_len, params)) == NULL) {
        if ((fresh = c = EVP_MAC_CTX_new(hmac_alg)) == NULL)
            return rdmx__error(RDMX_ERR_INTERNAL, "HMAC-SHA256 unavailable");
        ok = EVP_MAC_init(c, key, key_len, params);
    }
    for (unsigned i = 0; ok && i < nparts; i++)
        ok = EVP_MAC_update(c, parts[i].base, parts[i].len);
    ok = ok && EVP_MAC_final(c, out, &outlen, RDMX_MAC_SIZE) &&
         outlen == RDMX_MAC_SIZE;
    EVP_MAC_CTX_free(fresh);
    if (!ok)
        return rdmx__error(RDMX_ERR_INTERNAL, "HMAC-SHA256 failed");
    return RDMX_OK;
}

int rdmx__mac_equal(const unsigned char *a, const unsigned char *b)
{
    return CRYPTO_memcmp(a, b, RDMX_MAC_SIZE) == 0;
}

rdmx_status_t rdmx__random(void *buf, size_t len)
{
    unsigned char *p = buf;

    while (len > 0) {
        ssize_t n = getrandom(p, len, 0);
        if (n < 0)
            return rdmx__error(RDMX_ERR_INTERNAL, "getrandom failed");
        p += n;
        len -= (size_t)n;
    }
    return RDMX_OK;
}

rdmx_status_t rdmx__secret_copy(const void *secret, size_t len,
                                unsigned char **out_p, size_t *len_p)
{
    *out_p = NULL;
    *len_p = 0;
    if (secret == NULL || len == 0)
        return RDMX_OK; /* no authentication */
    if (len > RDMX_SECRET_MAX)
        return rdmx__error(RDMX_ERR_INVALID,
                           "auth secret of %zu bytes (at most %u)", len,
                           RDMX_SECRET_MAX);
    if ((*out_p = malloc(len)) == NULL)
        return rdmx__error(RDMX_ERR_NO_MEMORY, "out of memory");
    memcpy(*out_p, secret, len);
    *len_p = len;
    return RDMX_OK;
}

void rdmx__secret_free(unsigned char **secret_p, size_t *len_p)
{
    if (*secret_p != NULL) {
        OPENSSL_cleanse(*secret_p, *len_p);
        free(*secret_p);
    }
    *secret_p = NULL;
    *len_p = 0;
}
