/* uppercase: a stateless operator that turns ASCII a-z in each record's value
 * into A-Z; key and timestamp pass through unchanged, output on port 0. */
#include "../weir.h"

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
        for (uint32_t i = 0; i < r.value.len; i++) {
            uint8_t c = r.value.ptr[i];
            v[i] = (c >= 'a' && c <= 'z') ? (uint8_t)(c - 'a' + 'A') : c;
        }
    }
    return WEIR_OK;
}

static int snapshot(void) { return WEIR_OK; }
static int restore(void) { return WEIR_OK; }

WEIR_OPERATOR(init, process, snapshot, restore)
