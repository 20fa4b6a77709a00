/*
 * A map from pointer keys to pointer values: open addressing with linear
 * probing and backward-shift deletion. Grows at 1/2 load; never shrinks.
 * Not thread-safe: its owner serializes access.
 */
#ifndef RDMX_UTIL_PTRMAP_H
#define RDMX_UTIL_PTRMAP_H

#include <stddef.h>

typedef struct {
    const void *key; /* NULL: empty slot */
    void *value;
} rdmx_ptrmap_slot_t;

typedef struct {
    rdmx_ptrmap_slot_t *slots;
    size_t mask; /* capacity - 1; capacity is a power of two */
    size_t count;
} rdmx_ptrmap_t;

/* Returns 0, or -1 when out of memory. */
int rdmx_ptrmap_init(rdmx_ptrmap_t *map);
void rdmx_ptrmap_cleanup(rdmx_ptrmap_t *map);
/* Insert or replace. Returns 0, or -1 when out of memory. */
int rdmx_ptrmap_put(rdmx_ptrmap_t *map, const void *key, void *value);
void *rdmx_ptrmap_get(const rdmx_ptrmap_t *map, const void *key);
/* Returns the removed value, or NULL. */
void *rdmx_ptrmap_del(rdmx_ptrmap_t *map, const void *key);

#endif /* RDMX_UTIL_PTRMAP_H */
