//go:build unix

package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirhq/weir/coordinator/control"
	"github.com/weirhq/weir/guests/go/guestbuild"
	"github.com/weirhq/weir/transport/embedded"
	"github.com/weirhq/weir/transport/embedded/embeddedtest"
)

// chaosSeedEnv names the environment variable that repeats a chaos test's
// schedule of kills: the seed a run logs.
const chaosSeedEnv = "WEIR_CHAOS_SEED"

// The proof a user would make of exactly-once: real weir processes — a
// coordinator-only weir up and two weir workers — killed with SIGKILL
// while the input streams in (workers several times, weir up once), each
// started again; a NATS server that outlives them all. The job copies
// every record (passthrough) and counts each key's records (keyedcount)
// into exactly-once JetStream sinks: once it finished, every input record
// is in the copy exactly once, and each key's counts go 1, 2, 3… up to
// its number of records, none skipped or repeated.
func TestChaosExactlyOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("chaos: starts and kills weir processes for about a minute")
	}
	c := newChaos(t, 20000, 40)
	c.run(chaosSchedule{workerKills: 5, upKills: 1})
	c.checkCopyExactlyOnce("COPY")
	c.checkCountsExactlyOnce("COUNTS")
}

// The same chaos with at-least-once checkpoints and sinks: no input record
// is missing from the copy, and no key's last count is below its number
// of records; repeats (and counts past it) are allowed, and logged.
func TestChaosAtLeastOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("chaos: starts and kills weir processes for about a minute")
	}
	c := newChaos(t, 10000, 40)
	c.atLeastOnce = true
	c.run(chaosSchedule{workerKills: 3, upKills: 1})
	c.checkCopyAtLeastOnce("COPY")
	c.checkCountsAtLeastOnce("COUNTS")
}

// chaos is one chaos test: the NATS server, the weir binary, the processes
// it runs, the job and its input.
type chaos struct {
	t           *testing.T
	ctx         context.Context
	rng         *rand.Rand
	bin         string // the weir binary
	url         string // the NATS server's client URL
	nc          *nats.Conn
	js          jetstream.JetStream
	records     int // input records, sequence numbers 1..records
	keys        int // distinct keys, k00..
	atLeastOnce bool

	mu    sync.Mutex
	procs []*chaosProc // every process started, for the logs and the cleanup
	seq   int          // processes started, for their names
}

// chaosProc is one weir process of a chaos test.
type chaosProc struct {
	name string // what#N, N counting the test's processes
	id   string // a worker's ID
	cmd  *exec.Cmd
	log  string        // its stdout and stderr
	done chan struct{} // closed once it exited
	err  error         // its exit, once done is closed
}

func newChaos(t *testing.T, records, keys int) *chaos {
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv(chaosSeedEnv); s != "" {
		var err error
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatalf("%s=%q: %v", chaosSeedEnv, s, err)
		}
	}
	t.Logf("seed %d (%s=%d repeats this schedule of kills)", seed, chaosSeedEnv, seed)
	// Hang guard only: the test takes about a minute.
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	t.Cleanup(cancel)

	dir := t.TempDir()
	bin := filepath.Join(dir, "weir")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build weir: %v\n%s", err, out)
	}
	srv := embeddedtest.Server(t, embedded.Config{})
	nc, js := embeddedtest.Connect(t, srv)
	c := &chaos{t: t, ctx: ctx, rng: rand.New(rand.NewPCG(seed, seed>>32)), bin: bin, url: srv.ClientURL(),
		nc: nc, js: js, records: records, keys: keys}
	// Registered after the server's shutdown, so run before it: nothing of
	// a failed test goes on running, and the server outlives every process.
	t.Cleanup(c.killAll)
	t.Cleanup(func() {
		if t.Failed() {
			c.logs()
		}
	})
	return c
}

// start starts the weir command line args as a process group of its own,
// its output in a file of the test's.
func (c *chaos) start(what string, args ...string) *chaosProc {
	c.t.Helper()
	c.mu.Lock()
	c.seq++
	p := &chaosProc{name: fmt.Sprintf("%s#%d", what, c.seq), done: make(chan struct{})}
	c.mu.Unlock()
	p.log = filepath.Join(c.t.TempDir(), strings.ReplaceAll(p.name, "#", "-")+".log")
	f, err := os.Create(p.log)
	if err != nil {
		c.t.Fatal(err)
	}
	defer f.Close()
	p.cmd = exec.Command(c.bin, args...)
	p.cmd.Stdout, p.cmd.Stderr = f, f
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := p.cmd.Start(); err != nil {
		c.t.Fatalf("start %s: %v", p.name, err)
	}
	c.mu.Lock()
	c.procs = append(c.procs, p)
	c.mu.Unlock()
	go func() { p.err = p.cmd.Wait(); close(p.done) }()
	return p
}

// kill sends SIGKILL to p's process group and waits for p to exit.
func (c *chaos) kill(p *chaosProc) {
	c.t.Helper()
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	select {
	case <-p.done:
	case <-c.ctx.Done():
		c.t.Fatalf("%s (pid %d) did not exit after SIGKILL", p.name, p.cmd.Process.Pid)
	}
}

// killAll kills every process group the test started.
func (c *chaos) killAll() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range c.procs {
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	}
	for _, p := range c.procs {
		<-p.done
	}
}

// await waits until p printed want, failing the test if p exits first.
func (c *chaos) await(p *chaosProc, want ...string) {
	c.t.Helper()
	for {
		b, _ := os.ReadFile(p.log)
		for _, w := range want {
			if strings.Contains(string(b), w) {
				return
			}
		}
		select {
		case <-p.done:
			c.t.Fatalf("%s exited (%v) before it said %q:\n%s", p.name, p.err, want, b)
		case <-c.ctx.Done():
			c.t.Fatalf("%s did not say %q:\n%s", p.name, want, b)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// up starts a coordinator-only weir up on the server.
func (c *chaos) up() *chaosProc {
	c.t.Helper()
	p := c.start("up", "up", "-nats", c.url, "-workers", "0", "-data", c.t.TempDir(), "-v")
	c.await(p, "weir is up")
	return p
}

// worker starts a weir worker on the server, and waits until it joined
// the coordinator (or, while none runs, connected).
func (c *chaos) worker() *chaosProc {
	c.t.Helper()
	c.mu.Lock()
	id := fmt.Sprintf("chaos-w%d", c.seq+1) // the process's number, start's
	c.mu.Unlock()
	p := c.start("worker", "worker", "-nats", c.url, "-id", id, "-data", c.t.TempDir(), "-atomic-batch", "20000", "-v")
	p.id = id
	c.await(p, " joined ", "no coordinator answers there yet")
	return p
}

// victim picks the worker to kill: one that runs tasks of the job's
// attempt, as far as the coordinator answers, else any.
func (c *chaos) victim(api *control.APIClient, workers []*chaosProc) int {
	ctx, cancel := context.WithTimeout(c.ctx, 5*time.Second)
	defer cancel()
	var busy []int
	if st, err := api.Job(ctx, "chaos"); err == nil {
		for i, w := range workers {
			for _, id := range st.Assignment {
				if id == w.id {
					busy = append(busy, i)
					break
				}
			}
		}
	}
	if len(busy) == 0 {
		return c.rng.IntN(len(workers))
	}
	return busy[c.rng.IntN(len(busy))]
}

// logs logs the output of every process the test started, the last 100
// lines of each.
func (c *chaos) logs() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range c.procs {
		b, _ := os.ReadFile(p.log)
		lines := strings.SplitAfter(string(b), "\n")
		if len(lines) > 100 {
			lines = append([]string{fmt.Sprintf("(%d lines before)\n", len(lines)-100)}, lines[len(lines)-100:]...)
		}
		c.t.Logf("--- %s (%s):\n%s", p.name, strings.Join(p.cmd.Args[1:], " "), strings.Join(lines, ""))
	}
}

// chaosSchedule says how many kills a chaos run makes.
type chaosSchedule struct {
	workerKills, upKills int
}

// spec writes the job: the input stream IN (key k00.., value the record's
// sequence number) copied by passthrough to COPY and counted per key by
// keyedcount to COUNTS, bounded at the last input record, so that the job
// finishes once its output is complete.
func (c *chaos) spec() string {
	c.t.Helper()
	dir := c.t.TempDir()
	mods := map[string]string{}
	for _, m := range []string{"passthrough", "keyedcount"} {
		p := filepath.Join(dir, m+".wasm")
		if err := os.WriteFile(p, guestbuild.MustBuild(c.t, "github.com/weirhq/weir/guests/go/examples/"+m), 0o644); err != nil {
			c.t.Fatal(err)
		}
		mods[m] = p
	}
	mode, guarantee := "exactly-once", "exactly-once"
	if c.atLeastOnce {
		mode, guarantee = "at-least-once", "at-least-once"
	}
	spec := fmt.Sprintf(`name: chaos
sources:
  - {name: in, kind: jetstream, stream: IN, filter: in.>, parallelism: 2, stop: %d}
operators:
  - {name: pass, module: %s, parallelism: 2, inputs: [{from: in}]}
  - {name: count, module: %s, parallelism: 2, inputs: [{from: in, partition: key}]}
sinks:
  - {name: copy, kind: jetstream, stream: COPY, subject: "copy.{key}", guarantee: %s, parallelism: 2, input: {from: pass}}
  - {name: counts, kind: jetstream, stream: COUNTS, subject: "counts.{key}", guarantee: %s, parallelism: 2, input: {from: count}}
checkpointing: {mode: %s, interval: 300ms, timeout: 30s}
restart: {strategy: fixed-delay, delay: 200ms, attempts: 1000}
`, c.records, mods["passthrough"], mods["keyedcount"], guarantee, guarantee, mode)
	p := filepath.Join(dir, "chaos.yaml")
	if err := os.WriteFile(p, []byte(spec), 0o644); err != nil {
		c.t.Fatal(err)
	}
	return p
}

// run starts weir up and two workers, submits the job with weir run,
// publishes the input while it kills and restarts processes as s says, at
// random moments, and waits for the job to finish.
func (c *chaos) run(s chaosSchedule) {
	t := c.t
	if _, err := c.js.CreateStream(c.ctx, jetstream.StreamConfig{Name: "IN", Subjects: []string{"in.>"}}); err != nil {
		t.Fatalf("create stream IN: %v", err)
	}
	up := c.up()
	workers := []*chaosProc{c.worker(), c.worker()}
	submit := c.start("run", "run", "-nats", c.url, "-for", "1s", "-show", "0", c.spec())
	select {
	case <-submit.done:
	case <-c.ctx.Done():
		t.Fatal("hang guard: weir run -for 1s did not return")
	}
	if submit.err != nil {
		b, _ := os.ReadFile(submit.log)
		t.Fatalf("weir run: %v\n%s", submit.err, b)
	}

	api := control.NewAPIClient(c.nc, "")
	published := make(chan error, 1)
	go func() { published <- c.publish() }()

	// The kills, in a random order, each after a random pause of 2-6 s.
	kills := slices.Repeat([]string{"worker"}, s.workerKills)
	kills = append(kills, slices.Repeat([]string{"up"}, s.upKills)...)
	c.rng.Shuffle(len(kills), func(i, j int) { kills[i], kills[j] = kills[j], kills[i] })
	start := time.Now()
	for _, k := range kills {
		pause := 2*time.Second + time.Duration(c.rng.Int64N(int64(4*time.Second)))
		select {
		case <-time.After(pause):
		case <-c.ctx.Done():
			t.Fatal("hang guard: the kills did not end")
		}
		switch k {
		case "worker":
			i := c.victim(api, workers)
			t.Logf("%5.1fs SIGKILL %s (pid %d)", time.Since(start).Seconds(), workers[i].name, workers[i].cmd.Process.Pid)
			c.kill(workers[i])
			workers[i] = c.worker()
			t.Logf("%5.1fs started %s", time.Since(start).Seconds(), workers[i].name)
		case "up":
			t.Logf("%5.1fs SIGKILL %s (pid %d)", time.Since(start).Seconds(), up.name, up.cmd.Process.Pid)
			c.kill(up)
			up = c.up()
			t.Logf("%5.1fs started %s", time.Since(start).Seconds(), up.name)
		}
	}
	if err := <-published; err != nil {
		t.Fatal(err)
	}
	t.Logf("%5.1fs input published; waiting for the job to finish", time.Since(start).Seconds())

	var st control.JobStatus
	for {
		ctx, cancel := context.WithTimeout(c.ctx, 10*time.Second)
		var err error
		st, err = api.Job(ctx, "chaos")
		cancel()
		if err == nil && (st.State == control.JobFinished || st.State == control.JobFailed || st.State == control.JobCanceled) {
			break
		}
		select {
		case <-time.After(200 * time.Millisecond):
		case <-c.ctx.Done():
			t.Fatalf("hang guard: the job did not end (last status %+v, err %v)", st, err)
		}
	}
	t.Logf("%5.1fs job %s after %d restarts, attempt %d, %d checkpoints: %s", time.Since(start).Seconds(),
		st.State, st.Restarts, st.Attempt, st.Checkpoints.Completed, st.Reason)
	if st.State != control.JobFinished {
		t.Fatalf("job %s: %s", st.State, st.Reason)
	}
	if st.Attempt < 2 {
		t.Fatal("no kill made the job run again: the output proves nothing")
	}
}

// publish publishes the input to IN, paced over about 30 s so that the
// kills fall amid it: record i (1..records) has key k(i mod keys), its
// sequence number as value and message id, so a publish repeated after a
// lost acknowledgement is stored once.
func (c *chaos) publish() error {
	const batch = 100
	pace := 30 * time.Second / time.Duration(c.records/batch)
	tick := time.NewTicker(pace)
	defer tick.Stop()
	for from := 1; from <= c.records; from += batch {
		var acks []jetstream.PubAckFuture
		for i := from; i < from+batch && i <= c.records; i++ {
			key := fmt.Sprintf("k%02d", i%c.keys)
			m := nats.NewMsg("in." + key)
			m.Header.Set("Weir-Key", key)
			m.Data = []byte(strconv.Itoa(i))
			a, err := c.js.PublishMsgAsync(m, jetstream.WithMsgID(strconv.Itoa(i)))
			if err != nil {
				return fmt.Errorf("publish input %d: %w", i, err)
			}
			acks = append(acks, a)
		}
		for _, a := range acks {
			select {
			case <-a.Ok():
			case err := <-a.Err():
				return fmt.Errorf("publish input %s: %w", a.Msg().Data, err)
			case <-c.ctx.Done():
				return errors.New("hang guard: input not acknowledged")
			}
		}
		select {
		case <-tick.C:
		case <-c.ctx.Done():
			return errors.New("hang guard: publishing the input")
		}
	}
	return nil
}

// outputRecord is one message of a sink's stream.
type outputRecord struct {
	seq   uint64 // stream sequence
	key   string // the subject's last token
	value string
}

// output reads every message of stream.
func (c *chaos) output(stream string) []outputRecord {
	c.t.Helper()
	s, err := c.js.Stream(c.ctx, stream)
	if err != nil {
		c.t.Fatalf("stream %s: %v", stream, err)
	}
	info, err := s.Info(c.ctx)
	if err != nil {
		c.t.Fatalf("stream %s: %v", stream, err)
	}
	n := int(info.State.Msgs)
	cons, err := s.OrderedConsumer(c.ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		c.t.Fatalf("stream %s: consumer: %v", stream, err)
	}
	out := make([]outputRecord, 0, n)
	for len(out) < n {
		batch, err := cons.Fetch(min(n-len(out), 1000), jetstream.FetchMaxWait(10*time.Second))
		if err != nil {
			c.t.Fatalf("stream %s: fetch: %v", stream, err)
		}
		for m := range batch.Messages() {
			md, err := m.Metadata()
			if err != nil {
				c.t.Fatalf("stream %s: %v", stream, err)
			}
			subj := m.Subject()
			out = append(out, outputRecord{seq: md.Sequence.Stream, key: subj[strings.LastIndexByte(subj, '.')+1:], value: string(m.Data())})
		}
		if err := batch.Error(); err != nil {
			c.t.Fatalf("stream %s: fetch: %v", stream, err)
		}
	}
	return out
}

// copies counts how often each input record (by sequence number) is in
// stream, failing the test for a record that is no input's.
func (c *chaos) copies(stream string) []int {
	c.t.Helper()
	seen := make([]int, c.records+1)
	for _, r := range c.output(stream) {
		i, err := strconv.Atoi(r.value)
		if err != nil || i < 1 || i > c.records || r.key != fmt.Sprintf("k%02d", i%c.keys) {
			c.t.Fatalf("%s: stream sequence %d holds %q on key %q: no input record's", stream, r.seq, r.value, r.key)
		}
		seen[i]++
	}
	return seen
}

// checkCopyExactlyOnce checks that stream holds every input record once.
func (c *chaos) checkCopyExactlyOnce(stream string) {
	c.t.Helper()
	seen := c.copies(stream)
	var missing, repeated []int
	for i := 1; i <= c.records; i++ {
		switch {
		case seen[i] == 0:
			missing = append(missing, i)
		case seen[i] > 1:
			repeated = append(repeated, i)
		}
	}
	if len(missing) > 0 {
		c.t.Errorf("%s: %d of %d input records missing: %s", stream, len(missing), c.records, ranges(missing))
	}
	if len(repeated) > 0 {
		var b strings.Builder
		for j, i := range repeated {
			if j == 50 {
				fmt.Fprintf(&b, " …")
				break
			}
			fmt.Fprintf(&b, " %d×%d", i, seen[i])
		}
		c.t.Errorf("%s: %d input records repeated (record×copies):%s", stream, len(repeated), b.String())
	}
}

// checkCopyAtLeastOnce checks that stream holds every input record, and
// logs how many it holds more than once.
func (c *chaos) checkCopyAtLeastOnce(stream string) {
	c.t.Helper()
	seen := c.copies(stream)
	var missing []int
	repeats := 0
	for i := 1; i <= c.records; i++ {
		if seen[i] == 0 {
			missing = append(missing, i)
		}
		repeats += max(seen[i]-1, 0)
	}
	if len(missing) > 0 {
		c.t.Errorf("%s: %d of %d input records missing: %s", stream, len(missing), c.records, ranges(missing))
	}
	c.t.Logf("%s: every input record stored, %d repeats (at-least-once)", stream, repeats)
}

// checkCountsExactlyOnce checks that each key's counts in stream go 1, 2,
// 3… up to its number of input records.
func (c *chaos) checkCountsExactlyOnce(stream string) {
	c.t.Helper()
	want := c.perKey()
	last := make(map[string]int)
	bad := 0
	for _, r := range c.output(stream) {
		n, err := strconv.Atoi(r.value)
		if err != nil {
			c.t.Fatalf("%s: stream sequence %d holds %q: no count", stream, r.seq, r.value)
		}
		if n != last[r.key]+1 {
			if bad++; bad <= 20 {
				what := "skipped " + ranges(seqTo(last[r.key]+1, n-1))
				if n <= last[r.key] {
					what = "repeated"
				}
				c.t.Errorf("%s: key %s: count %d at stream sequence %d after %d: %s", stream, r.key, n, r.seq, last[r.key], what)
			}
		}
		last[r.key] = n
	}
	if bad > 20 {
		c.t.Errorf("%s: %d counts out of order in all", stream, bad)
	}
	for k, n := range want {
		if last[k] != n {
			c.t.Errorf("%s: key %s: last count %d, want %d", stream, k, last[k], n)
		}
	}
}

// checkCountsAtLeastOnce checks that each key's last count in stream is
// its number of input records at least, and logs by how many they are
// over.
func (c *chaos) checkCountsAtLeastOnce(stream string) {
	c.t.Helper()
	last := make(map[string]int)
	for _, r := range c.output(stream) {
		n, err := strconv.Atoi(r.value)
		if err != nil {
			c.t.Fatalf("%s: stream sequence %d holds %q: no count", stream, r.seq, r.value)
		}
		last[r.key] = n
	}
	over := 0
	for k, n := range c.perKey() {
		if last[k] < n {
			c.t.Errorf("%s: key %s: last count %d, below its %d input records", stream, k, last[k], n)
		}
		over += max(last[k]-n, 0)
	}
	c.t.Logf("%s: no key counted short, %d counted more than once in all (at-least-once)", stream, over)
}

// perKey returns each key's number of input records.
func (c *chaos) perKey() map[string]int {
	want := make(map[string]int)
	for i := 1; i <= c.records; i++ {
		want[fmt.Sprintf("k%02d", i%c.keys)]++
	}
	return want
}

// seqTo returns from..to.
func seqTo(from, to int) []int {
	var s []int
	for i := from; i <= to; i++ {
		s = append(s, i)
	}
	return s
}

// ranges writes sorted numbers as ranges: 3-7 9 12-13, the first 50.
func ranges(ns []int) string {
	var b strings.Builder
	for i, n := 0, 0; i < len(ns); n++ {
		if n == 50 {
			b.WriteString(" …")
			break
		}
		j := i
		for j+1 < len(ns) && ns[j+1] == ns[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		if j > i {
			fmt.Fprintf(&b, "%d-%d", ns[i], ns[j])
		} else {
			fmt.Fprintf(&b, "%d", ns[i])
		}
		i = j + 1
	}
	return b.String()
}
