/*
 * Bootstrap sockets: the TCP connection rdmx opens for every endpoint
 * before any transport resource exists, and keeps as its control channel.
 *
 * Frames are a u32 little-endian body length, a type byte, three zero
 * bytes and the body (docs/PROTOCOL.md, "Connection bootstrap"):
 *   HELLO     client -> server  magic u32, version u16, flags u16,
 *                               worker id u64, nonce u8[16],
 *                               transport address
 *   CHALLENGE server -> client  nonce u8[16]          (server with a secret)
 *   AUTH      client -> server  proof u8[32]
 *   WELCOME   server -> client  magic u32, version u16, flags u16,
 *                               worker id u64, token u64,
 *                               [proof u8[32] if flags & F_PROOF],
 *                               transport address
 *   REFUSE    server -> client  status i32, message (text, no NUL)
 * Nothing here knows the transport: addresses are opaque bytes.
 *
 * Sockets are non-blocking and sit in their worker's epoll set; a frame is
 * read in as many pieces as the kernel hands over, and a frame that cannot
 * be written at once waits in s->out for EPOLLOUT.
 */
#include "core/internal.h"

#include "util/endian.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#define HELLO_FIXED   32 /* magic, version, flags, worker id, nonce */
#define WELCOME_FIXED 24 /* magic, version, flags, worker id, token */

rdmx_status_t rdmx__sock_attach(rdmx_worker_t *w, rdmx_sock_t *s, int fd,
                                uint32_t events,
                                void (*on_event)(rdmx_sock_t *, uint32_t))
{
    struct epoll_event ev = {.events = events, .data.ptr = s};

    s->fd = fd;
    s->worker = w;
    s->on_event = on_event;
    s->events = events;
    if (epoll_ctl(w->epfd, EPOLL_CTL_ADD, fd, &ev) != 0)
        return rdmx__error(RDMX_ERR_NO_RESOURCE, "epoll add: %s",
                           strerror(errno));
    w->nsocks++;
    return RDMX_OK;
}

void rdmx__sock_set_events(rdmx_sock_t *s, uint32_t events)
{
    struct epoll_event ev = {.events = events, .data.ptr = s};

    if (s->fd < 0 || s->worker == NULL || s->events == events)
        return;
    if (epoll_ctl(s->worker->epfd, EPOLL_CTL_MOD, s->fd, &ev) == 0)
        s->events = events;
}

rdmx_status_t rdmx__sock_move(rdmx_sock_t *s, rdmx_worker_t *w,
                              void (*on_event)(rdmx_sock_t *, uint32_t))
{
    /* Already out of the old set (rdmx__sock_detach by the listener). */
    return rdmx__sock_attach(w, s, s->fd, EPOLLIN | EPOLLRDHUP, on_event);
}

void rdmx__sock_close(rdmx_sock_t *s)
{
    if (s->fd >= 0) {
        if (s->worker != NULL) {
            epoll_ctl(s->worker->epfd, EPOLL_CTL_DEL, s->fd, NULL);
            s->worker->nsocks--;
        }
        close(s->fd);
        s->fd = -1;
    }
    s->worker = NULL;
    free(s->in);
    free(s->out);
    s->in = s->out = NULL;
    s->in_len = s->in_cap = s->out_len = s->out_off = 0;
}

void rdmx__sock_peer_name(int fd, char *buf, size_t size)
{
    struct sockaddr_storage ss;
    socklen_t len = sizeof(ss);
    char host[INET6_ADDRSTRLEN] = "?";
    unsigned port = 0;

    snprintf(buf, size, "?");
    if (getpeername(fd, (struct sockaddr *)&ss, &len) != 0)
        return;
    if (ss.ss_family == AF_INET) {
        struct sockaddr_in *a = (struct sockaddr_in *)&ss;
        inet_ntop(AF_INET, &a->sin_addr, host, sizeof(host));
        port = ntohs(a->sin_port);
        snprintf(buf, size, "%s:%u", host, port);
    } else if (ss.ss_family == AF_INET6) {
        struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
        inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof(host));
        port = ntohs(a->sin6_port);
        snprintf(buf, size, "[%s]:%u", host, port);
    }
}

/* Read what the socket has, up to the end of the current frame (never
 * past it: the next frame may belong to a later state). 0, or -1 at EOF or
 * error with errno set (0 for EOF). */
static int sock_fill(rdmx_sock_t *s, size_t want)
{
    while (s->in_len < want) {
        ssize_t n;
        if (s->in_len == s->in_cap) {
            /* Grow as bytes arrive, not as the header announces: a peer
             * that announces 64 KiB and sends nothing costs 256 bytes. */
            size_t cap = s->in_cap < 128 ? 256 : 2 * s->in_cap;
            if (cap > want)
                cap = want;
            unsigned char *in = realloc(s->in, cap);
            if (in == NULL) {
                errno = ENOMEM;
                return -1;
            }
            s->in = in;
            s->in_cap = cap;
        }
        n = recv(s->fd, s->in + s->in_len, s->in_cap - s->in_len, 0);
        if (n > 0) {
            s->in_len += (size_t)n;
            continue;
        }
        if (n == 0) {
            errno = 0;
            return -1;
        }
        if (errno == EINTR)
            continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK)
            return 0;
        return -1;
    }
    return 0;
}

int rdmx__sock_read_frame(rdmx_sock_t *s, unsigned *type_p,
                          const unsigned char **body_p, size_t *len_p)
{
    uint32_t blen;

    if (sock_fill(s, RDMX_BS_HDR_SIZE) < 0)
        goto broken;
    if (s->in_len < RDMX_BS_HDR_SIZE)
        return 0;
    blen = rdmx_get_le32(s->in);
    if (blen > RDMX_BS_BODY_MAX || s->in[5] || s->in[6] || s->in[7])
        return rdmx__error(RDMX_ERR_PROTO,
                           "bootstrap: not an rdmx frame (length %u)", blen);
    if (sock_fill(s, RDMX_BS_HDR_SIZE + blen) < 0)
        goto broken;
    if (s->in_len < RDMX_BS_HDR_SIZE + blen)
        return 0;
    *type_p = s->in[4];
    *body_p = s->in + RDMX_BS_HDR_SIZE;
    *len_p = blen;
    return 1;

broken:
    if (errno == 0)
        return rdmx__error(RDMX_ERR_CONN_RESET, "bootstrap: the peer closed "
                                                "the connection");
    return rdmx__error(errno == ECONNREFUSED ? RDMX_ERR_CONN_REFUSED
                                             : RDMX_ERR_CONN_RESET,
                       "bootstrap: %s", strerror(errno));
}

void rdmx__sock_consume(rdmx_sock_t *s)
{
    s->in_len = 0;
}

int rdmx__sock_flush(rdmx_sock_t *s)
{
    while (s->out_off < s->out_len) {
        ssize_t n = send(s->fd, s->out + s->out_off, s->out_len - s->out_off,
                         MSG_NOSIGNAL);
        if (n > 0) {
            s->out_off += (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            rdmx__sock_set_events(s, s->events | EPOLLOUT);
            return 0;
        }
        return -1;
    }
    free(s->out);
    s->out = NULL;
    s->out_len = s->out_off = 0;
    if (s->events & EPOLLOUT)
        rdmx__sock_set_events(s, s->events & ~(uint32_t)EPOLLOUT);
    return 0;
}

rdmx_status_t rdmx__sock_send(rdmx_sock_t *s, unsigned type,
                              const rdmx_bs_msg_t *m)
{
    size_t mlen = 0, blen, off = RDMX_BS_HDR_SIZE, pending;
    unsigned char *f;

    switch (type) {
    case RDMX_BS_HELLO:
        blen = HELLO_FIXED + m->addr_len;
        break;
    case RDMX_BS_WELCOME:
        blen = WELCOME_FIXED + m->addr_len +
               (m->flags & RDMX_BS_F_PROOF ? RDMX_MAC_SIZE : 0);
        break;
    case RDMX_BS_REFUSE:
        mlen = strnlen(m->message, sizeof(m->message) - 1);
        blen = 4 + mlen;
        break;
    case RDMX_BS_CHALLENGE:
        blen = RDMX_NONCE_SIZE;
        break;
    case RDMX_BS_AUTH:
        blen = RDMX_MAC_SIZE;
        break;
    default:
        return rdmx__error(RDMX_ERR_INTERNAL, "bootstrap: frame type %u",
                           type);
    }
    if (blen > RDMX_BS_BODY_MAX)
        return rdmx__error(RDMX_ERR_TOO_BIG,
                           "bootstrap: transport address of %zu bytes",
                           m->addr_len);
    pending = s->out_len - s->out_off;
    f = malloc(pending + RDMX_BS_HDR_SIZE + blen);
    if (f == NULL)
        return rdmx__error(RDMX_ERR_NO_MEMORY, "bootstrap: out of memory");
    if (pending != 0)
        memcpy(f, s->out + s->out_off, pending);
    free(s->out);
    s->out = f;
    s->out_off = 0;
    f += pending;
    memset(f, 0, RDMX_BS_HDR_SIZE);
    rdmx_put_le32(f, (uint32_t)blen);
    f[4] = (unsigned char)type;
    if (type == RDMX_BS_REFUSE) {
        rdmx_put_le32(f + off, (uint32_t)m->status);
        memcpy(f + off + 4, m->message, mlen);
    } else if (type == RDMX_BS_CHALLENGE) {
        memcpy(f + off, m->nonce, RDMX_NONCE_SIZE);
    } else if (type == RDMX_BS_AUTH) {
        memcpy(f + off, m->proof, RDMX_MAC_SIZE);
    } else {
        rdmx_put_le32(f + off, RDMX_WIRE_MAGIC);
        rdmx_put_le16(f + off + 4, (uint16_t)m->version);
        rdmx_put_le16(f + off + 6, (uint16_t)m->flags);
        rdmx_put_le64(f + off + 8, m->worker_id);
        off += 16;
        if (type == RDMX_BS_HELLO) {
            memcpy(f + off, m->nonce, RDMX_NONCE_SIZE);
            off += RDMX_NONCE_SIZE;
        } else {
            rdmx_put_le64(f + off, m->token);
            off += 8;
            if (m->flags & RDMX_BS_F_PROOF) {
                memcpy(f + off, m->proof, RDMX_MAC_SIZE);
                off += RDMX_MAC_SIZE;
            }
        }
        if (m->addr_len != 0)
            memcpy(f + off, m->addr, m->addr_len);
    }
    s->out_len = pending + RDMX_BS_HDR_SIZE + blen;
    if (rdmx__sock_flush(s) < 0)
        return rdmx__error(RDMX_ERR_CONN_RESET, "bootstrap: send: %s",
                           strerror(errno));
    return RDMX_OK;
}

rdmx_status_t rdmx__bs_decode(unsigned type, const unsigned char *b,
                              size_t len, rdmx_bs_msg_t *m)
{
    size_t fixed = type == RDMX_BS_WELCOME ? WELCOME_FIXED : HELLO_FIXED;

    memset(m, 0, sizeof(*m));
    if (type == RDMX_BS_REFUSE) {
        size_t n;
        if (len < 4)
            return rdmx__error(RDMX_ERR_PROTO, "bootstrap: short REFUSE");
        m->status = (int32_t)rdmx_get_le32(b);
        if (m->status >= 0 ||
            !strcmp(rdmx_status_name(m->status), "RDMX_UNKNOWN"))
            m->status = RDMX_ERR_CONN_REFUSED;
        n = len - 4 < sizeof(m->message) - 1 ? len - 4
                                             : sizeof(m->message) - 1;
        memcpy(m->message, b + 4, n);
        for (size_t i = 0; i < n; i++)
            if (m->message[i] < 0x20 || m->message[i] > 0x7e)
                m->message[i] = '?';
        return RDMX_OK;
    }
    if (type == RDMX_BS_CHALLENGE || type == RDMX_BS_AUTH) {
        size_t want = type == RDMX_BS_AUTH ? RDMX_MAC_SIZE : RDMX_NONCE_SIZE;
        if (len != want)
            return rdmx__error(RDMX_ERR_PROTO,
                               "bootstrap: %s of %zu bytes (not %zu)",
                               type == RDMX_BS_AUTH ? "AUTH" : "CHALLENGE",
                               len, want);
        memcpy(type == RDMX_BS_AUTH ? m->proof : m->nonce, b, len);
        return RDMX_OK;
    }
    if (type != RDMX_BS_HELLO && type != RDMX_BS_WELCOME)
        return rdmx__error(RDMX_ERR_PROTO, "bootstrap: unknown frame type %u",
                           type);
    if (len < fixed || rdmx_get_le32(b) != RDMX_WIRE_MAGIC)
        return rdmx__error(RDMX_ERR_PROTO, "bootstrap: not an rdmx peer");
    m->version = rdmx_get_le16(b + 4);
    m->flags = rdmx_get_le16(b + 6);
    m->worker_id = rdmx_get_le64(b + 8);
    if (m->version != RDMX_WIRE_VERSION)
        return rdmx__error(RDMX_ERR_PROTO,
                           "bootstrap: peer speaks protocol version %u, "
                           "this is %u",
                           m->version, RDMX_WIRE_VERSION);
    if (type == RDMX_BS_HELLO) {
        memcpy(m->nonce, b + 16, RDMX_NONCE_SIZE);
        if (m->flags != 0)
            return rdmx__error(RDMX_ERR_PROTO,
                               "bootstrap: HELLO with unknown flags 0x%x",
                               m->flags);
    } else {
        m->token = rdmx_get_le64(b + 16);
        if (m->flags & ~RDMX_BS_F_PROOF)
            return rdmx__error(RDMX_ERR_PROTO,
                               "bootstrap: WELCOME with unknown flags 0x%x",
                               m->flags);
        if (m->flags & RDMX_BS_F_PROOF) {
            if (len < fixed + RDMX_MAC_SIZE)
                return rdmx__error(RDMX_ERR_PROTO,
                                   "bootstrap: short WELCOME");
            memcpy(m->proof, b + fixed, RDMX_MAC_SIZE);
            fixed += RDMX_MAC_SIZE;
        }
    }
    m->addr = b + fixed;
    m->addr_len = len - fixed;
    if (m->addr_len == 0)
        return rdmx__error(RDMX_ERR_PROTO,
                           "bootstrap: no transport address");
    return RDMX_OK;
}

/* The proofs (docs/PROTOCOL.md, "Authentication"). The client's covers
 * the server's nonce and its HELLO (its nonce, worker and transport
 * address); the server's covers the client's nonce, its own nonce and its
 * WELCOME's worker, token and transport address. Neither can be replayed
 * on another connection, and neither side's transport address can be
 * swapped on the way. */
rdmx_status_t rdmx__bs_client_proof(const void *secret, size_t secret_len,
                                    const unsigned char *snonce,
                                    const rdmx_bs_msg_t *hello,
                                    unsigned char out[RDMX_MAC_SIZE])
{
    unsigned char id[8];
    rdmx_iov_t parts[5] = {{"rdmx-client", 11},
                           {snonce, RDMX_NONCE_SIZE},
                           {hello->nonce, RDMX_NONCE_SIZE},
                           {id, sizeof(id)},
                           {hello->addr, hello->addr_len}};

    rdmx_put_le64(id, hello->worker_id);
    return rdmx__hmac(secret, secret_len, parts, 5, out);
}

rdmx_status_t rdmx__bs_server_proof(const void *secret, size_t secret_len,
                                    const unsigned char *cnonce,
                                    const unsigned char *snonce,
                                    const rdmx_bs_msg_t *welcome,
                                    unsigned char out[RDMX_MAC_SIZE])
{
    unsigned char ids[16];
    rdmx_iov_t parts[5] = {{"rdmx-server", 11},
                           {cnonce, RDMX_NONCE_SIZE},
                           {snonce, RDMX_NONCE_SIZE},
                           {ids, sizeof(ids)},
                           {welcome->addr, welcome->addr_len}};

    rdmx_put_le64(ids, welcome->worker_id);
    rdmx_put_le64(ids + 8, welcome->token);
    return rdmx__hmac(secret, secret_len, parts, 5, out);
}

void rdmx__limit_put(rdmx_limit_t *lim)
{
    if (lim != NULL && __atomic_sub_fetch(&lim->refs, 1, __ATOMIC_ACQ_REL) == 0)
        free(lim);
}
