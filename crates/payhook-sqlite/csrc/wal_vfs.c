/*
 * payhook's SQLite VFS: the platform's default VFS with one change to how the write-ahead log is written.
 *
 * SQLite writes each WAL frame with two calls, its 24-byte header and then its page at the next offset. Each call
 * is a system call, and the kernel's fixed cost of a write (about a microsecond on a virtual machine) is most of
 * what a small one costs: the header cost about as much as the page. This VFS holds a WAL frame header back and
 * writes it with the page that follows it, in one call (ARCHITECTURE.md, *Decisions*).
 *
 * Invariant: a held header lives only until the next call on the same file. A write of the page right after it
 * takes it along; any other call (another write, a read, a sync, a truncation, a lock, a close) writes it alone
 * first, so every call sees the file as if the header had been written when SQLite asked. SQLite writes the page
 * immediately after its header (`walWriteOneFrame`), so in practice the header never waits for anything else; the
 * rule above keeps the file right even if that order changed. Nothing is held across a sync, so what is durable
 * is exactly what SQLite made durable.
 *
 * It is registered as the default VFS when the program starts (a constructor: every connection uses it without
 * naming it), on top of whichever VFS was the default. Files other than the WAL pass straight through.
 *
 * `payhook_wal_frame_writes('combined' | 'alone')`, an SQL function on every connection, counts the frames written
 * with one call and the headers written on their own since the program started.
 */
#include <stdlib.h>
#include <string.h>

#include "sqlite3.h"

#define FRAME_HEADER_BYTES 24

typedef struct HeldFile HeldFile;

struct HeldFile {
    sqlite3_file base;          /* this VFS's methods */
    sqlite3_file *real;         /* the underlying VFS's file, allocated right after this struct */
    int is_wal;                 /* opened as a write-ahead log */
    int held;                   /* a frame header is waiting for its page */
    sqlite3_int64 held_offset;  /* where that header goes */
    unsigned char header[FRAME_HEADER_BYTES];
    unsigned char *frame;       /* header and page, for the one write; grown to the largest frame seen */
    int frame_capacity;
};

static sqlite3_vfs *underlying;
static sqlite3_vfs payhook_vfs;
static sqlite3_uint64 frames_combined;
static sqlite3_uint64 headers_alone;

static void count(sqlite3_uint64 *counter) { __atomic_fetch_add(counter, 1, __ATOMIC_RELAXED); }

/* Writes a held header on its own, if there is one. */
static int release(HeldFile *f) {
    if (!f->held) {
        return SQLITE_OK;
    }
    f->held = 0;
    count(&headers_alone);
    return f->real->pMethods->xWrite(f->real, f->header, FRAME_HEADER_BYTES, f->held_offset);
}

static int held_write(sqlite3_file *file, const void *data, int amount, sqlite3_int64 offset) {
    HeldFile *f = (HeldFile *)file;
    if (f->held && offset == f->held_offset + FRAME_HEADER_BYTES && amount > 0) {
        int total = FRAME_HEADER_BYTES + amount;
        if (total > f->frame_capacity) {
            unsigned char *grown = sqlite3_realloc(f->frame, total);
            if (grown != NULL) {
                f->frame = grown;
                f->frame_capacity = total;
            }
        }
        if (total <= f->frame_capacity) {
            memcpy(f->frame, f->header, FRAME_HEADER_BYTES);
            memcpy(f->frame + FRAME_HEADER_BYTES, data, (size_t)amount);
            f->held = 0;
            count(&frames_combined);
            return f->real->pMethods->xWrite(f->real, f->frame, total, f->held_offset);
        }
    }
    int rc = release(f);
    if (rc != SQLITE_OK) {
        return rc;
    }
    if (f->is_wal && amount == FRAME_HEADER_BYTES) {
        memcpy(f->header, data, FRAME_HEADER_BYTES);
        f->held_offset = offset;
        f->held = 1;
        return SQLITE_OK;
    }
    return f->real->pMethods->xWrite(f->real, data, amount, offset);
}

static int held_close(sqlite3_file *file) {
    HeldFile *f = (HeldFile *)file;
    int rc = release(f);
    int closed = f->real->pMethods->xClose(f->real);
    sqlite3_free(f->frame);
    f->frame = NULL;
    f->frame_capacity = 0;
    return rc != SQLITE_OK ? rc : closed;
}

/* Every other method: release what is held, then pass the call through. */
#define RELEASED(f) \
    HeldFile *f = (HeldFile *)file; \
    int released = release(f); \
    if (released != SQLITE_OK) return released

static int held_read(sqlite3_file *file, void *data, int amount, sqlite3_int64 offset) {
    RELEASED(f);
    return f->real->pMethods->xRead(f->real, data, amount, offset);
}

static int held_truncate(sqlite3_file *file, sqlite3_int64 size) {
    RELEASED(f);
    return f->real->pMethods->xTruncate(f->real, size);
}

static int held_sync(sqlite3_file *file, int flags) {
    RELEASED(f);
    return f->real->pMethods->xSync(f->real, flags);
}

static int held_file_size(sqlite3_file *file, sqlite3_int64 *size) {
    RELEASED(f);
    return f->real->pMethods->xFileSize(f->real, size);
}

static int held_lock(sqlite3_file *file, int level) {
    RELEASED(f);
    return f->real->pMethods->xLock(f->real, level);
}

static int held_unlock(sqlite3_file *file, int level) {
    RELEASED(f);
    return f->real->pMethods->xUnlock(f->real, level);
}

static int held_check_reserved_lock(sqlite3_file *file, int *out) {
    RELEASED(f);
    return f->real->pMethods->xCheckReservedLock(f->real, out);
}

static int held_file_control(sqlite3_file *file, int op, void *arg) {
    RELEASED(f);
    int rc = f->real->pMethods->xFileControl(f->real, op, arg);
    if (rc == SQLITE_OK && op == SQLITE_FCNTL_VFSNAME) {
        char **name = (char **)arg;
        *name = sqlite3_mprintf("payhook/%z", *name);
    }
    return rc;
}

static int held_sector_size(sqlite3_file *file) {
    HeldFile *f = (HeldFile *)file;
    return f->real->pMethods->xSectorSize(f->real);
}

static int held_device_characteristics(sqlite3_file *file) {
    HeldFile *f = (HeldFile *)file;
    return f->real->pMethods->xDeviceCharacteristics(f->real);
}

static int held_shm_map(sqlite3_file *file, int region, int size, int extend, void volatile **out) {
    RELEASED(f);
    return f->real->pMethods->xShmMap(f->real, region, size, extend, out);
}

static int held_shm_lock(sqlite3_file *file, int offset, int n, int flags) {
    RELEASED(f);
    return f->real->pMethods->xShmLock(f->real, offset, n, flags);
}

static void held_shm_barrier(sqlite3_file *file) {
    HeldFile *f = (HeldFile *)file;
    /* No way to report an error here; a held header is written by the next call that can. */
    f->real->pMethods->xShmBarrier(f->real);
}

static int held_shm_unmap(sqlite3_file *file, int delete_flag) {
    RELEASED(f);
    return f->real->pMethods->xShmUnmap(f->real, delete_flag);
}

static int held_fetch(sqlite3_file *file, sqlite3_int64 offset, int amount, void **out) {
    RELEASED(f);
    return f->real->pMethods->xFetch(f->real, offset, amount, out);
}

static int held_unfetch(sqlite3_file *file, sqlite3_int64 offset, void *page) {
    RELEASED(f);
    return f->real->pMethods->xUnfetch(f->real, offset, page);
}

static const sqlite3_io_methods held_methods = {
    3,
    held_close,
    held_read,
    held_write,
    held_truncate,
    held_sync,
    held_file_size,
    held_lock,
    held_unlock,
    held_check_reserved_lock,
    held_file_control,
    held_sector_size,
    held_device_characteristics,
    held_shm_map,
    held_shm_lock,
    held_shm_barrier,
    held_shm_unmap,
    held_fetch,
    held_unfetch,
};

static int held_open(sqlite3_vfs *vfs, sqlite3_filename name, sqlite3_file *file, int flags, int *out_flags) {
    (void)vfs;
    HeldFile *f = (HeldFile *)file;
    memset(f, 0, sizeof(*f));
    f->real = (sqlite3_file *)&f[1];
    int rc = underlying->xOpen(underlying, name, f->real, flags, out_flags);
    if (f->real->pMethods == NULL) {
        /* Nothing to close: SQLite will not call xClose on a file whose methods are NULL. */
        return rc;
    }
    if (f->real->pMethods->iVersion < 3) {
        /* Every method above forwards version-3 calls; an underlying file without them would need its own
         * table. The platform VFSes SQLite ships are version 3. */
        f->real->pMethods->xClose(f->real);
        return SQLITE_CANTOPEN;
    }
    f->is_wal = (flags & SQLITE_OPEN_WAL) != 0;
    f->base.pMethods = &held_methods;
    return rc;
}

static void frame_writes(sqlite3_context *context, int argc, sqlite3_value **argv) {
    (void)argc;
    const unsigned char *which = sqlite3_value_text(argv[0]);
    if (which != NULL && strcmp((const char *)which, "combined") == 0) {
        sqlite3_result_int64(context, (sqlite3_int64)__atomic_load_n(&frames_combined, __ATOMIC_RELAXED));
    } else if (which != NULL && strcmp((const char *)which, "alone") == 0) {
        sqlite3_result_int64(context, (sqlite3_int64)__atomic_load_n(&headers_alone, __ATOMIC_RELAXED));
    } else {
        sqlite3_result_error(context, "payhook_wal_frame_writes: 'combined' or 'alone'", -1);
    }
}

static int add_functions(sqlite3 *db, char **error, const sqlite3_api_routines *api) {
    (void)error;
    (void)api;
    return sqlite3_create_function(db, "payhook_wal_frame_writes", 1, SQLITE_UTF8 | SQLITE_INNOCUOUS, NULL,
                                   frame_writes, NULL, NULL);
}

__attribute__((constructor)) static void payhook_vfs_register(void) {
    underlying = sqlite3_vfs_find(NULL);
    if (underlying == NULL) {
        return;
    }
    payhook_vfs = *underlying;
    payhook_vfs.pNext = NULL;
    payhook_vfs.zName = "payhook";
    payhook_vfs.szOsFile = (int)sizeof(HeldFile) + underlying->szOsFile;
    payhook_vfs.xOpen = held_open;
    if (sqlite3_vfs_register(&payhook_vfs, 1) == SQLITE_OK) {
        sqlite3_auto_extension((void (*)(void))add_functions);
    }
}
