/* dwarf: a test operator built with DWARF line info (-g). Each value is a
 * decimal number; process divides 1000 by it, so a value of 0 traps with an
 * integer division by zero after a loop, whose check the host inserts and
 * which moves the code after it.
 *
 * guests/build.sh builds it from this directory, freestanding, -O1 -g with
 * paths relative to this directory, and keeps its DWARF sections: they are
 * what TestTrapStackWithDWARF is about. */
#include "weir.h"

static int init(weir_bytes config) {
    (void)config;
    return WEIR_OK;
}

static int process(uint32_t port, weir_batch *in) {
    (void)port;
    weir_record r;
    while (weir_batch_next(in, &r)) {
        uint32_t n = 0;
        for (uint32_t i = 0; i < r.value.len; i++) n = n * 10 + (r.value.ptr[i] - '0');
        uint32_t q = 1000 / n; /* the trap */
        if (weir_emit(0, r.key, (weir_bytes){(const uint8_t *)&q, 4}, r.timestamp)) return WEIR_ERR;
    }
    return WEIR_OK;
}

static int snapshot(void) { return WEIR_OK; }
static int restore(void) { return WEIR_OK; }

WEIR_OPERATOR(init, process, snapshot, restore)
