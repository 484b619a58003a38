// filter in C++: keeps the records whose value contains the config bytes.
#include "weir.h"

#include <string>
#include <string_view>

namespace {

std::string_view view(weir_bytes b) { return {reinterpret_cast<const char *>(b.ptr), b.len}; }

// The substring to keep, copied out of the config buffer.
std::string needle;

int init(weir_bytes config) {
    if (config.len == 0) return weir_fail("filter: config must be the substring to keep");
    needle = view(config);
    return WEIR_OK;
}

int process(uint32_t, weir_batch *in) {
    weir_record r;
    while (weir_batch_next(in, &r))
        if (view(r.value).find(needle) != std::string_view::npos && weir_emit(0, r.key, r.value, r.timestamp))
            return WEIR_ERR;
    return WEIR_OK;
}

int snapshot() { return WEIR_OK; }
int restore() { return WEIR_OK; }

} // namespace

WEIR_OPERATOR(init, process, snapshot, restore)
