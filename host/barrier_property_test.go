package host_test

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/weirhq/weir/abi"
	"github.com/weirhq/weir/host"
	"github.com/weirhq/weir/host/barrier"
	"github.com/weirhq/weir/host/snapshot"
	"github.com/weirhq/weir/transport/local"
	"github.com/weirhq/weir/transport/stream"
)

// logOp forwards its input and keeps the values of the records it
// processed, in order; its state is that list.
type logOp struct{ seen []string }

func (o *logOp) Process(ctx context.Context, port int, batch []byte, emit func(int, []byte) error) error {
	rs, err := abi.DecodeBatch(batch)
	if err != nil {
		return err
	}
	for _, r := range rs {
		o.seen = append(o.seen, string(r.Value))
	}
	return emit(0, batch)
}
func (o *logOp) EndOfInput(context.Context, int, func(int, []byte) error) error { return nil }
func (o *logOp) Snapshot(ctx context.Context, w io.Writer) error {
	_, err := io.WriteString(w, strings.Join(o.seen, " "))
	return err
}
func (o *logOp) Restore(ctx context.Context, r io.Reader) error {
	b, err := io.ReadAll(r)
	o.seen = strings.Fields(string(b))
	return err
}
func (o *logOp) CheckpointComplete(context.Context, int64) error { return nil }
func (o *logOp) Close(context.Context) error                     { return nil }

// pacedLog is logOp taking one record per call: the task feeds it batches
// in pieces and takes priority barriers between them.
type pacedLog struct{ logOp }

func (p *pacedLog) RecordsWithin(time.Duration) int { return 1 }

// elemCase is one randomized input of a single task: per channel, the
// elements in channel order (logical) and how the receiver hands them out
// (a priority barrier first, then the records it overtook).
type elemCase struct {
	seed        uint64
	mode        barrier.Mode
	timeout     time.Duration
	maxBuffered int64
	alignMem    int64
	paced       bool
	slowOut     bool // a consumer drains a one-element output channel
	logical     [][]stream.Element
	delivered   [][]stream.Delivery
	atLocal     bool // deliver through local channels (no priority barriers)
}

func (c elemCase) String() string {
	var chs []string
	for ch := range c.logical {
		var s []string
		for _, d := range c.delivered[ch] {
			e := d.Element
			switch e.Kind {
			case stream.KindRecords:
				rs, _ := abi.DecodeBatch(e.Batch)
				s = append(s, values(rs))
			case stream.KindBarrier:
				p := ""
				if e.Barrier.Unaligned {
					p = fmt.Sprintf("!%d", len(d.Overtaken))
				}
				s = append(s, fmt.Sprintf("B%d%s", e.Barrier.ID, p))
			case stream.KindCancel:
				s = append(s, fmt.Sprintf("C%d", e.CheckpointID))
			case stream.KindEndOfPartition:
				s = append(s, "EOP")
			}
		}
		chs = append(chs, fmt.Sprintf("ch%d: %s", ch, strings.Join(s, " ")))
	}
	return fmt.Sprintf("seed=%d mode=%s timeout=%v maxBuffered=%d alignMem=%d paced=%v local=%v slowOut=%v\n  %s",
		c.seed, c.mode, c.timeout, c.maxBuffered, c.alignMem, c.paced, c.atLocal, c.slowOut, strings.Join(chs, "\n  "))
}

// genElems generates a case: every channel delivers, for checkpoints 1..K in
// order, its barrier (sometimes twice, sometimes followed by a stale one), a
// cancel marker or nothing, with records in between, and ends at a random
// point.
func genElems(seed uint64) elemCase {
	r := rand.New(rand.NewPCG(seed, seed^0x5851f42d4c957f2d))
	modes := []barrier.Mode{barrier.Aligned, barrier.Unaligned, barrier.AlignedTimeout, barrier.AtLeastOnce}
	c := elemCase{seed: seed, mode: modes[r.IntN(len(modes))], atLocal: r.IntN(4) == 0, paced: r.IntN(3) == 0, slowOut: r.IntN(3) == 0}
	if c.mode == barrier.AlignedTimeout {
		// The clock moves a millisecond per reading.
		c.timeout = []time.Duration{0, time.Hour, time.Millisecond, 5 * time.Millisecond, 20 * time.Millisecond}[r.IntN(5)]
	}
	if r.IntN(4) == 0 {
		c.maxBuffered = int64(40 + r.IntN(200))
	}
	c.alignMem = int64(r.IntN(200))
	nch := 1 + r.IntN(3)
	k := 1 + r.IntN(4)
	savepoint := map[int]bool{}
	if r.IntN(4) == 0 {
		savepoint[1+r.IntN(k)] = true
	}
	for ch := 0; ch < nch; ch++ {
		var els []stream.Element
		seq := 0
		recs := func() {
			for n := r.IntN(4); n > 0; n-- {
				var bld abi.Builder
				for m := 1 + r.IntN(3); m > 0; m-- {
					v := fmt.Sprintf("c%d-%d", ch, seq)
					seq++
					bld.Add([]byte(v), []byte(v), 1)
				}
				els = append(els, stream.Records(append([]byte(nil), bld.Bytes()...)))
			}
		}
		end := 1 + r.IntN(k+2) // the channel ends before checkpoint end
		for id := 1; id <= k; id++ {
			recs()
			if id == end {
				break
			}
			switch x := r.IntN(20); {
			case x < 15:
				bar := stream.BarrierElement(stream.Barrier{ID: int64(id), Timestamp: clockStart.UnixMilli()})
				if savepoint[id] {
					bar.Barrier.Type = stream.Savepoint
				}
				els = append(els, bar)
				if r.IntN(10) == 0 {
					els = append(els, bar) // duplicate
				}
				if id > 1 && !c.atLocal && r.IntN(10) == 0 {
					// Stale (a channel carries ids in order: a local
					// channel would prioritize it over the newer one).
					els = append(els, b(int64(id-1)))
				}
			case x < 18:
				els = append(els, stream.Cancel(int64(id)))
			default: // skipped
			}
		}
		recs()
		els = append(els, stream.EndOfPartition())
		c.logical = append(c.logical, els)
		// Delivery: in the unaligned modes some barriers come as priority
		// elements that overtook the records queued before them.
		var ds []stream.Delivery
		priorityOK := !c.atLocal && (c.mode == barrier.Unaligned || c.mode == barrier.AlignedTimeout)
		deep := r.IntN(2) == 0
		var top int64 // the highest barrier or cancel id so far
		for i := 0; i < len(els); i++ {
			e := els[i]
			fresh := e.Kind == stream.KindBarrier && e.Barrier.ID > top && e.Barrier.Type != stream.Savepoint
			top = max(top, e.Barrier.ID, e.CheckpointID)
			if fresh && priorityOK && r.IntN(2) == 0 {
				// Overtake up to the records right before it or, deep,
				// every ordinary element queued (barriers and cancel
				// markers too) behind the priority elements at the head.
				j := len(ds)
				for j > 0 && len(ds)-j < 6 && r.IntN(4) > 0 {
					p := ds[j-1]
					if p.Kind == stream.KindBarrier && p.Barrier.Unaligned || !deep && p.Kind != stream.KindRecords {
						break
					}
					j--
				}
				over := make([]stream.Element, 0, len(ds)-j)
				for _, d := range ds[j:] {
					over = append(over, d.Element)
				}
				pb := e
				pb.Barrier.Unaligned = true
				ds = append(ds[:j], append([]stream.Delivery{{Element: pb, Overtaken: over}}, plain(over...)...)...)
				continue
			}
			ds = append(ds, stream.Delivery{Element: e})
		}
		c.delivered = append(c.delivered, ds)
	}
	return c
}

var clockStart = time.Unix(1000, 0)

// prioScripted is a scripted receiver that hands out a priority barrier at
// its head without the data behind it (stream.PriorityPoller).
type prioScripted struct {
	scripted
	notify func()
}

// Notify keeps fn: poke calls it, as new input would.
func (s *prioScripted) Notify(fn func()) {
	s.mu.Lock()
	s.notify = fn
	s.mu.Unlock()
	fn()
}

func (s *prioScripted) poke() {
	s.mu.Lock()
	fn := s.notify
	s.mu.Unlock()
	if fn != nil {
		fn()
	}
}

func (s *prioScripted) PollPriority() (stream.Delivery, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.ds) == 0 || s.ds[0].Kind != stream.KindBarrier || !s.ds[0].Barrier.Unaligned {
		return stream.Delivery{}, false, nil
	}
	d := s.ds[0]
	s.ds = s.ds[1:]
	return d, true, nil
}

// recVals lists the values of the records among els.
func recVals(t testing.TB, els []stream.Element) []string {
	t.Helper()
	var out []string
	for _, e := range els {
		if e.Kind != stream.KindRecords {
			continue
		}
		rs, err := abi.DecodeBatch(e.Batch)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rs {
			out = append(out, string(r.Value))
		}
	}
	return out
}

// byChannel splits values "c<ch>-<seq>" by channel, keeping their order.
func byChannel(vals []string) map[int][]string {
	m := map[int][]string{}
	for _, v := range vals {
		ch, _ := strconv.Atoi(v[1:strings.IndexByte(v, '-')])
		m[ch] = append(m[ch], v)
	}
	return m
}

func runElemCase(t *testing.T, c elemCase) {
	t.Helper()
	store := snapshot.NewMemStore()
	rc := newRecorder()
	var inputs []host.Input
	var pokes []func()
	for ch := range c.logical {
		if c.atLocal {
			s, r := local.New(local.Options{})
			for _, e := range c.logical[ch] {
				if err := s.Send(context.Background(), e); err != nil {
					t.Fatal(err)
				}
			}
			inputs = append(inputs, host.Input{Receiver: r})
			continue
		}
		in := &prioScripted{scripted: scripted{ds: append([]stream.Delivery(nil), c.delivered[ch]...)}}
		inputs = append(inputs, host.Input{Receiver: in})
		pokes = append(pokes, in.poke)
	}
	oo := local.Options{Name: "out", CapacityBytes: 1 << 30}
	if c.slowOut {
		oo.CapacityElements = 1
	}
	so, ro := local.New(oo)
	var op host.Operator = &logOp{}
	if c.paced {
		op = &pacedLog{}
	}
	var clockMu sync.Mutex
	now := clockStart
	clock := func() time.Time {
		clockMu.Lock()
		defer clockMu.Unlock()
		now = now.Add(time.Millisecond)
		return now
	}
	tk, err := host.New(host.Config{Name: "x", Operator: op, Inputs: inputs,
		Outputs: []host.Output{{Senders: []stream.Sender{so}}},
		Checkpointing: host.Checkpointing{Mode: c.mode, AlignmentTimeout: c.timeout, MaxBufferedBytes: c.maxBuffered,
			AlignmentMemory: c.alignMem, SpillDir: t.TempDir()},
		Store: store, Listener: rc, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out []stream.Element
	consumed := make(chan struct{})
	if c.slowOut {
		wake := make(chan struct{}, 1)
		ro.Notify(func() {
			select {
			case wake <- struct{}{}:
			default:
			}
		})
		go func() {
			defer close(consumed)
			for {
				// Interrupt the task's blocked send, as new input does.
				for _, p := range pokes {
					p()
				}
				runtime.Gosched()
				d, ok, _ := ro.Poll()
				if !ok {
					select {
					case <-wake:
						continue
					case <-ctx.Done():
						return
					}
				}
				out = append(out, d.Element)
				if d.Kind == stream.KindEndOfPartition {
					return
				}
			}
		}()
	}
	if err := tk.Run(ctx); err != nil {
		t.Fatalf("%v\nrun: %v", c, err)
	}
	if c.slowOut {
		<-consumed
	}
	for {
		d, ok, _ := ro.Poll()
		if !ok {
			break
		}
		out = append(out, d.Element)
	}

	// Every input record is output once, in its channel's order.
	var all []string
	for _, els := range c.logical {
		all = append(all, recVals(t, els)...)
	}
	got := byChannel(recVals(t, out))
	want := byChannel(all)
	for ch := range c.logical {
		if strings.Join(got[ch], " ") != strings.Join(want[ch], " ") {
			t.Fatalf("%v\nchannel %d output %v, want %v\noutput: %s", c, ch, got[ch], want[ch], render(t, out))
		}
	}

	acked := map[int64]bool{}
	for id, hs := range rc.acks {
		if hs["x"] != "" {
			acked[id] = true
		}
	}
	declined := map[int64]int{}
	for _, d := range rc.declines {
		f := strings.Fields(d)
		id, _ := strconv.ParseInt(f[1], 10, 64)
		declined[id]++
		if acked[id] && c.mode != barrier.AtLeastOnce {
			t.Fatalf("%v\ncheckpoint %d acknowledged and declined: %v", c, id, rc.declines)
		}
	}
	for id := range acked {
		checkCut(t, c, id, rc.handle(id, "x"), store, out)
	}
	if c.mode == barrier.Aligned && c.maxBuffered == 0 {
		// Liveness: a checkpoint whose barrier every channel delivered (or
		// that ended before it) completes.
		for id := int64(1); id <= 6; id++ {
			ok, any := true, false
			for _, els := range c.logical {
				has, cancelled := false, false
				for _, e := range els {
					if e.Kind == stream.KindBarrier && e.Barrier.ID == id {
						has = true
					}
					if (e.Kind == stream.KindBarrier && e.Barrier.ID > id || e.Kind == stream.KindCancel && e.CheckpointID > id) && !has {
						ok = false // skipped: subsumed
					}
					if e.Kind == stream.KindCancel && e.CheckpointID == id {
						cancelled = true
					}
				}
				any = any || has
				if cancelled {
					ok = false
				}
			}
			if ok && any && !acked[id] {
				t.Fatalf("%v\ncheckpoint %d not acknowledged; declines %v", c, id, rc.declines)
			}
		}
	}
}

// checkCut checks snapshot id: its operator state and input channel state
// hold exactly the records before barrier id on every channel (all of a
// channel without it); the output before barrier id plus the output channel
// state are what the operator processed.
func checkCut(t *testing.T, c elemCase, id int64, handle string, store host.Store, out []stream.Element) {
	t.Helper()
	rd, err := store.Get(context.Background(), handle)
	if err != nil {
		t.Fatal(err)
	}
	snap, err := snapshot.Read(rd)
	rd.Close()
	if err != nil {
		t.Fatal(err)
	}
	state := strings.Fields(string(snap.ModuleState))
	for _, els := range c.logical {
		for _, e := range els {
			if e.Kind == stream.KindBarrier && e.Barrier.ID == id && e.Barrier.Type == stream.Savepoint && snap.Unaligned {
				t.Fatalf("%v\nsavepoint %d taken unaligned", c, id)
			}
		}
	}
	var cut []string
	for _, els := range c.logical {
		var chCut []string
	elements:
		for _, e := range els {
			switch {
			case e.Kind == stream.KindBarrier && e.Barrier.ID == id:
				break elements
			case e.Kind == stream.KindBarrier && e.Barrier.ID > id || e.Kind == stream.KindCancel && e.CheckpointID >= id:
				if c.mode != barrier.AtLeastOnce {
					t.Fatalf("%v\ncheckpoint %d acknowledged, but a channel skipped or cancelled it", c, id)
				}
				// At least once: the channel has no cut for id.
				chCut = nil
				break elements
			}
			chCut = append(chCut, recVals(t, []stream.Element{e})...)
		}
		cut = append(cut, chCut...)
	}
	var inState []string
	for _, cs := range snap.Inputs {
		inState = append(inState, recVals(t, cs.Elements)...)
	}
	sb, ib, cb := byChannel(state), byChannel(inState), byChannel(cut)
	for ch := range c.logical {
		if c.mode == barrier.AtLeastOnce {
			// No loss: the state holds at least the cut, in order.
			if len(ib[ch]) > 0 || len(sb[ch]) < len(cb[ch]) || strings.Join(sb[ch][:len(cb[ch])], " ") != strings.Join(cb[ch], " ") {
				t.Fatalf("%v\ncheckpoint %d channel %d: state %v, want at least %v", c, id, ch, sb[ch], cb[ch])
			}
			continue
		}
		g := strings.Join(append(append([]string(nil), sb[ch]...), ib[ch]...), " ")
		if g != strings.Join(cb[ch], " ") {
			t.Fatalf("%v\ncheckpoint %d channel %d: state %v + channel state %v, want %v", c, id, ch, sb[ch], ib[ch], cb[ch])
		}
	}
	// Output: before barrier id, and the output channel state.
	var before []stream.Element
	found := false
	for _, e := range out {
		if e.Kind == stream.KindBarrier && e.Barrier.ID == id {
			found = true
			break
		}
		before = append(before, e)
	}
	if !found {
		t.Fatalf("%v\ncheckpoint %d acknowledged, its barrier not forwarded: %s", c, id, render(t, out))
	}
	outVals := recVals(t, before)
	for _, cs := range snap.Outputs {
		outVals = append(outVals, recVals(t, cs.Elements)...)
	}
	if strings.Join(outVals, " ") != strings.Join(state, " ") {
		t.Fatalf("%v\ncheckpoint %d: output before the barrier + output state %v, state %v", c, id, outVals, state)
	}
}

// TestBarrierProperty feeds one task random sequences of records, barriers
// (priority ones too, duplicates, stale ones), cancel markers and
// end-of-partition on several channels, in every mode, and checks that it
// ends, outputs every record once in channel order, and that every
// snapshot it acknowledges holds the records before its barrier exactly
// once (at least, at-least-once), in the operator state or the channel
// state.
func TestBarrierProperty(t *testing.T) {
	n := 1000
	if testing.Short() {
		n = 200
	}
	if s := os.Getenv("WEIR_PROPERTY_CASES"); s != "" {
		n, _ = strconv.Atoi(s)
	}
	for i := 0; i < n; i++ {
		runElemCase(t, genElems(uint64(i)))
	}
}
