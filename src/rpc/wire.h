/*
 * RPC wire format: the header every RPC message carries as its active-
 * message header (16 bytes, 20 or 24 with a deadline or aux bytes: small
 * enough that a call with a 64-byte payload takes the transport's shortest
 * send path), and the bodies of the handshake and of bulk descriptor
 * tables. Encoders write, decoders validate everything they read and say
 * what was wrong. docs/PROTOCOL.md is the reference.
 */
#ifndef RDMX_RPC_WIRE_H
#define RDMX_RPC_WIRE_H

#include <rdmx/status.h>

#include <stddef.h>
#include <stdint.h>

#define RDMX_RPC_VERSION     2u
#define RDMX_RPC_HDR_MIN     16 /* no deadline, no aux */
#define RDMX_RPC_HDR_MAX     24 /* both */
/* Version 1's 40-byte header began with this magic ("RXRP"): recognised
 * only to say what the peer speaks. */
#define RDMX_RPC_V1_MAGIC    0x50525852u
#define RDMX_RPC_V1_HDR_SIZE 40

/* The UCX active-message id of every RPC message (core uses 0..15). */
#define RDMX_AM_RPC 16

typedef enum {
    RDMX_RPC_MSG_REQUEST = 1,  /* call: handler id, request id, deadline */
    RDMX_RPC_MSG_RESPONSE = 2, /* success: payload is the response */
    RDMX_RPC_MSG_ERROR = 3,    /* failure: status < 0, payload is a message */
    RDMX_RPC_MSG_ONEWAY = 4,   /* call without a response */
    RDMX_RPC_MSG_CANCEL = 5,   /* caller gave up on request id */
    RDMX_RPC_MSG_PING = 6,     /* heartbeat; answered with PONG, same id */
    RDMX_RPC_MSG_PONG = 7,
    RDMX_RPC_MSG_HELLO = 8, /* client -> server, first message */
    /* 9 and 10 are unused (authentication is in the connection's
     * bootstrap, before any RPC message: docs/PROTOCOL.md) */
    RDMX_RPC_MSG_WELCOME = 11, /* server -> client: ready, credits, handlers */
    RDMX_RPC_MSG_RING = 12,    /* server -> client: its request ring
                                  (docs/RPC_RINGS.md) */
    RDMX_RPC_MSG_WAKE = 13,    /* client -> server: a record waits in the
                                  ring of a worker that sleeps; no answer */
    RDMX_RPC_MSG_KIND_MAX = 13
} rdmx_rpc_kind_t;

/* Header flags. IDEMPOTENT and RETRY are the call's; DEADLINE and AUX say
 * which optional words follow the fixed 16 bytes (the encoder sets them,
 * from deadline_us and aux being non-zero). */
enum {
    RDMX_RPC_F_IDEMPOTENT = 1u << 0, /* the caller may resend it */
    RDMX_RPC_F_RETRY = 1u << 1,      /* this is a resend */
    RDMX_RPC_F_CALL = 3u,            /* the two above */
    RDMX_RPC_F_DEADLINE = 1u << 6,   /* u32 deadline_us follows */
    RDMX_RPC_F_AUX = 1u << 7,        /* u32 aux follows (after deadline) */
    RDMX_RPC_F_KNOWN = 0xc3u         /* flags a version-2 peer may set */
};

/* A header, decoded. flags holds only the call's flags (RDMX_RPC_F_CALL);
 * payload is the message data after aux. */
typedef struct {
    uint8_t version;
    uint8_t kind;
    uint8_t flags;
    uint32_t handler;   /* REQUEST, ONEWAY: rdmx_rpc_id of the name */
    int32_t status;     /* 0, or a negative rdmx_status_t (ERROR) */
    uint64_t id;        /* request id, chosen by the caller */
    uint32_t payload;   /* payload bytes (after aux) in the message data */
    uint32_t aux;       /* aux bytes (bulk table, handshake body) */
    uint32_t deadline_us; /* REQUEST, ONEWAY: time left when sent; 0 = none */
} rdmx_rpc_hdr_t;

/* Encode @h into @out; @return its length (RDMX_RPC_HDR_MIN..MAX). The
 * handler goes out only for REQUEST and ONEWAY, the status only for ERROR,
 * the deadline only for REQUEST and ONEWAY. */
size_t rdmx_rpc_hdr_encode(const rdmx_rpc_hdr_t *h,
                           unsigned char out[RDMX_RPC_HDR_MAX]);

/*
 * Decode and validate a header of @len bytes that came with @data_len bytes
 * of message data. On error writes what was wrong to @why (may be NULL) and
 * leaves in @h the kind and id when 16 or more bytes arrived and they are
 * not a version-1 header (all of @h zero otherwise), for an error response;
 * other fields of @h are then unspecified.
 * @return RDMX_OK, RDMX_ERR_PROTO (version, kind, flags, lengths, fields a
 * kind must leave zero).
 */
rdmx_status_t rdmx_rpc_hdr_decode(const void *buf, size_t len,
                                  size_t data_len, rdmx_rpc_hdr_t *h,
                                  char *why, size_t why_size);

/* --- bulk descriptor table (aux of a REQUEST) ------------------------------ */
/* u8 count, u8[3] zero, then count x { u32 length, descriptor bytes }.      */

#define RDMX_RPC_BULK_DESC_MAX 1024 /* longest descriptor accepted */

typedef struct {
    const unsigned char *desc; /* points into the decoded buffer */
    uint32_t length;
} rdmx_rpc_bulk_ref_t;

/* Decode at most @max entries; @return RDMX_ERR_PROTO on any inconsistency. */
rdmx_status_t rdmx_rpc_bulk_decode(const void *aux, size_t len,
                                   rdmx_rpc_bulk_ref_t *out, unsigned max,
                                   unsigned *count_p, char *why,
                                   size_t why_size);

/* --- handshake bodies -------------------------------------------------------- */

#define RDMX_RPC_HANDLERS_MAX 4096

/* HELLO aux: u32 features, RDMX_RPC_HELLO_F_*. */
#define RDMX_RPC_HELLO_SIZE 4
/* The client maps a server's memory when the transport can (shared
 * memory): the server may offer a request ring (RING, docs/RPC_RINGS.md). */
#define RDMX_RPC_HELLO_F_RINGS 1u
#define RDMX_RPC_HELLO_F_KNOWN 1u

typedef struct {
    uint32_t credits;
    uint32_t worker;      /* index of the server worker that owns the link */
    uint64_t max_message;
    uint32_t nhandlers;
    const unsigned char *handlers; /* nhandlers x { u32 id, u32 flags } */
} rdmx_rpc_welcome_t;

/* WELCOME aux: u32 credits, u32 worker, u64 max_message, u32 nhandlers,
 * u32 reserved (0), nhandlers x {u32 id, u32 flags}. */
size_t rdmx_rpc_welcome_size(uint32_t nhandlers);
void rdmx_rpc_welcome_encode(const rdmx_rpc_welcome_t *wl,
                             const uint32_t *ids, const uint32_t *flags,
                             unsigned char *out);
rdmx_status_t rdmx_rpc_welcome_decode(const void *aux, size_t len,
                                      rdmx_rpc_welcome_t *wl, char *why,
                                      size_t why_size);
/* The flags of handler @id in a decoded welcome; -1 if not listed. */
int rdmx_rpc_welcome_flags(const rdmx_rpc_welcome_t *wl, uint32_t id);

/* --- ring records (docs/RPC_RINGS.md) ----------------------------------------
 */
/* What follows a ring slot's sequence word: u16 header length, u16 data
 * length, u32 `after` (a request's: how many REQUEST and ONEWAY messages
 * the client had sent on the connection before it wrote this record, mod
 * 2^32: the server runs the record only after those; 0 in an answer), the
 * header, then the data (aux || payload). A server's ring carries
 * REQUESTs, a client's RESPONSEs. */

#define RDMX_RPC_RING_REC_FIXED 8

/* Write the fixed part and the header for @dlen bytes of data into @out;
 * @return where the data goes (from @out). */
size_t rdmx_rpc_ring_record_encode(const rdmx_rpc_hdr_t *h, size_t dlen,
                                   uint32_t after, unsigned char *out);
/* Decode a record of at most @size bytes that must be of @kind: its header
 * into @h, its `after`, where its data starts (from @rec) and how long it
 * is. RDMX_ERR_PROTO (and @why) for lengths that do not fit @size, a
 * header that does not decode, or another kind (@h then holds what the
 * header decoder leaves). */
rdmx_status_t rdmx_rpc_ring_record_decode(const unsigned char *rec, size_t size,
                                          unsigned kind, rdmx_rpc_hdr_t *h,
                                          uint32_t *after, size_t *data_off,
                                          size_t *data_len, char *why,
                                          size_t why_size);

#endif /* RDMX_RPC_WIRE_H */
