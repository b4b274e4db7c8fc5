/* runtime/core/names.c - the name registry: name -> address, mutex-protected (not
 * a hot path: callers resolve once and keep the address). */
#include "runtime_internal.h"

#include "moonlet/alloc.h"
#include "moonlet/hash.h"

#include <string.h>

#define N_BUCKETS 256

typedef struct name_entry {
    struct name_entry *next;
    moon_addr_t        addr;
    char               name[];
} name_entry_t;

struct moon_names {
    pthread_mutex_t lock;
    name_entry_t   *buckets[N_BUCKETS];
};

uint32_t moon_name_hash(const char *s)
{
    return (uint32_t)moon_hash_str(s);
}

moon_status_t moon_names_create(moon_names_t **n_p)
{
    moon_names_t *n = moon_calloc(1, sizeof(*n));

    if (n == NULL) {
        return MOON_ERR_NO_MEMORY;
    }
    pthread_mutex_init(&n->lock, NULL);
    *n_p = n;
    return MOON_OK;
}

void moon_names_destroy(moon_names_t *n)
{
    if (n == NULL) {
        return;
    }
    for (int b = 0; b < N_BUCKETS; b++) {
        while (n->buckets[b] != NULL) {
            name_entry_t *e = n->buckets[b];
            n->buckets[b]   = e->next;
            moon_free(e);
        }
    }
    pthread_mutex_destroy(&n->lock);
    moon_free(n);
}

static name_entry_t **find(moon_names_t *n, const char *name)
{
    name_entry_t **pe = &n->buckets[moon_name_hash(name) % N_BUCKETS];

    while (*pe != NULL && strcmp((*pe)->name, name) != 0) {
        pe = &(*pe)->next;
    }
    return pe;
}

moon_status_t moon_register(moon_runtime_t *rt, const char *name, moon_addr_t addr)
{
    moon_names_t  *n = rt->names;
    name_entry_t **pe, *e;
    size_t         len;

    if (name == NULL || (len = strlen(name)) == 0 || len > 255 || addr == MOON_ADDR_NONE) {
        return MOON_ERR_INVALID_PARAM;
    }
    pthread_mutex_lock(&n->lock);
    pe = find(n, name);
    if (*pe != NULL) {
        pthread_mutex_unlock(&n->lock);
        return MOON_ERR_EXISTS;
    }
    e = moon_malloc(sizeof(*e) + len + 1);
    if (e == NULL) {
        pthread_mutex_unlock(&n->lock);
        return MOON_ERR_NO_MEMORY;
    }
    memcpy(e->name, name, len + 1);
    e->addr = addr;
    e->next = NULL;
    *pe     = e;
    pthread_mutex_unlock(&n->lock);
    moon_names_note_extra(rt, name, addr);
    return MOON_OK;
}

static moon_status_t drop(moon_names_t *n, const char *name, moon_addr_t only_addr)
{
    name_entry_t **pe, *e;

    pthread_mutex_lock(&n->lock);
    pe = find(n, name);
    e  = *pe;
    if (e == NULL || (only_addr != MOON_ADDR_NONE && e->addr != only_addr)) {
        pthread_mutex_unlock(&n->lock);
        return MOON_ERR_NOT_FOUND;
    }
    *pe = e->next;
    pthread_mutex_unlock(&n->lock);
    moon_free(e);
    return MOON_OK;
}

moon_status_t moon_unregister(moon_runtime_t *rt, const char *name)
{
    return name != NULL ? drop(rt->names, name, MOON_ADDR_NONE) : MOON_ERR_INVALID_PARAM;
}

void moon_names_drop_addr(moon_names_t *n, const char *name, moon_addr_t addr)
{
    (void)drop(n, name, addr); /* someone may have re-registered it meanwhile */
}

void moon_names_drop_all(moon_names_t *n, moon_addr_t addr)
{
    pthread_mutex_lock(&n->lock);
    for (int b = 0; b < N_BUCKETS; b++) {
        name_entry_t **pe = &n->buckets[b];

        while (*pe != NULL) {
            name_entry_t *e = *pe;
            if (e->addr == addr) {
                *pe = e->next;
                moon_free(e);
            } else {
                pe = &e->next;
            }
        }
    }
    pthread_mutex_unlock(&n->lock);
}

moon_status_t moon_whereis(moon_runtime_t *rt, const char *name, moon_addr_t *addr_p)
{
    moon_names_t  *n = rt->names;
    name_entry_t **pe;
    moon_status_t  status = MOON_ERR_NOT_FOUND;

    if (name == NULL) {
        return MOON_ERR_INVALID_PARAM;
    }
    pthread_mutex_lock(&n->lock);
    pe = find(n, name);
    if (*pe != NULL) {
        *addr_p = (*pe)->addr;
        status  = MOON_OK;
    }
    pthread_mutex_unlock(&n->lock);
    return status;
}
