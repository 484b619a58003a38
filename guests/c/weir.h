/*
 * weir.h — header-only C SDK for weir operators (ABI version 1, abi/ABI.md).
 *
 * An operator is one C file that includes this header, defines four
 * callbacks and names them with WEIR_OPERATOR:
 *
 *     #include "weir.h"
 *
 *     static int init(weir_bytes config) { return WEIR_OK; }
 *     static int process(uint32_t port, weir_batch *in) {
 *         weir_record r;
 *         while (weir_batch_next(in, &r))
 *             weir_emit(0, r.key, r.value, r.timestamp);
 *         return WEIR_OK;
 *     }
 *     static int snapshot(void) { return WEIR_OK; }
 *     static int restore(void) { return WEIR_OK; }
 *
 *     WEIR_OPERATOR(init, process, snapshot, restore)
 *
 * Optional: WEIR_END_OF_INPUT(fn) and WEIR_CHECKPOINT_COMPLETE(fn).
 *
 * The header implements the ABI's exports: it owns the input buffer
 * (weir_input), walks batches in place, keeps the record cursor the host reads
 * when a call traps (weir_cursor), collects each output port's records into
 * one batch emitted once per call, streams snapshots in 64 KiB chunks
 * (snapshot_write / restore_read), writes and reads the keyed state layout
 * the host can redistribute by key (weir_keyed_state_*), and passes error
 * messages to the host (weir_fail; weir_abort also traps). A callback that
 * fails inside its weir_batch_next loop leaves the cursor on that record, so
 * the host's message says "at record N".
 *
 * Two build modes, chosen automatically:
 *
 *   WASI reactor, with wasi-libc (malloc, memcpy from libc):
 *     clang --target=wasm32-wasi --sysroot=/usr -mexec-model=reactor -O2 \
 *           -Wl,--stack-first -Wl,--strip-all -o op.wasm op.c
 *   Freestanding, no libc (the header brings a small allocator and mem*):
 *     clang --target=wasm32 -nostdlib -O2 -Wl,--no-entry -Wl,--stack-first \
 *           -Wl,--strip-all -o op.wasm op.c
 *
 * --stack-first puts the stack below the globals, so a stack overflow
 * traps at once instead of overwriting them (see guests/README.md).
 *
 * Define WEIR_FREESTANDING to force the freestanding mode on a WASI target.
 * Every function returns int status: WEIR_OK (0) or non-zero on failure.
 * The header has one translation unit in mind: include it once per module.
 *
 * C++ (guests/README.md): the header compiles as C++ too, and serves C++
 * operators as it is (guests/cpp/examples). Build with clang++ and
 * -fno-exceptions (libc++ for wasm32 has none):
 *     clang++ --target=wasm32-wasi --sysroot=/usr -mexec-model=reactor \
 *             -std=c++17 -fno-exceptions -O2 -Wl,--stack-first \
 *             -Wl,--strip-all -o op.wasm op.cpp
 * In C++ several files of a module may include it, WEIR_OPERATOR in one of
 * them, which also defines operator new: an allocation that fails fails the
 * call with a message (libc++'s returns NULL); see the end of the header.
 */
#ifndef WEIR_H
#define WEIR_H

#include <stddef.h>
#include <stdint.h>

#if !defined(__wasi__) && !defined(WEIR_FREESTANDING)
#define WEIR_FREESTANDING 1
#endif

#ifndef WEIR_FREESTANDING
#include <stdlib.h>
#include <string.h>
#endif

#ifdef __cplusplus
/* C++ (guests/README.md): libc++'s <new>, where there is one, declares
 * the nothrow and aligned operator new that WEIR_OPERATOR replaces. */
#if __has_include(<new>)
#include <new>
#define WEIR__HAVE_NEW 1
#endif
extern "C" {
#endif

/* WEIR__ONCE marks the header's definitions that are not static: the ABI's
 * exports and, freestanding, the mem* functions. WEIR__STATE marks its
 * state (the runtime's, the freestanding allocator's). C includes the header
 * in one file per module, and the state is static. C++ may include it in
 * several files (WEIR_OPERATOR in one of them): the definitions are weak, so
 * the linker keeps one of each, and every file shares one state. */
#ifdef __cplusplus
#define WEIR__ONCE __attribute__((weak))
#define WEIR__STATE __attribute__((weak))
#else
#define WEIR__ONCE
#define WEIR__STATE static
#endif

/* Status codes. */
#define WEIR_OK 0
#define WEIR_ERR 1

/* WEIR_MAX_PORTS bounds the output port numbers weir_emit accepts. */
#ifndef WEIR_MAX_PORTS
#define WEIR_MAX_PORTS 16
#endif

/* WEIR_CHUNK is the size of the snapshot chunks handed to the host and of the
 * restore chunks asked from it. */
#define WEIR_CHUNK 65536

/* Log levels for weir_log. */
#define WEIR_LOG_DEBUG (-1)
#define WEIR_LOG_INFO 0
#define WEIR_LOG_WARN 1
#define WEIR_LOG_ERROR 2

#define WEIR_IMPORT(name) __attribute__((import_module("weir"), import_name(name)))
#define WEIR_EXPORT(name) __attribute__((export_name(name)))

/* Host functions (ABI §2). */
WEIR_IMPORT("emit") int32_t weir__host_emit(int32_t port, const void *ptr, int32_t len);
WEIR_IMPORT("error") void weir__host_error(const void *ptr, int32_t len);
WEIR_IMPORT("log") void weir__host_log(int32_t level, const void *ptr, int32_t len);
WEIR_IMPORT("snapshot_write") int32_t weir__host_snapshot_write(const void *ptr, int32_t len);
WEIR_IMPORT("restore_read") int32_t weir__host_restore_read(void *ptr, int32_t cap);

/* ------------------------------------------------------------------------ */
/* Freestanding support: mem* functions and a size-class allocator.         */
/* ------------------------------------------------------------------------ */

#ifdef WEIR_FREESTANDING

/* The compiler may emit calls to these four even without libc. */
WEIR__ONCE void *memcpy(void *dst, const void *src, size_t n) {
    unsigned char *d = (unsigned char *)dst;
    const unsigned char *s = (const unsigned char *)src;
    while (n--) *d++ = *s++;
    return dst;
}

WEIR__ONCE void *memmove(void *dst, const void *src, size_t n) {
    unsigned char *d = (unsigned char *)dst;
    const unsigned char *s = (const unsigned char *)src;
    if (d < s) {
        while (n--) *d++ = *s++;
    } else {
        while (n--) d[n] = s[n];
    }
    return dst;
}

WEIR__ONCE void *memset(void *dst, int c, size_t n) {
    unsigned char *d = (unsigned char *)dst;
    while (n--) *d++ = (unsigned char)c;
    return dst;
}

WEIR__ONCE int memcmp(const void *a, const void *b, size_t n) {
    const unsigned char *x = (const unsigned char *)a, *y = (const unsigned char *)b;
    for (; n; n--, x++, y++)
        if (*x != *y) return *x - *y;
    return 0;
}

/* The allocator hands out power-of-two blocks (16 B up to 2 GiB) with an
 * 8-byte header holding the size class; freed blocks go on a free list per
 * class and are reused by later allocations of the same class. Memory comes
 * from the end of the heap (__heap_base, set by wasm-ld) and memory.grow. */
extern unsigned char __heap_base;

#define WEIR__CLASSES 32
#define WEIR__HDR 8

WEIR__STATE struct weir__heap_state {
    uintptr_t top;                    /* first unused heap byte, 0 before first use */
    void *free_list[WEIR__CLASSES];   /* per size class; next pointer in the block */
} weir__heap;

static inline void *weir_malloc(size_t n) {
    if (n > ((size_t)1 << (WEIR__CLASSES - 1)) - WEIR__HDR) return NULL;
    unsigned cls = 4;
    while (((size_t)1 << cls) < n + WEIR__HDR) cls++;
    unsigned char *block = (unsigned char *)weir__heap.free_list[cls];
    if (block) {
        weir__heap.free_list[cls] = *(void **)(block + WEIR__HDR);
    } else {
        if (!weir__heap.top) weir__heap.top = ((uintptr_t)&__heap_base + 15) & ~(uintptr_t)15;
        uintptr_t end = weir__heap.top + ((uintptr_t)1 << cls);
        if (end < weir__heap.top) return NULL;
        uintptr_t have = __builtin_wasm_memory_size(0) * 65536u;
        if (end > have) {
            uintptr_t pages = (end - have + 65535) / 65536;
            if (__builtin_wasm_memory_grow(0, pages) == (size_t)-1) return NULL;
        }
        block = (unsigned char *)weir__heap.top;
        weir__heap.top = end;
    }
    *(uint32_t *)block = cls;
    return block + WEIR__HDR;
}

static inline void weir_free(void *p) {
    if (!p) return;
    unsigned char *block = (unsigned char *)p - WEIR__HDR;
    unsigned cls = *(uint32_t *)block;
    *(void **)p = weir__heap.free_list[cls];
    weir__heap.free_list[cls] = block;
}

static inline void *weir_realloc(void *p, size_t n) {
    if (!p) return weir_malloc(n);
    unsigned cls = *(uint32_t *)((unsigned char *)p - WEIR__HDR);
    size_t have = ((size_t)1 << cls) - WEIR__HDR;
    if (n <= have) return p;
    void *q = weir_malloc(n);
    if (!q) return NULL;
    memcpy(q, p, have);
    weir_free(p);
    return q;
}

#else /* WASI: wasi-libc's allocator. */

static inline void *weir_malloc(size_t n) { return malloc(n); }
static inline void weir_free(void *p) { free(p); }
static inline void *weir_realloc(void *p, size_t n) { return realloc(p, n); }

#endif /* WEIR_FREESTANDING */

/* ------------------------------------------------------------------------ */
/* Bytes, records, batches.                                                  */
/* ------------------------------------------------------------------------ */

/* weir_bytes is a borrowed byte string. */
typedef struct weir_bytes {
    const uint8_t *ptr;
    uint32_t len;
} weir_bytes;

/* weir_record is one record; key and value point into the input batch and are
 * valid until the callback returns: copy what you keep. */
typedef struct weir_record {
    weir_bytes key;
    weir_bytes value;
    int64_t timestamp; /* milliseconds since the Unix epoch, 0 when unknown */
} weir_record;

/* weir_batch walks an input batch in place. */
typedef struct weir_batch {
    const uint8_t *next; /* start of the next record */
    uint32_t count;      /* records in the batch */
    uint32_t index;      /* records returned so far */
} weir_batch;

static inline uint32_t weir_load_u32(const uint8_t *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

static inline int64_t weir_load_i64(const uint8_t *p) {
    int64_t v;
    memcpy(&v, p, 8);
    return v;
}

/* weir_bytes_of returns the bytes of a NUL-terminated string. */
static inline weir_bytes weir_bytes_of(const char *s) {
    weir_bytes b = {(const uint8_t *)s, 0};
    while (s[b.len]) b.len++;
    return b;
}

/* The runtime's state: one per module instance. */
typedef struct weir__buf {
    uint8_t *ptr;
    uint32_t len, cap;
} weir__buf;

WEIR__STATE struct weir__runtime {
    int32_t cursor;                      /* index of the record being processed, -1 outside */
    weir__buf input;                     /* the buffer weir_input hands out */
    weir__buf out[WEIR_MAX_PORTS];       /* one batch per output port */
    uint32_t out_count[WEIR_MAX_PORTS];  /* records in each */
    uint32_t used[WEIR_MAX_PORTS];       /* ports with records, in first-use order */
    uint32_t n_used;
    const char *pending;                 /* an error raised by emit, reported at return */
    weir__buf chunk;                     /* snapshot / restore chunk buffer */
    uint32_t chunk_pos;                  /* restore: next unread byte of chunk */
    int chunk_eof;                       /* restore: host said end of stream */
    uint8_t snap_wrote;                  /* snapshot: some state written */
    uint8_t snap_keyed;                  /* snapshot: weir_keyed_state_begin called */
    const char *snap_misuse;             /* snapshot: a keyed state misuse, which fails it */
#ifdef __cplusplus
} weir__rt = {-1, {NULL, 0, 0}, {}, {}, {}, 0, NULL, {NULL, 0, 0}, 0, 0, 0, 0, NULL};
#else
} weir__rt = {.cursor = -1};
#endif

/* weir_batch_next stores the next record in *r and returns 1, or returns 0
 * at the end of the batch. It keeps the cursor the host reads on a trap. */
static inline int weir_batch_next(weir_batch *b, weir_record *r) {
    if (b->index >= b->count) {
        weir__rt.cursor = -1;
        return 0;
    }
    const uint8_t *p = b->next;
    r->key.len = weir_load_u32(p);
    r->value.len = weir_load_u32(p + 4);
    r->timestamp = weir_load_i64(p + 8);
    r->key.ptr = p + 16;
    r->value.ptr = p + 16 + r->key.len;
    b->next = r->value.ptr + r->value.len;
    weir__rt.cursor = (int32_t)b->index++;
    return 1;
}

/* ------------------------------------------------------------------------ */
/* Errors and logging.                                                       */
/* ------------------------------------------------------------------------ */

/* weir_fail sets the message the host reports for the current call and
 * returns WEIR_ERR, so a callback can `return weir_fail("...")`. */
static inline int weir_fail(const char *msg) {
    weir_bytes b = weir_bytes_of(msg);
    weir__host_error(b.ptr, (int32_t)b.len);
    return WEIR_ERR;
}

/* weir_abort sets msg as the call's error message and traps, for a failure
 * the operator cannot return from (like assert): the host reports the trap
 * with msg and the index of the record being processed. */
static inline __attribute__((noreturn)) void weir_abort(const char *msg) {
    weir_fail(msg);
    __builtin_trap();
}

/* weir_log writes one line to the host log at a WEIR_LOG_* level. */
static inline void weir_log(int level, const char *msg) {
    weir_bytes b = weir_bytes_of(msg);
    weir__host_log(level, b.ptr, (int32_t)b.len);
}

/* ------------------------------------------------------------------------ */
/* Output.                                                                   */
/* ------------------------------------------------------------------------ */

/* weir__format_u32 writes v in decimal at buf (10 bytes) and returns its
 * length. */
static inline uint32_t weir__format_u32(uint32_t v, char *buf) {
    char tmp[10];
    uint32_t n = 0, i = 0;
    do {
        tmp[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    while (n) buf[i++] = tmp[--n];
    return i;
}

static inline int weir__reserve(weir__buf *b, uint32_t more) {
    if ((uint64_t)b->len + more > UINT32_MAX / 2) return -1;
    uint32_t need = b->len + more;
    if (need <= b->cap) return 0;
    uint32_t cap = b->cap ? b->cap : 1024;
    while (cap < need) cap *= 2;
    uint8_t *p = (uint8_t *)weir_realloc(b->ptr, cap);
    if (!p) return -1;
    b->ptr = p;
    b->cap = cap;
    return 0;
}

/* weir__emit_failed fails the call an emit is in: the first failure's
 * message goes to the host at once, so it is the call's error also when the
 * callback returns WEIR_ERR without a message of its own. */
static inline uint8_t *weir__emit_failed(const char *msg) {
    if (!weir__rt.pending) {
        weir__rt.pending = msg;
        weir_fail(msg);
    }
    return NULL;
}

/* weir_emit_alloc appends a record with the given key and a value of
 * value_len bytes to output port port's batch and returns the value's bytes
 * for the caller to fill. They are valid until the next emit: a later emit
 * may move the batch, so fill one record's value before emitting another.
 * It returns NULL for a bad port or when memory runs out, having set the
 * error message; the call then fails (return WEIR_ERR). */
static inline uint8_t *weir_emit_alloc(uint32_t port, weir_bytes key, uint32_t value_len, int64_t ts) {
    if (port >= WEIR_MAX_PORTS) {
        if (weir__rt.pending) return NULL;
        /* "weir: emit to output port N: past WEIR_MAX_PORTS (M; ...)" */
        static char msg[128];
        static const char a[] = "weir: emit to output port ", b[] = ": past WEIR_MAX_PORTS (",
                          c[] = "; #define it before including weir.h for more)";
        uint32_t n = 0;
        memcpy(msg, a, sizeof a - 1);
        n += sizeof a - 1;
        n += weir__format_u32(port, msg + n);
        memcpy(msg + n, b, sizeof b - 1);
        n += sizeof b - 1;
        n += weir__format_u32(WEIR_MAX_PORTS, msg + n);
        memcpy(msg + n, c, sizeof c); /* with the NUL */
        return weir__emit_failed(msg);
    }
    weir__buf *b = &weir__rt.out[port];
    uint8_t *p; /* declared before the gotos, which C++ may not jump over its initialization */
    if (b->len == 0) {
        if (weir__reserve(b, 4)) goto oom;
        b->len = 4; /* the count, written at flush */
        weir__rt.used[weir__rt.n_used++] = port;
    }
    if (weir__reserve(b, 16 + key.len + value_len)) goto oom;
    p = b->ptr + b->len;
    memcpy(p, &key.len, 4);
    memcpy(p + 4, &value_len, 4);
    memcpy(p + 8, &ts, 8);
    if (key.len) memcpy(p + 16, key.ptr, key.len);
    b->len += 16 + key.len + value_len;
    weir__rt.out_count[port]++;
    return p + 16 + key.len;
oom:
    return weir__emit_failed("weir: out of memory while emitting");
}

/* weir_emit appends one record to output port port's batch; key and value
 * are copied. The batch goes to the host when the callback returns. On
 * failure it returns WEIR_ERR with the message set, as weir_emit_alloc. */
static inline int weir_emit(uint32_t port, weir_bytes key, weir_bytes value, int64_t ts) {
    uint8_t *v = weir_emit_alloc(port, key, value.len, ts);
    if (!v) return WEIR_ERR;
    if (value.len) memcpy(v, value.ptr, value.len);
    return WEIR_OK;
}

/* weir__finish ends a call that may emit: on success it emits one batch per
 * used port, in first-use order; either way it empties the output. */
static inline int32_t weir__finish(int32_t status) {
    if (status == 0 && weir__rt.pending) status = weir_fail(weir__rt.pending);
    for (uint32_t i = 0; i < weir__rt.n_used; i++) {
        uint32_t port = weir__rt.used[i];
        weir__buf *b = &weir__rt.out[port];
        if (status == 0) {
            memcpy(b->ptr, &weir__rt.out_count[port], 4);
            int32_t rc = weir__host_emit((int32_t)port, b->ptr, (int32_t)b->len);
            if (rc != 0) status = rc;
        }
        b->len = 0;
        weir__rt.out_count[port] = 0;
    }
    weir__rt.n_used = 0;
    weir__rt.pending = NULL;
    /* On an error the cursor stays on the failing record, for the host's
     * message. */
    if (status == 0) weir__rt.cursor = -1;
    return status;
}

/* ------------------------------------------------------------------------ */
/* State: snapshot and restore.                                              */
/* ------------------------------------------------------------------------ */

static inline int weir__chunk_init(void) {
    if (weir__rt.chunk.cap) return 0;
    weir__rt.chunk.ptr = (uint8_t *)weir_malloc(WEIR_CHUNK);
    if (!weir__rt.chunk.ptr) return -1;
    weir__rt.chunk.cap = WEIR_CHUNK;
    return 0;
}

static inline int weir__state_flush(void) {
    int32_t rc = weir__host_snapshot_write(weir__rt.chunk.ptr, (int32_t)weir__rt.chunk.len);
    weir__rt.chunk.len = 0;
    return rc == 0 ? WEIR_OK : weir_fail("weir: snapshot_write failed");
}

/* weir__keyed_misuse fails the snapshot for a misuse of keyed state: the
 * message goes to the host at once, and the snapshot fails with it also when
 * the callback ignores the error and returns WEIR_OK (the state would not be
 * in the keyed layout, and only the first restore would fail). */
static inline int weir__keyed_misuse(const char *msg) {
    if (!weir__rt.snap_misuse) weir__rt.snap_misuse = msg;
    return weir_fail(msg);
}

/* weir__state_append appends n bytes to the snapshot: weir_state_write's,
 * and the keyed state's. No bytes are no state written: a keyed state may
 * still begin after them, as in the other SDKs. */
static inline int weir__state_append(const void *p, size_t n) {
    const uint8_t *s = (const uint8_t *)p;
    if (n) weir__rt.snap_wrote = 1;
    while (n > 0) {
        uint32_t room = weir__rt.chunk.cap - weir__rt.chunk.len;
        uint32_t c = n < room ? (uint32_t)n : room;
        memcpy(weir__rt.chunk.ptr + weir__rt.chunk.len, s, c);
        weir__rt.chunk.len += c;
        s += c;
        n -= c;
        if (weir__rt.chunk.len == weir__rt.chunk.cap && weir__state_flush()) return WEIR_ERR;
    }
    return WEIR_OK;
}

/* weir_state_write appends n bytes to the snapshot (only in the snapshot
 * callback). Bytes travel to the host in WEIR_CHUNK chunks. After
 * weir_keyed_state_begin it fails, and so does the snapshot: the keyed
 * layout is the whole state, and bytes after (or between) its entries would
 * make a state in neither that layout nor one of the operator's own. */
static inline int weir_state_write(const void *p, size_t n) {
    if (weir__rt.snap_keyed && n)
        return weir__keyed_misuse("weir: weir_state_write after weir_keyed_state_begin: the keyed layout is the "
                                  "whole snapshot (write every entry with weir_keyed_state_put, nothing with "
                                  "weir_state_write)");
    return weir__state_append(p, n);
}

static inline int weir_state_write_u8(uint8_t v) { return weir_state_write(&v, 1); }
static inline int weir_state_write_u32(uint32_t v) { return weir_state_write(&v, 4); }
static inline int weir_state_write_u64(uint64_t v) { return weir_state_write(&v, 8); }
static inline int weir_state_write_i64(int64_t v) { return weir_state_write(&v, 8); }

/* weir_state_write_bytes writes b as u32 length + bytes. */
static inline int weir_state_write_bytes(weir_bytes b) {
    if (weir_state_write_u32(b.len)) return WEIR_ERR;
    return weir_state_write(b.ptr, b.len);
}

/* weir__state_fill makes unread restore bytes available; 0 at the end. */
static inline uint32_t weir__state_fill(void) {
    if (weir__rt.chunk_pos < weir__rt.chunk.len) return weir__rt.chunk.len - weir__rt.chunk_pos;
    if (weir__rt.chunk_eof) return 0;
    int32_t n = weir__host_restore_read(weir__rt.chunk.ptr, (int32_t)weir__rt.chunk.cap);
    weir__rt.chunk_pos = 0;
    weir__rt.chunk.len = n > 0 ? (uint32_t)n : 0;
    if (n <= 0) weir__rt.chunk_eof = 1;
    return weir__rt.chunk.len;
}

/* weir_state_at_end reports whether the restore stream is exhausted (an
 * operator that never snapshotted is restored from an empty stream). */
static inline int weir_state_at_end(void) { return weir__state_fill() == 0; }

/* weir_state_read reads exactly n bytes of the restore stream into p (only in
 * the restore callback); it fails if the stream ends first. */
static inline int weir_state_read(void *p, size_t n) {
    uint8_t *d = (uint8_t *)p;
    while (n > 0) {
        uint32_t have = weir__state_fill();
        if (have == 0) return weir_fail("weir: state ended early");
        uint32_t c = n < have ? (uint32_t)n : have;
        memcpy(d, weir__rt.chunk.ptr + weir__rt.chunk_pos, c);
        weir__rt.chunk_pos += c;
        d += c;
        n -= c;
    }
    return WEIR_OK;
}

static inline int weir_state_read_u8(uint8_t *v) { return weir_state_read(v, 1); }
static inline int weir_state_read_u32(uint32_t *v) { return weir_state_read(v, 4); }
static inline int weir_state_read_u64(uint64_t *v) { return weir_state_read(v, 8); }
static inline int weir_state_read_i64(int64_t *v) { return weir_state_read(v, 8); }

static inline size_t weir__state_read_upto(void *p, size_t n);

/* weir_state_read_bytes reads what weir_state_write_bytes wrote (u32 length +
 * bytes) into a new weir_malloc'd buffer (at least 1 byte, so never NULL on
 * success), which the caller owns: weir_free(out->ptr) when done. The buffer
 * grows as the bytes arrive, not to the length up front: a length past the
 * end of the stream (a corrupt state, or one in another format) fails with
 * "weir: state ended early", not "out of memory". */
static inline int weir_state_read_bytes(weir_bytes *out) {
    uint32_t n;
    if (weir_state_read_u32(&n)) return WEIR_ERR;
    uint32_t cap = n < WEIR_CHUNK ? n : WEIR_CHUNK, got = 0;
    uint8_t *p = (uint8_t *)weir_malloc(cap ? cap : 1);
    if (!p) return weir_fail("weir: out of memory reading state");
    while (got < n) {
        if (got == cap) {
            uint32_t c = cap > n / 2 ? n : cap * 2;
            uint8_t *q = (uint8_t *)weir_realloc(p, c);
            if (!q) {
                weir_free(p);
                return weir_fail("weir: out of memory reading state");
            }
            p = q;
            cap = c;
        }
        size_t k = weir__state_read_upto(p + got, cap - got);
        if (k == 0) {
            weir_free(p);
            return weir_fail("weir: state ended early");
        }
        got += (uint32_t)k;
    }
    out->ptr = p;
    out->len = n;
    return WEIR_OK;
}

/* ------------------------------------------------------------------------ */
/* Keyed state (abi/ABI.md §8).                                              */
/* ------------------------------------------------------------------------ */

/* Keyed state is the one state layout the host understands: one entry per
 * routing key, so weir can redistribute the entries by key when the
 * operator's parallelism changes on a restore. Use it only when every
 * entry's key is the key the operator's records arrive by, with its inputs
 * partitioned by key (see examples/keyedcount.c):
 *
 *     state := "WKS1" entry*
 *     entry := u32 key_len, u32 value_len, i64 reserved (0), key, value
 *
 * In the snapshot callback:
 *
 *     if (weir_keyed_state_begin()) return WEIR_ERR;
 *     for (each key, in a stable order)
 *         if (weir_keyed_state_put(key, value)) return WEIR_ERR;
 *     return weir_keyed_state_end();
 *
 * and in the restore callback: return weir_keyed_state_read(fn, ctx); */

/* WEIR_KEYED_MAGIC starts a state stream in the keyed layout. */
#define WEIR_KEYED_MAGIC "WKS1"

/* weir_keyed_state_begin starts a keyed state: it writes WEIR_KEYED_MAGIC to
 * the snapshot (only in the snapshot callback, once, before anything else:
 * the keyed layout is the whole state, so it fails after other state or a
 * begin before it, and so does the snapshot; after it, so does
 * weir_state_write). */
static inline int weir_keyed_state_begin(void) {
    if (weir__rt.snap_keyed)
        return weir__keyed_misuse("weir: a second weir_keyed_state_begin in one snapshot: the keyed layout is the "
                                  "whole snapshot (begin it once and put every entry after it)");
    if (weir__rt.snap_wrote)
        return weir__keyed_misuse("weir: weir_keyed_state_begin after other state: the keyed layout is the "
                                  "whole snapshot (begin it first, with no version byte before it)");
    weir__rt.snap_keyed = 1;
    return weir__state_append(WEIR_KEYED_MAGIC, 4);
}

/* weir_keyed_state_put writes the entry for key; key and value are copied.
 * Each key at most once, after weir_keyed_state_begin (without it, it fails,
 * and so does the snapshot). */
static inline int weir_keyed_state_put(weir_bytes key, weir_bytes value) {
    if (!weir__rt.snap_keyed)
        return weir__keyed_misuse("weir: weir_keyed_state_put without weir_keyed_state_begin "
                                  "(call it first in the snapshot callback)");
    uint8_t hdr[16] = {0}; /* the reserved i64 stays 0 */
    memcpy(hdr, &key.len, 4);
    memcpy(hdr + 4, &value.len, 4);
    if (weir__state_append(hdr, 16) || weir__state_append(key.ptr, key.len)) return WEIR_ERR;
    return weir__state_append(value.ptr, value.len);
}

/* weir_keyed_state_end finishes a keyed state, handing the host what is
 * buffered; call it last in the snapshot callback. */
static inline int weir_keyed_state_end(void) {
    return weir__rt.chunk.len ? weir__state_flush() : WEIR_OK;
}

/* weir_keyed_fn is called by weir_keyed_state_read for each entry. key and
 * value are valid only during the call (copy what you keep) and the callback
 * must not read the state stream itself. It returns WEIR_OK, or an error
 * (usually `return weir_fail("...")`) that stops the read. */
typedef int (*weir_keyed_fn)(weir_bytes key, weir_bytes value, void *ctx);

/* weir__state_read_upto reads up to n bytes of the restore stream into p and
 * returns how many it read: fewer than n only at the end of the stream. */
static inline size_t weir__state_read_upto(void *p, size_t n) {
    uint8_t *d = (uint8_t *)p;
    size_t got = 0;
    while (got < n) {
        uint32_t have = weir__state_fill();
        if (have == 0) break;
        uint32_t c = n - got < have ? (uint32_t)(n - got) : have;
        memcpy(d + got, weir__rt.chunk.ptr + weir__rt.chunk_pos, c);
        weir__rt.chunk_pos += c;
        got += c;
    }
    return got;
}

/* WEIR__ERR_NOT_KEYED_STATE fails weir_keyed_state_read on a state in another
 * layout: one a build of the operator from before it wrote keyed state took,
 * as the other SDKs say it. */
#define WEIR__ERR_NOT_KEYED_STATE                                                         \
    "weir: the state to restore is in a layout of its own, and this build of the "        \
    "operator reads keyed state (abi/ABI.md §8): restore with the build that wrote it, "  \
    "or have this build read the old layout too (state that does not start with \"WKS1\")"

/* weir_keyed_state_read reads a state written with weir_keyed_state_begin /
 * put / end (also one weir redistributed after a rescale, whose entries come
 * in no particular key order) and calls fn(key, value, ctx) for each entry,
 * in stream order (only in the restore callback). An empty stream has no
 * entries; a non-empty one that does not start with WEIR_KEYED_MAGIC (a
 * state in another layout, which the error says how to restore), or that
 * ends inside an entry, is an error. Entries of any size are fine:
 * one that spans restore chunks is copied into a buffer that grows to fit. */
static inline int weir_keyed_state_read(weir_keyed_fn fn, void *ctx) {
    if (weir_state_at_end()) return WEIR_OK;
    uint8_t hdr[16];
    if (weir__state_read_upto(hdr, 4) != 4 || memcmp(hdr, WEIR_KEYED_MAGIC, 4) != 0)
        return weir_fail(WEIR__ERR_NOT_KEYED_STATE);
    weir__buf entry = {NULL, 0, 0}; /* an entry that spans chunks */
    int status = WEIR_OK;
    while (status == WEIR_OK && !weir_state_at_end()) {
        if (weir__state_read_upto(hdr, 16) != 16) {
            status = weir_fail("weir: keyed state: entry header passes the end");
            break;
        }
        uint32_t klen = weir_load_u32(hdr), vlen = weir_load_u32(hdr + 4);
        uint64_t n = (uint64_t)klen + vlen;
        const uint8_t *p;
        if (n <= weir__state_fill()) {
            /* Whole in the current chunk: no copy. An empty entry at the end
             * of the stream takes this path too. */
            p = weir__rt.chunk.ptr + weir__rt.chunk_pos;
            weir__rt.chunk_pos += (uint32_t)n;
        } else {
            if (n > entry.cap) {
                if (n > UINT32_MAX / 2) {
                    status = weir_fail("weir: keyed state: entry too large");
                    break;
                }
                uint8_t *q = (uint8_t *)weir_realloc(entry.ptr, (size_t)n);
                if (!q) {
                    status = weir_fail("weir: keyed state: out of memory");
                    break;
                }
                entry.ptr = q;
                entry.cap = (uint32_t)n;
            }
            if (weir__state_read_upto(entry.ptr, (size_t)n) != n) {
                status = weir_fail("weir: keyed state: entry passes the end");
                break;
            }
            p = entry.ptr;
        }
        weir_bytes key = {p, klen}, value = {p + klen, vlen};
        status = fn(key, value, ctx);
    }
    weir_free(entry.ptr);
    return status;
}

/* ------------------------------------------------------------------------ */
/* Exports.                                                                  */
/* ------------------------------------------------------------------------ */

WEIR__ONCE WEIR_EXPORT("weir_abi_v1") void weir_abi_v1(void) {}

WEIR__ONCE WEIR_EXPORT("weir_cursor") int32_t *weir_cursor(void) { return &weir__rt.cursor; }

WEIR__ONCE WEIR_EXPORT("weir_input") void *weir_input(uint32_t size) {
    weir__buf *b = &weir__rt.input;
    if (size == 0) size = 1; /* the address must be non-zero */
    if (size > b->cap) {
        weir_free(b->ptr);
        b->ptr = (uint8_t *)weir_malloc(size);
        b->cap = b->ptr ? size : 0;
    }
    return b->ptr;
}

/* WEIR__ERR_TRAILING_STATE fails a restore callback that returned WEIR_OK
 * before it read all of the state: a state the operator cannot read back
 * whole is one it does not understand. */
#define WEIR__ERR_TRAILING_STATE                                                           \
    "weir: state has trailing bytes: restore returned before reading all of it "           \
    "(read back everything snapshot writes)"

/* WEIR_OPERATOR defines the required exports around four callbacks:
 *   int init(weir_bytes config);          validate the config; it points into
 *                                         the input buffer, so copy what you keep
 *   int process(uint32_t port, weir_batch *in);
 *   int snapshot(void);                   weir_state_write...
 *   int restore(void);                    weir_state_read..., all of what
 *                                         snapshot wrote (bytes left unread
 *                                         fail the restore)
 * Each returns WEIR_OK or an error (usually `return weir_fail("...")`). */
#define WEIR_OPERATOR(init_fn, process_fn, snapshot_fn, restore_fn)                       \
    WEIR_EXPORT("weir_init") int32_t weir_init(const uint8_t *ptr, uint32_t len) {        \
        weir_bytes config = {ptr, len};                                                   \
        return init_fn(config);                                                           \
    }                                                                                     \
    WEIR_EXPORT("weir_process")                                                           \
    int32_t weir_process(uint32_t port, const uint8_t *ptr, uint32_t len) {               \
        (void)len;                                                                        \
        weir_batch in = {ptr + 4, weir_load_u32(ptr), 0};                                 \
        return weir__finish(process_fn(port, &in));                                       \
    }                                                                                     \
    WEIR_EXPORT("weir_snapshot") int32_t weir_snapshot(void) {                            \
        if (weir__chunk_init()) return weir_fail("weir: out of memory");                  \
        weir__rt.chunk.len = 0;                                                           \
        weir__rt.snap_wrote = weir__rt.snap_keyed = 0;                                    \
        weir__rt.snap_misuse = NULL;                                                      \
        int32_t status = snapshot_fn();                                                   \
        if (status == 0 && weir__rt.snap_misuse) status = weir_fail(weir__rt.snap_misuse); \
        if (status == 0 && weir__rt.chunk.len) status = weir__state_flush();              \
        weir__rt.chunk.len = 0;                                                           \
        return status;                                                                    \
    }                                                                                     \
    WEIR_EXPORT("weir_restore") int32_t weir_restore(void) {                              \
        if (weir__chunk_init()) return weir_fail("weir: out of memory");                  \
        weir__rt.chunk.len = weir__rt.chunk_pos = 0;                                      \
        weir__rt.chunk_eof = 0;                                                           \
        int32_t status = restore_fn();                                                    \
        if (status == 0 && !weir_state_at_end())                                          \
            status = weir_fail(WEIR__ERR_TRAILING_STATE);                                  \
        weir__rt.chunk.len = weir__rt.chunk_pos = 0;                                      \
        return status;                                                                    \
    }                                                                                     \
    WEIR__OPERATOR_NEW

/* WEIR_END_OF_INPUT(fn) exports weir_end_of_input: int fn(uint32_t port) is
 * called once per input port that ended; it may emit final results. */
#define WEIR_END_OF_INPUT(fn)                                                             \
    WEIR_EXPORT("weir_end_of_input") int32_t weir_end_of_input(uint32_t port) {           \
        return weir__finish(fn(port));                                                    \
    }

/* WEIR_CHECKPOINT_COMPLETE(fn) exports weir_checkpoint_complete: int fn(int64_t id). */
#define WEIR_CHECKPOINT_COMPLETE(fn)                                                      \
    WEIR_EXPORT("weir_checkpoint_complete") int32_t weir_checkpoint_complete(int64_t id) { \
        return fn(id);                                                                    \
    }

#ifdef __cplusplus
} /* extern "C" */

/* ------------------------------------------------------------------------ */
/* C++: operator new.                                                        */
/* ------------------------------------------------------------------------ */

/* libc++ for wasm32 is built without exceptions: its operator new returns
 * NULL when memory runs out (the memory limit refused memory.grow), and the
 * operator would write through NULL, which WebAssembly does not trap on.
 * WEIR_OPERATOR therefore replaces operator new and new[] in its file: an
 * allocation that fails sets "weir: operator new of N bytes failed: out of
 * memory" as the call's error and traps (weir_abort), and the host reports
 * it with the record and the memory.grow the limit refused. The nothrow
 * forms still return NULL (check it); delete frees. Define
 * WEIR_NO_OPERATOR_NEW before including weir.h to bring your own. */

/* weir__new_failed aborts the call for an operator new of n bytes. */
static inline __attribute__((noreturn)) void weir__new_failed(size_t n) {
    static char msg[80];
    static const char a[] = "weir: operator new of ", b[] = " bytes failed: out of memory";
    uint32_t k = sizeof a - 1;
    memcpy(msg, a, k);
    k += weir__format_u32((uint32_t)n, msg + k);
    memcpy(msg + k, b, sizeof b); /* with the NUL */
    weir_abort(msg);
}

static inline void *weir__new(size_t n) {
    void *p = weir_malloc(n ? n : 1);
    if (!p) weir__new_failed(n);
    return p;
}

#if defined(WEIR__HAVE_NEW) && !defined(WEIR_FREESTANDING)
static inline void *weir__new_aligned_nothrow(size_t n, size_t align) noexcept {
    if (align < sizeof(void *)) align = sizeof(void *);
    size_t size = n ? (n + align - 1) & ~(align - 1) : align;
    return size < n ? NULL : aligned_alloc(align, size);
}

static inline void *weir__new_aligned(size_t n, size_t align) {
    void *p = weir__new_aligned_nothrow(n, align);
    if (!p) weir__new_failed(n);
    return p;
}
#endif

#if defined(WEIR_NO_OPERATOR_NEW)
#define WEIR__OPERATOR_NEW
#else
#ifdef WEIR__HAVE_NEW
#define WEIR__OPERATOR_NEW_NOTHROW                                                                         \
    void *operator new(size_t n, const std::nothrow_t &) noexcept { return weir_malloc(n ? n : 1); }       \
    void *operator new[](size_t n, const std::nothrow_t &) noexcept { return weir_malloc(n ? n : 1); }     \
    void operator delete(void *p, const std::nothrow_t &) noexcept { weir_free(p); }                       \
    void operator delete[](void *p, const std::nothrow_t &) noexcept { weir_free(p); }
#else
#define WEIR__OPERATOR_NEW_NOTHROW
#endif
/* The aligned forms allocate with aligned_alloc; libc++'s aligned delete
 * frees them (free). Freestanding, without libc++, there are none. */
#if defined(WEIR__HAVE_NEW) && !defined(WEIR_FREESTANDING) && defined(__cpp_aligned_new)
#define WEIR__OPERATOR_NEW_ALIGNED                                                                         \
    void *operator new(size_t n, std::align_val_t a) { return weir__new_aligned(n, (size_t)a); }           \
    void *operator new[](size_t n, std::align_val_t a) { return weir__new_aligned(n, (size_t)a); }         \
    void *operator new(size_t n, std::align_val_t a, const std::nothrow_t &) noexcept {                    \
        return weir__new_aligned_nothrow(n, (size_t)a);                                                    \
    }                                                                                                      \
    void *operator new[](size_t n, std::align_val_t a, const std::nothrow_t &) noexcept {                  \
        return weir__new_aligned_nothrow(n, (size_t)a);                                                    \
    }
#else
#define WEIR__OPERATOR_NEW_ALIGNED
#endif
#define WEIR__OPERATOR_NEW                                                                                 \
    void *operator new(size_t n) { return weir__new(n); }                                                  \
    void *operator new[](size_t n) { return weir__new(n); }                                                \
    void operator delete(void *p) noexcept { weir_free(p); }                                               \
    void operator delete[](void *p) noexcept { weir_free(p); }                                             \
    void operator delete(void *p, size_t) noexcept { weir_free(p); }                                       \
    void operator delete[](void *p, size_t) noexcept { weir_free(p); }                                     \
    WEIR__OPERATOR_NEW_NOTHROW                                                                             \
    WEIR__OPERATOR_NEW_ALIGNED
#endif

#else /* C */
#define WEIR__OPERATOR_NEW
#endif /* __cplusplus */

#endif /* WEIR_H */
