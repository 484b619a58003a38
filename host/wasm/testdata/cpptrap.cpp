// cpptrap: a C++ test operator built with its function names kept (the
// name section), for TestTrapStackCppNames. A record whose value is "trap"
// aborts (weir_abort) in a member function of a class template, which an
// overload of process called, so the trap's stack names functions in the
// Itanium C++ mangling: "_Z7processPKhm" for process(unsigned char const*,
// unsigned long) among them; other records pass through.
//
// guests/build.sh builds it as it builds the C++ guests (clang++ 14,
// wasi-libc and libc++, -fno-exceptions), but -O1, its name section kept,
// and linked with -Wl,-no-demangle: wasm-ld otherwise writes the names it
// demangled itself, and a stack trace shows mangled names only for a
// module linked so or by a linker that does not demangle.
#include "weir.h"

#include <cstddef>
#include <string_view>

namespace cpptrap {

template <typename T>
struct Checked {
    T limit;

    // noinline: each function keeps its frame in the trap's stack.
    __attribute__((noinline)) void check(std::string_view v) const {
        if (v == "trap") weir_abort("cpptrap: trap");
        if (v.size() > limit) weir_abort("cpptrap: too long");
    }
};

} // namespace cpptrap

__attribute__((noinline)) void process(const unsigned char *p, std::size_t n) {
    cpptrap::Checked<std::size_t>{1024}.check({reinterpret_cast<const char *>(p), n});
}

static int init(weir_bytes config) {
    (void)config;
    return WEIR_OK;
}

static int process(uint32_t port, weir_batch *in) {
    (void)port;
    weir_record r;
    while (weir_batch_next(in, &r)) {
        process(r.value.ptr, r.value.len);
        if (weir_emit(0, r.key, r.value, r.timestamp)) return WEIR_ERR;
    }
    return WEIR_OK;
}

static int snapshot() { return WEIR_OK; }
static int restore() { return WEIR_OK; }

WEIR_OPERATOR(init, process, snapshot, restore)
