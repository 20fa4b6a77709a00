/*
 * rdmx-perf: the control protocol between the client and the server
 * processes. Before each test the client sends TEST (the test, its size,
 * counts and window, and a descriptor of its receive buffer); the server
 * answers REPLY (a status and a descriptor of its own) and runs its half.
 * The client ends the test with DONE and waits for DONE_ACK, so that both
 * halves start every test from the same point; QUIT / QUIT_ACK ends the
 * session, and the client closes first. Messages are a fixed little-endian
 * header of CTRL_HDR bytes, then the descriptor, if any.
 */
#include "perf.h"

static void put_le64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++) {
        p[i] = (unsigned char)(v >> (8 * i));
    }
}

static uint64_t get_le64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) {
        v |= (uint64_t)p[i] << (8 * i);
    }
    return v;
}

/* The header of @p c into @p buf; returns the message's length. */
static size_t ctrl_encode(const ctrl_t *c, unsigned char *buf)
{
    memset(buf, 0, CTRL_HDR);
    put_le32(buf + 0, CTRL_MAGIC);
    put_le32(buf + 4, c->op);
    put_le32(buf + 8, c->test);
    put_le32(buf + 12, (uint32_t)c->status);
    put_le32(buf + 16, c->transport);
    put_le64(buf + 20, c->size);
    put_le64(buf + 28, c->iters);
    put_le64(buf + 36, c->warmup);
    put_le64(buf + 44, c->window);
    put_le32(buf + 52, c->desc_len);
    put_le32(buf + 56, c->workers);
    put_le32(buf + 60, c->poll);
    put_le32(buf + 64, c->rpc_port);
    put_le32(buf + 68, c->threads);
    put_le64(buf + 72, c->stat);
    put_le64(buf + 80, c->stat2);
    return CTRL_HDR + c->desc_len; /* descriptor bytes follow, if any */
}

/* @p buf into @p c; false unless it is a whole control message. */
static bool ctrl_decode(const unsigned char *buf, size_t len, ctrl_t *c)
{
    if (len < CTRL_HDR || get_le32(buf) != CTRL_MAGIC) {
        return false;
    }
    c->op = get_le32(buf + 4);
    c->test = get_le32(buf + 8);
    c->status = (int32_t)get_le32(buf + 12);
    c->transport = get_le32(buf + 16);
    c->size = get_le64(buf + 20);
    c->iters = get_le64(buf + 28);
    c->warmup = get_le64(buf + 36);
    c->window = get_le64(buf + 44);
    c->desc_len = get_le32(buf + 52);
    c->workers = get_le32(buf + 56);
    c->poll = get_le32(buf + 60);
    c->rpc_port = get_le32(buf + 64);
    c->threads = get_le32(buf + 68);
    c->stat = get_le64(buf + 72);
    c->stat2 = get_le64(buf + 80);
    c->desc = buf + CTRL_HDR;
    return (size_t)CTRL_HDR + c->desc_len <= len;
}

/* Post the receive of the next control message into p->ctrl_rx. */
int perf_ctrl_post_recv(perf_t *p)
{
    int rc;

    START(rc, p, &p->ctrl_rx_ops, "post control receive",
          rdmx_recv_nb(p->ep, p->ctrl_rx, sizeof(p->ctrl_rx),
                       &PERF_OP_CB(perf_ops_cb, &p->ctrl_rx_ops, NULL)));
    return rc;
}

/* Wait for the control message whose receive was posted last. */
int perf_ctrl_wait(perf_t *p, ctrl_t *c, const char *what)
{
    if (wait_done(p, &p->ctrl_rx_ops, p->ctrl_rx_ops.posted, what) < 0) {
        return -1;
    }
    if (!ctrl_decode(p->ctrl_rx, p->ctrl_rx_ops.last_length, c)) {
        fprintf(stderr,
                "rdmx-perf: %s: malformed control message (%zu bytes)\n", what,
                p->ctrl_rx_ops.last_length);
        return -1;
    }
    return 0;
}

/* Send a control message (header + @p desc) and wait for its completion. */
int perf_ctrl_send(perf_t *p, ctrl_t *c, const void *desc, const char *what)
{
    size_t len;
    int rc;

    c->desc_len = desc ? c->desc_len : 0;
    if ((size_t)CTRL_HDR + c->desc_len > sizeof(p->ctrl_tx)) {
        return perf_fail_msg("descriptor too large for a control message");
    }
    len = ctrl_encode(c, p->ctrl_tx);
    if (c->desc_len) {
        memcpy(p->ctrl_tx + CTRL_HDR, desc, c->desc_len);
    }
    START(rc, p, &p->ctrl_tx_ops, what,
          rdmx_send_nb(p->ep, p->ctrl_tx, len,
                       &PERF_OP_CB(perf_ops_cb, &p->ctrl_tx_ops, NULL)));
    if (rc < 0) {
        return -1;
    }
    return wait_done(p, &p->ctrl_tx_ops, p->ctrl_tx_ops.posted, what);
}

/* Wait for a control message while sleeping on the worker's fd: during an
 * RPC test this process's CPU time belongs to the RPC server's workers. */
int perf_ctrl_wait_idle(perf_t *p, ctrl_t *c, const char *what)
{
    while (p->ctrl_rx_ops.done < p->ctrl_rx_ops.posted) {
        if (p->conn_status != RDMX_OK) {
            return perf_conn_failed(p, what);
        }
        rdmx_worker_wait(p->worker, 100);
    }
    if (p->ctrl_rx_ops.err != RDMX_OK) {
        return perf_fail_status(what, p->ctrl_rx_ops.err);
    }
    if (!ctrl_decode(p->ctrl_rx, p->ctrl_rx_ops.last_length, c)) {
        return perf_fail_msg("malformed control message");
    }
    return 0;
}

/* Client: send @p req (with @p desc, req->desc_len bytes, if not NULL) and
 * wait for the server's REPLY into @p reply; -1 after a message if the
 * exchange failed or the server refused the test. */
int perf_ctrl_request(perf_t *p, ctrl_t *req, const void *desc, ctrl_t *reply)
{
    if (perf_ctrl_post_recv(p) < 0 ||
        perf_ctrl_send(p, req, desc, "request") < 0 ||
        perf_ctrl_wait(p, reply, "wait for the server's reply") < 0) {
        return -1;
    }
    if (reply->op != OP_REPLY) {
        return perf_fail_msg("protocol error: expected a reply");
    }
    if (reply->status != RDMX_OK) {
        fprintf(stderr, "rdmx-perf: %s %zu B: the server refused: %s\n",
                g_tests[req->test].name, (size_t)req->size,
                rdmx_strerror((rdmx_status_t)reply->status));
        return -1;
    }
    return 0;
}

/* Client: DONE, then wait for DONE_ACK into @p ack (the server has released
 * the test's resources). */
int perf_ctrl_done(perf_t *p, test_id_t test, ctrl_t *ack)
{
    ctrl_t done = {.op = OP_DONE, .test = test};

    if (perf_ctrl_post_recv(p) < 0 ||
        perf_ctrl_send(p, &done, NULL, "done") < 0 ||
        perf_ctrl_wait(p, ack, "wait for the server's done") < 0) {
        return -1;
    }
    if (ack->op != OP_DONE_ACK) {
        return perf_fail_msg("protocol error: expected DONE_ACK");
    }
    return 0;
}

/* Client: QUIT, then wait for QUIT_ACK; the caller closes next, and the
 * server waits for that close. */
int perf_ctrl_quit(perf_t *p)
{
    ctrl_t quit = {.op = OP_QUIT}, ack;

    if (perf_ctrl_post_recv(p) < 0 ||
        perf_ctrl_send(p, &quit, NULL, "quit") < 0 ||
        perf_ctrl_wait(p, &ack, "wait for the server's quit ack") < 0) {
        return -1;
    }
    if (ack.op != OP_QUIT_ACK) {
        return perf_fail_msg("protocol error: expected QUIT_ACK");
    }
    return 0;
}

/* The client said QUIT: acknowledge, then let the client close first, so
 * that nothing the server sent can be overtaken by the disconnect. */
static int server_quit(perf_t *p)
{
    ctrl_t ack = {.op = OP_QUIT_ACK};
    uint64_t deadline = now_ns() + 2000000000ull;

    if (perf_ctrl_send(p, &ack, NULL, "quit ack") < 0) {
        return -1;
    }
    while (p->conn_status == RDMX_OK && now_ns() < deadline) {
        rdmx_worker_wait(p->worker, 10);
    }
    return 0;
}

/* Server: serve one connected client until it quits (0), leaves between
 * tests (0, with a note) or fails (-1). */
int perf_serve_client(perf_t *p)
{
    for (;;) {
        ctrl_t c;
        int rc;

        if (perf_ctrl_post_recv(p) < 0) {
            return -1;
        }
        /* between tests, a client may go away without QUIT */
        p->quiet_close = true;
        rc = perf_ctrl_wait(p, &c, "wait for a request");
        p->quiet_close = false;
        if (rc < 0) {
            if (p->conn_status == RDMX_OK) {
                return -1;
            }
            fprintf(stderr, "rdmx-perf: the client left without QUIT: %s\n",
                    rdmx_strerror(p->conn_status));
            return 0;
        }
        if (c.op == OP_QUIT) {
            return server_quit(p);
        }
        if (c.op != OP_TEST) {
            return perf_fail_msg("protocol error: expected a test request");
        }
        if (perf_server_test(p, &c) < 0) {
            return -1;
        }
    }
}
