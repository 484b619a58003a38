/* An operator as a user writes it outside the repository: no weir.h beside
 * it; sourcebuild puts the SDK's on the include path. */
#include "weir.h"

static int init(weir_bytes config) { (void)config; return WEIR_OK; }

static int process(uint32_t port, weir_batch *in) {
    (void)port;
    weir_record r;
    while (weir_batch_next(in, &r)) {
        uint8_t *v = weir_emit_alloc(0, r.key, r.value.len, r.timestamp);
        if (!v) return WEIR_ERR;
        for (uint32_t i = 0; i < r.value.len; i++) {
            uint8_t c = r.value.ptr[i];
            v[i] = (c >= 'a' && c <= 'z') ? (uint8_t)(c - 32) : c;
        }
    }
    return WEIR_OK;
}

static int snapshot(void) { return WEIR_OK; }
static int restore(void) { return WEIR_OK; }

WEIR_OPERATOR(init, process, snapshot, restore)
