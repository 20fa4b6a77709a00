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
#include <string.h>
#include <sys/random.h>

static EVP_MAC *hmac_alg;
static pthread_once_t hmac_once = PTHREAD_ONCE_INIT;

static void hmac_fetch(void)
{
    hmac_alg = EVP_MAC_fetch(NULL, "HMAC", NULL);
}

rdmx_status_t rdmx__hmac(const void *key, size_t key_len,
                         const rdmx_iov_t *parts, unsigned nparts,
                         unsigned char out[RDMX_MAC_SIZE])
{
    OSSL_PARAM params[2];
    EVP_MAC_CTX *c;
    size_t outlen = 0;
    int ok;

    pthread_once(&hmac_once, hmac_fetch);
    if (hmac_alg == NULL || (c = EVP_MAC_CTX_new(hmac_alg)) == NULL)
        return rdmx__error(RDMX_ERR_INTERNAL, "HMAC-SHA256 unavailable");
    params[0] = OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST,
                                                 (char *)"SHA256", 0);
    params[1] = OSSL_PARAM_construct_end();
    ok = EVP_MAC_init(c, key, key_len, params);
    for (unsigned i = 0; ok && i < nparts; i++)
        ok = EVP_MAC_update(c, parts[i].base, parts[i].len);
    ok = ok && EVP_MAC_final(c, out, &outlen, RDMX_MAC_SIZE) &&
         outlen == RDMX_MAC_SIZE;
    EVP_MAC_CTX_free(c);
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
