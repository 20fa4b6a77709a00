/*
 * rdmx lambda — the engine's pool of sandbox states (docs/LAMBDA.md,
 * "Sandbox states").
 *
 * Reused (the default): a free list. A call pops a state under the mutex,
 * or builds one when the list is empty, and pushes it back when done; each
 * call runs in its own environment (sandbox.c). The list holds as many
 * states as calls ever ran at once.
 *
 * Fresh (fresh_states): a keeper thread per engine builds spares (states
 * with the sandbox opened, never used) until `target` are ready, and closes
 * the states calls hand back. A call pops a ready spare under the mutex, or
 * builds its own when none is ready: every call runs in a state no other
 * call used. When the keeper falls behind on closing (more calling threads
 * than it can serve), calls close their own: the states waiting to be
 * closed stay few.
 *
 * The keeper runs under SCHED_IDLE (Linux): only on a CPU that would
 * otherwise idle, so it never takes time from the threads that serve
 * calls; with every CPU busy the pool runs empty and calls build their own
 * states, as without spares.
 */
#define _GNU_SOURCE /* SCHED_IDLE */
#include "lambda/lambda_int.h"

#include <pthread.h>
#include <sched.h>
#include <stdlib.h>

/* States waiting for the keeper to close them, at most. */
#define USED_MAX 8u

struct rdmx__lambda_states {
    pthread_mutex_t lock;
    pthread_cond_t wake; /* the keeper: a state to close, a spare taken */
    pthread_t keeper;
    int running, stopping;
    int fresh; /* one call per state; else states are reused */
    unsigned target;
    unsigned nready, nused;
    rdmx__lambda_state_t *ready; /* fresh: built, never used; else: idle */
    rdmx__lambda_state_t *used;  /* to close */
};

static rdmx__lambda_state_t *state_new(void)
{
    rdmx__lambda_state_t *s = calloc(1, sizeof(*s));

    if (s != NULL && rdmx__lambda_state_build(s) != RDMX_OK) {
        free(s);
        s = NULL;
    }
    return s;
}

static void state_free(rdmx__lambda_state_t *s)
{
    rdmx__lambda_state_close(s);
    free(s);
}

/* Close what calls handed back first (it holds memory), then fill up. */
static void *keeper_main(void *arg)
{
    rdmx__lambda_states_t *st = arg;
    rdmx__lambda_state_t *s;
#ifdef SCHED_IDLE
    struct sched_param idle = {0};

    (void)pthread_setschedparam(pthread_self(), SCHED_IDLE, &idle);
#endif

    pthread_mutex_lock(&st->lock);
    while (!st->stopping) {
        if (st->used != NULL) {
            s = st->used;
            st->used = s->next;
            st->nused--;
            pthread_mutex_unlock(&st->lock);
            state_free(s);
            pthread_mutex_lock(&st->lock);
        } else if (st->nready < st->target) {
            pthread_mutex_unlock(&st->lock);
            s = state_new();
            pthread_mutex_lock(&st->lock);
            if (s == NULL) {
                /* out of memory: calls build their own until a state is
                 * handed back and closed */
                pthread_cond_wait(&st->wake, &st->lock);
                continue;
            }
            s->next = st->ready;
            st->ready = s;
            st->nready++;
        } else {
            pthread_cond_wait(&st->wake, &st->lock);
        }
    }
    pthread_mutex_unlock(&st->lock);
    return NULL;
}

rdmx__lambda_states_t *rdmx__lambda_states_create(int fresh, unsigned target)
{
    rdmx__lambda_states_t *st = calloc(1, sizeof(*st));

    if (st == NULL)
        return NULL;
    st->fresh = fresh;
    st->target = fresh ? target : 0;
    pthread_mutex_init(&st->lock, NULL);
    pthread_cond_init(&st->wake, NULL);
    if (st->target > 0) {
        if (pthread_create(&st->keeper, NULL, keeper_main, st) != 0) {
            pthread_cond_destroy(&st->wake);
            pthread_mutex_destroy(&st->lock);
            free(st);
            return NULL;
        }
        st->running = 1;
    }
    return st;
}

void rdmx__lambda_states_destroy(rdmx__lambda_states_t *st)
{
    rdmx__lambda_state_t *s;

    if (st == NULL)
        return;
    if (st->running) {
        pthread_mutex_lock(&st->lock);
        st->stopping = 1;
        pthread_cond_signal(&st->wake);
        pthread_mutex_unlock(&st->lock);
        pthread_join(st->keeper, NULL);
    }
    while ((s = st->ready) != NULL) {
        st->ready = s->next;
        state_free(s);
    }
    while ((s = st->used) != NULL) {
        st->used = s->next;
        state_free(s);
    }
    pthread_cond_destroy(&st->wake);
    pthread_mutex_destroy(&st->lock);
    free(st);
}

rdmx__lambda_state_t *rdmx__lambda_states_take(rdmx__lambda_states_t *st,
                                               int *ready_p)
{
    rdmx__lambda_state_t *s = NULL;

    if (st->running || !st->fresh) {
        pthread_mutex_lock(&st->lock);
        if ((s = st->ready) != NULL) {
            st->ready = s->next;
            st->nready--;
            if (st->running)
                pthread_cond_signal(&st->wake);
        }
        pthread_mutex_unlock(&st->lock);
    }
    *ready_p = s != NULL;
    return s != NULL ? s : state_new();
}

void rdmx__lambda_states_done(rdmx__lambda_states_t *st,
                              rdmx__lambda_state_t *s, int built_here)
{
    int queued = 0;

    if (!st->fresh) {
        if (s->broken) {
            state_free(s);
            return;
        }
        pthread_mutex_lock(&st->lock);
        s->next = st->ready;
        st->ready = s;
        st->nready++;
        pthread_mutex_unlock(&st->lock);
        return;
    }
    if (st->running && !built_here) {
        pthread_mutex_lock(&st->lock);
        if (st->nused < USED_MAX) {
            s->next = st->used;
            st->used = s;
            st->nused++;
            queued = 1;
            pthread_cond_signal(&st->wake);
        }
        pthread_mutex_unlock(&st->lock);
    }
    if (!queued)
        state_free(s);
}
