// keyedcount in C++: counts the records of each key and, for every input
// record in order, emits key=the record's key, value=the key's new count in
// decimal, with the input record's timestamp. No config.
//
// State (the same bytes as every other language's keyedcount): the keyed
// layout of abi/ABI.md §8, "WKS1" then one entry per key in ascending
// bytewise order of the key, its value the count as u64 LE. weir can then
// redistribute the counts by key when the operator's parallelism changes on
// a restore, so partition its input by key.
//
// The C SDK (guests/c/weir.h) serves C++ as it is: build with clang++ and
// -fno-exceptions (guests/README.md, "C++").
#include "weir.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <unordered_map>
#include <vector>

namespace {

std::string str(weir_bytes b) { return std::string(reinterpret_cast<const char *>(b.ptr), b.len); }

weir_bytes bytes(const std::string &s) { return {reinterpret_cast<const uint8_t *>(s.data()), static_cast<uint32_t>(s.size())}; }

class KeyedCount {
  public:
    // count adds one to key's count and returns the new count.
    uint64_t count(weir_bytes key) { return ++counts_[str(key)]; }

    // snapshot writes the counts in the keyed layout, keys in ascending
    // bytewise order (std::string compares as unsigned bytes).
    int snapshot() const {
        std::vector<const std::pair<const std::string, uint64_t> *> sorted;
        sorted.reserve(counts_.size());
        for (const auto &kv : counts_) sorted.push_back(&kv);
        std::sort(sorted.begin(), sorted.end(), [](auto a, auto b) { return a->first < b->first; });
        if (weir_keyed_state_begin()) return WEIR_ERR;
        for (const auto *kv : sorted) {
            uint64_t n = kv->second; // wasm is little-endian
            weir_bytes value = {reinterpret_cast<const uint8_t *>(&n), 8};
            if (weir_keyed_state_put(bytes(kv->first), value)) return WEIR_ERR;
        }
        return weir_keyed_state_end();
    }

    // restore replaces the counts with a keyed state's, whose entries come
    // in any order (weir merges several subtasks' on a rescale); a key
    // twice (never in a state weir wrote): the last entry wins.
    int restore() {
        std::unordered_map<std::string, uint64_t> restored;
        if (weir_keyed_state_read(restore_entry, &restored)) return WEIR_ERR;
        counts_.swap(restored);
        return WEIR_OK;
    }

  private:
    static int restore_entry(weir_bytes key, weir_bytes value, void *ctx) {
        if (value.len != 8) {
            static std::string msg;
            msg = "keyedcount: a count of " + std::to_string(value.len) + " bytes, want 8";
            return weir_fail(msg.c_str());
        }
        uint64_t n;
        std::memcpy(&n, value.ptr, 8);
        (*static_cast<std::unordered_map<std::string, uint64_t> *>(ctx))[str(key)] = n;
        return WEIR_OK;
    }

    std::unordered_map<std::string, uint64_t> counts_;
};

KeyedCount op;

int init(weir_bytes) { return WEIR_OK; }

int process(uint32_t, weir_batch *in) {
    weir_record r;
    while (weir_batch_next(in, &r)) {
        std::string n = std::to_string(op.count(r.key));
        if (weir_emit(0, r.key, bytes(n), r.timestamp)) return WEIR_ERR;
    }
    return WEIR_OK;
}

int snapshot() { return op.snapshot(); }
int restore() { return op.restore(); }

} // namespace

WEIR_OPERATOR(init, process, snapshot, restore)
