/*
 * SQLite's own page cache (pcache1), wrapped so that ending a transaction does not scan the whole cache for
 * nothing.
 *
 * At the end of every transaction the pager asks its cache to drop the pages past the end of the database
 * (`xTruncate`). pcache1 remembers the largest key it has seen since its last truncation and, when that is far
 * enough past the limit, walks every page it holds to find the ones to drop. When a B-tree rebalances its leaves it
 * sorts their page numbers by swapping two pages through a spare key, the page after the lock byte's (1 GiB past the
 * start of the file: key 262,145 with 4 KiB pages). That key is gone again a moment later, but pcache1 remembers it:
 * on a file smaller than 1 GiB, every commit after a page split walked all of the writer's cached pages, a cache
 * miss each, and dropped none.
 *
 * This wrapper keeps its own bound on the keys a cache may hold: the largest key created by `xFetch`, and the few
 * keys pages were moved to above it (`xRekey`), forgotten when their page moves away. A truncation whose limit is
 * past all of them cannot drop anything and is not passed on; any other is, and so is everything else. When more
 * than `HIGH_KEYS` pages sit above the bound, every truncation is passed on until one is.
 *
 * `payhook_page_cache_truncations('skipped' | 'passed')`, an SQL function, reads how many truncations the calling
 * thread's caches skipped and passed on.
 */
#include <stdlib.h>
#include <string.h>

#include "sqlite3.h"

#define HIGH_KEYS 4

typedef struct Cache Cache;

struct Cache {
    sqlite3_pcache *inner;
    unsigned max_key;           /* no page held has a larger key but those in `high` (and any `overflow` lost) */
    unsigned high[HIGH_KEYS];   /* keys above max_key that pages were moved to and still hold */
    int n_high;
    int overflow;               /* more keys moved above max_key than `high` holds: pass every truncation on */
};

static sqlite3_pcache_methods2 inner;

static __thread sqlite3_int64 skipped;
static __thread sqlite3_int64 passed;

static int cache_init(void *arg) {
    return inner.xInit ? inner.xInit(arg) : SQLITE_OK;
}

static void cache_shutdown(void *arg) {
    if (inner.xShutdown) {
        inner.xShutdown(arg);
    }
}

static sqlite3_pcache *cache_create(int page_size, int extra_size, int purgeable) {
    Cache *c = sqlite3_malloc(sizeof(Cache));
    if (c == NULL) {
        return NULL;
    }
    memset(c, 0, sizeof(Cache));
    c->inner = inner.xCreate(page_size, extra_size, purgeable);
    if (c->inner == NULL) {
        sqlite3_free(c);
        return NULL;
    }
    return (sqlite3_pcache *)c;
}

static void cache_cachesize(sqlite3_pcache *p, int n) {
    inner.xCachesize(((Cache *)p)->inner, n);
}

static int cache_pagecount(sqlite3_pcache *p) {
    return inner.xPagecount(((Cache *)p)->inner);
}

static sqlite3_pcache_page *cache_fetch(sqlite3_pcache *p, unsigned key, int create) {
    Cache *c = (Cache *)p;
    sqlite3_pcache_page *page = inner.xFetch(c->inner, key, create);
    if (page != NULL && key > c->max_key) {
        c->max_key = key;
    }
    return page;
}

static void cache_unpin(sqlite3_pcache *p, sqlite3_pcache_page *page, int discard) {
    inner.xUnpin(((Cache *)p)->inner, page, discard);
}

static void forget_high(Cache *c, unsigned key) {
    for (int i = 0; i < c->n_high; i++) {
        if (c->high[i] == key) {
            c->high[i] = c->high[--c->n_high];
            return;
        }
    }
}

static void cache_rekey(sqlite3_pcache *p, sqlite3_pcache_page *page, unsigned old_key, unsigned new_key) {
    Cache *c = (Cache *)p;
    inner.xRekey(c->inner, page, old_key, new_key);
    forget_high(c, old_key);
    if (new_key > c->max_key) {
        if (c->n_high < HIGH_KEYS) {
            c->high[c->n_high++] = new_key;
        } else {
            c->overflow = 1;
        }
    }
}

static void cache_truncate(sqlite3_pcache *p, unsigned limit) {
    Cache *c = (Cache *)p;
    int above = c->overflow || c->max_key >= limit;
    for (int i = 0; i < c->n_high && !above; i++) {
        above = c->high[i] >= limit;
    }
    if (!above) {
        skipped++;
        return;
    }
    passed++;
    inner.xTruncate(c->inner, limit);
    /* Every page left has a key below the limit. After an overflow some of them are in neither `max_key` nor
     * `high`: the bound becomes the limit itself before the overflow is forgotten. */
    if (limit > 0 && (c->overflow || c->max_key >= limit)) {
        c->max_key = limit - 1;
    }
    int kept = 0;
    for (int i = 0; i < c->n_high; i++) {
        if (c->high[i] < limit) {
            c->high[kept++] = c->high[i];
        }
    }
    c->n_high = kept;
    c->overflow = 0;
}

static void cache_destroy(sqlite3_pcache *p) {
    Cache *c = (Cache *)p;
    inner.xDestroy(c->inner);
    sqlite3_free(c);
}

static void cache_shrink(sqlite3_pcache *p) {
    inner.xShrink(((Cache *)p)->inner);
}

static void truncations_fn(sqlite3_context *context, int argc, sqlite3_value **argv) {
    (void)argc;
    const char *which = (const char *)sqlite3_value_text(argv[0]);
    if (which != NULL && strcmp(which, "skipped") == 0) {
        sqlite3_result_int64(context, skipped);
    } else if (which != NULL && strcmp(which, "passed") == 0) {
        sqlite3_result_int64(context, passed);
    } else {
        sqlite3_result_error(context, "payhook_page_cache_truncations: 'skipped' or 'passed'", -1);
    }
}

static int add_function(sqlite3 *db, char **error, const sqlite3_api_routines *api) {
    (void)error;
    (void)api;
    return sqlite3_create_function(db, "payhook_page_cache_truncations", 1, SQLITE_UTF8, NULL, truncations_fn, NULL,
                                   NULL);
}

/* Called by the VFS's constructor (wal_vfs.c) before anything initializes SQLite: the cache is chosen once, for
 * every connection of the process. If SQLite refuses, its own cache stays, unwrapped. */
void payhook_page_cache_install(void) {
    static sqlite3_pcache_methods2 wrapped;
    if (sqlite3_config(SQLITE_CONFIG_GETPCACHE2, &inner) != SQLITE_OK || inner.xCreate == NULL) {
        return;
    }
    wrapped = inner;
    wrapped.pArg = inner.pArg;
    wrapped.xInit = cache_init;
    wrapped.xShutdown = cache_shutdown;
    wrapped.xCreate = cache_create;
    wrapped.xCachesize = cache_cachesize;
    wrapped.xPagecount = cache_pagecount;
    wrapped.xFetch = cache_fetch;
    wrapped.xUnpin = cache_unpin;
    wrapped.xRekey = cache_rekey;
    wrapped.xTruncate = cache_truncate;
    wrapped.xDestroy = cache_destroy;
    wrapped.xShrink = cache_shrink;
    if (sqlite3_config(SQLITE_CONFIG_PCACHE2, &wrapped) == SQLITE_OK) {
        sqlite3_auto_extension((void (*)(void))add_function);
    }
}
