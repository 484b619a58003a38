/* keyedcount: counts the records of each key and, for every input record in
 * order, emits key=the record's key, value=the key's new count in decimal,
 * with the input record's timestamp. No config.
 *
 * State (the same bytes as the Go SDK's keyedcount): the keyed layout of
 * abi/ABI.md §8, "WKS1" then one entry per key in ascending bytewise order
 * of the key, its value the count as u64 LE. weir can then redistribute the
 * counts by key when the operator's parallelism changes on a restore, so
 * partition its input by key. */
#include "weir.h"

typedef struct entry {
    uint8_t *key;
    uint32_t len;
    uint64_t count;
} entry;

/* The counts, kept sorted by key so lookups bisect and snapshots need no
 * sorting. */
typedef struct table {
    entry *v;
    uint32_t n, cap;
} table;

static table counts;

/* compare orders byte strings bytewise, a proper prefix first. */
static int compare(const uint8_t *a, uint32_t alen, const uint8_t *b, uint32_t blen) {
    int c = memcmp(a, b, alen < blen ? alen : blen);
    if (c) return c;
    return alen < blen ? -1 : alen > blen;
}

static int compare_entries(const entry *a, const entry *b) { return compare(a->key, a->len, b->key, b->len); }

/* find returns the index of key, or of where it belongs, in *at; 1 if found. */
static int find(const uint8_t *k, uint32_t len, uint32_t *at) {
    uint32_t lo = 0, hi = counts.n;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        int c = compare(counts.v[mid].key, counts.v[mid].len, k, len);
        if (c == 0) {
            *at = mid;
            return 1;
        }
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    *at = lo;
    return 0;
}

/* insert adds a copy of key with count at index i of t; NULL when memory
 * runs out. */
static entry *insert(table *t, uint32_t i, const uint8_t *k, uint32_t len, uint64_t count) {
    if (t->n == t->cap) {
        uint32_t cap = t->cap ? t->cap * 2 : 64;
        entry *v = weir_realloc(t->v, cap * sizeof(entry));
        if (!v) return NULL;
        t->v = v;
        t->cap = cap;
    }
    uint8_t *copy = weir_malloc(len ? len : 1);
    if (!copy) return NULL;
    if (len) memcpy(copy, k, len);
    memmove(&t->v[i + 1], &t->v[i], (t->n - i) * sizeof(entry));
    t->v[i] = (entry){copy, len, count};
    t->n++;
    return &t->v[i];
}

/* format writes v in decimal into buf (20 bytes) and returns its length. */
static uint32_t format(uint64_t v, uint8_t *buf) {
    uint8_t tmp[20];
    uint32_t n = 0;
    do {
        tmp[n++] = (uint8_t)('0' + v % 10);
        v /= 10;
    } while (v);
    for (uint32_t i = 0; i < n; i++) buf[i] = tmp[n - 1 - i];
    return n;
}

static int init(weir_bytes config) {
    (void)config;
    return WEIR_OK;
}

static int process(uint32_t port, weir_batch *in) {
    (void)port;
    weir_record r;
    while (weir_batch_next(in, &r)) {
        uint32_t at;
        entry *e = find(r.key.ptr, r.key.len, &at) ? &counts.v[at] : insert(&counts, at, r.key.ptr, r.key.len, 0);
        if (!e) return weir_fail("keyedcount: out of memory");
        e->count++;
        uint8_t digits[20];
        weir_bytes value = {digits, format(e->count, digits)};
        if (weir_emit(0, r.key, value, r.timestamp)) return WEIR_ERR;
    }
    return WEIR_OK;
}

static int snapshot(void) {
    if (weir_keyed_state_begin()) return WEIR_ERR;
    for (uint32_t i = 0; i < counts.n; i++) {
        weir_bytes key = {counts.v[i].key, counts.v[i].len};
        weir_bytes value = {(const uint8_t *)&counts.v[i].count, 8}; /* wasm is little-endian */
        if (weir_keyed_state_put(key, value)) return WEIR_ERR;
    }
    return weir_keyed_state_end();
}

/* The restore callback appends each entry to a new table; sorted is cleared
 * when an entry does not come after the one before (a state weir merged from
 * several subtasks on a rescale is in no key order). */
typedef struct restoring {
    table t;
    int sorted;
} restoring;

static int restore_entry(weir_bytes key, weir_bytes value, void *ctx) {
    restoring *st = ctx;
    if (value.len != 8) {
        static char msg[64] = "keyedcount: a count of ";
        uint32_t n = sizeof "keyedcount: a count of " - 1;
        n += format(value.len, (uint8_t *)msg + n);
        memcpy(msg + n, " bytes, want 8", sizeof " bytes, want 8");
        return weir_fail(msg);
    }
    uint64_t count;
    memcpy(&count, value.ptr, 8);
    table *t = &st->t;
    if (t->n && compare(t->v[t->n - 1].key, t->v[t->n - 1].len, key.ptr, key.len) >= 0) st->sorted = 0;
    if (!insert(t, t->n, key.ptr, key.len, count)) return weir_fail("keyedcount: out of memory");
    return WEIR_OK;
}

/* sort_entries sorts v[0..n) by key, stably (a bottom-up merge sort). */
static int sort_entries(entry *v, uint32_t n) {
    entry *tmp = weir_malloc((n ? n : 1) * sizeof(entry));
    if (!tmp) return WEIR_ERR;
    entry *src = v, *dst = tmp;
    for (uint32_t width = 1; width < n; width *= 2) {
        for (uint32_t lo = 0; lo < n; lo += 2 * width) {
            uint32_t mid = lo + width < n ? lo + width : n;
            uint32_t hi = mid + width < n ? mid + width : n;
            uint32_t i = lo, j = mid, k = lo;
            while (i < mid && j < hi) dst[k++] = compare_entries(&src[j], &src[i]) < 0 ? src[j++] : src[i++];
            while (i < mid) dst[k++] = src[i++];
            while (j < hi) dst[k++] = src[j++];
        }
        entry *swap = src;
        src = dst;
        dst = swap;
    }
    if (src != v) memcpy(v, src, n * sizeof(entry));
    weir_free(tmp);
    return WEIR_OK;
}

static void free_table(table *t) {
    for (uint32_t i = 0; i < t->n; i++) weir_free(t->v[i].key);
    weir_free(t->v);
    *t = (table){NULL, 0, 0};
}

static int restore(void) {
    restoring st = {{NULL, 0, 0}, 1};
    if (weir_keyed_state_read(restore_entry, &st)) {
        free_table(&st.t);
        return WEIR_ERR;
    }
    if (!st.sorted) {
        if (sort_entries(st.t.v, st.t.n)) {
            free_table(&st.t);
            return weir_fail("keyedcount: out of memory");
        }
        /* A key twice (never in a state weir wrote): the last entry wins,
         * as in the Go keyedcount. */
        uint32_t w = 0;
        for (uint32_t i = 0; i < st.t.n; i++) {
            if (w && compare_entries(&st.t.v[w - 1], &st.t.v[i]) == 0) {
                weir_free(st.t.v[w - 1].key);
                st.t.v[w - 1] = st.t.v[i];
            } else {
                st.t.v[w++] = st.t.v[i];
            }
        }
        st.t.n = w;
    }
    free_table(&counts);
    counts = st.t;
    return WEIR_OK;
}

WEIR_OPERATOR(init, process, snapshot, restore)
