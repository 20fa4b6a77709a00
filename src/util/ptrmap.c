/*
 * Pointer-keyed hash map; see ptrmap.h.
 */
#include "util/ptrmap.h"

#include "util/hash.h"

#include <stdint.h>
#include <stdlib.h>

static size_t slot_of(const rdmx_ptrmap_t *map, const void *key)
{
    return (size_t)rdmx_mix64((uint64_t)(uintptr_t)key) & map->mask;
}

int rdmx_ptrmap_init(rdmx_ptrmap_t *map)
{
    map->mask = 15;
    map->count = 0;
    map->slots = calloc(map->mask + 1, sizeof(*map->slots));
    return map->slots ? 0 : -1;
}

void rdmx_ptrmap_cleanup(rdmx_ptrmap_t *map)
{
    free(map->slots);
    map->slots = NULL;
    map->count = 0;
}

static int grow(rdmx_ptrmap_t *map)
{
    rdmx_ptrmap_t bigger = {.mask = map->mask * 2 + 1, .count = 0};
    bigger.slots = calloc(bigger.mask + 1, sizeof(*bigger.slots));
    if (bigger.slots == NULL)
        return -1;
    for (size_t i = 0; i <= map->mask; i++) {
        if (map->slots[i].key != NULL)
            rdmx_ptrmap_put(&bigger, map->slots[i].key, map->slots[i].value);
    }
    free(map->slots);
    *map = bigger;
    return 0;
}

int rdmx_ptrmap_put(rdmx_ptrmap_t *map, const void *key, void *value)
{
    if ((map->count + 1) * 2 > map->mask + 1 && grow(map) != 0)
        return -1;
    size_t i = slot_of(map, key);
    while (map->slots[i].key != NULL && map->slots[i].key != key)
        i = (i + 1) & map->mask;
    if (map->slots[i].key == NULL)
        map->count++;
    map->slots[i].key = key;
    map->slots[i].value = value;
    return 0;
}

void *rdmx_ptrmap_get(const rdmx_ptrmap_t *map, const void *key)
{
    size_t i = slot_of(map, key);
    while (map->slots[i].key != NULL) {
        if (map->slots[i].key == key)
            return map->slots[i].value;
        i = (i + 1) & map->mask;
    }
    return NULL;
}

void *rdmx_ptrmap_del(rdmx_ptrmap_t *map, const void *key)
{
    size_t i = slot_of(map, key);
    while (map->slots[i].key != key) {
        if (map->slots[i].key == NULL)
            return NULL;
        i = (i + 1) & map->mask;
    }
    void *value = map->slots[i].value;
    /* Backward-shift: move later members of the probe run into the hole. */
    size_t hole = i;
    for (size_t j = (i + 1) & map->mask; map->slots[j].key != NULL;
         j = (j + 1) & map->mask) {
        size_t home = slot_of(map, map->slots[j].key);
        /* j may move to hole if home is not in (hole, j] cyclically. */
        int in_range = (hole <= j) ? (home > hole && home <= j)
                                   : (home > hole || home <= j);
        if (!in_range) {
            map->slots[hole] = map->slots[j];
            hole = j;
        }
    }
    map->slots[hole].key = NULL;
    map->slots[hole].value = NULL;
    map->count--;
    return value;
}
