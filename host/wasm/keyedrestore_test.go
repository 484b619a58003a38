package wasm

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/weirhq/weir/abi"
)

// TestGoSDKReadKeyedStateStreams: weir.ReadKeyedState reads a keyed state
// entry by entry as it arrives (it once read the whole state into memory
// first, which took a restore of 850 000 keys past a 64 MiB limit), so
// entries that straddle the SDK's 64 KiB chunks, entries larger than a
// chunk and short reads of the host all come back whole: keyedcount
// restores them and snapshots the same bytes again.
func TestGoSDKReadKeyedStateStreams(t *testing.T) {
	e := newEngine(t)
	wasm := goGuest(t, "keyedcount")
	var keys []string
	for i, n := range []int{1, 70_000, 13, 65_536 - 16, 0, 200_000, 7, 65_536, 3} {
		keys = append(keys, fmt.Sprintf("%02d", i)+strings.Repeat("k", n))
	}
	for i := range 5000 {
		keys = append(keys, fmt.Sprintf("user-%07d", i))
	}
	slices.Sort(keys) // keyedcount snapshots its keys sorted
	state := []byte(abi.KeyedStateMagic)
	for i, k := range keys {
		state = abi.AppendKeyedEntry(state, []byte(k), binary.LittleEndian.AppendUint64(nil, uint64(i+1)))
	}
	inst := instantiate(t, e, "kc", wasm, Limits{}, InstanceConfig{})
	if err := inst.Restore(context.Background(), iotest.HalfReader(bytes.NewReader(state))); err != nil {
		t.Fatal(err)
	}
	var again bytes.Buffer
	if err := inst.Snapshot(context.Background(), &again); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(again.Bytes(), state) {
		t.Fatalf("snapshot after restore: %d bytes, want the %d restored", again.Len(), len(state))
	}
}

// TestGoSDKReadKeyedStateMalformed: a keyed state cut short, or with a
// length past its end (4 GiB), fails the restore with the words of the
// layout's own check (abi.KeyedEntries, which the host applies to every
// snapshot), never a trap or an allocation of the length; a state too
// short for the magic is in another layout.
func TestGoSDKReadKeyedStateMalformed(t *testing.T) {
	e := newEngine(t)
	wasm := goGuest(t, "keyedcount")
	one := abi.AppendKeyedEntry([]byte(abi.KeyedStateMagic), []byte("k"), make([]byte, 8))
	huge := binary.LittleEndian.AppendUint32(append(bytes.Clone(one), 0, 0, 0, 0), 0xffff_fff0)
	huge = append(huge, make([]byte, 8+100)...)
	for _, c := range []struct {
		name  string
		state []byte
		want  string
	}{
		{"header cut", one[:len(one)-8-1-3], ""},
		{"entry cut", one[:len(one)-1], ""},
		{"second header cut", append(bytes.Clone(one), 1, 0, 0), ""},
		{"length past the end", huge, ""},
		{"shorter than the magic", []byte("WK"), "weir: the state to restore is in a layout of its own"},
	} {
		want := c.want
		if want == "" {
			err := abi.KeyedEntries(c.state, func(_, _ []byte) error { return nil })
			if err == nil {
				t.Fatalf("%s: abi.KeyedEntries takes it", c.name)
			}
			want = "weir: " + err.Error()
		}
		inst := instantiate(t, e, "kc", wasm, Limits{}, InstanceConfig{})
		err := inst.Restore(context.Background(), bytes.NewReader(c.state))
		var oe *OperatorError
		if !errors.As(err, &oe) || !strings.HasPrefix(oe.Message, want) {
			t.Errorf("%s: got %v (%T), want an operator error %q", c.name, err, err, want)
		}
	}
}
