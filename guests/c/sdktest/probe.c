/* probe: exercises the SDK features the examples do not, for the
 * conformance suite's TestSDKProbe (same behaviour in every SDK):
 *   - record i of a batch goes to output port (i + 1) % 2 with its value
 *     unchanged, so port batches are emitted in first-use order;
 *   - a record whose value is "trap" traps (the host reports the cursor);
 *   - a record whose value is "fail" fails the call with "probe: fail"
 *     (the host reports the cursor with the error);
 *   - a record whose value is "panic" aborts with "probe: panic" (the host
 *     reports the message and the cursor with the trap);
 *   - (C only) a record whose value is "recurse" recurses until the stack
 *     runs out: with -Wl,--stack-first that traps at once, out of bounds,
 *     and the host reports the right record (without it the stack grows
 *     into the SDK's globals, the cursor among them);
 *   - (C only) a record whose value is "null" writes 4 KiB of 1s through a
 *     NULL pointer and carries on: with -Wl,--stack-first they land in the
 *     far end of the stack, unused, and the SDK's state is whole (without
 *     it they land on the globals, and the cursor reads 16843009);
 *   - a record whose value is "log" is also logged at warn level as "probe: log";
 *   - a record whose value is "badport" is emitted to output port 2000, past
 *     every SDK's port limit, which fails the call with the SDK's message;
 *   - end of input on port p emits key "eoi", value the decimal p, on port 0;
 *   - checkpoint_complete(id) fails with "probe: negative checkpoint" for id < 0;
 *   - snapshot writes u8 1, bytes "probe" (u32 length + bytes), i64 -2;
 *     restore reads them back (an empty state is fine) and fails with
 *     "probe: bad state" if they differ;
 *   - (C only) with the config "keyed-put-without-begin" the snapshot puts a
 *     keyed entry without weir_keyed_state_begin, and with
 *     "keyed-begin-after-state" it writes a version byte and then begins a
 *     keyed state: the SDK fails either, saying what to do; with the same
 *     configs and "-ignored" after them the snapshot ignores the error and
 *     returns WEIR_OK, which fails it all the same;
 *   - with the config "state-after-keyed" the snapshot puts k=v in a keyed
 *     state and then writes a byte with weir_state_write_u8, and with
 *     "keyed-put-after-state" it puts k2=v2 after that byte: the SDK fails
 *     either, saying what to do, though the snapshot ignores the errors and
 *     returns WEIR_OK;
 *   - with the config "two-keyed-writers" the snapshot begins a keyed state
 *     and puts k=v, then begins another and puts k2=v2: the SDK fails it,
 *     saying what to do, though the snapshot ignores the errors and returns
 *     WEIR_OK;
 *   - with the config "empty-writes-around-keyed" the snapshot writes no
 *     bytes with weir_state_write, puts k=v in a keyed state, and writes no
 *     bytes again: a correct keyed state, which the SDK takes. */
#include "weir.h"

static int is(weir_bytes b, const char *s) {
    weir_bytes w = weir_bytes_of(s);
    return b.len == w.len && memcmp(b.ptr, w.ptr, w.len) == 0;
}

/* keyed_mistake: 1 puts a keyed entry without begin, 2 begins after a
 * version byte, 3 writes a byte after a keyed entry, 4 also puts an entry
 * after that byte, 5 begins twice, an entry after each begin (the config);
 * keyed_ignored: the snapshot ignores the error (the config ends in
 * "-ignored"; always for 3, 4 and 5). */
static int keyed_mistake, keyed_ignored, empty_writes;

static int init(weir_bytes config) {
    static const char ignored[] = "-ignored";
    uint32_t n = sizeof ignored - 1;
    if (config.len >= n && memcmp(config.ptr + config.len - n, ignored, n) == 0) {
        keyed_ignored = 1;
        config.len -= n;
    }
    empty_writes = is(config, "empty-writes-around-keyed");
    keyed_mistake = is(config, "keyed-put-without-begin")   ? 1
                    : is(config, "keyed-begin-after-state") ? 2
                    : is(config, "state-after-keyed")       ? 3
                    : is(config, "keyed-put-after-state")   ? 4
                    : is(config, "two-keyed-writers")       ? 5
                                                            : 0;
    return WEIR_OK;
}

static volatile int deep_sink;

/* deep recurses n levels with 256 bytes of stack each. */
static int deep(int n) {
    volatile char buf[256];
    buf[0] = (char)n;
    if (n == 0) return buf[0];
    return deep(n - 1) + buf[0];
}

/* nowhere is a pointer the operator never set, as a lookup that found
 * nothing leaves one; volatile, so that clang cannot see it is NULL. */
static uint8_t *volatile nowhere;

static int process(uint32_t port, weir_batch *in) {
    (void)port;
    weir_record r;
    for (uint32_t i = 0; weir_batch_next(in, &r); i++) {
        if (is(r.value, "trap")) __builtin_trap();
        if (is(r.value, "fail")) return weir_fail("probe: fail");
        if (is(r.value, "panic")) weir_abort("probe: panic");
        if (is(r.value, "recurse")) deep_sink = deep(1 << 20);
        if (is(r.value, "null")) memset(nowhere, 1, 4096);
        if (is(r.value, "log")) weir_log(WEIR_LOG_WARN, "probe: log");
        uint32_t out = is(r.value, "badport") ? 2000 : (i + 1) % 2;
        if (weir_emit(out, r.key, r.value, r.timestamp)) return WEIR_ERR;
    }
    return WEIR_OK;
}

static int end_of_input(uint32_t port) {
    uint8_t digit = (uint8_t)('0' + port % 10);
    weir_bytes value = {&digit, 1};
    return weir_emit(0, weir_bytes_of("eoi"), value, 0);
}

static int checkpoint_complete(int64_t id) {
    return id < 0 ? weir_fail("probe: negative checkpoint") : WEIR_OK;
}

static int snapshot(void) {
    if (empty_writes) {
        if (weir_state_write("", 0) || weir_keyed_state_begin() ||
            weir_keyed_state_put(weir_bytes_of("k"), weir_bytes_of("v")) || weir_state_write("", 0))
            return WEIR_ERR;
        return weir_keyed_state_end();
    }
    if (keyed_mistake == 5) {
        (void)weir_keyed_state_begin();
        (void)weir_keyed_state_put(weir_bytes_of("k"), weir_bytes_of("v"));
        (void)weir_keyed_state_begin();
        (void)weir_keyed_state_put(weir_bytes_of("k2"), weir_bytes_of("v2"));
        (void)weir_keyed_state_end();
        return WEIR_OK;
    }
    if (keyed_mistake >= 3) {
        (void)weir_keyed_state_begin();
        (void)weir_keyed_state_put(weir_bytes_of("k"), weir_bytes_of("v"));
        (void)weir_state_write_u8(1);
        if (keyed_mistake == 4) (void)weir_keyed_state_put(weir_bytes_of("k2"), weir_bytes_of("v2"));
        (void)weir_keyed_state_end();
        return WEIR_OK;
    }
    if (keyed_ignored) {
        if (keyed_mistake == 2) {
            (void)weir_state_write_u8(1);
            (void)weir_keyed_state_begin();
        }
        (void)weir_keyed_state_put(weir_bytes_of("k"), weir_bytes_of("v"));
        (void)weir_keyed_state_end();
        return WEIR_OK;
    }
    if (keyed_mistake == 1) return weir_keyed_state_put(weir_bytes_of("k"), weir_bytes_of("v"));
    if (keyed_mistake == 2 && (weir_state_write_u8(1) || weir_keyed_state_begin())) return WEIR_ERR;
    if (weir_state_write_u8(1) || weir_state_write_bytes(weir_bytes_of("probe"))) return WEIR_ERR;
    return weir_state_write_i64(-2);
}

static int restore(void) {
    if (weir_state_at_end()) return WEIR_OK;
    uint8_t v;
    weir_bytes b;
    int64_t i;
    if (weir_state_read_u8(&v) || weir_state_read_bytes(&b)) return WEIR_ERR;
    int ok = is(b, "probe");
    weir_free((void *)b.ptr);
    if (weir_state_read_i64(&i)) return WEIR_ERR;
    return v == 1 && ok && i == -2 ? WEIR_OK : weir_fail("probe: bad state");
}

WEIR_OPERATOR(init, process, snapshot, restore)
WEIR_END_OF_INPUT(end_of_input)
WEIR_CHECKPOINT_COMPLETE(checkpoint_complete)
