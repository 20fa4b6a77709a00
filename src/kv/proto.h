/*
 * KV wire format: the payloads of the kv.* RPC handlers of the KV server
 * (server.c) and its client (client.c), encoded and decoded here only.
 * Fixed little-endian headers, then the key, then (inline) value bytes.
 * Decoders validate every length against the bytes present.
 * docs/KV.md has the tables.
 */
#ifndef RDMX_KV_PROTO_H
#define RDMX_KV_PROTO_H

#include <rdmx/status.h>

#include <stddef.h>
#include <stdint.h>

/* Handler names. */
#define RDMX_KV_H_GET    "kv.get"
#define RDMX_KV_H_PUT    "kv.put"
#define RDMX_KV_H_DELETE "kv.delete"
#define RDMX_KV_H_TOUCH  "kv.touch"
#define RDMX_KV_H_INCR   "kv.incr"
#define RDMX_KV_H_EXISTS "kv.exists"
#define RDMX_KV_H_MGET   "kv.mget"
#define RDMX_KV_H_MPUT   "kv.mput"
#define RDMX_KV_H_PREFIX "kv.prefix"
#define RDMX_KV_H_FLUSH  "kv.flush"
#define RDMX_KV_H_STATS  "kv.stats"
#define RDMX_KV_H_BGET   "kv.batch_get"
#define RDMX_KV_H_BPUT   "kv.batch_put"

typedef enum {
    RDMX_KV_SET = 0,     /* store */
    RDMX_KV_ADD = 1,     /* only if absent */
    RDMX_KV_REPLACE = 2, /* only if present */
    RDMX_KV_CAS = 3      /* only if present with version cas */
} rdmx_kv_mode_t;

/* Where a GET's value went. */
enum {
    RDMX_KV_WHERE_NONE = 0,   /* no value (error, or EXISTS-style answer) */
    RDMX_KV_WHERE_INLINE = 1, /* follows the result header */
    RDMX_KV_WHERE_BUFFER = 2, /* RDMA-written into the caller's buffer at
                                 `offset` (multi-get) or 0 */
    RDMX_KV_WHERE_STORE = 3   /* in the server's store: a location
                                 (RDMX_KV_LOCATION_SIZE) follows */
};

/* Result header, 32 bytes, at the start of every kv.* response (one per
 * key for batches): i32 status, u32 where, u32 flags, u32 reserved,
 * u64 cas, u64 length (value length; for TOO_BIG the length needed). */
#define RDMX_KV_RESULT_SIZE 32
typedef struct {
    int32_t status;
    uint32_t where;
    uint32_t flags;
    uint32_t offset; /* multi-get: offset in the caller's buffer / 64 */
    uint64_t cas;
    uint64_t length;
} rdmx_kv_result_t;

void rdmx__kv_result_encode(const rdmx_kv_result_t *r, unsigned char *out);
rdmx_status_t rdmx__kv_result_decode(const void *buf, size_t len,
                                     rdmx_kv_result_t *r);

/* A key-carrying request, 32-byte header then the key then the value:
 * u8 mode, u8 reserved, u16 key length, u32 flags, u32 ttl_ms,
 * u32 reserved, u64 cas (expected) / delta, u64 value length.
 * GET:    mode RDMX_KV_GET_BUF: the caller lent a buffer of `value length`
 *         bytes (RPC bulk descriptor 0).
 * PUT:    mode & RDMX_KV_MODE_MASK = rdmx_kv_mode_t; RDMX_KV_PUT_BULK: the
 *         value is in the caller's buffer (bulk descriptor 0), not inline.
 * DELETE: cas (0 = any). TOUCH: ttl_ms. INCR: mode RDMX_KV_INCR_DECR
 *         decrements, cas = delta. EXISTS: key only. */
#define RDMX_KV_REQ_SIZE   32
/* A KV server's RPC message limit is its max_value plus this: room for a
 * request's header and the longest key the protocol carries (klen is 16
 * bits), so that a PUT of max_value bytes always fits, and a client can
 * tell the server's max_value from its message limit. */
#define RDMX_KV_MESSAGE_SLACK (64u * 1024 + 4096)
#define RDMX_KV_MODE_MASK  0x7fu /* the mode proper (PUT: rdmx_kv_mode_t) */
#define RDMX_KV_PUT_BULK   0x80u /* PUT: the value is not inline */
#define RDMX_KV_GET_BUF    0x01u /* GET: the caller lent a buffer */
/* GET: the caller maps the store (vlen: its buffer's capacity); with
 * MAP_WANT it would, and asks for the store's descriptor */
#define RDMX_KV_GET_MAP      0x02u
#define RDMX_KV_GET_MAP_WANT 0x04u
/* GET: asked again after a mapped copy met a change (counted) */
#define RDMX_KV_GET_AGAIN  0x08u
#define RDMX_KV_INCR_DECR  0x01u /* INCR: subtract the delta */
typedef struct {
    uint8_t mode;
    uint16_t klen;
    uint32_t flags;
    uint32_t ttl_ms;
    uint64_t cas;
    uint64_t vlen;
    const unsigned char *key;   /* into the decoded buffer */
    const unsigned char *value; /* inline value, or NULL */
} rdmx_kv_req_t;

/* Whether value bytes follow a request's key (what its handler expects). */
typedef enum {
    RDMX_KV_VALUE_NONE = 0,   /* key only; vlen is a number */
    RDMX_KV_VALUE_INLINE = 1, /* vlen value bytes (kv.mput's items) */
    RDMX_KV_VALUE_PUT = 2     /* kv.put: inline unless the mode has
                                 RDMX_KV_PUT_BULK */
} rdmx_kv_value_t;

/* Bytes of an encoded request with @klen key bytes and @inline_len value
 * bytes. */
static inline size_t rdmx__kv_req_size(size_t klen, size_t inline_len)
{
    return RDMX_KV_REQ_SIZE + klen + inline_len;
}
/* Encode into @out (rdmx__kv_req_size bytes); copies key and inline value. */
void rdmx__kv_req_encode(const rdmx_kv_req_t *r, size_t inline_len,
                         unsigned char *out);
/* Encode only the 32-byte header of @r over the one at @out: the same
 * request (key and value unchanged) with other header fields. */
void rdmx__kv_req_encode_header(const rdmx_kv_req_t *r, unsigned char *out);
/* Decode one request from @buf; *used_p = its bytes (batches hold many).
 * @value: whether value bytes follow the key. RDMX_ERR_PROTO with the
 * reason in @why when a length disagrees with the bytes present or a
 * reserved field is set. */
rdmx_status_t rdmx__kv_req_decode(const void *buf, size_t len,
                                  rdmx_kv_value_t value, rdmx_kv_req_t *r,
                                  size_t *used_p, char *why, size_t why_size);

/* Batches (kv.mget, kv.mput, kv.prefix): u32 count, u32 reserved, then
 * count requests back to back (single requests' layout). */
#define RDMX_KV_BATCH_HDR 8
#define RDMX_KV_BATCH_MAX 4096

/* Bytes of a batch of @reqs[0..n), each with @inl[i] value bytes inline
 * (@inl NULL: none). */
size_t rdmx__kv_batch_size(const rdmx_kv_req_t *reqs, const size_t *inl,
                           size_t n);
/* Encode the batch into @out (rdmx__kv_batch_size bytes). */
void rdmx__kv_batch_encode(const rdmx_kv_req_t *reqs, const size_t *inl,
                           size_t n, unsigned char *out);
/* Encode only a batch's header (@n keys) into @out (RDMX_KV_BATCH_HDR
 * bytes). */
void rdmx__kv_batch_hdr_encode(uint32_t n, unsigned char *out);
/* Decode a batch's header: RDMX_OK and *count_p (1..RDMX_KV_BATCH_MAX), or
 * RDMX_ERR_PROTO. Its requests follow at RDMX_KV_BATCH_HDR. */
rdmx_status_t rdmx__kv_batch_decode(const void *buf, size_t len,
                                    uint32_t *count_p);

/* Zero-copy batches (kv.batch_get, kv.batch_put; docs/PROTOCOL.md, "KV
 * zero-copy batches"): the batch header, then per key a request header
 * (mode 0, cas 0; vlen: the slot's capacity or the value's length), the
 * key, and a locator of RDMX_KV_LOC_SIZE bytes: u64 offset within bulk
 * descriptor `bulk`, u8 bulk, 7 reserved. The answer is one result per
 * key. */
#define RDMX_KV_LOC_SIZE      16
/* Most slot (GET) or value (PUT) bytes of one request with more than one
 * key. */
#define RDMX_KV_ZBATCH_BYTES  (64ull << 20)
/* Most transfers the server runs at once for one request. */
#define RDMX_KV_ZBATCH_WINDOW 16

/* One key of a zero-copy batch. */
typedef struct {
    rdmx_kv_req_t r;  /* header and key (r.vlen: the slot's size) */
    uint64_t offset;  /* the slot's offset within descriptor `bulk` */
    uint8_t bulk;     /* index into the request's bulk descriptors */
} rdmx_kv_zitem_t;

/* Bytes of the encoded entry of @z. */
static inline size_t rdmx__kv_zitem_size(const rdmx_kv_zitem_t *z)
{
    return RDMX_KV_REQ_SIZE + z->r.klen + RDMX_KV_LOC_SIZE;
}
/* Encode the entry of @z into @out (rdmx__kv_zitem_size bytes). */
void rdmx__kv_zitem_encode(const rdmx_kv_zitem_t *z, unsigned char *out);
/* Decode one entry from @buf (@len bytes left); *used_p = its bytes.
 * RDMX_ERR_PROTO with the reason in @why when a length disagrees with the
 * bytes present or a reserved field, cas or mode is set. Checks neither
 * the key's length against 0 nor the locator against the descriptors. */
rdmx_status_t rdmx__kv_zitem_decode(const void *buf, size_t len,
                                    rdmx_kv_zitem_t *z, size_t *used_p,
                                    char *why, size_t why_size);

/* Mapped GETs (docs/KV.md, "Mapped GETs over shared memory"). A GET with
 * RDMX_KV_GET_MAP of a value above RDMX_KV_MAP_ABOVE bytes may be
 * answered RDMX_KV_WHERE_STORE: the result, then a location (u64 store
 * id, u64 stamp offset, u64 value offset, both from the store's start, u64
 * stamp), then, if the GET had RDMX_KV_GET_MAP_WANT, the packed
 * descriptor of the whole store (read access). Smaller values come
 * inline. */
#define RDMX_KV_MAP_ABOVE     512
#define RDMX_KV_LOCATION_SIZE 32
typedef struct {
    uint64_t store_id;
    uint64_t stamp_offset;
    uint64_t value_offset;
    uint64_t stamp;
} rdmx_kv_location_t;

void rdmx__kv_location_encode(const rdmx_kv_location_t *l, unsigned char *out);
/* RDMX_ERR_PROTO when shorter than RDMX_KV_LOCATION_SIZE. */
rdmx_status_t rdmx__kv_location_decode(const void *buf, size_t len,
                                       rdmx_kv_location_t *l);

/* kv.prefix's answer: u32 keys present before the first miss. */
#define RDMX_KV_PREFIX_SIZE 4
void rdmx__kv_prefix_encode(uint32_t hits, unsigned char *out);
/* RDMX_ERR_PROTO when shorter than RDMX_KV_PREFIX_SIZE. */
rdmx_status_t rdmx__kv_prefix_decode(const void *buf, size_t len,
                                     uint32_t *hits_p);

#endif /* RDMX_KV_PROTO_H */
