package node

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/weirhq/weir/cmd/weir/internal/metrics"
	"github.com/weirhq/weir/coordinator/control"
	"github.com/weirhq/weir/coordinator/jobspec"
	"github.com/weirhq/weir/guests/go/guestbuild"
)

// TestCoreSourceDropsAreCounted runs core NATS subject → a real operator
// held at its first call → core NATS subject, with the source's
// pending-messages at 1000, and publishes far more than the channels,
// the source's batch and that limit hold. The NATS client drops the rest:
// the source task reports what its subscription holds (UNREAD, in bytes
// too) and what it dropped, weir_source_dropped_messages_total says it,
// the worker logs it naming the job and the task, and once the operator
// goes on, dropped = published − delivered.
func TestCoreSourceDropsAreCounted(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	mod := filepath.Join(dir, "uppercase.wasm")
	if err := os.WriteFile(mod, guestbuild.MustBuild(t, "github.com/weirhq/weir/guests/go/examples/uppercase"), 0o644); err != nil {
		t.Fatal(err)
	}
	inj := &injector{}
	logs := &lockedBuffer{}
	n, err := Start(ctx, Options{DataDir: dir, Port: -1, Coordinator: true, Workers: 1, WorkerID: "w1",
		HeartbeatTimeout: testHeartbeatTimeout, HeartbeatInterval: 100 * time.Millisecond, Hooks: inj.hooks(),
		Log: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Close)
	const limit = 1000
	spec, err := jobspec.Parse("drops.yaml", []byte(`name: drops
sources: [{name: in, kind: nats, subject: in, pending-messages: `+strconv.Itoa(limit)+`}]
operators: [{name: upper, module: `+mod+`, inputs: [{from: in}]}]
sinks: [{name: out, kind: nats, subject: out, input: {from: upper}}]
checkpointing: {disabled: true}
restart: {strategy: none}
`), jobspec.Options{})
	if err != nil {
		t.Fatal(err)
	}
	outConn, err := n.Dial()
	if err != nil {
		t.Fatal(err)
	}
	defer outConn.Close()
	out, err := outConn.SubscribeSync("out")
	if err != nil {
		t.Fatal(err)
	}
	if err := out.SetPendingLimits(-1, -1); err != nil {
		t.Fatal(err)
	}
	if err := outConn.Flush(); err != nil {
		t.Fatal(err)
	}
	st, err := n.API.Submit(ctx, control.SubmitRequest{Spec: spec})
	if err != nil {
		t.Fatal(err)
	}
	if g := st.Guarantees[0].String(); !strings.Contains(g, "past the source's pending limit") || !strings.Contains(g, "pending limit 1000 messages or 64MiB per subtask") {
		t.Errorf("the source's guarantee: %s", g)
	}
	// The source subscribes as its task is deployed: once the job runs.
	waitJob(t, ctx, n, "drops", "the job running", running)
	release := inj.hold(t)
	// 100 bytes a message: 1 MiB of channel holds some 9 000 of them,
	// the source's batch up to 4096, its subscription 1000.
	data := []byte(strings.Repeat("x", 100))
	published := int64(0)
	publish := func(count int) {
		for range count {
			if err := n.Conn.Publish("in", data); err != nil {
				t.Fatal(err)
			}
		}
		// The server sends the connection the messages before the pong
		// to its ping: the source's subscription, on the same
		// connection, has taken or dropped them all once Flush returns.
		if err := n.Conn.Flush(); err != nil {
			t.Fatal(err)
		}
		published += int64(count)
	}
	source := func(st control.JobStatus) control.TaskStatus {
		for _, ts := range st.Tasks {
			if ts.Task == "in-0" {
				return ts
			}
		}
		return control.TaskStatus{}
	}
	// A burst drops past the limit even while the channels still take
	// records, which then drain the subscription: more goes out until
	// they are full too, the subscription holds what comes, and drops.
	publish(40_000)
	st = waitJob(t, ctx, n, "drops", "the source's drops reported, with messages held", func(st control.JobStatus) bool {
		src := source(st)
		c, p := src.Stats.CoreSubscription, src.Stats.SourcePending
		if c != nil && c.Dropped > 0 && p != nil && *p > 0 && c.PendingBytes > 0 || st.State.Terminal() {
			return true
		}
		publish(2000)
		return false
	})
	src := source(st)
	c := src.Stats.CoreSubscription
	if st.State != control.JobRunning || c.LimitMessages != limit || c.LimitBytes != jobspec.DefaultPendingBytes ||
		src.Stats.SourcePending == nil || *src.Stats.SourcePending == 0 || c.PendingBytes == 0 {
		t.Fatalf("while the operator is held: job %s, source %+v, subscription %+v", st.State, src.Stats, c)
	}
	// The limit bounds the buffer: the worker's memory.
	held := *src.Stats.SourcePending
	if c.PendingBytes > limit*int64(2*len(data)) {
		t.Errorf("the subscription holds %d bytes past its limit of %d messages of %d bytes", c.PendingBytes, limit, len(data))
	}

	srv := httptest.NewServer(metrics.Handler(metrics.NewCollector(n.Manager, 0)))
	defer srv.Close()
	got := scrape(t, srv.URL)
	for _, re := range []string{
		`\nweir_source_dropped_messages_total\{job="drops",task="in-0",worker="w1"\} [1-9]\d*\n`,
		`\nweir_source_pending_messages\{job="drops",task="in-0",worker="w1"\} [1-9]\d*\n`,
		`\nweir_source_pending_bytes\{job="drops",task="in-0",worker="w1"\} [1-9]\d*\n`,
	} {
		if !regexp.MustCompile(re).MatchString(got) {
			t.Errorf("the scrape lacks %s", re)
		}
	}
	waitUntil(t, ctx, "the worker's log of the drops", func() bool { return strings.Contains(logs.String(), "dropped_in_all=") })
	if l := logs.String(); !strings.Contains(l, "core NATS source dropped messages") || !strings.Contains(l, "job=drops task=in-0 subject=in dropped=") ||
		strings.Contains(l, "slow consumer") {
		t.Errorf("the log:\n%s", l)
	}

	release()
	delivered := 0
	st = waitJob(t, ctx, n, "drops", "every message delivered or dropped", func(st control.JobStatus) bool {
		for {
			if _, err := out.NextMsg(10 * time.Millisecond); err != nil {
				break
			}
			delivered++
		}
		c := source(st).Stats.CoreSubscription
		return c != nil && int64(delivered)+c.Dropped >= published || st.State.Terminal()
	})
	src = source(st)
	if dropped := src.Stats.CoreSubscription.Dropped; st.State != control.JobRunning || dropped != published-int64(delivered) {
		t.Errorf("job %s: %d delivered, %d dropped of %d published", st.State, delivered, dropped, published)
	}
	t.Logf("%d published, %d delivered, %d dropped; %d held in the subscription and the source's batch (%d bytes in the subscription) while the operator was held",
		published, delivered, src.Stats.CoreSubscription.Dropped, held, c.PendingBytes)
	st = waitJob(t, ctx, n, "drops", "the subscription empty", func(st control.JobStatus) bool {
		p := source(st).Stats.SourcePending
		return p != nil && *p == 0 || st.State.Terminal()
	})
	if c := source(st).Stats.CoreSubscription; c == nil || c.PendingBytes != 0 {
		t.Errorf("the subscription, emptied: %+v", c)
	}
}

// scrape returns what a metrics endpoint at url serves.
func scrape(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("scrape: %d %s %v", resp.StatusCode, b, err)
	}
	return string(b)
}
