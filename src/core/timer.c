/*
 * Timers and posted functions: what lets code run later on a worker's
 * thread (a handler that answers in 300 ms, another thread handing work
 * to the worker).
 *
 * Timers sit in a binary min-heap by due time; one hook of the worker
 * (upper.h) fires the due ones, so they are checked where the worker's
 * own timers are — every 64th progress pass and after a sleep — and a
 * sleeping worker wakes for the earliest. The hook is on the worker only
 * while a timer is pending. Ids are never reused; a map from id to timer
 * makes a cancel of a fired timer a clean RDMX_ERR_NOT_FOUND.
 *
 * Posted functions go on a list under their own mutex; a flag read once
 * per progress pass says whether the list has any, and the worker is
 * woken (the backend's signal) so that a sleeping one runs them at once.
 */
#include "core/internal.h"

#include "util/time.h"

#include <stdlib.h>

struct rdmx_timer {
    uint64_t due_ns;
    uint64_t id;
    rdmx_task_cb_t cb;
    void *arg;
    size_t index; /* in the heap */
};

struct rdmx_post {
    struct rdmx_post *next;
    rdmx_task_cb_t cb;
    void *arg;
};

/* --- the heap ------------------------------------------------------------ */

static int earlier(const rdmx_timer_t *a, const rdmx_timer_t *b)
{
    return a->due_ns < b->due_ns || (a->due_ns == b->due_ns && a->id < b->id);
}

static void heap_set(rdmx_worker_t *w, size_t i, rdmx_timer_t *t)
{
    w->timers[i] = t;
    t->index = i;
}

static void sift_up(rdmx_worker_t *w, size_t i)
{
    rdmx_timer_t *t = w->timers[i];

    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!earlier(t, w->timers[parent]))
            break;
        heap_set(w, i, w->timers[parent]);
        i = parent;
    }
    heap_set(w, i, t);
}

static void sift_down(rdmx_worker_t *w, size_t i)
{
    rdmx_timer_t *t = w->timers[i];

    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= w->ntimers)
            break;
        if (c + 1 < w->ntimers && earlier(w->timers[c + 1], w->timers[c]))
            c++;
        if (!earlier(w->timers[c], t))
            break;
        heap_set(w, i, w->timers[c]);
        i = c;
    }
    heap_set(w, i, t);
}

/* Take @t out of the heap and the id map; the hook follows the new top. */
static void heap_remove(rdmx_worker_t *w, rdmx_timer_t *t)
{
    size_t i = t->index;
    rdmx_timer_t *last = w->timers[--w->ntimers];

    rdmx_ptrmap_del(&w->timer_ids, (const void *)(uintptr_t)t->id);
    if (last != t) {
        heap_set(w, i, last);
        sift_up(w, i);
        sift_down(w, last->index);
    }
    if (w->ntimers == 0) {
        rdmx__hook_del(&w->timer_hook);
        w->timer_hook.next_ns = UINT64_MAX;
    } else {
        w->timer_hook.next_ns = w->timers[0]->due_ns;
    }
}

/* The worker's hook: fire every timer that is due. */
static unsigned fire_timers(rdmx_hook_t *hook, uint64_t now_ns)
{
    rdmx_worker_t *w = rdmx_container_of(hook, rdmx_worker_t, timer_hook);
    unsigned n = 0;

    while (w->ntimers > 0 && w->timers[0]->due_ns <= now_ns) {
        rdmx_timer_t *t = w->timers[0];
        heap_remove(w, t);
        t->cb(RDMX_OK, t->arg);
        free(t);
        n++;
    }
    return n;
}

rdmx_status_t rdmx_worker_timer_start(rdmx_worker_t *w, int delay_ms,
                                      rdmx_task_cb_t cb, void *arg,
                                      uint64_t *timer_id_p)
{
    rdmx_status_t st = RDMX_OK;
    rdmx_timer_t *t;

    if (w == NULL || cb == NULL)
        return rdmx__error(RDMX_ERR_INVALID, "timer_start: NULL argument");
    if (delay_ms < 0)
        return rdmx__error(RDMX_ERR_INVALID,
                           "timer_start: delay %d ms is negative", delay_ms);
    if ((t = malloc(sizeof(*t))) == NULL)
        return rdmx__error(RDMX_ERR_NO_MEMORY, "timer_start: out of memory");
    t->due_ns = rdmx_now_ns() + (uint64_t)delay_ms * 1000000ull;
    t->cb = cb;
    t->arg = arg;
    rdmx__lock(w);
    if (w->ntimers == w->timers_cap) {
        size_t cap = w->timers_cap ? 2 * w->timers_cap : 16;
        rdmx_timer_t **a = realloc(w->timers, cap * sizeof(*a));
        if (a == NULL) {
            st = rdmx__error(RDMX_ERR_NO_MEMORY, "timer_start: out of memory");
            goto out;
        }
        w->timers = a;
        w->timers_cap = cap;
    }
    t->id = ++w->next_timer_id;
    if (rdmx_ptrmap_put(&w->timer_ids, (const void *)(uintptr_t)t->id, t) !=
        0) {
        st = rdmx__error(RDMX_ERR_NO_MEMORY, "timer_start: out of memory");
        goto out;
    }
    if (w->ntimers == 0)
        rdmx__hook_add(w, &w->timer_hook);
    heap_set(w, w->ntimers++, t);
    sift_up(w, t->index);
    w->timer_hook.next_ns = w->timers[0]->due_ns;
    if (timer_id_p != NULL)
        *timer_id_p = t->id;
    /* A due timer runs at the next pass, not 64 passes later. */
    if (delay_ms == 0)
        w->hooks_due = 1;
    if (w->mt)
        w->tp->signal(w->tw); /* the progress thread sleeps on the old time */
    t = NULL;
out:
    rdmx__unlock(w);
    free(t);
    return st;
}

rdmx_status_t rdmx_worker_timer_cancel(rdmx_worker_t *w, uint64_t timer_id)
{
    rdmx_timer_t *t;

    if (w == NULL)
        return rdmx__error(RDMX_ERR_INVALID, "timer_cancel: NULL worker");
    rdmx__lock(w);
    t = timer_id != 0 ? rdmx_ptrmap_get(&w->timer_ids,
                                        (const void *)(uintptr_t)timer_id)
                      : NULL;
    if (t != NULL)
        heap_remove(w, t);
    rdmx__unlock(w);
    if (t == NULL)
        return rdmx__error(RDMX_ERR_NOT_FOUND,
                           "timer_cancel: no pending timer %llu (it fired or "
                           "was canceled)",
                           (unsigned long long)timer_id);
    t->cb(RDMX_ERR_CANCELED, t->arg);
    free(t);
    return RDMX_OK;
}

/* --- posted functions ---------------------------------------------------- */

rdmx_status_t rdmx_worker_post(rdmx_worker_t *w, rdmx_task_cb_t cb,
                               void *arg)
{
    struct rdmx_post *p;

    if (w == NULL || cb == NULL)
        return rdmx__error(RDMX_ERR_INVALID, "worker_post: NULL argument");
    if ((p = malloc(sizeof(*p))) == NULL)
        return rdmx__error(RDMX_ERR_NO_MEMORY, "worker_post: out of memory");
    p->next = NULL;
    p->cb = cb;
    p->arg = arg;
    pthread_mutex_lock(&w->post_lock);
    if (w->post_tail != NULL)
        w->post_tail->next = p;
    else
        w->post_head = p;
    w->post_tail = p;
    __atomic_store_n(&w->post_pending, 1, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&w->post_lock);
    w->tp->signal(w->tw);
    return RDMX_OK;
}

/* Take the whole list and run it with @status; returns how many ran. */
static unsigned run_posts(rdmx_worker_t *w, rdmx_status_t status)
{
    struct rdmx_post *p, *next;
    unsigned n = 0;

    pthread_mutex_lock(&w->post_lock);
    p = w->post_head;
    w->post_head = w->post_tail = NULL;
    w->post_pending = 0;
    pthread_mutex_unlock(&w->post_lock);
    for (; p != NULL; p = next) {
        next = p->next;
        p->cb(status, p->arg);
        free(p);
        n++;
    }
    return n;
}

unsigned rdmx__posts_run(rdmx_worker_t *w)
{
    return run_posts(w, RDMX_OK);
}

/* --- worker life ----------------------------------------------------------- */

rdmx_status_t rdmx__timers_init(rdmx_worker_t *w)
{
    rdmx_list_init(&w->timer_hook.link);
    w->timer_hook.fn = fire_timers;
    w->timer_hook.next_ns = UINT64_MAX;
    pthread_mutex_init(&w->post_lock, NULL);
    if (rdmx_ptrmap_init(&w->timer_ids) != 0) {
        pthread_mutex_destroy(&w->post_lock);
        return rdmx__error(RDMX_ERR_NO_MEMORY, "worker: out of memory");
    }
    return RDMX_OK;
}

void rdmx__timers_cancel_all(rdmx_worker_t *w)
{
    /* (a callback may post or start more: run until none is left) */
    while (w->ntimers > 0 || w->post_head != NULL) {
        run_posts(w, RDMX_ERR_CANCELED);
        while (w->ntimers > 0) {
            rdmx_timer_t *t = w->timers[w->ntimers - 1];
            heap_remove(w, t);
            t->cb(RDMX_ERR_CANCELED, t->arg);
            free(t);
        }
    }
}

void rdmx__timers_cleanup(rdmx_worker_t *w)
{
    rdmx__timers_cancel_all(w);
    free(w->timers);
    rdmx_ptrmap_cleanup(&w->timer_ids);
    pthread_mutex_destroy(&w->post_lock);
}
