/*
 * Shared-secret authentication: HMAC-SHA256 challenge/response (OpenSSL).
 * Both sides prove they hold the secret over both nonces, so neither a
 * replayed proof nor an impostor server passes (docs/PROTOCOL.md).
 */
#include "rpc/internal.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <string.h>

rdmx_status_t rdmx__rpc_mac(const void *secret, size_t secret_len,
                            const char *label, const unsigned char *a,
                            const unsigned char *b,
                            unsigned char out[RDMX_RPC_MAC_SIZE])
{
    unsigned char msg[32 + 2 * RDMX_RPC_NONCE_SIZE];
    size_t llen = strlen(label);
    unsigned int outlen = RDMX_RPC_MAC_SIZE;

    if (llen > 32)
        return rdmx__error(RDMX_ERR_INVALID, "auth: label too long");
    memcpy(msg, label, llen);
    memcpy(msg + llen, a, RDMX_RPC_NONCE_SIZE);
    memcpy(msg + llen + RDMX_RPC_NONCE_SIZE, b, RDMX_RPC_NONCE_SIZE);
    if (HMAC(EVP_sha256(), secret, (int)secret_len, msg,
             llen + 2 * RDMX_RPC_NONCE_SIZE, out, &outlen) == NULL ||
        outlen != RDMX_RPC_MAC_SIZE)
        return rdmx__error(RDMX_ERR_INTERNAL, "auth: HMAC-SHA256 failed");
    return RDMX_OK;
}

rdmx_status_t rdmx__rpc_nonce(unsigned char out[RDMX_RPC_NONCE_SIZE])
{
    if (RAND_bytes(out, RDMX_RPC_NONCE_SIZE) != 1)
        return rdmx__error(RDMX_ERR_INTERNAL, "auth: no random bytes");
    return RDMX_OK;
}

int rdmx__rpc_mac_equal(const unsigned char *a, const unsigned char *b)
{
    return CRYPTO_memcmp(a, b, RDMX_RPC_MAC_SIZE) == 0;
}
