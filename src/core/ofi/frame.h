/*
 * The ofi backend's frame header: 16 bytes in front of every message the
 * backend sends (docs/FABRIC.md, "Frames"). Pure C, no libfabric: the
 * fuzzer builds this file alone.
 *
 *  0 u8  kind   RDMX_OFI_FRAME_EAGER, _RTS or _FIN (others reserved)
 *  1 u8  id     the core's message id (< RDMX_OFI_FRAME_ID_MAX)
 *  2 u16 hlen   core header bytes that follow (<= RDMX_OFI_FRAME_HDR_MAX)
 *  4 u32 src    the sender's endpoint id (never 0)
 *  8 u32 dst    the receiver's endpoint id; 0 only before the receiver's
 *               id is known (the first message of a connection)
 * 12 u32 0
 * 16 ...        the core header (hlen bytes), then by kind:
 *   EAGER: the message's data (the rest of the frame)
 *   RTS:   a large message the receiver pulls (40 bytes): u64 length,
 *          u64 rendezvous id (never 0), u64 remote address, u64 key,
 *          u32 flags (0), u32 0
 *   FIN:   the receiver is done with a rendezvous (16 bytes; hlen 0,
 *          id 0): u64 rendezvous id, i32 status, u32 0
 */
#ifndef RDMX_CORE_OFI_FRAME_H
#define RDMX_CORE_OFI_FRAME_H

#include <stddef.h>
#include <stdint.h>

#define RDMX_OFI_FRAME_SIZE    16
#define RDMX_OFI_FRAME_ID_MAX  32 /* = RDMX_MSG_ID_MAX */
#define RDMX_OFI_FRAME_HDR_MAX 96 /* = RDMX_OP_HDR_MAX */
#define RDMX_OFI_RTS_SIZE      40
#define RDMX_OFI_FIN_SIZE      16

enum {
    RDMX_OFI_FRAME_EAGER = 1, /* header and data inline */
    RDMX_OFI_FRAME_RTS = 2,   /* header inline, data to pull */
    RDMX_OFI_FRAME_FIN = 3,   /* a pull is over */
};

typedef struct {
    unsigned kind;
    unsigned id;
    size_t hlen;
    uint32_t src, dst;
    const unsigned char *hdr;  /* the core header, inside the frame */
    const unsigned char *data; /* what follows it */
    size_t len;                /* bytes of @data */
    /* RTS and FIN only: */
    uint64_t rndv_id;            /* never 0 */
    uint64_t length, raddr, key; /* RTS */
    int32_t status;              /* FIN: an rdmx_status_t */
} rdmx_ofi_frame_t;

/* Write a frame header into @out (RDMX_OFI_FRAME_SIZE bytes). */
void rdmx__ofi_frame_pack(unsigned char *out, unsigned kind, unsigned id,
                          size_t hlen, uint32_t src, uint32_t dst);

/* Write the 40 bytes of an RTS after its core header into @out. */
void rdmx__ofi_rts_pack(unsigned char *out, uint64_t length, uint64_t id,
                        uint64_t raddr, uint64_t key);
/* Write the 16 bytes of a FIN after its frame header into @out. */
void rdmx__ofi_fin_pack(unsigned char *out, uint64_t id, int32_t status);

/* Parse the @len bytes at @buf. Returns 0 and fills @f, or -1 when the
 * frame is malformed (short, unknown kind, id or hlen out of range,
 * header past the end, src 0, reserved bits set, an RTS or FIN of the
 * wrong size, a FIN with a header or id, a rendezvous id 0, a FIN status
 * that is not an error or RDMX_OK). Reads nothing past @buf + @len. */
int rdmx__ofi_frame_parse(const void *buf, size_t len, rdmx_ofi_frame_t *f);

#endif /* RDMX_CORE_OFI_FRAME_H */
