// emit: the second file of the C++ probe (probe.cpp), which includes weir.h
// too and emits through the runtime probe.cpp's WEIR_OPERATOR flushes.
#include "weir.h"

#include <string>

int probe_emit(const weir_record &r) {
    std::string v = "<" + std::string(reinterpret_cast<const char *>(r.value.ptr), r.value.len) + ">";
    weir_bytes value = {reinterpret_cast<const uint8_t *>(v.data()), static_cast<uint32_t>(v.size())};
    return weir_emit(0, r.key, value, r.timestamp);
}
