/* uppercase: a stateless operator that turns ASCII a-z in each record's value
 * into A-Z; key and timestamp pass through unchanged, output on port 0.
 *
 * It converts 8 bytes per step (SWAR: a uint64_t as 8 byte lanes), then the
 * last len%8 bytes one by one: the same algorithm as every other language's
 * uppercase, so guests/conformance's BenchmarkUppercase compares like with like. */
#include "weir.h"

#define ONES UINT64_C(0x0101010101010101)
#define HIGH UINT64_C(0x8080808080808080)

/* upper8 converts the ASCII letters a-z among the 8 bytes of x to A-Z. No
 * sum carries out of its byte: the low 7 bits plus at most 0x1f stay < 0x100. */
static inline uint64_t upper8(uint64_t x) {
    uint64_t h = x & ~HIGH;                    /* each byte's low 7 bits */
    uint64_t ge = h + ONES * (0x80 - 'a');     /* high bit set: low 7 bits >= 'a' */
    uint64_t gt = h + ONES * (0x80 - 'z' - 1); /* high bit set: low 7 bits > 'z' */
    uint64_t m = ge & ~gt & ~x & HIGH;         /* high bit set: 'a' <= byte <= 'z', ASCII */
    return x ^ (m >> 2);                       /* 0x80 >> 2 == 0x20: flip the case bit */
}

static int init(weir_bytes config) {
    (void)config;
    return WEIR_OK;
}

static int process(uint32_t port, weir_batch *in) {
    (void)port;
    weir_record r;
    while (weir_batch_next(in, &r)) {
        uint8_t *v = weir_emit_alloc(0, r.key, r.value.len, r.timestamp);
        if (!v) return WEIR_ERR;
        uint32_t i = 0;
        /* memcpy: unaligned 8-byte loads and stores (clang emits i64.load/store) */
        for (; i + 8 <= r.value.len; i += 8) {
            uint64_t x;
            memcpy(&x, r.value.ptr + i, 8);
            x = upper8(x);
            memcpy(v + i, &x, 8);
        }
        for (; i < r.value.len; i++) {
            uint8_t c = r.value.ptr[i];
            v[i] = (c >= 'a' && c <= 'z') ? (uint8_t)(c - 'a' + 'A') : c;
        }
    }
    return WEIR_OK;
}

static int snapshot(void) { return WEIR_OK; }
static int restore(void) { return WEIR_OK; }

WEIR_OPERATOR(init, process, snapshot, restore)
