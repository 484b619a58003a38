// An operator as a user writes it outside the repository, in C++: no
// weir.h beside it; sourcebuild puts the SDK's on the include path and
// builds it with clang++ and libc++.
#include "weir.h"

#include <algorithm>
#include <string>

namespace {

class Shout {
  public:
    std::string operator()(weir_bytes v) const {
        std::string s(reinterpret_cast<const char *>(v.ptr), v.len);
        std::transform(s.begin(), s.end(), s.begin(), [](char c) { return c >= 'a' && c <= 'z' ? char(c - 32) : c; });
        return s;
    }
};

int init(weir_bytes) { return WEIR_OK; }

int process(uint32_t, weir_batch *in) {
    Shout shout;
    weir_record r;
    while (weir_batch_next(in, &r)) {
        std::string v = shout(r.value);
        weir_bytes value = {reinterpret_cast<const uint8_t *>(v.data()), static_cast<uint32_t>(v.size())};
        if (weir_emit(0, r.key, value, r.timestamp)) return WEIR_ERR;
    }
    return WEIR_OK;
}

int snapshot() { return WEIR_OK; }
int restore() { return WEIR_OK; }

} // namespace

WEIR_OPERATOR(init, process, snapshot, restore)
