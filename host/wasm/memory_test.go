package wasm

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// The note every failure after misbehave's "G" grow carries: 16384 pages
// asked for, with its 2-page memory under the default 64 MiB limit.
const gNote = " (memory.grow of 16384 pages (1 GiB) refused: the operator's memory limit (limits.memory) is 64 MiB and it had 128 KiB)"

// TestRefusedGrow: a call that had a memory.grow refused by the memory
// limit, however far below the limit the memory was, and then failed says
// so in its one-line error, whatever the failure; a guest that carries on
// after the refusal does not fail, and a later failure of its own says
// nothing of it.
func TestRefusedGrow(t *testing.T) {
	e := newEngine(t)
	ctx := context.Background()
	in := batchOf(kv{"a", "1", 1}, kv{"b", "2", 2}, kv{"c", "3", 3})
	for _, c := range []struct {
		mode string
		want string // the whole message
		typ  any
	}{
		{"Gt", `operator op: weir_process: trap at record 3 of the batch (key "c", value "3"): wasm error: unreachable` + gNote, &TrapError{}},
		{"Gx", "operator op: weir_process: the module exited with code 3" + gNote, &ExitError{}},
		{"Ge", "operator op: weir_process: boom" + gNote, &OperatorError{}},
		{"GE", "operator op: weir_process: returned status 7 and set no error message (C: return weir_fail(\"why\") rather than a bare status)" + gNote, &OperatorError{}},
		{"Gl", "operator op: weir_process: exceeded the 200ms call deadline (stuck, or much slower on this record than on earlier ones; if merely slow, raise limits.timeout)" + gNote, &DeadlineError{}},
	} {
		t.Run(c.mode, func(t *testing.T) {
			lim := Limits{CallTimeout: 10 * time.Second}
			process := func(inst *Instance) error { return inst.Process(ctx, 0, in, newOut().emit) }
			ie := e
			if c.mode == "Gl" {
				// On the test's ticks once weir_process loops (see
				// processPastDeadline).
				lim.CallTimeout = 200 * time.Millisecond
				var ticks chan<- time.Time
				ie, ticks = tickedEngine(t)
				process = func(inst *Instance) error { return processPastDeadline(t, inst, ticks, in) }
			}
			inst := instantiate(t, ie, "op", misbehave(t), lim, InstanceConfig{Config: []byte(c.mode)})
			err := process(inst)
			if err == nil || err.Error() != c.want {
				t.Fatalf("got  %v\nwant %s", err, c.want)
			}
			var size, limit, refused uint64
			switch x := err.(type) {
			case *TrapError:
				size, limit, refused = x.MemorySize, x.MemoryLimit, x.GrowRefused
			case *ExitError:
				size, limit, refused = x.MemorySize, x.MemoryLimit, x.GrowRefused
			case *OperatorError:
				size, limit, refused = x.MemorySize, x.MemoryLimit, x.GrowRefused
			case *DeadlineError:
				size, limit, refused = x.MemorySize, x.MemoryLimit, x.GrowRefused
			default:
				t.Fatalf("got a %T, want a %T", err, c.typ)
			}
			if size != 2*PageSize || limit != DefaultMemoryBytes || refused != 1<<30 {
				t.Fatalf("size %d, limit %d, refused %d", size, limit, refused)
			}
		})
	}

	t.Run("carries on", func(t *testing.T) {
		// "Gd" passes the batch through after its refused grow, and traps
		// at a record whose value starts with "!".
		inst := instantiate(t, e, "op", misbehave(t), Limits{}, InstanceConfig{Config: []byte("Gd")})
		o := newOut()
		if err := inst.Process(ctx, 0, in, o.emit); err != nil || len(o.port(0)) != 3 {
			t.Fatalf("the call with a refused grow: %v, %d records out", err, len(o.port(0)))
		}
		if err := inst.Process(ctx, 0, in, o.emit); err != nil || len(o.port(0)) != 6 {
			t.Fatalf("the next call: %v, %d records out", err, len(o.port(0)))
		}
		err := inst.Process(ctx, 0, batchOf(kv{"a", "1", 1}, kv{"b", "!", 2}), o.emit)
		var te *TrapError
		if !errors.As(err, &te) || te.GrowRefused != 0 || te.MemoryLimit != 0 ||
			err.Error() != `operator op: weir_process: trap at record 2 of the batch (key "b", value "!"): wasm error: unreachable` {
			t.Fatalf("a later trap: got %v, want one without a memory note", err)
		}
	})

	t.Run("input buffer", func(t *testing.T) {
		// weir_input cannot grow the memory for a 2 MiB batch under a
		// 1 MiB limit, and returns 0.
		inst := instantiate(t, e, "op", misbehave(t), Limits{MemoryBytes: 1 << 20}, InstanceConfig{})
		big := batchOf(kv{"k", strings.Repeat("v", 2<<20), 1})
		err := inst.Process(ctx, 0, big, newOut().emit)
		var fe *FaultError
		want := "operator op: weir_input: operator could not allocate 2097173 bytes (memory.grow of 32 pages (2 MiB) refused: the operator's memory limit (limits.memory) is 1 MiB and it had 128 KiB)"
		if !errors.As(err, &fe) || err.Error() != want {
			t.Fatalf("got  %v\nwant %s", err, want)
		}
	})
}

// TestMemoryLimitPerInstance: the memory limit is each instance's, not
// its compiled module's: one module loaded under two limits is compiled
// once, and each instance is refused at its own limit.
func TestMemoryLimitPerInstance(t *testing.T) {
	e, err := NewEngine(Config{CacheDir: "-"})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	defer e.Close(ctx)
	for _, limit := range []uint64{4 << 20, 8 << 20, 4 << 20, 8<<20 + 1000} {
		m, err := e.Load(ctx, "m", misbehave(t), Limits{MemoryBytes: limit})
		if err != nil {
			t.Fatal(err)
		}
		inst, err := m.Instantiate(ctx, InstanceConfig{Config: []byte("m")})
		if err != nil {
			t.Fatal(err)
		}
		err = inst.Process(ctx, 0, batchOf(), newOut().emit)
		inst.Close(ctx)
		pages := limit / PageSize * PageSize // whole pages
		var te *TrapError
		if !errors.As(err, &te) || te.MemorySize != pages || te.MemoryLimit != pages || te.GrowRefused != PageSize {
			t.Fatalf("limit %d: got %v, want a trap at the limit", limit, err)
		}
	}
	if n := e.cachedModules(); n != 1 {
		t.Fatalf("%d compiled modules, want 1", n)
	}
}

// TestGuestMemory: the allocator behind an instance's memory refuses, and
// notes, a grow past its limit, and never its initial allocation; memory
// it hands out is zeroed.
func TestGuestMemory(t *testing.T) {
	g := &guestMemory{limit: 4 * PageSize}
	lm := g.Allocate(PageSize, MaxMemoryBytes)
	if b := lm.Reallocate(2 * PageSize); len(b) != 2*PageSize {
		t.Fatalf("initial allocation: %d bytes", len(b))
	}
	b := lm.Reallocate(4 * PageSize)
	if len(b) != 4*PageSize || g.refused != 0 {
		t.Fatalf("grow to the limit: %d bytes, refused %d", len(b), g.refused)
	}
	for _, c := range b {
		if c != 0 {
			t.Fatal("grown memory is not zeroed")
		}
	}
	b[len(b)-1] = 7
	if lm.Reallocate(5*PageSize) != nil || g.refused != PageSize || g.refusedAt != 4*PageSize {
		t.Fatalf("grow past the limit: refused %d at %d", g.refused, g.refusedAt)
	}
	if len(g.buf) != 4*PageSize || g.buf[len(g.buf)-1] != 7 {
		t.Fatal("a refused grow changed the memory")
	}
	g.resetRefused()
	if g.refused != 0 || g.refusedAt != 0 {
		t.Fatal("resetRefused kept the note")
	}
	// Load refuses a declared minimum over the limit; were one to get
	// through, wazero would panic on a nil initial allocation.
	g2 := &guestMemory{limit: PageSize}
	if b := g2.Allocate(0, MaxMemoryBytes).Reallocate(2 * PageSize); len(b) != 2*PageSize {
		t.Fatalf("initial allocation over the limit: %d bytes", len(b))
	}
}

// A call that goes on after the memory limit refused a memory.grow (the
// guest got -1, as C's malloc and C++'s new then return NULL) is warned
// of, once per instance: a trial's C++ operator wrote through such a NULL
// and nothing said why its memory was corrupt.
func TestRefusedGrowIsWarnedOfOnce(t *testing.T) {
	e := newEngine(t)
	var warn bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&warn, &slog.HandlerOptions{Level: slog.LevelWarn}))
	// bombs with config o grows its memory until the limit refuses, then
	// goes on.
	inst := instantiate(t, e, "grower", bombs(t), Limits{MemoryBytes: 4 << 20}, InstanceConfig{Config: []byte("o"), Logger: logger, LogRate: -1})
	for range 2 {
		if err := inst.Process(context.Background(), 0, batchOf(), newOut().emit); err != nil {
			t.Fatal(err)
		}
	}
	want := `operator grower: weir_process went on after its memory limit refused a memory.grow (memory.grow of 1 page (64 KiB) refused: the operator's memory limit (limits.memory) is 4 MiB and it had 4 MiB)`
	if got := strings.Count(warn.String(), want); got != 1 {
		t.Errorf("warned %d times, want once:\n%s", got, warn.String())
	}
}

// An instance reports its memory's size after each call, and its limit:
// a task reports them, so that an operator near its limit shows before it
// fails (an SRE trial found no per-operator memory figure).
func TestMemoryBytesAfterACall(t *testing.T) {
	e := newEngine(t)
	inst := instantiate(t, e, "grower", bombs(t), Limits{MemoryBytes: 4 << 20}, InstanceConfig{Config: []byte("o"), LogRate: -1})
	if size, limit := inst.MemoryBytes(); limit != 4<<20 || size == 0 || size > limit {
		t.Errorf("before: %d of %d", size, limit)
	}
	if err := inst.Process(context.Background(), 0, batchOf(), newOut().emit); err != nil {
		t.Fatal(err)
	}
	if size, limit := inst.MemoryBytes(); size != 4<<20 || limit != 4<<20 {
		t.Errorf("after growing to the limit: %d of %d", size, limit)
	}
}
