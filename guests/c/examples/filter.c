/* filter: keeps the records whose value contains the config bytes. */
#include "weir.h"

/* The substring to keep, copied out of the config buffer. */
static weir_bytes needle;

static int init(weir_bytes config) {
    if (config.len == 0) return weir_fail("filter: config must be the substring to keep");
    uint8_t *copy = weir_malloc(config.len);
    if (!copy) return weir_fail("filter: out of memory");
    memcpy(copy, config.ptr, config.len);
    needle.ptr = copy;
    needle.len = config.len;
    return WEIR_OK;
}

/* contains reports whether needle occurs in hay. */
static int contains(weir_bytes hay, weir_bytes n) {
    if (n.len > hay.len) return 0;
    for (uint32_t i = 0; i + n.len <= hay.len; i++)
        if (hay.ptr[i] == n.ptr[0] && memcmp(hay.ptr + i, n.ptr, n.len) == 0) return 1;
    return 0;
}

static int process(uint32_t port, weir_batch *in) {
    (void)port;
    weir_record r;
    while (weir_batch_next(in, &r))
        if (contains(r.value, needle) && weir_emit(0, r.key, r.value, r.timestamp)) return WEIR_ERR;
    return WEIR_OK;
}

static int snapshot(void) { return WEIR_OK; }
static int restore(void) { return WEIR_OK; }

WEIR_OPERATOR(init, process, snapshot, restore)
