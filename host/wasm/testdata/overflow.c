/* overflow: a test operator whose process recurses as deep as the value
 * says, 256 bytes of C stack a level, so a large value overruns the 64 KiB
 * stack (--stack-first: out of bounds below address 0).
 *
 * guests/build.sh builds it from this directory, freestanding, -O1,
 * -Wl,--stack-first, and keeps its name section: the error names depth,
 * the function that recurses. */
#include "weir.h"

static int init(weir_bytes config) {
    (void)config;
    return WEIR_OK;
}

static int depth(uint32_t n) {
    volatile uint8_t frame[256];
    frame[0] = (uint8_t)n;
    if (n == 0) return frame[0];
    return depth(n - 1) + frame[0];
}

static int process(uint32_t port, weir_batch *in) {
    (void)port;
    weir_record r;
    while (weir_batch_next(in, &r)) {
        uint32_t n = 0;
        for (uint32_t i = 0; i < r.value.len; i++) n = n * 10 + (r.value.ptr[i] - '0');
        uint8_t v = (uint8_t)depth(n);
        weir_bytes out = {&v, 1};
        if (weir_emit(0, r.key, out, r.timestamp)) return WEIR_ERR;
    }
    return WEIR_OK;
}

static int snapshot(void) { return WEIR_OK; }
static int restore(void) { return WEIR_OK; }

WEIR_OPERATOR(init, process, snapshot, restore)
