package node

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirhq/weir/coordinator/control"
	"github.com/weirhq/weir/coordinator/jobspec"
)

// TestLargeRecordsKeepTheConnection moves records of 100 KB from a
// stream through an operator into an exactly-once sink, and from the
// stream into a core sink,
// on one node whose coordinator, worker and tasks share one connection to
// the embedded server, as weir up's do. The source asked for 4096
// messages at a time, 400 MB of them, which the server queued to the
// connection at once and, past its max_pending (64 MiB), cut it as a
// slow consumer: the connection dropped every few seconds, the core sink
// failed its task at each drop, and a job like this one took many
// attempts. Now nothing drops: the connection never reconnects, the
// server counts no slow consumer, the job finishes in its first attempt,
// and each record reaches each sink once.
func TestLargeRecordsKeepTheConnection(t *testing.T) {
	if testing.Short() {
		t.Skip("moves 200 MB through embedded NATS: skipped in -short")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	n, mods := oneNode(t, ctx, "passthrough")
	js := n.JS
	mustStream(t, ctx, js, jetstream.StreamConfig{Name: "IN", Subjects: []string{"in.>"}})
	mustSinkStream(t, ctx, js, "OUT", "out")

	const count, size = 2000, 100_000
	pub, err := n.Dial()
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	pjs, err := jetstream.New(pub)
	if err != nil {
		t.Fatal(err)
	}
	value := bytes.Repeat([]byte("0123456789"), size/10)
	for i := range count {
		m := nats.NewMsg("in.x")
		m.Header.Set("Weir-Key", strconv.Itoa(i))
		m.Data = value
		if _, err := pjs.PublishMsgAsync(m); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-pjs.PublishAsyncComplete():
	case <-ctx.Done():
		t.Fatal(ctx.Err())
	}

	// The core sink's subscriber, on a connection of its own.
	var (
		mu   sync.Mutex
		core = map[string]int{}
		bad  []string
	)
	sub, err := pub.Subscribe("dash", func(m *nats.Msg) {
		mu.Lock()
		defer mu.Unlock()
		core[m.Header.Get("Weir-Key")]++
		if !bytes.Equal(m.Data, value) {
			bad = append(bad, m.Header.Get("Weir-Key"))
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := sub.SetPendingLimits(-1, -1); err != nil {
		t.Fatal(err)
	}
	if err := pub.Flush(); err != nil {
		t.Fatal(err)
	}

	spec, err := jobspec.Parse("big.yaml", fmt.Appendf(nil, `name: big
sources: [{name: in, kind: jetstream, stream: IN, stop: end}]
operators: [{name: op, module: %s, inputs: [{from: in}]}]
sinks:
  - {name: out, kind: jetstream, stream: OUT, subject: out, guarantee: exactly-once, input: {from: op}}
  - {name: dash, kind: nats, subject: dash, input: {from: in}}
checkpointing: {interval: 200ms}
restart: {strategy: none}
`, mods["passthrough"]), jobspec.Options{})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := n.API.Submit(ctx, control.SubmitRequest{Spec: spec}); err != nil {
		t.Fatal(err)
	}
	st := waitJob(t, ctx, n, "big", "the job to end", func(st control.JobStatus) bool { return st.State.Terminal() })
	t.Logf("%d records of %d bytes in %s; %d reconnects, %d slow consumers", count, size, time.Since(start).Round(time.Millisecond),
		n.Conn.Stats().Reconnects, n.Server.NATSServer().NumSlowConsumers())
	if st.State != control.JobFinished || st.Restarts != 0 {
		t.Fatalf("job %s after %d restarts (%s), failures %+v: want finished in its first attempt", st.State, st.Restarts, st.Reason, st.Failures)
	}
	if r := n.Conn.Stats().Reconnects; r != 0 {
		t.Errorf("the node's connection reconnected %d times, want never", r)
	}
	if sc := n.Server.NATSServer().NumSlowConsumers(); sc != 0 {
		t.Errorf("the server cut %d slow consumers, want none", sc)
	}

	// The exactly-once sink's stream holds every record once.
	stream, err := js.Stream(ctx, "OUT")
	if err != nil {
		t.Fatal(err)
	}
	info, err := stream.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != count {
		t.Errorf("OUT holds %d messages, want %d", info.State.Msgs, count)
	}
	cons, err := stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	it, err := cons.Messages(jetstream.PullMaxMessagesWithBytesLimit(64, 8<<20))
	if err != nil {
		t.Fatal(err)
	}
	defer it.Stop()
	seen := map[string]int{}
	for range info.State.Msgs {
		m, err := it.Next(jetstream.NextContext(ctx))
		if err != nil {
			t.Fatalf("read OUT after %d messages: %v", len(seen), err)
		}
		seen[m.Headers().Get("Weir-Key")]++
		if !bytes.Equal(m.Data(), value) {
			t.Fatalf("OUT message of key %s holds %d bytes, not the record's value", m.Headers().Get("Weir-Key"), len(m.Data()))
		}
	}
	for i := range count {
		if c := seen[strconv.Itoa(i)]; c != 1 {
			t.Errorf("OUT holds record %d %d times, want once", i, c)
		}
	}

	// The core sink flushed at the end of its input: the subscriber has
	// its messages once it has what the server handed it.
	if err := pub.Flush(); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, ctx, "the core sink's records", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(core) == count
	})
	mu.Lock()
	defer mu.Unlock()
	for k, c := range core {
		if c != 1 {
			t.Errorf("the core sink's subscriber got record %s %d times, want once", k, c)
		}
	}
	if len(bad) > 0 {
		t.Errorf("the core sink's subscriber got records %v with another value", bad)
	}
}
