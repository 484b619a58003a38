package wasm

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/weirhq/weir/abi"
)

func TestRecordSummary(t *testing.T) {
	long := strings.Repeat("x", 47) + "é" + strings.Repeat("y", 50) // é straddles byte 48
	for _, c := range []struct {
		r    abi.Record
		want string
	}{
		{abi.Record{Key: []byte("user-17"), Value: []byte(`{"amount": 1e999}`)}, `key "user-17", value "{\"amount\": 1e999}"`},
		{abi.Record{Value: []byte("line")}, `value "line"`},
		{abi.Record{Key: []byte("k")}, `key "k", value ""`},
		{abi.Record{Value: []byte{0, 0xff, '\n'}}, `value "\x00\xff\n"`},
		{abi.Record{Value: []byte(long)}, `value "` + strings.Repeat("x", 47) + `"… (99 bytes)`},
		{abi.Record{Key: []byte(long), Value: []byte("v")}, `key "` + strings.Repeat("x", 47) + `"…, value "v"`},
	} {
		if got := recordSummary(c.r); got != c.want {
			t.Errorf("recordSummary(%q, %q) = %s, want %s", c.r.Key, c.r.Value, got, c.want)
		}
	}
}

func TestMemoryNote(t *testing.T) {
	for _, c := range []struct {
		size, limit, refused uint64
		want                 string
	}{
		{0, 0, 0, ""},
		{63 << 20, 64 << 20, 0, " (its memory had grown to 63 MiB of its 64 MiB limit)"},
		{2 << 20, 64 << 20, 1 << 30, " (memory.grow of 16384 pages (1 GiB) refused: the operator's memory limit (limits.memory) is 64 MiB and it had 2 MiB)"},
		{64 << 20, 64 << 20, PageSize, " (memory.grow of 1 page (64 KiB) refused: the operator's memory limit (limits.memory) is 64 MiB and it had 64 MiB)"},
		{2 * PageSize, 4 << 30, 8193 * PageSize, " (memory.grow of 8193 pages (512.06 MiB) refused: the operator's memory limit (limits.memory) is 4 GiB and it had 128 KiB)"},
		{3 << 19, 2 << 20, 1<<30 + PageSize, " (memory.grow of 16385 pages (1 GiB) refused: the operator's memory limit (limits.memory) is 2 MiB and it had 1.5 MiB)"},
	} {
		if got := memoryNote(c.size, c.limit, c.refused); got != c.want {
			t.Errorf("memoryNote(%d, %d, %d) = %q, want %q", c.size, c.limit, c.refused, got, c.want)
		}
	}
}

// An out-of-bounds access is told by the runtime's error that wazero
// wraps, whole, not by words anywhere in the message's first line: a host
// function's panic whose error says them is not the trap.
func TestOutOfBounds(t *testing.T) {
	const stack = "\nwasm stack trace:\n\tdepth(i32) i32\n\tdepth(i32) i32"
	for _, c := range []struct {
		err  error
		want bool
	}{
		{fmt.Errorf("wasm error: %w"+stack, errors.New("out of bounds memory access")), true},
		{fmt.Errorf("wasm error: %w"+stack, errors.New("unreachable")), false},
		{fmt.Errorf("%w (recovered by wazero)"+stack, errors.New("read guest memory: out of bounds memory access at 0x10")), false},
		{errors.New("wasm error: out of bounds memory access" + stack), false},
	} {
		if got := outOfBounds(c.err); got != c.want {
			t.Errorf("outOfBounds(%q) = %v, want %v", c.err, got, c.want)
		}
	}
}
