package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirhq/weir/cmd/weir/internal/node"
	"github.com/weirhq/weir/coordinator/jobspec"
	"github.com/weirhq/weir/transport/embedded"
	"github.com/weirhq/weir/transport/embedded/embeddedtest"
)

// inputNode starts a node (embedded NATS on a random port, a coordinator
// and a worker) for weir run -nats to use, in a temporary working
// directory holding the spec job as job.yaml.
func inputNode(t *testing.T, ctx context.Context, job string) *node.Node {
	t.Helper()
	n, err := node.Start(ctx, node.Options{DataDir: t.TempDir(), Port: -1, Coordinator: true, Workers: 1,
		Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Close)
	t.Chdir(t.TempDir())
	if err := os.WriteFile("job.yaml", []byte(job), 0o644); err != nil {
		t.Fatal(err)
	}
	return n
}

// storedValues returns the values of the messages stream holds, in order.
func storedValues(t *testing.T, ctx context.Context, js jetstream.JetStream, stream string) []string {
	t.Helper()
	st, err := js.Stream(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	n := int(st.CachedInfo().State.Msgs)
	cons, err := js.OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	it, err := cons.Messages()
	if err != nil {
		t.Fatal(err)
	}
	defer it.Stop()
	values := make([]string, 0, n)
	for range n {
		m, err := it.Next()
		if err != nil {
			t.Fatalf("stream %s, message %d of %d: %v", stream, len(values)+1, n, err)
		}
		values = append(values, string(m.Data()))
	}
	return values
}

// boundedCopy is a bounded job that copies stream IN to stream OUT.
const boundedCopy = `name: copy
sources: [{name: in, kind: jetstream, stream: IN, stop: end}]
sinks: [{name: out, kind: jetstream, stream: OUT, subject: out, input: {from: in}}]
checkpointing: {interval: 200ms}
`

// TestRunInputThroughAServerRestart: the NATS server goes down while
// weir run -input publishes a bounded source's input (before the submit)
// and comes back while weir run waits for it; weir run publishes again
// what the stream had not acknowledged, and the stream holds every line
// once, in order, and so does the job's output.
func TestRunInputThroughAServerRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a job: skipped in -short")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	n := inputNode(t, ctx, boundedCopy)
	// A named pipe: weir run reads the input as the test writes it, so
	// that the outage comes in the middle.
	mkfifo(t, "in.fifo")
	const half, lines = 15_000, 30_000
	line := func(i int) string { return fmt.Sprintf("line %06d", i) }

	f := &following{t: t, ctx: ctx, done: make(chan int, 1)}
	go func() {
		f.done <- run(ctx, []string{"run", "-nats", n.Server.ClientURL(), "-show", "0", "job.yaml", "-input", "in.fifo"},
			Stdio{In: strings.NewReader(""), Out: &f.out, Err: &f.errb})
	}()
	w, err := os.OpenFile("in.fifo", os.O_WRONLY, 0) // once weir run opens it
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	write := func(from, to int) error {
		var b strings.Builder
		for i := from; i <= to; i++ {
			b.WriteString(line(i) + "\n")
		}
		_, err := w.WriteString(b.String())
		return err
	}
	if err := write(1, half); err != nil {
		t.Fatal(err)
	}
	n.Server.Shutdown() // with records of the first half in flight, or in the pipe
	// The second half, but no end of input until the coordinator is back:
	// weir run submits the job once the input is in.
	end := make(chan struct{})
	written := make(chan error, 1)
	go func() {
		err := write(half+1, lines)
		<-end
		if cerr := w.Close(); err == nil {
			err = cerr
		}
		written <- err
	}()
	f.said("-input in.fifo: lines from ")
	embeddedtest.Restart(t, n.Server, n.Conn)
	close(end)
	if err := <-written; err != nil {
		t.Fatal(err)
	}
	select {
	case code := <-f.done:
		if code != 0 {
			t.Fatalf("weir run exited %d: %s\n%s", code, f.errb.String(), f.out.String())
		}
	case <-ctx.Done():
		t.Fatalf("weir run did not end:\n%s", f.out.String())
	}
	t.Logf("weir run:\n%s", f.out.String())
	for _, s := range []string{"published 30000 input records from in.fifo to in\njob copy submitted", "job copy: finished"} {
		if !strings.Contains(f.out.String(), s) {
			t.Errorf("weir run's output lacks %q", s)
		}
	}
	want := make([]string, lines)
	for i := range want {
		want[i] = line(i + 1)
	}
	if got := storedValues(t, ctx, n.JS, "IN"); !slices.Equal(got, want) {
		t.Errorf("stream IN holds %d lines, not each of the %d once in order: %s", len(got), lines, firstDifference(got, want))
	}
	got := storedValues(t, ctx, n.JS, "OUT")
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("stream OUT holds %d lines, not each of the %d once: %s", len(got), lines, firstDifference(got, want))
	}
}

// firstDifference describes where got first differs from want.
func firstDifference(got, want []string) string {
	for i := range min(len(got), len(want)) {
		if got[i] != want[i] {
			return fmt.Sprintf("message %d is %q, want %q", i+1, got[i], want[i])
		}
	}
	return fmt.Sprintf("%d messages, want %d", len(got), len(want))
}

// TestRunInputTwice: the same file run twice is published twice, as a
// user expects: each weir run's message ids are its own. (The finished
// job is removed in between, as weir run's refusal to run it again over
// its output says.)
func TestRunInputTwice(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a job: skipped in -short")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	n := inputNode(t, ctx, boundedCopy)
	if err := os.WriteFile("in.txt", []byte("a\nb\nc\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if i > 0 {
			if code, _, errs := weir(t, "", "job", "rm", "-nats", n.Server.ClientURL(), "copy"); code != 0 {
				t.Fatalf("weir job rm copy: exit %d, %s", code, errs)
			}
		}
		var out, errb syncBuffer
		if code := run(ctx, []string{"run", "-nats", n.Server.ClientURL(), "job.yaml", "-input", "in.txt"},
			Stdio{In: strings.NewReader(""), Out: &out, Err: &errb}); code != 0 {
			t.Fatalf("weir run exited %d: %s\n%s", code, errb.String(), out.String())
		}
	}
	if got, want := storedValues(t, ctx, n.JS, "IN"), []string{"a", "b", "c", "a", "b", "c"}; !slices.Equal(got, want) {
		t.Fatalf("stream IN after the same input twice: %q, want %q", got, want)
	}
}

// TestRunInputShortDuplicateWindow: a source stream that forgets message
// ids too soon for -input to publish a line again safely is refused
// before anything is published, saying why and what to do.
func TestRunInputShortDuplicateWindow(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	n := inputNode(t, ctx, boundedCopy)
	if _, err := n.JS.CreateStream(ctx, jetstream.StreamConfig{Name: "IN", Subjects: []string{"in.>"}, Duplicates: time.Second}); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile("in.txt", []byte("a\nb\nc\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errb syncBuffer
	code := run(ctx, []string{"run", "-nats", n.Server.ClientURL(), "job.yaml", "-input", "in.txt"},
		Stdio{In: strings.NewReader(""), Out: &out, Err: &errb})
	want := "weir: -input in.txt: stream IN: duplicate window too short: it remembers message ids for 1s, too short to publish a record again after a lost connection without storing it twice; give it 10s or more, e.g. `weir stream edit IN -dupe-window 2m`\n"
	if code != 1 || errb.String() != want {
		t.Fatalf("weir run exited %d with %q; want 1 with %q\n%s", code, errb.String(), want, out.String())
	}
	if got := storedValues(t, ctx, n.JS, "IN"); len(got) != 0 {
		t.Errorf("stream IN holds %q after the refusal", got)
	}
}

// weir input started while NATS cannot be reached (weir up restarting)
// says so once and tries again until -wait has passed: a trial's feeder
// lost two files to a restart, each refused at once.
func TestInputWaitsForNATS(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// The server, with the job's stream, is stopped before weir input
	// starts, and started again on the same port and store.
	dir := t.TempDir()
	first := embeddedtest.Server(t, embedded.Config{DataDir: dir})
	port := first.Port()
	_, js := embeddedtest.Connect(t, first)
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "FED", Subjects: []string{"fed"}, Duplicates: time.Minute}); err != nil {
		t.Fatal(err)
	}
	first.Shutdown()
	t.Chdir(t.TempDir())
	if err := os.WriteFile("job.yaml", []byte(`name: fed
sources: [{name: in, kind: jetstream, stream: FED, subject: fed}]
sinks: [{name: out, kind: nats, subject: out, input: {from: in}}]
`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile("in.txt", []byte("a\nb\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errb syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"input", "-nats", fmt.Sprintf("nats://127.0.0.1:%d", port), "-wait", "30s", "job.yaml", "in.txt"},
			Stdio{In: strings.NewReader(""), Out: &out, Err: &errb})
	}()
	for !strings.Contains(errb.String(), "trying again for up to") {
		select {
		case code := <-done:
			t.Fatalf("weir input exited %d before NATS came: %s", code, errb.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
	srv := embeddedtest.Server(t, embedded.Config{Port: port, DataDir: dir})
	_, js = embeddedtest.Connect(t, srv)
	if code := <-done; code != 0 {
		t.Fatalf("weir input exited %d: %s", code, errb.String())
	}
	if got := storedValues(t, ctx, js, "FED"); strings.Join(got, ",") != "a,b" {
		t.Errorf("stream FED holds %q, want a, b", got)
	}
	if n := strings.Count(errb.String(), "trying again"); n != 1 {
		t.Errorf("said %d times that it tries again:\n%s", n, errb.String())
	}
}

// An -input SOURCE=FILE whose SOURCE is one letter off the job's source
// says which was meant; one near none lists the job's sources.
func TestInputOfASourceNotThereSaysWhichWasMeant(t *testing.T) {
	spec := &jobspec.Spec{Sources: []jobspec.Source{{Name: "orders"}, {Name: "payments"}}}
	for in, want := range map[string]string{
		"order=o.txt": `-input order=o.txt: the job has no source "order" (did you mean orders?)`,
		"x=o.txt":     `-input x=o.txt: the job has no source "x" (its sources: orders, payments)`,
	} {
		if err := checkInputs("-input", spec, inputFlags{in}); err == nil || err.Error() != want {
			t.Errorf("-input %s: %v, want %q", in, err, want)
		}
	}
}
