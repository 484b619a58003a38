package main

import (
	"bytes"
	"context"
	"maps"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/synadia-io/orbit.go/jetstreamext"

	"github.com/weirhq/weir/coordinator/jobspec"
	"github.com/weirhq/weir/transport/embedded/embeddedtest"
	"github.com/weirhq/weir/transport/sink"
)

// weir run's records out of a jetstream sink are what its stream stored,
// not what was published on its subjects: a commit published again after
// a recovery (JetStream drops it by message id) and the empty message that
// ends a fast batch are no output. Counted from the subjects, a bounded
// job's crash-and-resume showed 420000 records out for the 400000 its
// stream held, and a failed at-least-once job an empty record.
func TestRunCountsWhatTheSinkStreamStores(t *testing.T) {
	nc, js := embeddedtest.JetStream(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "OUT", Subjects: []string{"out.>", "other"},
		Duplicates: time.Minute, AllowBatchPublish: true}); err != nil {
		t.Fatal(err)
	}
	publish := func(subject, key, id string) {
		t.Helper()
		m := nats.NewMsg(subject)
		m.Header.Set(sink.KeyHeader, key)
		m.Data = []byte(key)
		if _, err := js.PublishMsg(ctx, m, jetstream.WithMsgID(id)); err != nil {
			t.Fatal(err)
		}
	}
	publish("out.before", "before", "0") // stored before the job: not its output

	var buf bytes.Buffer
	spec := jobspec.Sink{Name: "out", Kind: jobspec.KindJetStream, Stream: "OUT", Subject: "out.{key}", Guarantee: jobspec.ExactlyOnce}
	out := &output{std: Stdio{Out: &buf}, show: -1, latest: map[string]string{}, bySink: map[string]int{}, since: map[string]uint64{},
		js: js, sinks: []jobspec.Sink{spec}}
	stop, err := out.watch(ctx, nc, spec)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()

	publish("out.a", "a", "1")
	publish("out.a", "a", "1") // a re-commit: dropped by its id
	publish("other", "x", "2") // not the sink's subject
	fp, err := jetstreamext.NewFastPublisher(js, jetstreamext.FastPublishFlowControl{Flow: 10, MaxOutstandingAcks: 2, AckTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	m := nats.NewMsg("out.b")
	m.Header.Set(sink.KeyHeader, "b")
	m.Data = []byte("b")
	if _, err := fp.AddMsg(m); err != nil {
		t.Fatal(err)
	}
	if _, err := fp.Close(ctx); err != nil { // sends the end-of-batch message on out.b
		t.Fatal(err)
	}
	// summary handles every message delivered so far first: the
	// end-of-batch message too, were it counted.
	summary(ctx, &buf, out, 0)
	got := buf.String()
	if !strings.Contains(got, "\n2 records out\n") || strings.Contains(got, "[out] \t") || strings.Contains(got, "[out] \n") {
		t.Errorf("weir run printed:\n%s\nwant 2 records out and no empty record", got)
	}
}

// weir run sums up only once it handled every record its sinks published
// before: the records NATS delivered before the job's status said it
// ended, which the subscriptions' handlers may not have taken yet. (A
// core NATS sink's: a JetStream sink's are read from its stream, and the
// summary waits until that read caught up with the stream.) Here
// the connection weir run watches the sink on goes through a proxy that
// holds what the server sends from the moment the records are published
// until the client unsubscribes (the summary ending the watch). weir run
// printed the summary first, without these records in its latest values,
// and the records after it.
func TestRunSumsUpOnceItHandledTheRecords(t *testing.T) {
	nc, js := embeddedtest.JetStream(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "OUT", Subjects: []string{"out.>"}, Duplicates: time.Minute}); err != nil {
		t.Fatal(err)
	}
	proxy := newHoldingProxy(t, nc.ConnectedAddr())
	wc, err := nats.Connect("nats://" + proxy.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer wc.Close()

	var buf bytes.Buffer
	spec := jobspec.Sink{Name: "out", Kind: jobspec.KindNATS, Subject: "out.{key}"}
	out := &output{std: Stdio{Out: &buf}, show: -1, latest: map[string]string{}, bySink: map[string]int{}, since: map[string]uint64{},
		js: js, sinks: []jobspec.Sink{spec}}
	if _, err := out.watch(ctx, wc, spec); err != nil {
		t.Fatal(err)
	}
	if err := wc.Flush(); err != nil { // the server has the subscription
		t.Fatal(err)
	}
	proxy.hold()
	for _, key := range []string{"a", "b", "c"} {
		m := nats.NewMsg("out." + key)
		m.Header.Set(sink.KeyHeader, key)
		m.Data = []byte("v" + key)
		if _, err := js.PublishMsg(ctx, m, jetstream.WithMsgID(key)); err != nil {
			t.Fatal(err)
		}
	}
	// The server may send the ack of a record (from the stream's goroutine)
	// before it sends the record to the watch (from the publisher's): a
	// flush of the publisher's connection comes after it did both.
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	summary(ctx, &buf, out, 3)
	want := "[out] a\tva\n[out] b\tvb\n[out] c\tvc\n3 records in, 3 records out\nlatest value per key:\n" +
		"  [out] a\tva\n  [out] b\tvb\n  [out] c\tvc\n"
	if got := buf.String(); got != want {
		t.Errorf("weir run printed:\n%s\nwant:\n%s", got, want)
	}
}

// holdingProxy forwards one TCP connection to a NATS server; once hold was
// called, what the server sends waits until the client unsubscribes.
type holdingProxy struct {
	addr     string
	held     chan struct{} // closed by hold
	released chan struct{} // closed when the client sent UNSUB after hold
	once     sync.Once
}

func newHoldingProxy(t *testing.T, target string) *holdingProxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &holdingProxy{addr: l.Addr().String(), held: make(chan struct{}), released: make(chan struct{})}
	done := make(chan struct{})
	var conns []net.Conn
	var mu sync.Mutex
	t.Cleanup(func() {
		close(done)
		l.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				return
			}
			mu.Lock()
			conns = append(conns, c, s)
			mu.Unlock()
			go p.forward(s, c, func([]byte) {}, func() bool { return p.holding(done) })
			go p.forward(c, s, func(b []byte) {
				if bytes.Contains(b, []byte("UNSUB ")) && p.isHeld() {
					p.once.Do(func() { close(p.released) })
				}
			}, func() bool { return true })
		}
	}()
	return p
}

// hold makes what the server sends from now on wait for the client's UNSUB.
func (p *holdingProxy) hold() { close(p.held) }

func (p *holdingProxy) isHeld() bool {
	select {
	case <-p.held:
		return true
	default:
		return false
	}
}

// holding waits, while held, until the client unsubscribed or done; it
// reports whether to go on.
func (p *holdingProxy) holding(done <-chan struct{}) bool {
	if !p.isHeld() {
		return true
	}
	select {
	case <-p.released:
		return true
	case <-done:
		return false
	}
}

// forward copies from to to, showing each read to seen and writing it
// once pass says so.
func (p *holdingProxy) forward(from, to net.Conn, seen func([]byte), pass func() bool) {
	b := make([]byte, 64<<10)
	for {
		n, err := from.Read(b)
		if n > 0 {
			seen(b[:n])
			if !pass() {
				return
			}
			if _, err := to.Write(b[:n]); err != nil {
				return
			}
		}
		if err != nil {
			to.Close()
			return
		}
	}
}

// weir run's output of an exactly-once sink is what its stream stored,
// the records a consumer of the stream sees: here the stream takes 2
// messages and refuses the rest, so every commit fails and every attempt
// publishes the checkpoint's records again, into the refusal. Counted
// from the sink's subjects (the stream has a limit, so the summary did not
// count what it stored), weir run printed each attempt's publishes and
// summed them up as output — many times what was stored.
func TestRunCountsOnlyCommittedOutput(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a job: skipped in -short")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	n := startUp(t, ctx)
	if _, err := n.JS.CreateStream(ctx, jetstream.StreamConfig{Name: "OUT", Subjects: []string{"out"}, Duplicates: 5 * time.Minute,
		MaxMsgs: 2, Discard: jetstream.DiscardNew, AllowAtomicPublish: true, AllowBatchPublish: true}); err != nil {
		t.Fatal(err)
	}
	mod, err := filepath.Abs("../../guests/wat/passthrough.wasm")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	t.Chdir(dir)
	in := filepath.Join(dir, "in.txt")
	if err := os.WriteFile(in, []byte("a\nb\nc\nd\ne\nf\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	spec := filepath.Join(dir, "refused.yaml")
	if err := os.WriteFile(spec, []byte(`name: refused
sources: [{name: in, kind: jetstream, stream: IN}]
operators: [{name: op, module: `+mod+`, inputs: [{from: in}]}]
sinks: [{name: out, kind: jetstream, stream: OUT, subject: out, input: {from: op}}]
checkpointing: {interval: 100ms}
restart: {strategy: fixed-delay, delay: 100ms, attempts: 3}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	code := run(ctx, []string{"run", "-nats", n.Server.ClientURL(), spec, "-input", in}, Stdio{In: strings.NewReader(""), Out: &out, Err: &errb})
	if code != 1 || !strings.Contains(errb.String(), "weir: job refused failed: ") {
		t.Fatalf("exit %d, want 1 with the job failed:\n%s\n%s", code, out.String(), errb.String())
	}
	st, err := n.JS.Stream(ctx, "OUT")
	if err != nil {
		t.Fatal(err)
	}
	stored := st.CachedInfo().State.Msgs
	if stored != 2 {
		t.Fatalf("stream OUT stores %d messages, want its limit, 2:\n%s", stored, out.String())
	}
	if !strings.Contains(out.String(), "\n6 records in, 2 records out\n") {
		t.Errorf("weir run does not count the 2 records stored as its output:\n%s", out.String())
	}
	if printed := strings.Count(out.String(), "\n[out] "); printed != 2 {
		t.Errorf("weir run printed %d output records, want the 2 stored:\n%s", printed, out.String())
	}
}

// A summary whose watch of a JetStream sink's stream cannot catch up
// says its figures are partial, and where to see the real ones, and still
// drains the other sinks' subscriptions. Here the sink's stream is
// deleted under the watch after it stored a record: the watch never
// catches up, nor can the stream's count be taken. weir run hung (the
// ordered consumer's Info waits for its lock while the consumer tries,
// forever, to be created again); bounded, it gave up on settling without
// draining the core NATS sink's subscription, and summed up the watch's
// count as if it were the output, saying nothing.
func TestRunSummarySaysWhatIsPartial(t *testing.T) {
	nc, js := embeddedtest.JetStream(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "OUT", Subjects: []string{"out.>"}})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	js1 := jobspec.Sink{Name: "out", Kind: jobspec.KindJetStream, Stream: "OUT", Subject: "out.{key}", Guarantee: jobspec.ExactlyOnce}
	core := jobspec.Sink{Name: "side", Kind: jobspec.KindNATS, Subject: "side"}
	out := &output{std: Stdio{Out: &buf}, show: -1, latest: map[string]string{}, bySink: map[string]int{}, since: map[string]uint64{},
		js: js, sinks: []jobspec.Sink{js1, core}}
	for _, s := range []jobspec.Sink{js1, core} {
		if _, err := out.watch(ctx, nc, s); err != nil {
			t.Fatal(err)
		}
	}
	if _, ok := out.since["out"]; !ok {
		t.Fatal("the sink's stream is not counted: the test needs it to be")
	}
	m := nats.NewMsg("out.a")
	m.Header.Set(sink.KeyHeader, "a")
	m.Data = []byte("va")
	if _, err := js.PublishMsg(ctx, m); err != nil {
		t.Fatal(err)
	}
	if err := js.DeleteStream(ctx, st.CachedInfo().Config.Name); err != nil {
		t.Fatal(err)
	}
	summary(ctx, &buf, out, 1)
	got := buf.String()
	want := "partial summary: the watch of sink out (stream OUT) had not caught up; the records out and the latest values miss some of their records (what a stream holds: weir stream info OUT)\n"
	if !strings.Contains(got, want) {
		t.Errorf("weir run printed:\n%s\nwant a line:\n%s", got, want)
	}
	if out.subs[0].sub.IsValid() {
		t.Error("the core NATS sink's subscription was not drained")
	}
}

// With several sinks the summary counts each one's records: a sink on
// an output port its operator emits nothing to shows as empty
// (jobspec.OutputPorts warns of it before the run).
func TestSummaryCountsEachSink(t *testing.T) {
	out := &output{sinks: []jobspec.Sink{{Name: "alo", Kind: jobspec.KindNATS}, {Name: "eo", Kind: jobspec.KindNATS}},
		bySink: map[string]int{"alo": 22000}, n: 22000, since: map[string]uint64{}}
	var b bytes.Buffer
	summary(context.Background(), &b, out, 22000)
	if want := "22000 records in, 22000 records out (alo 22000, eo 0)\n"; b.String() != want {
		t.Errorf("summary %q; want %q", b.String(), want)
	}
	out = &output{sinks: []jobspec.Sink{{Name: "one", Kind: jobspec.KindNATS}}, bySink: map[string]int{"one": 3}, n: 3, since: map[string]uint64{}}
	b.Reset()
	summary(context.Background(), &b, out, 3)
	if want := "3 records in, 3 records out\n"; b.String() != want {
		t.Errorf("summary of one sink %q; want %q", b.String(), want)
	}
}

// The summary's latest value per key shows as many keys as -show allows
// records, all with -show -1 (a trial's -show 2 printed 30 keys, and
// -show -1 stopped at 30).
func TestSummaryShowsKeysAsShowSays(t *testing.T) {
	latest := map[string]string{}
	for i, k := range []string{"a", "b", "c", "d", "e"} {
		latest["out\x00"+k] = strconv.Itoa(i)
	}
	for _, c := range []struct {
		show int
		want string
	}{
		{2, "latest value per key:\n  [out] a\t0\n  [out] b\t1\n  … 3 more keys (-show)\n"},
		{-1, "latest value per key:\n  [out] a\t0\n  [out] b\t1\n  [out] c\t2\n  [out] d\t3\n  [out] e\t4\n"},
		{0, "latest value per key: 5 keys (-show N lists them)\n"},
	} {
		var buf bytes.Buffer
		out := &output{std: Stdio{Out: &buf}, show: c.show, latest: maps.Clone(latest), bySink: map[string]int{}, since: map[string]uint64{}}
		summary(context.Background(), &buf, out, 5)
		if _, got, _ := strings.Cut(buf.String(), "records out\n"); got != c.want {
			t.Errorf("-show %d: printed\n%s\nwant the keys\n%s", c.show, buf.String(), c.want)
		}
	}
}

// Two jobs writing exactly-once to one stream and subject: each weir run
// counts its own job's records alone (a trial's two jobs of 5 000 records
// each were each summed up as "10000 records out"), as weir job output
// shows them: an exactly-once sink's message ids start with its job's
// name.
func TestRunCountsOnlyItsJobsOutputOnASharedSubject(t *testing.T) {
	nc, js := embeddedtest.JetStream(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "SHARED", Subjects: []string{"shared"}}); err != nil {
		t.Fatal(err)
	}
	spec := jobspec.Sink{Name: "out", Kind: jobspec.KindJetStream, Stream: "SHARED", Subject: "shared", Guarantee: jobspec.ExactlyOnce}
	var buf bytes.Buffer
	out := &output{std: Stdio{Out: &buf}, show: 0, latest: map[string]string{}, bySink: map[string]int{}, since: map[string]uint64{},
		js: js, sinks: []jobspec.Sink{spec}, job: "a1"}
	stop, err := out.watch(ctx, nc, spec)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	for i := range 5 {
		for _, job := range []string{"a1", "a2"} {
			if _, err := js.Publish(ctx, "shared", []byte("x"), jetstream.WithMsgID(job+"/out-0/1/"+strconv.Itoa(i))); err != nil {
				t.Fatal(err)
			}
		}
	}
	summary(ctx, &buf, out, 5)
	if !strings.Contains(buf.String(), "5 records in, 5 records out\n") {
		t.Errorf("summary:\n%s\nwant 5 records out, job a1's alone (the stream holds 10)", buf.String())
	}
}
