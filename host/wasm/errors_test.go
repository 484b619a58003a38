package wasm

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

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

// A deadline's message says to raise limits.memory where the memory had
// grown near its limit: a trial's restore failed with "(its memory had
// grown to 63 MiB of its 64 MiB limit)" and needed both settings raised.
func TestDeadlineMemoryAdvice(t *testing.T) {
	for _, c := range []struct {
		e    DeadlineError
		want string
	}{
		{DeadlineError{Operator: "agg[0]", Export: abi.ExportRestore, Timeout: time.Minute, RecordIndex: -1, MemorySize: 63 << 20, MemoryLimit: 64 << 20},
			"operator agg[0]: weir_restore: exceeded the 1m0s snapshot deadline (stuck, or its state is too large to read in time; if merely slow, raise limits.snapshot-timeout)" +
				" (its memory had grown to 63 MiB of its 64 MiB limit: raise limits.memory too)"},
		{DeadlineError{Operator: "agg[0]", Export: abi.ExportSnapshot, Timeout: time.Minute, RecordIndex: -1},
			"operator agg[0]: weir_snapshot: exceeded the 1m0s snapshot deadline (stuck, or its state is too large to write in time; if merely slow, raise limits.snapshot-timeout)"},
		{DeadlineError{Operator: "op", Export: abi.ExportProcess, Timeout: time.Second, RecordIndex: -1, MemorySize: 2 << 20, MemoryLimit: 64 << 20, GrowRefused: 1 << 30},
			"operator op: weir_process: exceeded the 1s call deadline (stuck, or much slower on this record than on earlier ones; if merely slow, raise limits.timeout)" +
				" (memory.grow of 16384 pages (1 GiB) refused: the operator's memory limit (limits.memory) is 64 MiB and it had 2 MiB)"},
	} {
		if got := c.e.Error(); got != c.want {
			t.Errorf("got  %s\nwant %s", got, c.want)
		}
	}
}
