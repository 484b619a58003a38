package conformance

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/weirhq/weir/abi"
	"github.com/weirhq/weir/host/wasm"
)

// A call is one batch for one input port.
type call struct {
	port  int
	batch []byte
}

// An emission is one batch an operator emitted during call number call.
type emission struct {
	call  int
	port  int
	batch []byte
}

// words are the vocabulary of the generated values: ASCII in both cases,
// the filter's needle inside and at the edges of words, UTF-8 and bytes
// that are not UTF-8.
var words = []string{"an", "banana", "Man", "plan", "cat", "dog", "CAT", "x", "a-z", "ümlaut", "\xff\xfe", "zz", "ana"}

// spaces are the separators between words: every ASCII whitespace byte
// wordcount splits on, and runs of them.
var spaces = []string{" ", "\t", "\n", "\r", "  ", " \t\r\n"}

// inputs generates a seeded sequence of batches for an example: join gets
// both ports, the others port 0. Some batches are empty; keys repeat and
// may be empty; timestamps may be negative.
func inputs(example string, seed uint64) []call {
	rng := rand.New(rand.NewPCG(seed, 0x77656972))
	calls := make([]call, 40)
	for i := range calls {
		var b abi.Builder
		n := rng.IntN(12)
		if rng.IntN(10) == 0 {
			n = 0
		}
		for range n {
			var v strings.Builder
			if rng.IntN(3) == 0 {
				v.WriteString(spaces[rng.IntN(len(spaces))])
			}
			for w := rng.IntN(6); w > 0; w-- {
				v.WriteString(words[rng.IntN(len(words))])
				if w > 1 || rng.IntN(4) == 0 {
					v.WriteString(spaces[rng.IntN(len(spaces))])
				}
			}
			key := ""
			if k := rng.IntN(5); k > 0 {
				key = fmt.Sprintf("k%d", k)
			}
			b.Add([]byte(key), []byte(v.String()), rng.Int64N(2000)-500)
		}
		port := 0
		if example == "join" {
			port = rng.IntN(2)
		}
		calls[i] = call{port: port, batch: bytes.Clone(b.Bytes())}
	}
	return calls
}

// feed runs calls[from:to] through inst and appends what it emitted to
// out. Every SDK emits at most one batch per output port per call.
func feed(t *testing.T, inst *wasm.Instance, calls []call, from, to int, out []emission) []emission {
	t.Helper()
	for i := from; i < to; i++ {
		ports := map[int]bool{}
		err := inst.Process(context.Background(), calls[i].port, calls[i].batch, func(port int, batch []byte) error {
			if ports[port] {
				return fmt.Errorf("a second batch for output port %d in one call", port)
			}
			ports[port] = true
			out = append(out, emission{call: i, port: port, batch: batch})
			return nil
		})
		if err != nil {
			t.Fatalf("%s: call %d: %v", inst.Name(), i, err)
		}
	}
	return out
}

// shortReader returns at most n bytes per Read.
type shortReader struct {
	r io.Reader
	n int
}

func (s *shortReader) Read(p []byte) (int, error) {
	return s.r.Read(p[:min(len(p), s.n)])
}

// snapshot returns inst's state stream.
func snapshot(t *testing.T, inst *wasm.Instance) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := inst.Snapshot(context.Background(), &buf); err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	return buf.Bytes()
}

// sameEmissions fails t at the first difference between two transcripts.
func sameEmissions(t *testing.T, what string, got, want []emission) {
	t.Helper()
	for i := range min(len(got), len(want)) {
		g, w := got[i], want[i]
		if g.call != w.call || g.port != w.port || !bytes.Equal(g.batch, w.batch) {
			gr, _ := abi.DecodeBatch(g.batch)
			wr, _ := abi.DecodeBatch(w.batch)
			t.Fatalf("%s: emission %d differs:\n got call %d port %d %s\nwant call %d port %d %s",
				what, i, g.call, g.port, show(gr), w.call, w.port, show(wr))
		}
	}
	if len(got) != len(want) {
		t.Fatalf("%s: %d emissions, want %d", what, len(got), len(want))
	}
}

func show(rs []abi.Record) string {
	var s strings.Builder
	for _, r := range rs {
		fmt.Fprintf(&s, "\n  %q=%q@%d", r.Key, r.Value, r.Timestamp)
	}
	return s.String()
}

// TestSameOutput runs every language's build of every example on the same
// seeded input and requires the same output batches, call by call, as Go's.
func TestSameOutput(t *testing.T) {
	e := newEngine(t)
	for _, ex := range examples {
		t.Run(ex, func(t *testing.T) {
			calls := inputs(ex, 1)
			want := feed(t, start(t, load(t, e, languages[0], ex), ex), calls, 0, len(calls), nil)
			if len(want) == 0 {
				t.Fatal("the reference emitted nothing: the input exercises nothing")
			}
			for _, lang := range languagesWith(ex)[1:] {
				got := feed(t, start(t, load(t, e, lang, ex), ex), calls, 0, len(calls), nil)
				sameEmissions(t, lang.name, got, want)
			}
		})
	}
}

// TestSnapshotRestore takes snapshots at seeded random points and restores
// each into a fresh instance of the next language in the list, so every
// snapshot is written by one language and read by another. The output must
// equal an uninterrupted run's, and the snapshot taken at a point must be
// byte-identical whichever language wrote it: the examples share their
// state formats (guests/README.md).
func TestSnapshotRestore(t *testing.T) {
	e := newEngine(t)
	for _, ex := range examples {
		t.Run(ex, func(t *testing.T) {
			languages := languagesWith(ex)
			mods := make([]*wasm.Module, len(languages))
			for i, lang := range languages {
				mods[i] = load(t, e, lang, ex)
			}
			for seed := uint64(1); seed <= 3; seed++ {
				calls := inputs(ex, 100+seed)
				rng := rand.New(rand.NewPCG(seed, 1))
				points := rng.Perm(len(calls) - 1)[:5]
				slices.Sort(points)
				for i := range points {
					points[i]++ // after at least one call
				}

				// The reference: Go, uninterrupted, snapshotting at each point.
				ref := start(t, mods[0], ex)
				var want []emission
				wantSnaps := make([][]byte, len(points))
				from := 0
				for k, p := range points {
					want = feed(t, ref, calls, from, p, want)
					wantSnaps[k] = snapshot(t, ref)
					from = p
				}
				want = feed(t, ref, calls, from, len(calls), want)

				for first := range languages {
					// Recovery with no state yet: an empty stream.
					cur := first
					inst := start(t, mods[cur], ex)
					if err := inst.Restore(context.Background(), bytes.NewReader(nil)); err != nil {
						t.Fatalf("%s: restore from an empty stream: %v", languages[cur].name, err)
					}
					var got []emission
					from := 0
					for k, p := range points {
						got = feed(t, inst, calls, from, p, got)
						snap := snapshot(t, inst)
						if !bytes.Equal(snap, wantSnaps[k]) {
							t.Fatalf("seed %d: %s's snapshot after call %d differs from go's:\n got %q\nwant %q",
								seed, languages[cur].name, p, snap, wantSnaps[k])
						}
						inst.Close(context.Background())
						cur = (cur + 1) % len(languages)
						inst = start(t, mods[cur], ex)
						// Short reads split fields: a short read is not the end.
						if err := inst.Restore(context.Background(), &shortReader{bytes.NewReader(snap), 7}); err != nil {
							t.Fatalf("seed %d: %s restoring a snapshot after call %d: %v", seed, languages[cur].name, p, err)
						}
						from = p
					}
					got = feed(t, inst, calls, from, len(calls), got)
					sameEmissions(t, fmt.Sprintf("seed %d, starting with %s", seed, languages[first].name), got, want)
				}
			}
		})
	}
}

// TestFilterConfigError: an empty filter config fails init with the
// guest's own message, in every language.
func TestFilterConfigError(t *testing.T) {
	e := newEngine(t)
	const msg = "filter: config must be the substring to keep"
	for _, lang := range languagesWith("filter") {
		m := load(t, e, lang, "filter")
		inst, err := m.Instantiate(context.Background(), wasm.InstanceConfig{})
		if err == nil {
			inst.Close(context.Background())
			t.Fatalf("%s: filter with an empty config started", lang.name)
		}
		var oe *wasm.OperatorError
		if !errors.As(err, &oe) || oe.Export != abi.ExportInit || oe.Message != msg {
			t.Errorf("%s: init error %v (%T), want an operator error from %s with message %q", lang.name, err, err, abi.ExportInit, msg)
		}
	}
}

// TestBadStateFails: restoring a truncated snapshot, one with an unknown
// version byte, or one with bytes after its end, fails the restore in
// every language.
func TestBadStateFails(t *testing.T) {
	e := newEngine(t)
	for _, ex := range []string{"wordcount", "join", "keyedcount"} {
		calls := inputs(ex, 7)
		ref := start(t, load(t, e, languages[0], ex), ex)
		feed(t, ref, calls, 0, len(calls), nil)
		snap := snapshot(t, ref)
		bad := map[string][]byte{
			"truncated":       snap[:len(snap)-1],
			"unknown version": append([]byte{9}, snap[1:]...),
			"trailing bytes":  append(bytes.Clone(snap), 0),
		}
		for _, lang := range languagesWith(ex) {
			m := load(t, e, lang, ex)
			for what, state := range bad {
				inst := start(t, m, ex)
				if err := inst.Restore(context.Background(), bytes.NewReader(state)); err == nil {
					t.Errorf("%s %s: restoring a %s snapshot succeeded", lang.name, ex, what)
				}
				inst.Close(context.Background())
			}
		}
	}
}

// TestRestoreUnreadState: a restore that leaves state unread fails with a
// message that says what to do, the same in every SDK: an operator without
// restore (uppercase in Rust and AssemblyScript, whose default reads
// nothing) is told to implement it; one whose restore returns early (C's
// and Go's uppercase, which read nothing; any wordcount given a byte more
// than it wrote) to read back everything snapshot writes. WAT has no SDK:
// its uppercase takes any state.
func TestRestoreUnreadState(t *testing.T) {
	const (
		trailing  = "weir: state has trailing bytes: restore returned before reading all of it (read back everything snapshot writes)"
		noRestore = "weir: the operator has state to restore but does not implement restore (implement restore to read back what snapshot writes)"
	)
	e := newEngine(t)
	ref := start(t, load(t, e, languages[0], "wordcount"), "wordcount")
	feed(t, ref, inputs("wordcount", 7), 0, 3, nil)
	wordcount := append(snapshot(t, ref), 0)
	for _, lang := range languages {
		if lang.name == "wat" {
			continue
		}
		upper := trailing
		if lang.name == "rust" || lang.name == "assemblyscript" {
			upper = noRestore
		}
		for _, c := range []struct {
			example string
			state   []byte
			want    string
		}{
			{"uppercase", []byte("state"), upper},
			{"wordcount", wordcount, trailing},
		} {
			if !lang.has(c.example) {
				continue
			}
			inst := start(t, load(t, e, lang, c.example), c.example)
			err := inst.Restore(context.Background(), bytes.NewReader(c.state))
			var oe *wasm.OperatorError
			if !errors.As(err, &oe) || oe.Export != abi.ExportRestore || oe.Message != c.want {
				t.Errorf("%s %s: restore error %v (%T), want an operator error from %s with message %q", lang.name, c.example, err, err, abi.ExportRestore, c.want)
			}
		}
	}
}

// TestNotKeyedState: a state in a layout of its own (here wordcount's,
// version byte first), restored into a build that reads keyed state, as
// when an operator's new build writes keyed state and the checkpoint is
// of the old one, fails in every SDK with a message that says what
// happened and what to do, not only that the layout is wrong. WAT has no
// SDK: its keyedcount says so in its own words.
func TestNotKeyedState(t *testing.T) {
	const want = `weir: the state to restore is in a layout of its own, and this build of the operator reads keyed state (abi/ABI.md §8): ` +
		`restore with the build that wrote it, or have this build read the old layout too (state that does not start with "WKS1")`
	e := newEngine(t)
	ref := start(t, load(t, e, languages[0], "wordcount"), "wordcount")
	feed(t, ref, inputs("wordcount", 7), 0, 3, nil)
	state := snapshot(t, ref)
	for _, lang := range languagesWith("keyedcount") {
		if lang.name == "wat" {
			continue
		}
		inst := start(t, load(t, e, lang, "keyedcount"), "keyedcount")
		err := inst.Restore(context.Background(), bytes.NewReader(state))
		var oe *wasm.OperatorError
		if !errors.As(err, &oe) || oe.Export != abi.ExportRestore || oe.Message != want {
			t.Errorf("%s: restore error %v, want an operator error from %s with message %q", lang.name, err, abi.ExportRestore, want)
		}
	}
}

// TestKeyedStateOperatorError: an entry the operator refuses while its
// SDK reads keyed state fails the restore with the operator's own message,
// as it returned it, in every SDK: Go's once added "weir: " to it and
// Rust's "weir: keyed state: ", which are the SDKs' words for the layout.
func TestKeyedStateOperatorError(t *testing.T) {
	e := newEngine(t)
	state := abi.AppendKeyedEntry([]byte(abi.KeyedStateMagic), []byte("k"), []byte("abc"))
	const want = "keyedcount: a count of 3 bytes, want 8"
	for _, lang := range languagesWith("keyedcount") {
		inst := start(t, load(t, e, lang, "keyedcount"), "keyedcount")
		err := inst.Restore(context.Background(), bytes.NewReader(state))
		var oe *wasm.OperatorError
		if !errors.As(err, &oe) || oe.Export != abi.ExportRestore || oe.Message != want {
			t.Errorf("%s: restore error %v, want an operator error from %s with message %q", lang.name, err, abi.ExportRestore, want)
		}
	}
}

// TestBadStateLength restores wordcount and join states whose first length
// (of a word, of a key) passes the end of the stream by far: 4 GiB, and the
// whole 64 MiB memory limit. Every build fails the restore with an error
// it returns, never a trap (capacity overflow, an allocation past the
// memory limit), and the SDKs' read_bytes/readBytes/weir_state_read_bytes,
// which grow their buffer as the bytes arrive, say "weir: state ended early".
func TestBadStateLength(t *testing.T) {
	e := newEngine(t)
	for _, ex := range []string{"wordcount", "join"} {
		for _, n := range []uint32{0xffff_fff0, 64 << 20} {
			// version 1, one entry (one left), then the length and 3 bytes
			state := binary.LittleEndian.AppendUint32([]byte{1, 1, 0, 0, 0}, n)
			state = append(state, "abc"...)
			for _, lang := range languagesWith(ex) {
				inst := start(t, load(t, e, lang, ex), ex)
				err := inst.Restore(context.Background(), bytes.NewReader(state))
				var te *wasm.TrapError
				switch {
				case err == nil:
					t.Errorf("%s %s: restoring a length of %d succeeded", lang.name, ex, n)
				case errors.As(err, &te):
					t.Errorf("%s %s: a length of %d trapped: %v", lang.name, ex, n, err)
				case lang.name != "go" && lang.name != "wat" && !strings.HasSuffix(err.Error(), "weir: state ended early"):
					t.Errorf("%s %s: a length of %d: got %v, want weir: state ended early", lang.name, ex, n, err)
				}
				inst.Close(context.Background())
			}
		}
	}
}

// bigInputs makes state and batches larger than the SDKs' 64 KiB chunks
// and initial buffers: distinct 300-byte words for wordcount, 300-byte
// values on both join inputs (alternating; keys repeat once per batch),
// distinct 300-byte keys for keyedcount.
func bigInputs(example string) []call {
	calls := make([]call, 6)
	for i := range calls {
		var b abi.Builder
		for j := range 400 {
			word := fmt.Sprintf("%d-%s", i*1000+j, strings.Repeat("w", 295))
			key := fmt.Sprintf("k%d", j) // each record joins one per batch of the other side
			if example == "keyedcount" {
				key = word
			}
			b.Add([]byte(key), []byte(word+" "+word[:3]), int64(i*1000+j))
		}
		port := 0
		if example == "join" {
			port = i % 2
		}
		calls[i] = call{port: port, batch: bytes.Clone(b.Bytes())}
	}
	return calls
}

// TestLargeState snapshots state of several 64 KiB chunks, restores it into
// every other language through short reads, and checks the output after.
func TestLargeState(t *testing.T) {
	e := newEngine(t)
	for _, ex := range []string{"wordcount", "join", "keyedcount"} {
		t.Run(ex, func(t *testing.T) {
			languages := languagesWith(ex)
			calls := bigInputs(ex)
			half := len(calls) / 2
			ref := start(t, load(t, e, languages[0], ex), ex)
			want := feed(t, ref, calls, 0, half, nil)
			snap := snapshot(t, ref)
			if len(snap) < 3*64<<10 {
				t.Fatalf("state of %d bytes spans too few chunks", len(snap))
			}
			want = feed(t, ref, calls, half, len(calls), want)
			for i, lang := range languages {
				inst := start(t, load(t, e, lang, ex), ex)
				got := feed(t, inst, calls, 0, half, nil)
				if s := snapshot(t, inst); !bytes.Equal(s, snap) {
					t.Fatalf("%s: snapshot of %d bytes differs from go's (%d bytes)", lang.name, len(s), len(snap))
				}
				next := languages[(i+1)%len(languages)]
				inst = start(t, load(t, e, next, ex), ex)
				if err := inst.Restore(context.Background(), iotest.HalfReader(bytes.NewReader(snap))); err != nil {
					t.Fatalf("%s restoring %s's snapshot: %v", next.name, lang.name, err)
				}
				got = feed(t, inst, calls, half, len(calls), got)
				sameEmissions(t, lang.name+" then "+next.name, got, want)
			}
		})
	}
}

// TestJoinBadPort: a batch on an input port other than 0 or 1 fails join's
// weir_process with the guest's error in every language.
func TestJoinBadPort(t *testing.T) {
	e := newEngine(t)
	batch := abi.EncodeBatch(abi.Record{Key: []byte("k"), Value: []byte("v")})
	for _, lang := range languagesWith("join") {
		inst := start(t, load(t, e, lang, "join"), "join")
		err := inst.Process(context.Background(), 2, batch, func(int, []byte) error { return nil })
		var oe *wasm.OperatorError
		if !errors.As(err, &oe) || oe.Export != abi.ExportProcess || !strings.HasPrefix(oe.Message, "join: ") {
			t.Errorf("%s: join on input port 2: %v, want an operator error from %s starting with \"join: \"", lang.name, err, abi.ExportProcess)
		}
	}
}

// TestLargeRecord sends a record far larger than every SDK's initial input
// and output buffers (256 KiB value, 64 KiB key) through the one-input
// examples.
func TestLargeRecord(t *testing.T) {
	e := newEngine(t)
	key := bytes.Repeat([]byte("k"), 64<<10)
	value := bytes.Repeat([]byte("banana plan\t"), (256<<10)/12)
	batch := abi.EncodeBatch(
		abi.Record{Key: []byte("small"), Value: []byte("an apple"), Timestamp: 1},
		abi.Record{Key: key, Value: value, Timestamp: 2},
	)
	calls := []call{{port: 0, batch: batch}, {port: 0, batch: batch}}
	for _, ex := range []string{"uppercase", "filter", "wordcount"} {
		t.Run(ex, func(t *testing.T) {
			want := feed(t, start(t, load(t, e, languages[0], ex), ex), calls, 0, len(calls), nil)
			for _, lang := range languagesWith(ex)[1:] {
				got := feed(t, start(t, load(t, e, lang, ex), ex), calls, 0, len(calls), nil)
				sameEmissions(t, lang.name, got, want)
			}
		})
	}
}

// upperASCII is uppercase's specification, in plain Go: the ASCII letters
// a-z become A-Z, every other byte (A-Z, digits, controls, bytes >= 0x80)
// stays as it is.
func upperASCII(v []byte) []byte {
	out := make([]byte, len(v))
	for i, c := range v {
		if 'a' <= c && c <= 'z' {
			c -= 'a' - 'A'
		}
		out[i] = c
	}
	return out
}

// byteRun returns n bytes counting up from first, wrapping at 256.
func byteRun(first, n int) []byte {
	v := make([]byte, n)
	for i := range v {
		v[i] = byte(first + i)
	}
	return v
}

// TestUppercaseEveryByte checks every language's uppercase against
// upperASCII rather than against another build, so a mistake all the
// builds share is caught too. The examples convert 8 bytes per step (SWAR)
// and the last len%8 bytes one by one, so the values are runs of
// consecutive byte values: from every start 0..255 at every length 0..40
// (no full word up to five, with every tail length), which puts every
// byte value in each of a word's 8 positions and in the tail, and long
// runs (2048+k bytes, every value at every position from 8 starts). Keys
// of 0..17 bytes, one batch each, shift where the values lie in memory;
// their bytes differ, so a key copied wrong shows (the Rust SDK copies a key
// of up to 16 bytes as overlapping fixed-size pieces).
func TestUppercaseEveryByte(t *testing.T) {
	var calls []call
	var want [][]byte
	for klen := range 18 {
		var in, out abi.Builder
		key := []byte("abcdefghijklmnopqr")[:klen]
		add := func(v []byte, ts int64) {
			in.Add(key, v, ts)
			out.Add(key, upperASCII(v), ts)
		}
		for first := range 256 {
			for n := range 41 {
				add(byteRun(first, n), int64(first*100+n))
			}
		}
		for k := range 8 {
			add(byteRun(k, 256*8+k), int64(-1-k))
		}
		calls = append(calls, call{port: 0, batch: bytes.Clone(in.Bytes())})
		want = append(want, bytes.Clone(out.Bytes()))
	}
	e := newEngine(t)
	for _, lang := range languagesWith("uppercase") {
		got := feed(t, start(t, load(t, e, lang, "uppercase"), "uppercase"), calls, 0, len(calls), nil)
		if len(got) != len(calls) {
			t.Fatalf("%s: %d emissions for %d calls", lang.name, len(got), len(calls))
		}
		for i, g := range got {
			if g.call != i || g.port != 0 {
				t.Fatalf("%s: emission %d is call %d port %d, want call %d port 0", lang.name, i, g.call, g.port, i)
			}
			if bytes.Equal(g.batch, want[i]) {
				continue
			}
			gr, err := abi.DecodeBatch(g.batch)
			if err != nil {
				t.Fatalf("%s: call %d: %v", lang.name, i, err)
			}
			wr, _ := abi.DecodeBatch(want[i])
			if len(gr) != len(wr) {
				t.Fatalf("%s: call %d: %d records, want %d", lang.name, i, len(gr), len(wr))
			}
			in, _ := abi.DecodeBatch(calls[i].batch)
			for j := range wr {
				gj, wj := gr[j], wr[j]
				if !bytes.Equal(gj.Key, wj.Key) || gj.Timestamp != wj.Timestamp {
					t.Fatalf("%s: call %d record %d: key %q ts %d, want %q ts %d", lang.name, i, j, gj.Key, gj.Timestamp, wj.Key, wj.Timestamp)
				}
				if !bytes.Equal(gj.Value, wj.Value) {
					p := 0
					for p < min(len(gj.Value), len(wj.Value)) && gj.Value[p] == wj.Value[p] {
						p++
					}
					t.Fatalf("%s: key of %d bytes, record %d: value of %d bytes (want %d) first differs at byte %d:\n  in %q\n got %q\nwant %q",
						lang.name, len(wj.Key), j, len(gj.Value), len(wj.Value), p, in[j].Value, gj.Value, wj.Value)
				}
			}
			t.Fatalf("%s: call %d: the batch differs from the expected one, but not in its records", lang.name, i)
		}
	}
}
