package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirhq/weir/cmd/weir/internal/worker"
	"github.com/weirhq/weir/coordinator/control"
	"github.com/weirhq/weir/coordinator/jobspec"
	"github.com/weirhq/weir/guests/go/guestbuild"
	"github.com/weirhq/weir/host"
	"github.com/weirhq/weir/transport/natsconn"
)

// injector arms one-shot faults that the hooks fire at the next chance.
type injector struct {
	trap    atomic.Bool // the next Process of an operator fails like a trap
	failPut atomic.Bool // the next checkpoint write fails
	fired   atomic.Int64
	// piece, if set, makes operators slow: a millisecond per call of at
	// most piece records, so tasks cut batches and take barriers between
	// the pieces (host.Paced).
	piece int
	// gate, if set (hold), holds every operator at its next Process or
	// EndOfInput call until it is closed or the task's context ends;
	// held counts the calls it held.
	gate atomic.Pointer[chan struct{}]
	held atomic.Int64
}

// hold holds every operator at its next call (gate) until the returned
// function is called, or the test ends.
func (inj *injector) hold(t *testing.T) (release func()) {
	g := make(chan struct{})
	inj.held.Store(0)
	inj.gate.Store(&g)
	var once sync.Once
	release = func() {
		once.Do(func() {
			inj.gate.Store(nil)
			close(g)
		})
	}
	t.Cleanup(release)
	return release
}

// pass waits at the gate, if one is set.
func (inj *injector) pass(ctx context.Context) {
	if g := inj.gate.Load(); g != nil {
		inj.held.Add(1)
		select {
		case <-*g:
		case <-ctx.Done():
		}
	}
}

type faultyOperator struct {
	host.Operator
	inj *injector
}

func (o faultyOperator) Process(ctx context.Context, port int, batch []byte, emit func(int, []byte) error) error {
	if o.inj.trap.CompareAndSwap(true, false) {
		o.inj.fired.Add(1)
		return errors.New("injected trap: wasm error: unreachable")
	}
	o.inj.pass(ctx)
	if o.inj.piece > 0 {
		time.Sleep(time.Millisecond)
	}
	return o.Operator.Process(ctx, port, batch, emit)
}

func (o faultyOperator) EndOfInput(ctx context.Context, port int, emit func(int, []byte) error) error {
	o.inj.pass(ctx)
	return o.Operator.EndOfInput(ctx, port, emit)
}

// RecordsWithin passes the wasm instance's pace on, so that the task cuts
// large batches as it does without the hook, or tells the slow pace of
// injector.piece.
func (o faultyOperator) RecordsWithin(d time.Duration) int {
	if o.inj.piece > 0 {
		return o.inj.piece
	}
	if p, ok := o.Operator.(host.Paced); ok {
		return p.RecordsWithin(d)
	}
	return 0
}

type faultyStore struct {
	host.Store
	inj *injector
}

func (s faultyStore) Put(ctx context.Context, key string, r io.Reader) error {
	if s.inj.failPut.CompareAndSwap(true, false) {
		s.inj.fired.Add(1)
		return errors.New("injected checkpoint storage failure")
	}
	return s.Store.Put(ctx, key, r)
}

func (inj *injector) hooks() *worker.Hooks {
	return &worker.Hooks{
		Operator: func(_, _ string, op host.Operator) host.Operator { return faultyOperator{op, inj} },
		Store:    func(_, _ string, s host.Store) host.Store { return faultyStore{s, inj} },
	}
}

const e2eKeys = 16

// TestExactlyOnceUnderFailures runs a partitioned JetStream stream (two
// source subtasks, two partitions each, offsets per partition) → keyed
// running count (the Go wordcount guest, parallelism 2 behind a key
// partitioner, on two workers so channels cross NATS) → exactly-once
// JetStream sink (fast batches; with at-least-once checkpointing the
// at-least-once sink, also in fast batches), and injects failures
// at random points: an operator trap, a worker crash (its tasks canceled and
// its heartbeats gone), a checkpoint-storage write failure and a NATS server
// restart that drops every connection. Afterwards the sink must hold, per
// key, the counts 1..n exactly once (at-least-once: no gap).
func TestExactlyOnceUnderFailures(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end failure injection: skipped in -short")
	}
	wasmBytes := guestbuild.MustBuild(t, "github.com/weirhq/weir/guests/go/examples/wordcount")
	modPath := filepath.Join(t.TempDir(), "wordcount.wasm")
	if err := os.WriteFile(modPath, wasmBytes, 0o644); err != nil {
		t.Fatal(err)
	}
	modes := []struct {
		name, checkpointing, sink string
		exact                     bool
		piece                     int
		subject                   string
	}{
		{"aligned", "mode: exactly-once", "exactly-once", true, 0, "out"},
		// Each count on the subject of its key (out.k07).
		{"unaligned-keyed-subjects", "mode: unaligned", "exactly-once", true, 0, "out.{key}"},
		{"aligned-timeout", "mode: exactly-once\n  aligned-timeout: 1ms", "exactly-once", true, 0, "out"},
		// The at-least-once sink, publishing fast batches as records come.
		{"at-least-once", "mode: at-least-once", "at-least-once", false, 0, "out"},
		// A slow operator: unaligned snapshots between the pieces of a
		// batch keep its rest as channel state.
		{"unaligned-slow-operator", "mode: unaligned", "exactly-once", true, 1, "out"},
	}
	total := 0
	for i, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			total += runFailureScenario(t, modPath, m.checkpointing, m.sink, m.subject, m.exact, m.piece, uint64(i+1))
		})
	}
	t.Logf("injected %d failures in all", total)
}

func runFailureScenario(t *testing.T, modPath, checkpointing, guarantee, subject string, exact bool, piece int, seed uint64) int {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	rng := rand.New(rand.NewPCG(seed, 7))
	inj := &injector{piece: piece}
	main, startWorker := faultNodes(t, ctx, inj)
	w2 := startWorker("w2")
	defer func() { w2.Close() }()

	js := main.JS
	mustPartitionedInput(t, ctx, js)
	// OUT allows batched publish, as the streams `weir run` creates do: the
	// sink commits with fast batches (sink.PublishFast).
	mustSinkStream(t, ctx, js, "OUT", "out", "out.>")

	spec := fmt.Sprintf(`name: counts
sources:
  - {name: in, kind: jetstream, stream: IN, parallelism: 2, partitions: 4, partition-filter: "in.{p}.*"}
operators:
  - name: count
    module: %s
    parallelism: 2
    inputs: [{from: in, partition: key}]
sinks:
  - {name: out, kind: jetstream, stream: OUT, subject: %q, guarantee: %s, input: {from: count}}
checkpointing:
  %s
  interval: 150ms
  timeout: 10s
restart:
  strategy: fixed-delay
  delay: 100ms
  attempts: 100
`, modPath, subject, guarantee, checkpointing)
	s, err := jobspec.Parse("counts.yaml", []byte(spec), jobspec.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := main.API.Submit(ctx, control.SubmitRequest{Spec: s}); err != nil {
		t.Fatal(err)
	}

	sent := map[string]int{}
	publish := func(n int) { publishKeys(t, ctx, js, rng, n, sent) }
	// progress waits until a checkpoint completes after the fault, which
	// needs the job running again — in a later attempt than attempt, if
	// that is not 0 (the fault failed the job over).
	progress := func(what string, attempt int) {
		st, _ := main.API.Job(ctx, "counts")
		from := st.LatestCheckpoint
		wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		defer cancel()
		ok := poll(wctx, func() bool {
			st, err := main.API.Job(wctx, "counts")
			return err == nil && st.State == control.JobRunning && st.LatestCheckpoint > from && st.Attempt > attempt
		})
		if !ok {
			st, err := main.API.Job(ctx, "counts")
			t.Logf("job: %+v (err %v)", st, err)
			cps, _ := main.API.Checkpoints(ctx, "counts")
			for i, c := range cps {
				if i < 5 {
					t.Logf("checkpoint %d: %s %s acked %d/%d", c.ID, c.Status, c.Reason, c.Acked, c.Total)
				}
			}
			t.Fatalf("no checkpoint completed within 60s of %s", what)
		}
	}
	// fire arms a hook fault and returns once it fired: the trap at the
	// next record an operator processes (the records published before may
	// all be processed already, so more follow), the storage failure at
	// the next snapshot write. A fault that fired only later would fail
	// the job over while the next fault is injected, and the recovery
	// waited for would be that of a fault not yet under way.
	fire := func(armed *atomic.Bool, more int) {
		fired := inj.fired.Load()
		armed.Store(true)
		publish(more)
		waitUntil(t, ctx, "the fault to fire", func() bool { return inj.fired.Load() > fired })
	}
	faults := []struct {
		name string
		do   func()
		// failover: the fault fails the job over for sure (a trap; a
		// failed write may be a sink's best-effort commit marker).
		failover bool
	}{
		{"operator trap", func() { fire(&inj.trap, 10) }, true},
		{"checkpoint storage write failure", func() { fire(&inj.failPut, 0) }, false},
		{"worker crash", func() {
			// Its connection dies first, so it cannot say goodbye: the
			// coordinator learns from missing heartbeats or a deploy
			// nobody answers.
			w2.Conn.Close()
			w2.Close()
			w2 = startWorker("w3")
		}, false},
		{"NATS server restart", func() {
			if err := main.Server.Restart(); err != nil {
				t.Fatalf("restart NATS: %v", err)
			}
		}, false},
	}
	rng.Shuffle(len(faults), func(i, j int) { faults[i], faults[j] = faults[j], faults[i] })
	publish(300)
	progress("first checkpoint", 0)
	for _, f := range faults {
		publish(100 + rng.IntN(300))
		time.Sleep(time.Duration(rng.IntN(200)) * time.Millisecond)
		t.Logf("injecting %s", f.name)
		attempt := 0
		if f.failover {
			st, err := main.API.Job(ctx, "counts")
			if err != nil {
				t.Fatal(err)
			}
			attempt = st.Attempt
		}
		f.do()
		progress("recovery after "+f.name, attempt)
	}
	publish(200)
	want := 0
	for _, n := range sent {
		want += n
	}
	counts := readCounts(t, ctx, js, want, exact)
	if subject != "out" {
		// Every count on its key's subject, exactly once.
		out, err := js.Stream(ctx, "OUT")
		if err != nil {
			t.Fatal(err)
		}
		info, err := out.Info(ctx, jetstream.WithSubjectFilter(">"))
		if err != nil {
			t.Fatal(err)
		}
		for k, n := range sent {
			if got := info.State.Subjects["out."+k]; got != uint64(n) {
				t.Errorf("subject out.%s holds %d messages, want %d", k, got, n)
			}
		}
		if len(info.State.Subjects) != len(sent) {
			t.Errorf("OUT holds subjects %v, want out.<key> for %d keys", info.State.Subjects, len(sent))
		}
	}
	for k, n := range sent {
		got := counts[k]
		if exact {
			if len(got) != n {
				t.Errorf("key %s: %d outputs, want exactly %d: %v", k, len(got), n, summarize(got))
				continue
			}
			for i, c := range got {
				if c != i+1 {
					t.Errorf("key %s: counts %v, want 1..%d with no gap or repeat", k, summarize(got), n)
					break
				}
			}
		} else {
			seen := map[int]bool{}
			for _, c := range got {
				seen[c] = true
			}
			for c := 1; c <= n; c++ {
				if !seen[c] {
					t.Errorf("key %s: count %d missing (at-least-once must not lose)", k, c)
					break
				}
			}
		}
	}
	st, _ := main.API.Job(ctx, "counts")
	t.Logf("%d records, %d keys, %d restarts, latest checkpoint %d", want, len(sent), st.Restarts, st.LatestCheckpoint)
	if st.Restarts == 0 {
		t.Errorf("no restart happened: the faults were not injected")
	}
	if n := inj.fired.Load(); n != 2 {
		t.Errorf("%d of the 2 hook faults (trap, storage write) fired", n)
	}
	return len(faults)
}

// faultNodes starts a node with the coordinator and worker w1 on an
// embedded NATS server, closed when the test ends, and returns it with a
// function that starts another worker on the same server and checkpoint
// store (the caller closes it: a test may crash it). Every worker runs
// inj's hooks; WEIR_E2E_LOG=1 shows their logs.
func faultNodes(t *testing.T, ctx context.Context, inj *injector) (*Node, func(id string) *Node) {
	t.Helper()
	dir := t.TempDir()
	hb := 100 * time.Millisecond
	log := slog.New(slog.DiscardHandler)
	if os.Getenv("WEIR_E2E_LOG") != "" {
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	main, err := Start(ctx, Options{DataDir: dir, Port: -1, Coordinator: true, Workers: 1, WorkerID: "w1",
		HeartbeatTimeout: testHeartbeatTimeout, HeartbeatInterval: hb, Hooks: inj.hooks(), Log: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(main.Close)
	return main, func(id string) *Node {
		t.Helper()
		n, err := Start(ctx, Options{NATS: &natsconn.Options{URL: main.Server.ClientURL()}, Workers: 1, WorkerID: id,
			CheckpointStore: StoreDir, DataDir: dir, HeartbeatInterval: hb, Hooks: inj.hooks(), Log: log})
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
}

// publishKeys publishes n records with random keys k00..k15 (the key is
// also the value) on in.<key> and waits for their acknowledgements,
// counting each key in sent (nil: not counted).
func publishKeys(t *testing.T, ctx context.Context, js jetstream.JetStream, rng *rand.Rand, n int, sent map[string]int) {
	t.Helper()
	for i := 0; i < n; i++ {
		k := fmt.Sprintf("k%02d", rng.IntN(e2eKeys))
		if sent != nil {
			sent[k]++
		}
		msg := nats.NewMsg("in." + k)
		msg.Header.Set("Weir-Key", k)
		msg.Data = []byte(k)
		if _, err := js.PublishMsgAsync(msg); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-ctx.Done():
		t.Fatal("publish timed out")
	}
}

// mustPartitionedInput creates IN, whose subjects carry 4 partitions
// (in.k07 is stored as in.<p>.k07): a source with two subtasks reads two
// partitions each.
func mustPartitionedInput(t *testing.T, ctx context.Context, js jetstream.JetStream) {
	t.Helper()
	mustStream(t, ctx, js, jetstream.StreamConfig{Name: "IN", Subjects: []string{"in.*"},
		SubjectTransform: &jetstream.SubjectTransformConfig{Source: "in.*", Destination: "in.{{partition(4,1)}}.{{wildcard(1)}}"}})
}

// checkRunningCounts checks that every key k of sent has the running
// counts 1..sent[k] in counts, each once and in order.
func checkRunningCounts(t *testing.T, counts map[string][]int, sent map[string]int) {
	t.Helper()
	for k, n := range sent {
		got := counts[k]
		ok := len(got) == n
		for i := 0; ok && i < n; i++ {
			ok = got[i] == i+1
		}
		if !ok {
			t.Errorf("key %s: counts %v, want 1..%d exactly once", k, summarize(got), n)
		}
	}
}

func summarize(c []int) string {
	if len(c) <= 12 {
		return fmt.Sprint(c)
	}
	return fmt.Sprintf("%v … %v", c[:6], c[len(c)-6:])
}

// readCounts waits until OUT holds want messages (exact) or at least want
// (at-least-once), then returns every key's counts in stream order.
func readCounts(t *testing.T, ctx context.Context, js jetstream.JetStream, want int, exact bool) map[string][]int {
	t.Helper()
	stream, err := js.Stream(ctx, "OUT")
	if err != nil {
		t.Fatal(err)
	}
	msgs := func() int {
		info, err := stream.Info(ctx)
		if err != nil {
			return -1
		}
		return int(info.State.Msgs)
	}
	waitUntil(t, ctx, fmt.Sprintf("%d outputs", want), func() bool { return msgs() >= want })
	// Give a duplicate time to show up: two more checkpoints.
	time.Sleep(500 * time.Millisecond)
	if n := msgs(); exact && n != want {
		t.Errorf("OUT holds %d messages, want exactly %d", n, want)
	}
	counts := map[string][]int{}
	info, err := stream.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Through one ordered consumer, not a GetMsg per sequence: a request
	// per message took 28 of the 37 s of the backlog test's 15 000
	// outputs, under -race on an unloaded machine. An ordered consumer
	// also carries on from where it was when a cluster's stream leader
	// moves (it recreates itself).
	cons, err := stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	it, err := cons.Messages()
	if err != nil {
		t.Fatal(err)
	}
	defer it.Stop()
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; {
		m, err := it.Next(jetstream.NextContext(ctx))
		if err != nil {
			t.Fatalf("read OUT after message %d of %d..%d: %v", seq, info.State.FirstSeq, info.State.LastSeq, err)
		}
		md, err := m.Metadata()
		if err != nil {
			t.Fatal(err)
		}
		if seq = md.Sequence.Stream + 1; seq > info.State.LastSeq+1 {
			break // written after the Info: not asked for
		}
		k := m.Headers().Get("Weir-Key")
		if m.Subject() != "out" && m.Subject() != "out."+k { // a keyed sink's: out.{key}
			t.Fatalf("OUT message %q with key %q on subject %s", m.Data(), k, m.Subject())
		}
		c, err := strconv.Atoi(string(m.Data()))
		if err != nil {
			t.Fatalf("OUT message %q: %v", m.Data(), err)
		}
		counts[k] = append(counts[k], c)
	}
	for k := range counts {
		if !exact {
			sort.Ints(counts[k])
		}
	}
	return counts
}

// mustSinkStream creates a stream for an exactly-once sink, as weir run
// creates one: a duplicate window of 5 minutes, batched publish allowed.
func mustSinkStream(t *testing.T, ctx context.Context, js jetstream.JetStream, name string, subjects ...string) {
	t.Helper()
	mustStream(t, ctx, js, jetstream.StreamConfig{Name: name, Subjects: subjects, Duplicates: 5 * time.Minute, AllowBatchPublish: true})
}

func mustStream(t *testing.T, ctx context.Context, js jetstream.JetStream, cfg jetstream.StreamConfig) {
	t.Helper()
	if _, err := js.CreateStream(ctx, cfg); err != nil {
		t.Fatalf("create stream %s: %v", cfg.Name, err)
	}
}

func waitUntil(t *testing.T, ctx context.Context, what string, cond func() bool) {
	t.Helper()
	if !poll(ctx, cond) {
		t.Fatalf("timed out waiting for %s", what)
	}
}

// poll reports whether cond became true before ctx ended.
func poll(ctx context.Context, cond func() bool) bool {
	for !cond() {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(20 * time.Millisecond):
		}
	}
	return true
}
