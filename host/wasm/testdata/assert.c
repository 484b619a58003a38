/* assert: a test operator built with wasi-libc, whose process asserts
 * that every value is shorter than 3 bytes: a failed assert prints
 * "Assertion failed: …" to stderr and traps.
 *
 * guests/build.sh builds it from this directory, a wasi-libc reactor, -O1,
 * stripped: the failed assert names the file "assert.c" and its line,
 * which TestFailedAssertIsTheReason expects. */
#include <assert.h>

#include "weir.h"

static int init(weir_bytes config) {
    (void)config;
    return WEIR_OK;
}

static int process(uint32_t port, weir_batch *in) {
    (void)port;
    weir_record r;
    while (weir_batch_next(in, &r)) {
        assert(r.value.len < 3);
        if (weir_emit(0, r.key, r.value, r.timestamp)) return WEIR_ERR;
    }
    return WEIR_OK;
}

static int snapshot(void) { return WEIR_OK; }
static int restore(void) { return WEIR_OK; }

WEIR_OPERATOR(init, process, snapshot, restore)
