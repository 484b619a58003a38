package host_test

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"reflect"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/weirhq/weir/abi"
	"github.com/weirhq/weir/host"
	"github.com/weirhq/weir/host/barrier"
	"github.com/weirhq/weir/host/partition"
	"github.com/weirhq/weir/host/snapshot"
	"github.com/weirhq/weir/transport/local"
	"github.com/weirhq/weir/transport/stream"
)

// scriptSource replays fixed batches; before handing out batch i it
// triggers the checkpoints scripted for position i.
type scriptSource struct {
	batches  [][]byte
	pos      int
	triggers map[int][]int // position → checkpoint numbers within a run
	trigger  func(k int)
}

func (s *scriptSource) Poll(ctx context.Context) ([]byte, []byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	if s.pos >= len(s.batches) {
		return nil, nil, io.EOF
	}
	for _, k := range s.triggers[s.pos] {
		s.trigger(k)
	}
	b := s.batches[s.pos]
	s.pos++
	return b, binary.LittleEndian.AppendUint64(nil, uint64(s.pos)), nil
}

func (s *scriptSource) Seek(ctx context.Context, off []byte) error {
	if len(off) == 0 {
		s.pos = 0
		return nil
	}
	if len(off) != 8 {
		return errors.New("bad offset")
	}
	s.pos = int(binary.LittleEndian.Uint64(off))
	return nil
}

func (s *scriptSource) CheckpointComplete(context.Context, int64, []byte) error { return nil }
func (s *scriptSource) Close() error                                            { return nil }

// committedStore is the sink's external system: output committed per
// checkpoint id, idempotently.
type committedStore struct {
	mu        sync.Mutex
	committed map[int64][]string
}

func (c *committedStore) commit(id int64, recs []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.committed[id]; !ok {
		c.committed[id] = recs
	}
}

func (c *committedStore) all() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, rs := range c.committed {
		out = append(out, rs...)
	}
	sort.Strings(out)
	return out
}

// txSink is a two-phase-commit sink: records written since the last
// checkpoint are staged; PreCommit moves them to a pending transaction whose
// list (all not yet committed) is the snapshot state; Commit publishes.
type txSink struct {
	store   *committedStore
	final   int64 // id used for the output committed at end of input
	staged  []string
	pending map[int64][]string
}

func (s *txSink) Write(ctx context.Context, batch []byte) error {
	rs, err := abi.DecodeBatch(batch)
	if err != nil {
		return err
	}
	for _, r := range rs {
		s.staged = append(s.staged, fmt.Sprintf("%s=%s@%d", r.Key, r.Value, r.Timestamp))
	}
	return nil
}

func (s *txSink) PreCommit(ctx context.Context, id int64) ([]byte, error) {
	s.pending[id] = s.staged
	s.staged = nil
	return json.Marshal(s.pending)
}

func (s *txSink) Commit(ctx context.Context, id int64) error {
	for k, rs := range s.pending {
		if k <= id {
			s.store.commit(k, rs)
			delete(s.pending, k)
		}
	}
	return nil
}

func (s *txSink) Recover(ctx context.Context, id int64, state []byte) error {
	var p map[int64][]string
	if err := json.Unmarshal(state, &p); err != nil {
		return err
	}
	for k, rs := range p {
		s.store.commit(k, rs)
	}
	return nil
}

func (s *txSink) EndOfInput(ctx context.Context) error {
	for k, rs := range s.pending {
		s.store.commit(k, rs)
	}
	s.pending = map[int64][]string{}
	s.store.commit(s.final, s.staged)
	s.staged = nil
	return nil
}

func (s *txSink) Close() error { return nil }

// coordinator completes a checkpoint once every task acknowledged it.
type coordinator struct {
	*recorder
	mu        sync.Mutex
	tasks     []*host.Task
	completed int64
	handles   map[int64]map[string]string
}

func newCoordinator(n int) *coordinator {
	c := &coordinator{recorder: newRecorder(), completed: -1, handles: map[int64]map[string]string{}}
	c.recorder.onAck = func(task string, id int64) {
		c.recorder.mu.Lock()
		acks := c.recorder.acks[id]
		done := len(acks) == n
		var hs map[string]string
		if done {
			hs = map[string]string{}
			for k, v := range acks {
				hs[k] = v
			}
		}
		c.recorder.mu.Unlock()
		if !done {
			return
		}
		c.mu.Lock()
		if id > c.completed {
			c.completed = id
		}
		c.handles[id] = hs
		tasks := c.tasks
		c.mu.Unlock()
		for _, t := range tasks {
			t.NotifyCheckpointComplete(id)
		}
	}
	return c
}

// jobCase is one randomized scenario of the graph
//
//	left source ─┐ key-hash ┌─ join[0] ─┐
//	             ├──────────┤           ├─ sink
//	right source ┘          └─ join[1] ─┘
type jobCase struct {
	seed        uint64
	mode        barrier.Mode
	timeout     time.Duration
	left, right [][]byte // batches
	triggers    [2]map[int][]int
	capacity    int
	atReceiver  bool
	alignMem    int64
	maxBuffered int64
	failures    []failure // one per failing run
	// channels, if set, makes the channels (default: local ones).
	channels func(t *testing.T, name string) (stream.Sender, stream.Receiver)
}

type failure struct {
	join  int // which join fails
	after int // after processing this many records in that run
}

func genCase(seed uint64) jobCase { return genCaseBatch(seed, 3) }

// genCaseBatch is genCase with source batches of up to maxBatch records.
func genCaseBatch(seed uint64, maxBatch int) jobCase {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	modes := []barrier.Mode{barrier.Aligned, barrier.Unaligned, barrier.AlignedTimeout, barrier.AtLeastOnce}
	c := jobCase{seed: seed, mode: modes[r.IntN(len(modes))], capacity: 1 + r.IntN(4), atReceiver: r.IntN(2) == 0}
	c.timeout = []time.Duration{0, 50 * time.Microsecond, time.Millisecond, time.Hour}[r.IntN(4)]
	c.alignMem = int64(r.IntN(300))
	if r.IntN(4) == 0 {
		c.maxBuffered = int64(100 + r.IntN(400))
	}
	gen := func(side string) [][]byte {
		n := 10 + r.IntN(40)
		var batches [][]byte
		for i := 0; i < n; {
			var b abi.Builder
			for j := 1 + r.IntN(maxBatch); j > 0 && i < n; j-- {
				b.Add([]byte(fmt.Sprintf("k%d", r.IntN(6))), []byte(fmt.Sprintf("%s%d", side, i)), int64(i))
				i++
			}
			batches = append(batches, append([]byte(nil), b.Bytes()...))
		}
		return batches
	}
	c.left, c.right = gen("L"), gen("R")
	nck := 1 + r.IntN(4)
	for s, bs := range [][][]byte{c.left, c.right} {
		c.triggers[s] = map[int][]int{}
		pos := make([]int, nck)
		for k := range pos {
			pos[k] = r.IntN(len(bs))
		}
		sort.Ints(pos) // checkpoint k+1 follows k on every source
		for k, p := range pos {
			c.triggers[s][p] = append(c.triggers[s][p], k+1)
		}
	}
	for i := r.IntN(3); i > 0; i-- {
		c.failures = append(c.failures, failure{join: r.IntN(2), after: r.IntN(40)})
	}
	return c
}

func (c jobCase) String() string {
	return fmt.Sprintf("seed=%d mode=%s timeout=%v cap=%d atReceiver=%v alignMem=%d maxBuffered=%d failures=%v",
		c.seed, c.mode, c.timeout, c.capacity, c.atReceiver, c.alignMem, c.maxBuffered, c.failures)
}

// expected computes the join's result directly: every (left, right) pair of
// equal keys once, and each join's final state.
func (c jobCase) expected() (out []string, states [2][2][]abi.Record) {
	var ls, rs []abi.Record
	for _, b := range c.left {
		d, _ := abi.DecodeBatch(b)
		ls = append(ls, d...)
	}
	for _, b := range c.right {
		d, _ := abi.DecodeBatch(b)
		rs = append(rs, d...)
	}
	for _, l := range ls {
		for _, r := range rs {
			if string(l.Key) == string(r.Key) {
				out = append(out, fmt.Sprintf("%s=%s|%s@%d", l.Key, l.Value, r.Value, max(l.Timestamp, r.Timestamp)))
			}
		}
	}
	sort.Strings(out)
	for _, l := range ls {
		j := partition.KeyChannel(l.Key, 2)
		states[j][0] = append(states[j][0], l)
	}
	for _, r := range rs {
		j := partition.KeyChannel(r.Key, 2)
		states[j][1] = append(states[j][1], r)
	}
	return out, states
}

var taskNames = []string{"left", "right", "join[0]", "join[1]", "sink"}

// runJob runs the graph once, restoring from handles (task → key) if set.
// It returns the joins (their final state when err is nil).
func runJob(t *testing.T, c jobCase, run int, newJoin func() host.Operator, store host.Store, committed *committedStore, coord *coordinator, restore map[string]string) ([2]*probe, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ch := func(name string) (stream.Sender, stream.Receiver) {
		if c.channels != nil {
			return c.channels(t, fmt.Sprintf("%s (run %d)", name, run))
		}
		return local.New(local.Options{Name: name, CapacityElements: c.capacity, PriorityAtReceiver: c.atReceiver})
	}
	ck := host.Checkpointing{Mode: c.mode, AlignmentTimeout: c.timeout, MaxBufferedBytes: c.maxBuffered,
		AlignmentMemory: c.alignMem, SpillDir: t.TempDir()}
	// channels: src s → join j, join j → sink
	var srcOut [2][2]stream.Sender
	var joinIn [2][2]stream.Receiver
	for s := 0; s < 2; s++ {
		for j := 0; j < 2; j++ {
			srcOut[s][j], joinIn[j][s] = ch(fmt.Sprintf("%s->join[%d]", taskNames[s], j))
		}
	}
	var joinOut [2]stream.Sender
	var sinkIn [2]stream.Receiver
	for j := 0; j < 2; j++ {
		joinOut[j], sinkIn[j] = ch(fmt.Sprintf("join[%d]->sink", j))
	}
	var tasks []*host.Task
	var srcTasks [2]*host.Task
	mk := func(cfg host.Config) *host.Task {
		cfg.Checkpointing = ck
		cfg.Store = store
		cfg.Listener = coord
		cfg.Restore = restore[cfg.Name]
		tk, err := host.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		tasks = append(tasks, tk)
		return tk
	}
	for s, data := range [][][]byte{c.left, c.right} {
		src := &scriptSource{batches: data, triggers: c.triggers[s]}
		s := s
		src.trigger = func(k int) {
			srcTasks[s].TriggerCheckpoint(stream.Barrier{ID: int64(run*1000 + k), Timestamp: time.Now().UnixMilli()})
		}
		srcTasks[s] = mk(host.Config{Name: taskNames[s], Source: src,
			Outputs: []host.Output{{Partitioner: &partition.KeyHash{}, Senders: []stream.Sender{srcOut[s][0], srcOut[s][1]}}}})
	}
	var joins [2]*probe
	for j := 0; j < 2; j++ {
		joins[j] = &probe{Operator: newJoin()}
		if run < len(c.failures) && c.failures[run].join == j {
			n, after := 0, c.failures[run].after
			joins[j].onRecord = func(int, abi.Record) error {
				if n++; n > after {
					return errors.New("injected failure")
				}
				return nil
			}
		}
		mk(host.Config{Name: taskNames[2+j], Operator: joins[j],
			Inputs:  []host.Input{{Port: 0, Receiver: joinIn[j][0]}, {Port: 1, Receiver: joinIn[j][1]}},
			Outputs: []host.Output{{Senders: []stream.Sender{joinOut[j]}}}})
	}
	mk(host.Config{Name: "sink", Sink: &txSink{store: committed, final: int64(run*1000 + 999), pending: map[int64][]string{}},
		Inputs: []host.Input{{Receiver: sinkIn[0]}, {Receiver: sinkIn[1]}}})
	coord.mu.Lock()
	coord.tasks = tasks
	coord.mu.Unlock()

	errs := make(chan error, len(tasks))
	for _, tk := range tasks {
		go func() { errs <- tk.Run(ctx) }()
	}
	// The first task to fail cancels the others; its neighbours may fail too
	// (their channel closed). Report the root cause: the injected failure.
	var first error
	for range tasks {
		if err := <-errs; err != nil {
			if first == nil || strings.Contains(err.Error(), "injected failure") {
				first = err
			}
			cancel()
		}
	}
	coord.mu.Lock()
	coord.tasks = nil
	coord.mu.Unlock()
	return joins, first
}

func checkCase(t *testing.T, c jobCase, newJoin func() host.Operator, verify func(*testing.T, jobCase, []string, [2]*probe)) {
	t.Helper()
	// In memory: the directory store (fsync per object) is exercised by the
	// other tests; here it would only make 200 cases slow.
	store := snapshot.NewMemStore()
	var err error
	committed := &committedStore{committed: map[int64][]string{}}
	coord := newCoordinator(len(taskNames))
	var restore map[string]string
	var joins [2]*probe
	for run := 0; ; run++ {
		if run > len(c.failures)+1 {
			t.Fatalf("%v: still failing after %d runs", c, run)
		}
		joins, err = runJob(t, c, run, newJoin, store, committed, coord, restore)
		if err == nil {
			break
		}
		if run >= len(c.failures) {
			t.Fatalf("%v: run %d failed: %v", c, run, err)
		}
		var te *host.TaskError
		if !errors.As(err, &te) || te.Task != "join[0]" && te.Task != "join[1]" {
			t.Fatalf("%v: unexpected failure %v", c, err)
		}
		coord.mu.Lock()
		restore = coord.handles[coord.completed]
		if os.Getenv("WEIR_PROPERTY_DEBUG") != "" {
			var csb, buf, spill int64
			for name, tm := range coord.metrics[coord.completed] {
				if tm[host.MetricChannelStateBytes] > 0 {
					t.Logf("  %s channel state %d", name, tm[host.MetricChannelStateBytes])
				}
				csb += tm[host.MetricChannelStateBytes]
				buf += tm[host.MetricBufferedBytes]
				spill += tm[host.MetricSpilledBytes]
			}
			t.Logf("%v: run %d failed, restoring checkpoint %d (channel state %dB, buffered %dB, spilled %dB), declines %d", c, run, coord.completed, csb, buf, spill, len(coord.declines))
		}
		coord.mu.Unlock()
	}
	verify(t, c, committed.all(), joins)
}

// verifyJoin checks the join's committed output and final states against
// an uninterrupted run (computed directly).
func verifyJoin(t *testing.T, c jobCase, got []string, joins [2]*probe) {
	t.Helper()
	want, states := c.expected()
	if c.mode == barrier.AtLeastOnce {
		// No loss: every expected output is there at least once.
		have := map[string]int{}
		for _, g := range got {
			have[g]++
		}
		for _, w := range want {
			if have[w] == 0 {
				t.Fatalf("%v: lost output %s", c, w)
			}
			have[w]--
		}
		return
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%v: output differs from an uninterrupted run:\n got %d %v\nwant %d %v", c, len(got), got, len(want), want)
	}
	for j := 0; j < 2; j++ {
		left, right := joins[j].finalState(t)
		if values(left) != values(states[j][0]) || values(right) != values(states[j][1]) {
			t.Fatalf("%v: join[%d] final state differs:\n got %s / %s\nwant %s / %s", c, j,
				values(left), values(right), values(states[j][0]), values(states[j][1]))
		}
	}
}

// TestRecoveryProperty runs many random scenarios — modes, interleavings
// (channel capacities, batch sizes), barrier placements, spill budgets,
// buffer limits and failure points — and checks that recovering from the
// last completed checkpoint gives exactly the output and final state of an
// uninterrupted run (exactly-once modes), or loses nothing (at-least-once).
func TestRecoveryProperty(t *testing.T) {
	n := 200
	if testing.Short() {
		n = 40
	}
	if s := os.Getenv("WEIR_PROPERTY_CASES"); s != "" {
		n, _ = strconv.Atoi(s)
	}
	for i := 0; i < n; i++ {
		checkCase(t, genCase(uint64(i)), func() host.Operator { return &joinOp{} }, verifyJoin)
	}
}

// pacedJoin is the join as a Paced operator of one record per call, which
// yields after each call: the tasks process every batch in pieces, with
// barriers taken between them.
type pacedJoin struct{ joinOp }

func (p *pacedJoin) RecordsWithin(time.Duration) int { return 1 }

func (p *pacedJoin) Process(ctx context.Context, port int, batch []byte, emit func(int, []byte) error) error {
	defer runtime.Gosched()
	return p.joinOp.Process(ctx, port, batch, emit)
}

// TestRecoveryPropertyPaced is the recovery property with larger batches
// processed in pieces (host.Paced): unaligned checkpoints taken in the
// middle of a batch keep its rest as channel state.
func TestRecoveryPropertyPaced(t *testing.T) {
	n := 100
	if testing.Short() {
		n = 20
	}
	if s := os.Getenv("WEIR_PROPERTY_CASES"); s != "" {
		n, _ = strconv.Atoi(s)
	}
	for i := 0; i < n; i++ {
		checkCase(t, genCaseBatch(uint64(5000+i), 8), func() host.Operator { return &pacedJoin{} }, verifyJoin)
	}
}
