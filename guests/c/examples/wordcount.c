/* wordcount: splits each value on ASCII whitespace and, for every word in
 * order, increments its count and emits key=word, value=decimal count, with
 * the input record's timestamp.
 *
 * State (shared by every SDK's wordcount): 0x01, u32 n, then n entries in
 * ascending bytewise order of the word: u32 word_len, word, u64 count. */
#include "weir.h"

typedef struct entry {
    uint8_t *word;
    uint32_t len;
    uint64_t count;
} entry;

/* The counts, kept sorted by word so lookups bisect and snapshots need no
 * sorting. */
static struct {
    entry *v;
    uint32_t n, cap;
} counts;

/* compare orders byte strings bytewise, a proper prefix first. */
static int compare(const uint8_t *a, uint32_t alen, const uint8_t *b, uint32_t blen) {
    int c = memcmp(a, b, alen < blen ? alen : blen);
    if (c) return c;
    return alen < blen ? -1 : alen > blen;
}

/* find returns the index of word, or of where it belongs, in *at; 1 if found. */
static int find(const uint8_t *w, uint32_t len, uint32_t *at) {
    uint32_t lo = 0, hi = counts.n;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        int c = compare(counts.v[mid].word, counts.v[mid].len, w, len);
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

/* insert adds word with count at index i; NULL when memory runs out. */
static entry *insert(uint32_t i, const uint8_t *w, uint32_t len, uint64_t count) {
    if (counts.n == counts.cap) {
        uint32_t cap = counts.cap ? counts.cap * 2 : 64;
        entry *v = weir_realloc(counts.v, cap * sizeof(entry));
        if (!v) return NULL;
        counts.v = v;
        counts.cap = cap;
    }
    uint8_t *copy = weir_malloc(len ? len : 1);
    if (!copy) return NULL;
    memcpy(copy, w, len);
    memmove(&counts.v[i + 1], &counts.v[i], (counts.n - i) * sizeof(entry));
    counts.v[i] = (entry){copy, len, count};
    counts.n++;
    return &counts.v[i];
}

static int is_space(uint8_t c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

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

static int count_word(const uint8_t *w, uint32_t len, int64_t ts) {
    uint32_t at;
    entry *e = find(w, len, &at) ? &counts.v[at] : insert(at, w, len, 0);
    if (!e) return weir_fail("wordcount: out of memory");
    e->count++;
    uint8_t digits[20];
    weir_bytes key = {w, len}, value = {digits, format(e->count, digits)};
    return weir_emit(0, key, value, ts);
}

static int process(uint32_t port, weir_batch *in) {
    (void)port;
    weir_record r;
    while (weir_batch_next(in, &r)) {
        const uint8_t *p = r.value.ptr, *end = p + r.value.len;
        while (p < end) {
            while (p < end && is_space(*p)) p++;
            const uint8_t *start = p;
            while (p < end && !is_space(*p)) p++;
            if (p > start && count_word(start, (uint32_t)(p - start), r.timestamp)) return WEIR_ERR;
        }
    }
    return WEIR_OK;
}

static int snapshot(void) {
    if (weir_state_write_u8(1) || weir_state_write_u32(counts.n)) return WEIR_ERR;
    for (uint32_t i = 0; i < counts.n; i++) {
        weir_bytes w = {counts.v[i].word, counts.v[i].len};
        if (weir_state_write_bytes(w) || weir_state_write_u64(counts.v[i].count)) return WEIR_ERR;
    }
    return WEIR_OK;
}

static int restore(void) {
    if (weir_state_at_end()) return WEIR_OK; /* never snapshotted */
    uint8_t version;
    uint32_t n;
    if (weir_state_read_u8(&version)) return WEIR_ERR;
    if (version != 1) return weir_fail("wordcount: unknown state version");
    if (weir_state_read_u32(&n)) return WEIR_ERR;
    for (uint32_t i = 0; i < n; i++) {
        /* weir_state_read_bytes, not weir_malloc(length): a length past
         * the end of a corrupt state says so ("state ended early") instead
         * of asking for memory. */
        weir_bytes w;
        uint64_t count;
        uint32_t at;
        if (weir_state_read_bytes(&w)) return WEIR_ERR;
        int rc = weir_state_read_u64(&count);
        if (rc == WEIR_OK && find(w.ptr, w.len, &at)) rc = weir_fail("wordcount: duplicate word in state");
        if (rc == WEIR_OK && !insert(at, w.ptr, w.len, count)) rc = weir_fail("wordcount: out of memory");
        weir_free((void *)w.ptr);
        if (rc) return WEIR_ERR;
    }
    return WEIR_OK;
}

WEIR_OPERATOR(init, process, snapshot, restore)
