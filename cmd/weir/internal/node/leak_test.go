package node

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirhq/weir/coordinator/control"
	"github.com/weirhq/weir/coordinator/jobspec"
	"github.com/weirhq/weir/host"
	"github.com/weirhq/weir/transport/source"
)

// A worker's NATS connection outlives every task it runs, and each run of
// a job — a restart, a resubmit — builds new tasks on it: whatever a
// closed source, sink or channel leaves on the connection (a
// subscription, the goroutines that serve it) or on the server (a
// consumer) grows with the number of restarts on a long-running worker.
// TestRestartsLeaveNothingBehind runs each kind of source and sink
// through restarts — 10 cancels and resubmits, each run reading input and
// writing output, then 10 failovers of one job, its operator trapping on
// a record every restore replays — and checks that the connection's
// subscriptions, the process's goroutines (the embedded server's among
// them: a consumer left on it has some) and the input stream's consumers
// come back to what they were after the first run.
//
// On two workers (one process, one connection: in-process workers share
// the node's) a job's tasks are spread over both, and talk through remote
// channels.
func TestRestartsLeaveNothingBehind(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	t.Run("one worker", func(t *testing.T) {
		n, _ := oneNode(t, ctx)
		restartsLeaveNothingBehind(t, ctx, n, nil)
	})
	start := func(t *testing.T, workers int, store string) *Node {
		n, err := Start(ctx, Options{DataDir: t.TempDir(), Port: -1, Coordinator: true, Workers: workers, WorkerID: "w1",
			CheckpointStore: store, HeartbeatTimeout: testHeartbeatTimeout, HeartbeatInterval: 100 * time.Millisecond,
			Log: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(n.Close)
		return n
	}
	t.Run("two workers", func(t *testing.T) {
		restartsLeaveNothingBehind(t, ctx, start(t, 2, StoreDir),
			map[string]bool{"jetstream source": true, "partitioned jetstream source": true, "exactly-once fast": true})
	})
	// Snapshots written to and, at each failover, read from an object
	// store on the worker's connection.
	t.Run("jetstream checkpoint store", func(t *testing.T) {
		restartsLeaveNothingBehind(t, ctx, start(t, 1, StoreJetStream),
			map[string]bool{"jetstream source": true, "exactly-once async": true})
	})
}

// restartsLeaveNothingBehind runs TestRestartsLeaveNothingBehind's kinds
// (those of only; all for nil) on n.
func restartsLeaveNothingBehind(t *testing.T, ctx context.Context, n *Node, only map[string]bool) {
	const restarts = 10
	// misbehave "d" with a spin of 0 passes records through, and traps on
	// one whose value starts with "!": the same one again after every
	// restore, until the restart strategy gives up.
	misbehave, err := filepath.Abs("../../../../host/wasm/testdata/misbehave.wasm")
	if err != nil {
		t.Fatal(err)
	}
	mustStream(t, ctx, n.JS, jetstream.StreamConfig{Name: "IN", Subjects: []string{"in"}})
	mustStream(t, ctx, n.JS, jetstream.StreamConfig{Name: "PIN", Subjects: []string{"pin.*"},
		SubjectTransform: &jetstream.SubjectTransformConfig{Source: "pin.*", Destination: "pin.{{partition(4,1)}}.{{wildcard(1)}}"}})
	mustStream(t, ctx, n.JS, jetstream.StreamConfig{Name: "OUT", Subjects: []string{"out"},
		Duplicates: 5 * time.Minute, AllowBatchPublish: true, AllowAtomicPublish: true})
	mustStream(t, ctx, n.JS, jetstream.StreamConfig{Name: "OUTA", Subjects: []string{"outa"}, Duplicates: 5 * time.Minute})
	for _, subj := range []string{"in", "pin.k1", "pin.k2", "pin.k3", "pin.k4"} {
		if _, err := n.JS.Publish(ctx, subj, []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	const (
		coreIn = `{name: in, kind: nats, subject: core-in}`
		jsIn   = `{name: in, kind: jetstream, stream: IN}`
		pjsIn  = `{name: in, kind: jetstream, stream: PIN, parallelism: 2, partitions: 4, partition-filter: "pin.{p}.*"}`
	)
	sinkJS := func(stream, subject, guarantee, publish string) string {
		return fmt.Sprintf(`{name: out, kind: jetstream, stream: %s, subject: %s, guarantee: %s, publish: %s, input: {from: upper}}`,
			stream, subject, guarantee, publish)
	}
	for _, c := range []struct {
		name, source, sink string
		inStream           string // the source's stream, whose consumers are counted
		outStream          string // the sink's stream, whose messages tell a run wrote; "" for core-out
	}{
		{"core source, core sink", coreIn, `{name: out, kind: nats, subject: core-out, input: {from: upper}}`, "", ""},
		{"jetstream source", jsIn, `{name: out, kind: nats, subject: core-out, input: {from: upper}}`, "IN", ""},
		{"partitioned jetstream source", pjsIn, `{name: out, kind: nats, subject: core-out, input: {from: upper}}`, "PIN", ""},
		{"exactly-once fast", jsIn, sinkJS("OUT", "out", "exactly-once", "fast"), "IN", "OUT"},
		{"exactly-once atomic", jsIn, sinkJS("OUT", "out", "exactly-once", "atomic"), "IN", "OUT"},
		{"exactly-once async", jsIn, sinkJS("OUT", "out", "exactly-once", "async"), "IN", "OUT"},
		{"at-least-once fast", jsIn, sinkJS("OUT", "out", "at-least-once", "fast"), "IN", "OUT"},
		{"at-least-once async", jsIn, sinkJS("OUT", "out", "at-least-once", "async"), "IN", "OUT"},
		{"at-least-once auto, no batches", jsIn, sinkJS("OUTA", "outa", "at-least-once", "auto"), "IN", "OUTA"},
	} {
		if only != nil && !only[c.name] {
			continue
		}
		t.Run(c.name, func(t *testing.T) {
			slug := strings.NewReplacer(" ", "-", ",", "").Replace(c.name)
			// run runs a job and cancels it, or, failover, makes it fail
			// over until its restart strategy gives up.
			run := func(i int, failover bool) {
				t.Helper()
				job := fmt.Sprintf("%s-%d", slug, i)
				restart := "{strategy: none}"
				if failover {
					restart = fmt.Sprintf("{strategy: fixed-delay, delay: 10ms, attempts: %d}", restarts)
				}
				spec, err := jobspec.Parse(job+".yaml", []byte(`name: `+job+`
sources: [`+c.source+`]
operators: [{name: upper, module: `+misbehave+`, config: "d\0\0\0\0", inputs: [{from: in}]}]
sinks: [`+c.sink+`]
checkpointing: {interval: 50ms}
restart: `+restart+`
`), jobspec.Options{})
				if err != nil {
					t.Fatal(err)
				}
				var before uint64
				if c.outStream != "" {
					before = streamMsgs(t, ctx, n.JS, c.outStream)
				}
				out, err := n.Conn.SubscribeSync("core-out")
				if err != nil {
					t.Fatal(err)
				}
				defer func() { _ = out.Unsubscribe() }()
				if _, err := n.API.Submit(ctx, control.SubmitRequest{Spec: spec}); err != nil {
					t.Fatal(err)
				}
				waitJob(t, ctx, n, job, job+" running", running)
				// The run read input and wrote output: its sink published
				// (an exactly-once sink at a checkpoint's commit). A run
				// that ended writes none: said at once, with why, rather
				// than after the test's deadline.
				waitUntil(t, ctx, job+"'s output", func() bool {
					if st, err := n.API.Job(ctx, job); err == nil && st.State.Terminal() {
						t.Fatalf("%s ended before it wrote output: %s (%s)", job, st.State, st.Reason)
					}
					if c.outStream != "" {
						return streamMsgs(t, ctx, n.JS, c.outStream) > before
					}
					if c.inStream == "" {
						_ = n.Conn.Publish("core-in", []byte("x"))
					}
					_, err := out.NextMsg(20 * time.Millisecond)
					return err == nil
				})
				st := waitJob(t, ctx, n, job, job+" to checkpoint", func(st control.JobStatus) bool {
					return st.LatestCheckpoint >= 1 || st.State.Terminal()
				})
				if i == 0 {
					t.Logf("%s running: %d subscriptions, %d goroutines", job, n.Conn.NumSubscriptions(), runtime.NumGoroutine())
				}
				if st.State != control.JobRunning {
					t.Fatalf("%s: %s (%s)", job, st.State, st.Reason)
				}
				if !failover {
					if _, err := n.API.CancelJob(ctx, job); err != nil {
						t.Fatal(err)
					}
					waitJob(t, ctx, n, job, job+" canceled", func(st control.JobStatus) bool { return st.State.Terminal() })
					return
				}
				// The poison goes in once a completed checkpoint covers
				// everything the stream holds: were the attempts restored
				// from one taken before the source read it (the output
				// waited for can be an earlier run's late commit into the
				// shared stream), the first attempt's checkpoint past it
				// would be progress, and the job would restart once more
				// than restart.attempts says.
				if c.inStream != "" {
					covered(t, ctx, n, job, c.inStream)
				}
				// Later runs, the next kinds' too, read their stream from the
				// start: not the poison, even if this one fails.
				if c.inStream != "" {
					t.Cleanup(func() {
						s, err := n.JS.Stream(ctx, c.inStream)
						if err == nil {
							err = s.Purge(ctx)
						}
						if err == nil {
							_, err = n.JS.Publish(ctx, map[string]string{"IN": "in", "PIN": "pin.k1"}[c.inStream], []byte("x"))
						}
						if err != nil {
							t.Errorf("purge the poison from %s: %v", c.inStream, err)
						}
					})
				}
				switch c.inStream {
				case "":
				case "IN":
					mustPublish(t, ctx, n.JS, "in", "!")
				default:
					mustPublish(t, ctx, n.JS, "pin.k1", "!")
				}
				// The job fails over until its restart strategy gives up:
				// restart.attempts bounds the restarts in a row without a
				// completed checkpoint that read on from the one restored.
				// A core source's poison is a new message each time, and
				// a checkpoint between two of them starts the count
				// again, so that job is canceled once it restarted more
				// often than that. A JetStream source's poison is read
				// again after every restore: an attempt that completes a
				// checkpoint before it reads it (a loaded machine) made
				// no progress, and the count goes on to the end.
				waitUntil(t, ctx, job+" to fail", func() bool {
					if c.inStream == "" {
						_ = n.Conn.Publish("core-in", []byte("!"))
					}
					st, err = n.API.Job(ctx, job)
					return err == nil && (st.State.Terminal() || st.Restarts > restarts)
				})
				if !st.State.Terminal() {
					// Refused when it failed meanwhile, giving up.
					if _, err := n.API.CancelJob(ctx, job); err != nil {
						if now, jerr := n.API.Job(ctx, job); jerr != nil || !now.State.Terminal() {
							t.Fatal(err)
						}
					}
					st = waitJob(t, ctx, n, job, job+" canceled", func(st control.JobStatus) bool { return st.State.Terminal() })
				}
				if st.State == control.JobFinished || st.Restarts < restarts ||
					c.inStream != "" && (st.State != control.JobFailed || st.Restarts != restarts) {
					t.Fatalf("%s: %s after %d restarts (%s); want failed after %d", job, st.State, st.Restarts, st.Reason, restarts)
				}
			}
			consumers := func() int {
				if c.inStream == "" {
					return 0
				}
				s, err := n.JS.Stream(ctx, c.inStream)
				if err != nil {
					t.Fatal(err)
				}
				count := 0
				for range s.ListConsumers(ctx).Info() {
					count++
				}
				return count
			}
			run(0, false) // what a first run starts once and keeps is the baseline
			subs, goroutines, cons := n.Conn.NumSubscriptions(), runtime.NumGoroutine(), consumers()
			// check waits until subscriptions, goroutines and consumers
			// are back to the baseline. Goroutines end, and consumers are
			// deleted, a moment after their task closed: a leak of one per
			// run shows as 10 more. The deadline is a hang guard.
			check := func(what string) {
				t.Helper()
				const slack = 3
				var gotSubs, gotGoroutines, gotCons int
				guard, stop := context.WithTimeout(ctx, 30*time.Second)
				defer stop()
				ok := poll(guard, func() bool {
					gotSubs, gotGoroutines, gotCons = n.Conn.NumSubscriptions(), runtime.NumGoroutine(), consumers()
					return gotSubs <= subs && gotGoroutines < goroutines+slack && gotCons <= cons
				})
				t.Logf("%s: %d subscriptions (%d after one run), %d goroutines (%d), %d consumers (%d)",
					what, gotSubs, subs, gotGoroutines, goroutines, gotCons, cons)
				if !ok && c.inStream != "" {
					// Which they are: a source's are ordered consumers,
					// named <prefix>_<serial>, filtered on its partitions.
					s, err := n.JS.Stream(ctx, c.inStream)
					if err != nil {
						t.Fatal(err)
					}
					for ci := range s.ListConsumers(ctx).Info() {
						t.Logf("consumer left on %s: %s, filter %q %v, start %d, delivered %+v",
							c.inStream, ci.Name, ci.Config.FilterSubject, ci.Config.FilterSubjects, ci.Config.OptStartSeq, ci.Delivered)
					}
				}
				if !ok {
					t.Errorf("after %s: %d subscriptions on the worker's connection (%d before), %d goroutines (%d before), %d consumers on %s (%d before)",
						what, gotSubs, subs, gotGoroutines, goroutines, gotCons, c.inStream, cons)
				}
			}
			for i := 1; i <= restarts; i++ {
				run(i, false)
			}
			check(fmt.Sprintf("%d cancels and resubmits", restarts))
			run(restarts+1, true)
			check(fmt.Sprintf("%d failovers", restarts))
		})
	}
}

// covered waits until a completed checkpoint of job has a source task at
// the position of every message the stream in holds, or, for a stream
// read by partitions, any source position past none (a checkpoint taken
// after its source read something).
func covered(t *testing.T, ctx context.Context, n *Node, job, in string) {
	t.Helper()
	s, err := n.JS.Stream(ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := host.SourcePosition(source.EncodeOffset(info.State.LastSeq))
	partitioned := info.Config.SubjectTransform != nil
	waitUntil(t, ctx, job+"'s checkpoint of all "+in+" holds", func() bool {
		cps, err := n.API.Checkpoints(ctx, job)
		if err != nil {
			return false
		}
		for _, cp := range cps {
			if cp.Status != control.CheckpointCompleted || cp.EarlierRun {
				continue
			}
			for _, m := range cp.Tasks {
				if pos := m[control.MetricSourcePosition]; pos == want || partitioned && pos != 0 {
					return true
				}
			}
		}
		return false
	})
}

func mustPublish(t *testing.T, ctx context.Context, js jetstream.JetStream, subject, data string) {
	t.Helper()
	if _, err := js.Publish(ctx, subject, []byte(data)); err != nil {
		t.Fatal(err)
	}
}

func streamMsgs(t *testing.T, ctx context.Context, js jetstream.JetStream, name string) uint64 {
	t.Helper()
	s, err := js.Stream(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}
