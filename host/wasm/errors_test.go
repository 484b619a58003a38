package wasm

import (
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
