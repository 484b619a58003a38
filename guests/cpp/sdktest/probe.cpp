// probe: what a C++ operator needs of the C SDK beyond the examples, for
// guests/conformance's cpp_test.go. Built from two files, this one and
// emit.cpp, which both include weir.h: they link (the header's exports are
// weak in C++) and share one runtime (emit.cpp's emits reach the host).
//   - a record whose value is "alloc" asks operator new[] for 1 GiB, past
//     the memory limit: weir.h's operator new fails the call with
//     "weir: operator new of 1073741824 bytes failed: out of memory"
//     (libc++'s, built without exceptions, returns NULL);
//   - "aligned" does the same with an over-aligned type (operator new
//     with std::align_val_t);
//   - "grow" appends to a std::string until memory runs out;
//   - "nothrow" asks new (std::nothrow) for 1 GiB and emits "nothrow: null"
//     when it returns NULL, as it should;
//   - every other record goes to output port 0 through emit.cpp, its value
//     with "<" and ">" around it.
#include "weir.h"

#include <new>
#include <string>

int probe_emit(const weir_record &r); // emit.cpp

namespace {

struct alignas(64) Line {
    char b[64];
};

// sink keeps what is allocated, so that the allocation is not optimized
// away.
void *volatile sink;

bool is(weir_bytes b, const char *s) { return std::string(reinterpret_cast<const char *>(b.ptr), b.len) == s; }

int init(weir_bytes) { return WEIR_OK; }

int process(uint32_t, weir_batch *in) {
    weir_record r;
    while (weir_batch_next(in, &r)) {
        if (is(r.value, "alloc")) {
            char *p = new char[1u << 30];
            p[0] = 1;
            sink = p;
        } else if (is(r.value, "aligned")) {
            Line *p = new Line[1u << 24];
            p[0].b[0] = 1;
            sink = p;
        } else if (is(r.value, "grow")) {
            static std::string s;
            for (;;) {
                s.append(1 << 20, 'x');
                sink = &s[0];
            }
        } else if (is(r.value, "nothrow")) {
            char *p = new (std::nothrow) char[1u << 30];
            sink = p;
            const char *v = p ? "nothrow: not null" : "nothrow: null";
            if (weir_emit(0, r.key, weir_bytes_of(v), r.timestamp)) return WEIR_ERR;
        } else if (probe_emit(r)) {
            return WEIR_ERR;
        }
    }
    return WEIR_OK;
}

int snapshot() { return WEIR_OK; }
int restore() { return WEIR_OK; }

} // namespace

WEIR_OPERATOR(init, process, snapshot, restore)
