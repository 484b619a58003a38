// uppercase in C++: a stateless operator that turns ASCII a-z in each
// record's value into A-Z; key and timestamp pass through unchanged, output
// on port 0. The same algorithm as every other language's uppercase: 8
// bytes per step (SWAR), then the last len%8 bytes one by one.
#include "weir.h"

#include <cstring>

namespace {

constexpr uint64_t ones = 0x0101010101010101u, high = 0x8080808080808080u;

// upper8 converts the ASCII letters a-z among the 8 bytes of x to A-Z.
inline uint64_t upper8(uint64_t x) {
    uint64_t h = x & ~high;                    // each byte's low 7 bits
    uint64_t ge = h + ones * (0x80 - 'a');     // high bit set: low 7 bits >= 'a'
    uint64_t gt = h + ones * (0x80 - 'z' - 1); // high bit set: low 7 bits > 'z'
    uint64_t m = ge & ~gt & ~x & high;         // high bit set: 'a' <= byte <= 'z', ASCII
    return x ^ (m >> 2);                       // 0x80 >> 2 == 0x20: flip the case bit
}

int init(weir_bytes) { return WEIR_OK; }

int process(uint32_t, weir_batch *in) {
    weir_record r;
    while (weir_batch_next(in, &r)) {
        uint8_t *v = weir_emit_alloc(0, r.key, r.value.len, r.timestamp);
        if (!v) return WEIR_ERR;
        uint32_t i = 0;
        for (; i + 8 <= r.value.len; i += 8) {
            uint64_t x;
            std::memcpy(&x, r.value.ptr + i, 8);
            x = upper8(x);
            std::memcpy(v + i, &x, 8);
        }
        for (; i < r.value.len; i++) {
            uint8_t c = r.value.ptr[i];
            v[i] = (c >= 'a' && c <= 'z') ? static_cast<uint8_t>(c - 'a' + 'A') : c;
        }
    }
    return WEIR_OK;
}

int snapshot() { return WEIR_OK; }
int restore() { return WEIR_OK; }

} // namespace

WEIR_OPERATOR(init, process, snapshot, restore)
