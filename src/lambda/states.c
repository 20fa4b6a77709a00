/*
 * rdmx lambda — the engine's pool of sandbox states (docs/LAMBDA.md,
 * "Sandbox states").
 *
 * A free list. A call pops a state under the mutex, or builds one when the
 * list is empty, and pushes it back when done. The list holds as many
 * states as calls ever ran at once. Each lives in an arena and begins
 * every call from a saved image (sandbox.c), so that no call sees anything
 * an earlier one left.
 */
#include "lambda/lambda_int.h"

#include <pthread.h>
#include <stdlib.h>

struct rdmx__lambda_states {
    pthread_mutex_t lock;
    size_t arena_size; /* of each state's arena */
    rdmx__lambda_state_t *idle;
};

static rdmx__lambda_state_t *state_new(size_t arena_size)
{
    rdmx__lambda_state_t *s = calloc(1, sizeof(*s));

    if (s != NULL && rdmx__lambda_state_build(s, arena_size) != RDMX_OK) {
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

rdmx__lambda_states_t *rdmx__lambda_states_create(size_t arena_size)
{
    rdmx__lambda_states_t *st = calloc(1, sizeof(*st));

    if (st == NULL)
        return NULL;
    st->arena_size = arena_size;
    pthread_mutex_init(&st->lock, NULL);
    return st;
}

void rdmx__lambda_states_destroy(rdmx__lambda_states_t *st)
{
    rdmx__lambda_state_t *s;

    if (st == NULL)
        return;
    while ((s = st->idle) != NULL) {
        st->idle = s->next;
        state_free(s);
    }
    pthread_mutex_destroy(&st->lock);
    free(st);
}

rdmx__lambda_state_t *rdmx__lambda_states_take(rdmx__lambda_states_t *st,
                                               int *ready_p)
{
    rdmx__lambda_state_t *s;

    pthread_mutex_lock(&st->lock);
    if ((s = st->idle) != NULL)
        st->idle = s->next;
    pthread_mutex_unlock(&st->lock);
    *ready_p = s != NULL;
    return s != NULL ? s : state_new(st->arena_size);
}

void rdmx__lambda_states_done(rdmx__lambda_states_t *st,
                              rdmx__lambda_state_t *s)
{
    pthread_mutex_lock(&st->lock);
    s->next = st->idle;
    st->idle = s;
    pthread_mutex_unlock(&st->lock);
}
