/*
 * payhook's SQLite VFS: the platform's default VFS with one change to how the write-ahead log is written.
 *
 * SQLite writes a transaction's pages to the WAL as frames at consecutive offsets, each with two calls: the frame's
 * 24-byte header, then its page. Each call is a system call, and the kernel's fixed cost of a write (about a
 * microsecond on a virtual machine) is much of what writing a page costs. This VFS gathers the frames of a
 * transaction in a buffer of the log's own and writes them with one call (ARCHITECTURE.md, *Decisions*).
 *
 * Invariant: when the write that completes a commit returns, every byte SQLite wrote to the log before it is in the
 * file. SQLite publishes a commit to the other connections (the wal-index header, in shared memory) right after its
 * last write, with no further call on the log, and payhook's syncer makes the log durable through a descriptor of
 * its own: nothing may still wait in the buffer then. So the buffer takes only what it can see is not the end of a
 * commit, a frame header whose commit field (the database's size after the commit, its second word) is zero and the
 * page written right after that header. Any other write (a commit frame's header, the page after it, a checksum
 * rewritten in place, the log's own header) is written at once, after what is buffered and with it when it follows
 * it. The last write of a commit is one of those: its commit frame's page, or that frame's header when SQLite
 * rewrites the checksums after the frames (`walRewriteChecksums`), or a padding copy of that frame followed by a
 * sync. Should SQLite ever write a frame differently (header and page in one call, say), its writes are simply
 * written at once.
 *
 * Besides, what is buffered is written before any other call on the same file (a read, a sync, a truncation, a
 * lock, a size, a file control, a close) and when the buffer is full, so every call sees the file as SQLite asked for
 * it and nothing is held across a sync: what is durable is exactly what SQLite made durable. A write that fails
 * fails the call that made it (the buffered frames are dropped: SQLite abandons a transaction whose write failed).
 *
 * It is registered as the default VFS when the program starts (a constructor: every connection uses it without
 * naming it), on top of whichever VFS was the default. Files other than the WAL and the sub-journals pass straight
 * through.
 *
 * Sub-journals (the pages a savepoint may have to restore) are files of memory here: pieces of 64 KiB allocated as
 * the file grows and freed when SQLite closes it (at the end of each transaction). SQLite's own in-memory
 * journal (`temp_store = MEMORY`) keeps them in 1 KiB pieces, allocated and freed again at every savepoint's
 * release, and its default spills them to a temporary file past 64 KiB; the constructor sets that threshold to 0
 * (`SQLITE_CONFIG_STMTJRNL_SPILL`), so SQLite opens each sub-journal here at once. A sub-journal is never read by
 * another process and never outlives its connection, so nothing of it needs to reach a disk.
 *
 * `payhook_wal_writes('frames' | 'calls')`, an SQL function on every connection, reads what the connection's own log
 * file did since it was opened: the frames written to it and the write calls that carried them;
 * `payhook_sub_journal_writes()` the writes the calling thread made to sub-journals in memory;
 * `payhook_page_cache('used' | 'hits' | 'misses')` the calling connection's page cache: the bytes it holds, and the
 * pages found in it and read from the file since the previous call, whose counts it resets (SQLite's are 32 bits
 * wide: whoever adds them up keeps the total). It calls `sqlite3_db_status`, which the Rust code cannot: the
 * workspace forbids `unsafe`.
 */
#include <stdlib.h>
#include <string.h>

#include "sqlite3.h"

#define WAL_HEADER_BYTES 32
#define FRAME_HEADER_BYTES 24
/* The most a log's buffer holds: 31 frames of 4 KiB pages. A commit larger than that is written in several calls.
 * The unix VFS writes at most 128 KiB - 1 bytes per call (`seekAndWriteFd` masks the length with 0x1ffff). */
#define BUFFER_BYTES (127 * 1024)

typedef struct LogFile LogFile;

struct LogFile {
    sqlite3_file base;          /* this VFS's methods */
    sqlite3_file *real;         /* the underlying VFS's file, allocated right after this struct */
    int is_wal;                 /* opened as a write-ahead log */
    unsigned char *buffer;      /* the run of writes not yet written, allocated at the first; BUFFER_BYTES */
    sqlite3_int64 run_offset;   /* where the run goes in the file */
    int run_bytes;              /* its length; 0 when nothing is buffered */
    int page_next;              /* the run ends with a frame header that is not a commit's: its page may follow */
    sqlite3_uint64 frames;      /* frame headers written */
    sqlite3_uint64 calls;       /* write calls made to the underlying file */
};

static sqlite3_vfs *underlying;
static sqlite3_vfs payhook_vfs;

static int real_write(LogFile *f, const void *data, int amount, sqlite3_int64 offset) {
    f->calls++;
    return f->real->pMethods->xWrite(f->real, data, amount, offset);
}

/* Writes the buffered run, if any. It is dropped whatever the outcome. */
static int flush(LogFile *f) {
    if (f->run_bytes == 0) {
        return SQLITE_OK;
    }
    int amount = f->run_bytes;
    f->run_bytes = 0;
    f->page_next = 0;
    return real_write(f, f->buffer, amount, f->run_offset);
}

static unsigned int read_u32(const unsigned char *p) {
    return ((unsigned int)p[0] << 24) | ((unsigned int)p[1] << 16) | ((unsigned int)p[2] << 8) | p[3];
}

static int log_write(sqlite3_file *file, const void *data, int amount, sqlite3_int64 offset) {
    LogFile *f = (LogFile *)file;
    if (!f->is_wal) {
        return f->real->pMethods->xWrite(f->real, data, amount, offset);
    }
    int frame_header = amount == FRAME_HEADER_BYTES && offset >= WAL_HEADER_BYTES;
    if (frame_header) {
        f->frames++;
    }
    int contiguous = f->run_bytes > 0 && offset == f->run_offset + f->run_bytes;
    /* What may wait: a frame header that does not end a commit, or the page right after one. */
    int holdable = (frame_header && read_u32((const unsigned char *)data + 4) == 0)
                   || (contiguous && f->page_next && !frame_header);
    if (holdable && f->buffer == NULL) {
        f->buffer = sqlite3_malloc(BUFFER_BYTES);
    }
    if (holdable && f->buffer != NULL && amount <= BUFFER_BYTES) {
        if (!contiguous || f->run_bytes + amount > BUFFER_BYTES) {
            int rc = flush(f);
            if (rc != SQLITE_OK) {
                return rc;
            }
            f->run_offset = offset;
        }
        memcpy(f->buffer + f->run_bytes, data, (size_t)amount);
        f->run_bytes += amount;
        f->page_next = frame_header;
        return SQLITE_OK;
    }
    /* Written now: with the run it extends, in one call, when there is room; else after it. */
    if (contiguous && f->run_bytes + amount <= BUFFER_BYTES) {
        memcpy(f->buffer + f->run_bytes, data, (size_t)amount);
        f->run_bytes += amount;
        return flush(f);
    }
    int rc = flush(f);
    if (rc != SQLITE_OK) {
        return rc;
    }
    return real_write(f, data, amount, offset);
}

static int log_close(sqlite3_file *file) {
    LogFile *f = (LogFile *)file;
    int rc = flush(f);
    int closed = f->real->pMethods->xClose(f->real);
    sqlite3_free(f->buffer);
    f->buffer = NULL;
    return rc != SQLITE_OK ? rc : closed;
}

/* Every other method: write what is buffered, then pass the call through. */
#define FLUSHED(f) \
    LogFile *f = (LogFile *)file; \
    int flushed = flush(f); \
    if (flushed != SQLITE_OK) return flushed

static int log_read(sqlite3_file *file, void *data, int amount, sqlite3_int64 offset) {
    FLUSHED(f);
    return f->real->pMethods->xRead(f->real, data, amount, offset);
}

static int log_truncate(sqlite3_file *file, sqlite3_int64 size) {
    FLUSHED(f);
    return f->real->pMethods->xTruncate(f->real, size);
}

static int log_sync(sqlite3_file *file, int flags) {
    FLUSHED(f);
    return f->real->pMethods->xSync(f->real, flags);
}

static int log_file_size(sqlite3_file *file, sqlite3_int64 *size) {
    FLUSHED(f);
    return f->real->pMethods->xFileSize(f->real, size);
}

static int log_lock(sqlite3_file *file, int level) {
    FLUSHED(f);
    return f->real->pMethods->xLock(f->real, level);
}

static int log_unlock(sqlite3_file *file, int level) {
    FLUSHED(f);
    return f->real->pMethods->xUnlock(f->real, level);
}

static int log_check_reserved_lock(sqlite3_file *file, int *out) {
    FLUSHED(f);
    return f->real->pMethods->xCheckReservedLock(f->real, out);
}

static int log_file_control(sqlite3_file *file, int op, void *arg) {
    FLUSHED(f);
    int rc = f->real->pMethods->xFileControl(f->real, op, arg);
    if (rc == SQLITE_OK && op == SQLITE_FCNTL_VFSNAME) {
        char **name = (char **)arg;
        *name = sqlite3_mprintf("payhook/%z", *name);
    }
    return rc;
}

static int log_sector_size(sqlite3_file *file) {
    LogFile *f = (LogFile *)file;
    return f->real->pMethods->xSectorSize(f->real);
}

static int log_device_characteristics(sqlite3_file *file) {
    LogFile *f = (LogFile *)file;
    return f->real->pMethods->xDeviceCharacteristics(f->real);
}

static int log_shm_map(sqlite3_file *file, int region, int size, int extend, void volatile **out) {
    FLUSHED(f);
    return f->real->pMethods->xShmMap(f->real, region, size, extend, out);
}

static int log_shm_lock(sqlite3_file *file, int offset, int n, int flags) {
    FLUSHED(f);
    return f->real->pMethods->xShmLock(f->real, offset, n, flags);
}

static void log_shm_barrier(sqlite3_file *file) {
    LogFile *f = (LogFile *)file;
    /* Called on the database file, which buffers nothing. */
    f->real->pMethods->xShmBarrier(f->real);
}

static int log_shm_unmap(sqlite3_file *file, int delete_flag) {
    FLUSHED(f);
    return f->real->pMethods->xShmUnmap(f->real, delete_flag);
}

static int log_fetch(sqlite3_file *file, sqlite3_int64 offset, int amount, void **out) {
    FLUSHED(f);
    return f->real->pMethods->xFetch(f->real, offset, amount, out);
}

static int log_unfetch(sqlite3_file *file, sqlite3_int64 offset, void *page) {
    FLUSHED(f);
    return f->real->pMethods->xUnfetch(f->real, offset, page);
}

/* A sub-journal in memory: pieces of MEMORY_CHUNK_BYTES, allocated as the file grows and kept until it closes. */
typedef struct MemoryFile MemoryFile;

struct MemoryFile {
    sqlite3_file base;
    unsigned char **chunks;     /* chunk_count pieces, the file's bytes in order */
    int chunk_count;
    int chunk_slots;            /* the length of the array of pieces */
    sqlite3_int64 size;
};

/* A journaled page takes 4 KiB and 4 bytes; a delivery's job journals a few. Pieces this large keep the count of
 * allocations per transaction at one or two and waste at most one piece, and no growth copies what is written. */
#define MEMORY_CHUNK_BYTES (64 * 1024)

static _Thread_local sqlite3_uint64 sub_journal_writes;

static int memory_close(sqlite3_file *file) {
    MemoryFile *f = (MemoryFile *)file;
    for (int i = 0; i < f->chunk_count; i++) {
        sqlite3_free(f->chunks[i]);
    }
    sqlite3_free(f->chunks);
    f->chunks = NULL;
    f->chunk_count = f->chunk_slots = 0;
    f->size = 0;
    return SQLITE_OK;
}

/* Copies between the file's bytes [offset, offset + amount), all within its pieces, and memory: out of the file
 * when `out` is set, else into it (`in`, or zeros when `in` is NULL). */
static void memory_copy(MemoryFile *f, sqlite3_int64 offset, int amount, unsigned char *out,
                        const unsigned char *in) {
    while (amount > 0) {
        unsigned char *chunk = f->chunks[offset / MEMORY_CHUNK_BYTES];
        int within = (int)(offset % MEMORY_CHUNK_BYTES);
        int n = MEMORY_CHUNK_BYTES - within < amount ? MEMORY_CHUNK_BYTES - within : amount;
        if (out != NULL) {
            memcpy(out, chunk + within, (size_t)n);
            out += n;
        } else if (in != NULL) {
            memcpy(chunk + within, in, (size_t)n);
            in += n;
        } else {
            memset(chunk + within, 0, (size_t)n);
        }
        offset += n;
        amount -= n;
    }
}

static int memory_read(sqlite3_file *file, void *data, int amount, sqlite3_int64 offset) {
    MemoryFile *f = (MemoryFile *)file;
    sqlite3_int64 available = offset < f->size ? f->size - offset : 0;
    if (available >= amount) {
        memory_copy(f, offset, amount, data, NULL);
        return SQLITE_OK;
    }
    /* As a file: what exists, then zeros, and SQLite is told the read was short. */
    if (available > 0) {
        memory_copy(f, offset, (int)available, data, NULL);
    }
    memset((unsigned char *)data + available, 0, (size_t)(amount - available));
    return SQLITE_IOERR_SHORT_READ;
}

static int memory_write(sqlite3_file *file, const void *data, int amount, sqlite3_int64 offset) {
    MemoryFile *f = (MemoryFile *)file;
    sqlite3_int64 end = offset + amount;
    sqlite3_int64 needed = (end + MEMORY_CHUNK_BYTES - 1) / MEMORY_CHUNK_BYTES;
    if (needed > f->chunk_slots) {
        sqlite3_int64 slots = f->chunk_slots > 0 ? f->chunk_slots : 16;
        while (slots < needed) {
            slots *= 2;
        }
        unsigned char **grown = sqlite3_realloc64(f->chunks, (sqlite3_uint64)slots * sizeof(*grown));
        if (grown == NULL) {
            return SQLITE_IOERR_NOMEM;
        }
        f->chunks = grown;
        f->chunk_slots = (int)slots;
    }
    while (f->chunk_count < needed) {
        unsigned char *chunk = sqlite3_malloc(MEMORY_CHUNK_BYTES);
        if (chunk == NULL) {
            return SQLITE_IOERR_NOMEM;
        }
        f->chunks[f->chunk_count++] = chunk;
    }
    if (offset > f->size) {
        memory_copy(f, f->size, (int)(offset - f->size), NULL, NULL);
    }
    memory_copy(f, offset, amount, NULL, data);
    if (end > f->size) {
        f->size = end;
    }
    sub_journal_writes++;
    return SQLITE_OK;
}

static int memory_truncate(sqlite3_file *file, sqlite3_int64 size) {
    MemoryFile *f = (MemoryFile *)file;
    if (size < f->size) {
        f->size = size;
    }
    return SQLITE_OK;
}

static int memory_sync(sqlite3_file *file, int flags) {
    (void)file;
    (void)flags;
    return SQLITE_OK;
}

static int memory_file_size(sqlite3_file *file, sqlite3_int64 *size) {
    *size = ((MemoryFile *)file)->size;
    return SQLITE_OK;
}

static int memory_lock(sqlite3_file *file, int level) {
    (void)file;
    (void)level;
    return SQLITE_OK;
}

static int memory_check_reserved_lock(sqlite3_file *file, int *out) {
    (void)file;
    *out = 0;
    return SQLITE_OK;
}

static int memory_file_control(sqlite3_file *file, int op, void *arg) {
    (void)file;
    (void)op;
    (void)arg;
    return SQLITE_NOTFOUND;
}

static int memory_sector_size(sqlite3_file *file) {
    (void)file;
    return 4096;
}

static int memory_device_characteristics(sqlite3_file *file) {
    (void)file;
    return SQLITE_IOCAP_ATOMIC | SQLITE_IOCAP_SAFE_APPEND | SQLITE_IOCAP_SEQUENTIAL
           | SQLITE_IOCAP_POWERSAFE_OVERWRITE;
}

static const sqlite3_io_methods memory_methods = {
    1,
    memory_close,
    memory_read,
    memory_write,
    memory_truncate,
    memory_sync,
    memory_file_size,
    memory_lock,
    memory_lock,
    memory_check_reserved_lock,
    memory_file_control,
    memory_sector_size,
    memory_device_characteristics,
    NULL,
    NULL,
    NULL,
    NULL,
    NULL,
    NULL,
};

static const sqlite3_io_methods log_methods = {
    3,
    log_close,
    log_read,
    log_write,
    log_truncate,
    log_sync,
    log_file_size,
    log_lock,
    log_unlock,
    log_check_reserved_lock,
    log_file_control,
    log_sector_size,
    log_device_characteristics,
    log_shm_map,
    log_shm_lock,
    log_shm_barrier,
    log_shm_unmap,
    log_fetch,
    log_unfetch,
};

static int log_open(sqlite3_vfs *vfs, sqlite3_filename name, sqlite3_file *file, int flags, int *out_flags) {
    (void)vfs;
    if (flags & SQLITE_OPEN_SUBJOURNAL) {
        MemoryFile *m = (MemoryFile *)file;
        memset(m, 0, sizeof(*m));
        m->base.pMethods = &memory_methods;
        if (out_flags != NULL) {
            *out_flags = flags;
        }
        return SQLITE_OK;
    }
    LogFile *f = (LogFile *)file;
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
    f->base.pMethods = &log_methods;
    return rc;
}

/* The counts of the calling connection's log file (0 while it has none open). */
static void wal_writes(sqlite3_context *context, int argc, sqlite3_value **argv) {
    (void)argc;
    const unsigned char *which = sqlite3_value_text(argv[0]);
    int frames = which != NULL && strcmp((const char *)which, "frames") == 0;
    if (!frames && (which == NULL || strcmp((const char *)which, "calls") != 0)) {
        sqlite3_result_error(context, "payhook_wal_writes: 'frames' or 'calls'", -1);
        return;
    }
    sqlite3_file *log = NULL;
    sqlite3_int64 count = 0;
    if (sqlite3_file_control(sqlite3_context_db_handle(context), "main", SQLITE_FCNTL_JOURNAL_POINTER, &log)
            == SQLITE_OK
        && log != NULL && log->pMethods == &log_methods && ((LogFile *)log)->is_wal) {
        LogFile *f = (LogFile *)log;
        count = (sqlite3_int64)(frames ? f->frames : f->calls);
    }
    sqlite3_result_int64(context, count);
}

/* The writes the calling thread made to sub-journals in memory since it started. */
static void sub_journal_writes_fn(sqlite3_context *context, int argc, sqlite3_value **argv) {
    (void)argc;
    (void)argv;
    sqlite3_result_int64(context, (sqlite3_int64)sub_journal_writes);
}

/* The bytes the calling connection's page cache holds, or its hits or misses since the previous call. */
static void page_cache_fn(sqlite3_context *context, int argc, sqlite3_value **argv) {
    (void)argc;
    const char *which = (const char *)sqlite3_value_text(argv[0]);
    int op;
    if (which != NULL && strcmp(which, "used") == 0) {
        op = SQLITE_DBSTATUS_CACHE_USED;
    } else if (which != NULL && strcmp(which, "hits") == 0) {
        op = SQLITE_DBSTATUS_CACHE_HIT;
    } else if (which != NULL && strcmp(which, "misses") == 0) {
        op = SQLITE_DBSTATUS_CACHE_MISS;
    } else {
        sqlite3_result_error(context, "payhook_page_cache: 'used', 'hits' or 'misses'", -1);
        return;
    }
    int current = 0, highest = 0;
    int reset = op != SQLITE_DBSTATUS_CACHE_USED;
    if (sqlite3_db_status(sqlite3_context_db_handle(context), op, &current, &highest, reset) != SQLITE_OK) {
        sqlite3_result_error(context, "payhook_page_cache: sqlite3_db_status failed", -1);
        return;
    }
    sqlite3_result_int64(context, (sqlite3_int64)(unsigned int)current);
}

static int add_functions(sqlite3 *db, char **error, const sqlite3_api_routines *api) {
    (void)error;
    (void)api;
    int rc = sqlite3_create_function(db, "payhook_wal_writes", 1, SQLITE_UTF8, NULL, wal_writes, NULL, NULL);
    if (rc != SQLITE_OK) {
        return rc;
    }
    rc = sqlite3_create_function(db, "payhook_sub_journal_writes", 0, SQLITE_UTF8, NULL, sub_journal_writes_fn, NULL,
                                 NULL);
    if (rc != SQLITE_OK) {
        return rc;
    }
    return sqlite3_create_function(db, "payhook_page_cache", 1, SQLITE_UTF8, NULL, page_cache_fn, NULL, NULL);
}

/* page_cache.c */
void payhook_page_cache_install(void);

__attribute__((constructor)) static void payhook_vfs_register(void) {
    /* Before SQLite initializes (sqlite3_vfs_find does): sub-journals open through the VFS from their first byte,
     * and every connection's page cache is the wrapped one. */
    sqlite3_config(SQLITE_CONFIG_STMTJRNL_SPILL, 0);
    payhook_page_cache_install();
    underlying = sqlite3_vfs_find(NULL);
    if (underlying == NULL) {
        return;
    }
    payhook_vfs = *underlying;
    payhook_vfs.pNext = NULL;
    payhook_vfs.zName = "payhook";
    payhook_vfs.szOsFile = (int)sizeof(LogFile) + underlying->szOsFile;
    payhook_vfs.xOpen = log_open;
    if (sqlite3_vfs_register(&payhook_vfs, 1) == SQLITE_OK) {
        sqlite3_auto_extension((void (*)(void))add_functions);
    }
}
