package barrier

import (
	"strings"
	"testing"
	"time"

	"github.com/weirhq/weir/transport/stream"
)

var t0 = time.Unix(1000, 0)

// script drives a handler with one-letter steps and checks the actions.
type step struct {
	do   func(h Handler) []Action
	want string // actions joined by "; "
}

func bar(ch int, id int64) func(Handler) []Action {
	return func(h Handler) []Action { return h.Barrier(ch, stream.Barrier{ID: id}, t0) }
}
func ubar(ch int, id int64) func(Handler) []Action {
	return func(h Handler) []Action { return h.Barrier(ch, stream.Barrier{ID: id, Unaligned: true}, t0) }
}
func save(ch int, id int64) func(Handler) []Action {
	return func(h Handler) []Action { return h.Barrier(ch, stream.Barrier{ID: id, Type: stream.Savepoint}, t0) }
}
func cancel(ch int, id int64) func(Handler) []Action {
	return func(h Handler) []Action { return h.Cancel(ch, id, t0) }
}
func eop(ch int) func(Handler) []Action {
	return func(h Handler) []Action { return h.EndOfPartition(ch, t0) }
}
func buffered(n int64) func(Handler) []Action {
	return func(h Handler) []Action { return h.Buffered(n, t0) }
}
func tick(d time.Duration) func(Handler) []Action {
	return func(h Handler) []Action { return h.Tick(t0.Add(d)) }
}

func run(t *testing.T, h Handler, steps []step) {
	t.Helper()
	for i, s := range steps {
		var got []string
		for _, a := range s.do(h) {
			got = append(got, a.String())
		}
		if g := strings.Join(got, "; "); g != s.want {
			t.Fatalf("step %d: got %q, want %q", i, g, s.want)
		}
	}
}

func TestAlignedBlocksUntilAllBarriers(t *testing.T) {
	h := New(Config{Channels: 2, Mode: Aligned})
	run(t, h, []step{{bar(0, 1), ""}})
	if !h.Blocked(0) || h.Blocked(1) {
		t.Fatal("channel 0 must be blocked, channel 1 not")
	}
	run(t, h, []step{
		{bar(1, 1), "snapshot(1); release"},
		{bar(1, 1), ""}, // duplicate/stale
	})
	if h.Blocked(0) || h.Blocked(1) {
		t.Fatal("released")
	}
	if _, ok := h.Pending(); ok {
		t.Fatal("nothing pending")
	}
}

func TestAlignedSubsumedStaleAndCancel(t *testing.T) {
	h := New(Config{Channels: 2, Mode: Aligned})
	run(t, h, []step{
		{bar(0, 1), ""},
		{bar(1, 2), "abort(1, subsumed: subsumed by checkpoint 2); release"},
		{bar(0, 1), ""}, // stale
	})
	if !h.Blocked(1) || h.Blocked(0) {
		t.Fatal("checkpoint 2 blocks channel 1 only")
	}
	run(t, h, []step{
		{bar(0, 2), "snapshot(2); release"},
		{bar(0, 3), ""},
		{cancel(1, 3), "abort(3, cancelled: checkpoint 3 cancelled upstream); release"},
		{bar(1, 3), ""},
		{bar(0, 4), ""},
		{cancel(1, 5), "abort(4, subsumed: subsumed by cancelled checkpoint 5); release; abort(5, cancelled: checkpoint 5 cancelled upstream)"},
		{bar(0, 5), ""},
		{cancel(0, 6), "abort(6, cancelled: checkpoint 6 cancelled upstream)"},
		{bar(0, 6), ""},
	})
}

func TestAlignedEndOfPartitionCountsAsAligned(t *testing.T) {
	h := New(Config{Channels: 3, Mode: Aligned})
	run(t, h, []step{
		{eop(2), ""},
		{bar(0, 1), ""},
		{bar(1, 1), "snapshot(1); release"},
		{bar(0, 2), ""},
		{eop(1), "snapshot(2); release"},
	})
}

func TestSingleChannelFastPath(t *testing.T) {
	for _, m := range []Mode{Aligned, AlignedTimeout, AtLeastOnce} {
		h := New(Config{Channels: 1, Mode: m, AlignmentTimeout: time.Second})
		run(t, h, []step{{bar(0, 1), "snapshot(1)"}, {bar(0, 1), ""}, {cancel(0, 2), "abort(2, cancelled: checkpoint 2 cancelled upstream)"}, {bar(0, 2), ""}})
		if h.Blocked(0) {
			t.Fatal(m, "fast path never blocks")
		}
	}
	h := New(Config{Channels: 1, Mode: Unaligned})
	run(t, h, []step{{bar(0, 1), "snapshot(1, unaligned); channel-state-done(1)"}})
}

func TestAlignedDeclinesOverBufferLimit(t *testing.T) {
	h := New(Config{Channels: 2, Mode: Aligned, MaxBufferedBytes: 50})
	run(t, h, []step{
		{bar(0, 1), ""},
		{buffered(50), ""},
		{buffered(100), "abort(1, declined: alignment buffered 100 bytes > limit 50); release"},
		{bar(1, 1), ""},
		{bar(1, 2), ""},
		{bar(0, 2), "snapshot(2); release"},
	})
}

func TestUnaligned(t *testing.T) {
	h := New(Config{Channels: 2, Mode: Unaligned})
	run(t, h, []step{{bar(0, 1), "snapshot(1, unaligned)"}})
	if h.Blocked(0) || h.Blocked(1) {
		t.Fatal("unaligned never blocks")
	}
	if _, ok := h.Recording(0); ok {
		t.Fatal("channel 0 delivered its barrier: not recorded")
	}
	if id, ok := h.Recording(1); !ok || id != 1 {
		t.Fatal("channel 1 is recorded until its barrier")
	}
	run(t, h, []step{
		{bar(1, 1), "channel-state-done(1)"},
		{bar(1, 2), "snapshot(2, unaligned)"},
		{bar(0, 3), "abort(2, subsumed: subsumed by checkpoint 3); snapshot(3, unaligned)"},
		{eop(1), "channel-state-done(3)"},
	})
	// Savepoints are always aligned.
	h = New(Config{Channels: 2, Mode: Unaligned})
	run(t, h, []step{{save(0, 1), ""}, {save(1, 1), "snapshot(1); release"}})
}

func TestAlignedTimeout(t *testing.T) {
	h := New(Config{Channels: 2, Mode: AlignedTimeout, AlignmentTimeout: 10 * time.Millisecond})
	run(t, h, []step{{bar(0, 1), ""}})
	if d, ok := h.Deadline(); !ok || !d.Equal(t0.Add(10*time.Millisecond)) {
		t.Fatalf("deadline %v %v", d, ok)
	}
	run(t, h, []step{
		{tick(5 * time.Millisecond), ""},
		{tick(10 * time.Millisecond), "snapshot(1, unaligned); release"},
	})
	if h.Blocked(0) {
		t.Fatal("switched: no longer blocked")
	}
	if _, ok := h.Recording(0); ok {
		t.Fatal("channel 0's post-barrier data is not channel state")
	}
	if _, ok := h.Recording(1); !ok {
		t.Fatal("channel 1's pre-barrier data is channel state")
	}
	run(t, h, []step{
		{bar(1, 1), "channel-state-done(1)"},
		// In time: aligned.
		{bar(1, 2), ""},
		{tick(time.Millisecond), ""},
		{bar(0, 2), "snapshot(2); release"},
		// An unaligned barrier from upstream switches at once.
		{bar(0, 3), ""},
		{ubar(1, 3), "snapshot(3, unaligned); release; channel-state-done(3)"},
	})
}

func TestTrackerOverlappingCheckpoints(t *testing.T) {
	h := New(Config{Channels: 2, Mode: AtLeastOnce})
	run(t, h, []step{
		{bar(0, 1), ""},
		{bar(0, 2), ""},
		{bar(1, 1), "snapshot(1)"},
		{bar(1, 2), "snapshot(2)"},
		{bar(0, 3), ""},
		{bar(0, 4), ""},
		{bar(1, 4), "abort(3, subsumed: subsumed by checkpoint 4); snapshot(4)"},
		{bar(1, 3), ""}, // late
		{bar(0, 5), ""},
		{cancel(1, 5), "abort(5, cancelled: checkpoint 5 cancelled upstream)"},
		{bar(1, 5), ""},
		{bar(1, 6), ""},
		{eop(0), "snapshot(6)"},
	})
	if h.Blocked(0) || h.Blocked(1) {
		t.Fatal("a tracker never blocks")
	}
}

// Rules the other scripts leave out: a cancel marker during channel-state
// collection, a savepoint under aligned-with-timeout (no deadline, never
// unaligned), the buffer limit outside an aligned alignment, barriers on an
// ended channel, and a newer barrier on a blocked channel reaching the
// handler (the task buffers it instead; the handler alone subsumes).
func TestAlignerEdges(t *testing.T) {
	h := New(Config{Channels: 2, Mode: Unaligned, MaxBufferedBytes: 1})
	run(t, h, []step{
		{bar(0, 1), "snapshot(1, unaligned)"},
		{buffered(100), ""}, // nothing is buffered while collecting
		{cancel(1, 1), "abort(1, cancelled: checkpoint 1 cancelled upstream)"},
		{bar(1, 1), ""},
	})
	if _, ok := h.Recording(1); ok {
		t.Fatal("a cancelled checkpoint records nothing")
	}

	h = New(Config{Channels: 2, Mode: AlignedTimeout, AlignmentTimeout: time.Millisecond})
	run(t, h, []step{{save(0, 1), ""}})
	if _, ok := h.Deadline(); ok {
		t.Fatal("a savepoint alignment has no deadline")
	}
	run(t, h, []step{
		{tick(time.Hour), ""},
		{save(1, 1), "snapshot(1); release"},
	})

	h = New(Config{Channels: 3, Mode: Aligned})
	run(t, h, []step{
		{eop(1), ""},
		{bar(1, 1), ""}, // an ended channel delivers nothing
		{bar(0, 1), ""},
		{bar(0, 2), "abort(1, subsumed: subsumed by checkpoint 2); release"},
		{eop(2), "snapshot(2); release"},
		{eop(0), ""},
		{bar(0, 3), ""}, // every channel ended
	})
	if h.Blocked(0) || h.Blocked(5) || h.Blocked(-1) {
		t.Fatal("nothing blocked after the snapshot")
	}
}
