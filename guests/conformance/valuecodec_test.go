package conformance

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/weirhq/weir/abi"
	"github.com/weirhq/weir/host/wasm"
)

// le builds the values of TestAssemblyScriptValueCodec: little-endian, as
// the AssemblyScript SDK's ValueWriter writes them.
var le = binary.LittleEndian

// probeV1 is a version 1 value of the AssemblyScript probe's "value-codec"
// config: u8 1, u64 count.
func probeV1(count uint64) []byte { return le.AppendUint64([]byte{1}, count) }

// probeV2 is a version 2 value: u8 2, u64 count, u32 n, n byte strings
// (u32 length, bytes).
func probeV2(count uint64, items ...string) []byte {
	b := le.AppendUint64([]byte{2}, count)
	b = le.AppendUint32(b, uint32(len(items)))
	for _, it := range items {
		b = le.AppendUint32(b, uint32(len(it)))
		b = append(b, it...)
	}
	return b
}

// probeAll is a version 9 value, one of each type ValueWriter writes: u8,
// u16, u32, u64, i64, f64, a byte string, then the string s, its u32
// length given as n (len(s) when n is -1).
func probeAll(s string, n int) []byte {
	b := []byte{9, 0xab}
	b = le.AppendUint16(b, 0xbeef)
	b = le.AppendUint32(b, 0xdeadbeef)
	b = le.AppendUint64(b, 0xfedcba9876543210)
	b = le.AppendUint64(b, uint64(math.MaxUint64-1)) // i64 -2
	b = le.AppendUint64(b, math.Float64bits(-1.5))
	b = le.AppendUint32(b, 2)
	b = append(b, 0, 0xff)
	if n < 0 {
		n = len(s)
	}
	b = le.AppendUint32(b, uint32(n))
	return append(b, s...)
}

// keyed is keyed state of the key and value pairs kv.
func keyed(kv ...[]byte) []byte {
	s := []byte(abi.KeyedStateMagic)
	for i := 0; i < len(kv); i += 2 {
		s = abi.AppendKeyedEntry(s, kv[i], kv[i+1])
	}
	return s
}

// TestAssemblyScriptValueCodec runs the AssemblyScript SDK's ValueWriter
// and ValueReader on the host, through the probe's "value-codec" config
// (a versioned record per key, as guests/README.md shows): every type
// reads back what Go wrote and writes it again bit for bit, over a
// record's pointer and length or over a Uint8Array; a version 2 build
// reads version 1 values, in records and in a restore; the values go
// into keyed state and come back; and a read past a value's end fails the
// call, naming what was read, where, and the value's length, where it
// once read whatever followed the value in memory.
func TestAssemblyScriptValueCodec(t *testing.T) {
	ctx := context.Background()
	e := newEngine(t)
	m := loadProbe(t, e, "assemblyscript")
	newInst := func() *wasm.Instance {
		inst, err := m.Instantiate(ctx, wasm.InstanceConfig{Config: []byte("value-codec"), Outputs: 2, WholeBatches: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { inst.Close(ctx) })
		return inst
	}
	batch := func(kv ...[]byte) []byte {
		var b abi.Builder
		for i := 0; i < len(kv); i += 2 {
			b.Add(kv[i], kv[i+1], int64(i/2))
		}
		return bytes.Clone(b.Bytes())
	}
	var got []emission
	collect := func(port int, b []byte) error {
		got = append(got, emission{port: port, batch: b})
		return nil
	}

	// The long byte string and string grow the writer past its 16 bytes.
	long := strings.Repeat("long", 300)
	b2 := probeV2(7, "x", "", "ключ", long)
	inst := newInst()
	err := inst.Process(ctx, 0, batch(
		[]byte("a"), probeV1(5),
		[]byte("b"), b2,
		[]byte("copy"), probeV2(3, "c"),
		[]byte("all"), probeAll("ключ €"+long, -1),
		[]byte("copy"), probeAll("", -1),
		[]byte("a"), probeV2(math.MaxUint64, "y"),
	), collect)
	if err != nil {
		t.Fatal(err)
	}
	sameEmissions(t, "values", got, []emission{{port: 0, batch: batch(
		[]byte("a"), probeV2(5),
		[]byte("b"), b2,
		[]byte("copy"), probeV2(3, "c"),
		[]byte("all"), probeAll("ключ €"+long, -1),
		[]byte("copy"), probeAll("", -1),
		[]byte("a"), probeV2(math.MaxUint64, "y"),
	)}})

	wantState := keyed([]byte("a"), probeV2(math.MaxUint64, "y"), []byte("b"), b2, []byte("copy"), probeV2(3, "c"))
	var snap bytes.Buffer
	if err := inst.Snapshot(ctx, &snap); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(snap.Bytes(), wantState) {
		t.Errorf("snapshot:\n got % x\nwant % x", snap.Bytes(), wantState)
	}

	// A state of versions 1 and 2 restores, and snapshots as version 2.
	inst = newInst()
	if err := inst.Restore(ctx, bytes.NewReader(keyed([]byte("b"), b2, []byte("a"), probeV1(9)))); err != nil {
		t.Fatal(err)
	}
	snap.Reset()
	if err := inst.Snapshot(ctx, &snap); err != nil {
		t.Fatal(err)
	}
	if want := keyed([]byte("b"), b2, []byte("a"), probeV2(9)); !bytes.Equal(snap.Bytes(), want) {
		t.Errorf("snapshot after a restore of versions 1 and 2:\n got % x\nwant % x", snap.Bytes(), want)
	}

	// A read past a value's end traps with the SDK's message, at the
	// record it read; what the operator decides itself (unknown version,
	// bytes left over, which remaining and done tell) fails the call with
	// its own.
	u64Short := append([]byte{2}, 1, 2, 3)
	lenShort := le.AppendUint32(le.AppendUint64([]byte{2}, 1), 1)
	lenShort = append(lenShort, 0, 0)
	for _, c := range []struct {
		name       string
		key, value []byte
		trap       bool
		want       string
	}{
		{"u64 short", []byte("a"), u64Short, true,
			"weir: value reader: u64 at offset 1 passes the value's end (4 bytes)"},
		{"u64 short in a Uint8Array", []byte("copy"), u64Short, true,
			"weir: value reader: u64 at offset 1 passes the value's end (4 bytes)"},
		{"empty", []byte("a"), nil, true,
			"weir: value reader: u8 at offset 0 passes the value's end (0 bytes)"},
		{"length short", []byte("a"), lenShort, true,
			"weir: value reader: u32 length at offset 13 passes the value's end (15 bytes)"},
		{"byte string long", []byte("a"), append(probeV2(1, "xy")[:13], 0x2c, 1, 0, 0, 'x', 'y'), true,
			"weir: value reader: byte string of 300 bytes at offset 17 passes the value's end (19 bytes)"},
		{"string long", []byte("copy"), probeAll("abc", 100), true,
			"weir: value reader: string of 100 bytes at offset 42 passes the value's end (45 bytes)"},
		{"string length past 4 GiB", []byte("a"), probeAll("abc", math.MaxUint32), true,
			"weir: value reader: string of 4294967295 bytes at offset 42 passes the value's end (45 bytes)"},
		{"f64 short", []byte("a"), probeAll("", -1)[:25], true,
			"weir: value reader: f64 at offset 24 passes the value's end (25 bytes)"},
		{"bytes left over", []byte("a"), append(probeV1(1), 0, 0), false,
			"probe: 2 bytes after a version 1 value"},
		{"unknown version", []byte("a"), []byte{7}, false, "probe: value version 7"},
	} {
		got = nil
		err := newInst().Process(ctx, 0, batch([]byte("ok"), probeV1(1), c.key, c.value), collect)
		var te *wasm.TrapError
		var oe *wasm.OperatorError
		switch {
		case c.trap && (!errors.As(err, &te) || te.RecordIndex != 1 || te.Message != c.want):
			t.Errorf("%s: %v, want a trap at record 2 of the batch with the message %q", c.name, err, c.want)
		case !c.trap && (!errors.As(err, &oe) || oe.RecordIndex != 1 || oe.Message != c.want):
			t.Errorf("%s: %v, want an operator error at record 2 of the batch with the message %q", c.name, err, c.want)
		case len(got) != 0:
			t.Errorf("%s: a failed call emitted %d batches", c.name, len(got))
		}
	}

	// So does a restore of a value cut short.
	err = newInst().Restore(ctx, bytes.NewReader(keyed([]byte("a"), probeV1(1), []byte("b"), probeV2(1, "xyz")[:18])))
	const want = "weir: value reader: byte string of 3 bytes at offset 17 passes the value's end (18 bytes)"
	if te := (*wasm.TrapError)(nil); !errors.As(err, &te) || te.Export != abi.ExportRestore || te.Message != want {
		t.Errorf("restore of a value cut short: %v, want a trap in %s with the message %q", err, abi.ExportRestore, want)
	}
}
