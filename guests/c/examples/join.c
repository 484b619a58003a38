/* join: an equi-join on the record key of two inputs, port 0 (left) and port
 * 1 (right). Every record of both sides is buffered in arrival order. A new
 * record is joined with every buffered record of the other side that has the
 * same key, in arrival order: key=k, value=left.value "|" right.value,
 * timestamp=max of the two; then it is buffered itself.
 *
 * State (shared by every SDK's join): 0x01, u32 n_left, n_left records, u32
 * n_right, n_right records; a record is u32 key_len, key, u32 value_len,
 * value, i64 timestamp; both sides in arrival order. */
#include "weir.h"

typedef struct row {
    uint8_t *key, *value; /* one allocation: key bytes then value bytes */
    uint32_t klen, vlen;
    int64_t ts;
} row;

typedef struct side {
    row *v;
    uint32_t n, cap;
} side;

/* sides[0] holds the lefts, sides[1] the rights. */
static side sides[2];

static int push(side *s, weir_bytes key, weir_bytes value, int64_t ts) {
    if (s->n == s->cap) {
        uint32_t cap = s->cap ? s->cap * 2 : 64;
        row *v = weir_realloc(s->v, cap * sizeof(row));
        if (!v) return weir_fail("join: out of memory");
        s->v = v;
        s->cap = cap;
    }
    uint8_t *mem = weir_malloc(key.len + value.len + 1);
    if (!mem) return weir_fail("join: out of memory");
    memcpy(mem, key.ptr, key.len);
    memcpy(mem + key.len, value.ptr, value.len);
    s->v[s->n++] = (row){mem, mem + key.len, key.len, value.len, ts};
    return WEIR_OK;
}

/* pair emits left|right under key. */
static int pair(weir_bytes key, weir_bytes left, weir_bytes right, int64_t ts) {
    uint8_t *v = weir_emit_alloc(0, key, left.len + 1 + right.len, ts);
    if (!v) return WEIR_ERR;
    memcpy(v, left.ptr, left.len);
    v[left.len] = '|';
    memcpy(v + left.len + 1, right.ptr, right.len);
    return WEIR_OK;
}

static int init(weir_bytes config) {
    (void)config;
    return WEIR_OK;
}

static int process(uint32_t port, weir_batch *in) {
    if (port > 1) return weir_fail("join: input port must be 0 (left) or 1 (right)");
    const side *other = &sides[1 - port];
    weir_record r;
    while (weir_batch_next(in, &r)) {
        for (uint32_t i = 0; i < other->n; i++) {
            const row *o = &other->v[i];
            if (o->klen != r.key.len || memcmp(o->key, r.key.ptr, r.key.len) != 0) continue;
            weir_bytes ov = {o->value, o->vlen};
            int64_t ts = r.timestamp > o->ts ? r.timestamp : o->ts;
            int rc = port == 0 ? pair(r.key, r.value, ov, ts) : pair(r.key, ov, r.value, ts);
            if (rc) return WEIR_ERR;
        }
        if (push(&sides[port], r.key, r.value, r.timestamp)) return WEIR_ERR;
    }
    return WEIR_OK;
}

static int snapshot(void) {
    if (weir_state_write_u8(1)) return WEIR_ERR;
    for (int s = 0; s < 2; s++) {
        if (weir_state_write_u32(sides[s].n)) return WEIR_ERR;
        for (uint32_t i = 0; i < sides[s].n; i++) {
            const row *o = &sides[s].v[i];
            weir_bytes k = {o->key, o->klen}, v = {o->value, o->vlen};
            if (weir_state_write_bytes(k) || weir_state_write_bytes(v) ||
                weir_state_write_u64((uint64_t)o->ts))
                return WEIR_ERR;
        }
    }
    return WEIR_OK;
}

static int restore(void) {
    if (weir_state_at_end()) return WEIR_OK; /* never snapshotted */
    uint8_t version;
    if (weir_state_read_u8(&version)) return WEIR_ERR;
    if (version != 1) return weir_fail("join: unknown state version");
    for (int s = 0; s < 2; s++) {
        uint32_t n;
        if (weir_state_read_u32(&n)) return WEIR_ERR;
        for (uint32_t i = 0; i < n; i++) {
            /* weir_state_read_bytes, not weir_malloc(length): a length
             * past the end of a corrupt state says so ("state ended
             * early") instead of asking for memory. */
            weir_bytes k = {NULL, 0}, v = {NULL, 0};
            uint64_t ts;
            int rc = weir_state_read_bytes(&k) || weir_state_read_bytes(&v) ||
                     weir_state_read_u64(&ts) || push(&sides[s], k, v, (int64_t)ts);
            weir_free((void *)k.ptr);
            weir_free((void *)v.ptr);
            if (rc) return WEIR_ERR;
        }
    }
    return WEIR_OK;
}

WEIR_OPERATOR(init, process, snapshot, restore)
