/*
 * Intrusive doubly linked circular list (the kernel's list_head shape).
 * A list head is an rdmx_list_t whose next/prev point to itself when empty.
 */
#ifndef RDMX_UTIL_LIST_H
#define RDMX_UTIL_LIST_H

#include <stddef.h>

typedef struct rdmx_list {
    struct rdmx_list *next;
    struct rdmx_list *prev;
} rdmx_list_t;

#define rdmx_container_of(ptr, type, member)                                   \
    ((type *)((char *)(ptr) - offsetof(type, member)))

static inline void rdmx_list_init(rdmx_list_t *head)
{
    head->next = head->prev = head;
}

static inline int rdmx_list_empty(const rdmx_list_t *head)
{
    return head->next == head;
}

static inline void rdmx_list_insert_tail(rdmx_list_t *head, rdmx_list_t *e)
{
    e->prev = head->prev;
    e->next = head;
    head->prev->next = e;
    head->prev = e;
}

/* Unlink @e and leave it self-linked, so a second del is harmless. */
static inline void rdmx_list_del(rdmx_list_t *e)
{
    e->prev->next = e->next;
    e->next->prev = e->prev;
    e->next = e->prev = e;
}

/* Remove and return the first element, or NULL. */
static inline rdmx_list_t *rdmx_list_pop(rdmx_list_t *head)
{
    rdmx_list_t *e = head->next;
    if (e == head)
        return NULL;
    /* (the static analyzer does not follow rdmx_list_del through the
     * neighbours' links, and takes an element freed after it was popped for
     * the next one) */
    /* NOLINTNEXTLINE(clang-analyzer-unix.Malloc) */
    rdmx_list_del(e);
    return e;
}

#define rdmx_list_for_each(pos, head)                                          \
    for ((pos) = (head)->next; (pos) != (head); (pos) = (pos)->next)

#define rdmx_list_for_each_safe(pos, tmp, head)                                \
    for ((pos) = (head)->next, (tmp) = (pos)->next; (pos) != (head);           \
         (pos) = (tmp), (tmp) = (pos)->next)

#endif /* RDMX_UTIL_LIST_H */
