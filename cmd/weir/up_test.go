package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirhq/weir/cmd/weir/internal/node"
	"github.com/weirhq/weir/coordinator/control"
	"github.com/weirhq/weir/coordinator/jobspec"
	"github.com/weirhq/weir/transport/embedded"
	"github.com/weirhq/weir/transport/embedded/embeddedtest"
	"github.com/weirhq/weir/transport/natsconn"
	"github.com/weirhq/weir/transport/natsconn/natsconntest"
	"github.com/weirhq/weir/transport/storage"
)

// syncBuffer is a bytes.Buffer safe to read while a command writes it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// weir up -nats runs the coordinator and a worker on an existing server:
// no embedded one, checkpoints in JetStream, and it says so.
func TestUpOnAnExistingServer(t *testing.T) {
	srv := embeddedtest.Server(t, embedded.Config{})
	_, js := embeddedtest.Connect(t, srv)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, stop, done := upOn(t, ctx, srv.ClientURL())
	up := "weir is up: NATS on " + srv.ClientURL() + ", no embedded server, coordinator and 1 worker(s) running (jetstream checkpoints)"
	out.await(t, ctx, done, up)
	out.await(t, ctx, done, " holds the coordinator lease of this NATS (bucket weir_coordinator): another weir up here is refused while it runs\n")
	for _, b := range []string{"weir_jobs", storage.DefaultMetaBucket, "weir_coordinator"} {
		if _, err := js.KeyValue(ctx, b); err != nil {
			t.Errorf("bucket %s on the server: %v", b, err)
		}
	}
	stop()
	if code := <-done; code != 0 {
		t.Fatalf("weir up exited %d after the interrupt: %s", code, out.errb.String())
	}
}

// weir up given a cluster's servers says which one it is on, and the
// command it suggests names them all, as given: the one connected to now
// may be the one that goes away.
func TestUpOnAClusterSuggestsAllItsServers(t *testing.T) {
	srv := embeddedtest.Server(t, embedded.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// The second server is down: nats.go connects to the first.
	urls := srv.ClientURL() + ",nats://127.0.0.1:1"
	out, stop, done := upOn(t, ctx, urls)
	out.await(t, ctx, done, "weir is up: NATS on "+srv.ClientURL()+" (of "+urls+"), no embedded server")
	// Its Ctrl-C stops no task on other workers, as its banner used to say.
	out.await(t, ctx, done, "submit a job with: weir run -nats "+urls+" JOB.yaml   (Ctrl-C stops the coordinator and its 1 worker; tasks on other weir workers run on)")
	stop()
	if code := <-done; code != 0 {
		t.Fatalf("weir up exited %d after the interrupt: %s", code, out.errb.String())
	}
}

// upOutput is what a weir up of upOn prints.
type upOutput struct{ out, errb syncBuffer }

// upOn starts weir up -nats urls with a data directory of the test's; stop
// interrupts it, and done has its exit code.
func upOn(t *testing.T, ctx context.Context, urls string) (out *upOutput, stop func(), done chan int) {
	dir := t.TempDir() // removed after the interrupt below
	upCtx, stop := context.WithCancel(ctx)
	t.Cleanup(stop)
	out, done = &upOutput{}, make(chan int, 1)
	go func() {
		done <- run(upCtx, []string{"up", "-nats", urls, "-data", dir}, Stdio{In: strings.NewReader(""), Out: &out.out, Err: &out.errb})
	}()
	return out, stop, done
}

// await waits until weir up printed want.
func (o *upOutput) await(t *testing.T, ctx context.Context, done chan int, want string) {
	t.Helper()
	for !strings.Contains(o.out.String(), want) {
		select {
		case code := <-done:
			t.Fatalf("weir up exited %d: %s%s", code, o.out.String(), o.errb.String())
		case <-ctx.Done():
			t.Fatalf("no %q in:\n%s%s", want, o.out.String(), o.errb.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Flags that do not fit together are refused before anything starts.
func TestUpFlagMistakes(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"up", "-replicas", "3"}, "-replicas 3 needs a NATS cluster (-nats)"},
		{[]string{"up", "-nats", "nats://127.0.0.1:1", "-replicas", "7"}, "JetStream keeps 1 to 5 replicas"},
		{[]string{"up", "-nats", "nats://127.0.0.1:1", "-port", "4333"}, "-host and -port are the embedded server's"},
		{[]string{"run", "-replicas", "3", "job.yaml"}, "above 1 only on a NATS cluster (-nats)"},
		{[]string{"run", "-time", "job.yaml"}, "run: -time says how -input files' lines start; give -input too"},
		{[]string{"up", "-slots", "-1"}, "up: -slots -1: give 0 (no limit) or more"},
		{[]string{"worker", "-slots", "-2"}, "worker: -slots -2: give 0 (no limit) or more"},
		{[]string{"up", "-sync", "sometimes"}, "up: -sync sometimes: give always, or how often to fsync as a positive duration such as 1s"},
		{[]string{"up", "-sync", "0s"}, "up: -sync 0s: give always"},
		{[]string{"up", "-nats", "nats://127.0.0.1:1", "-sync", "always"}, "up: -sync is the embedded server's; with -nats set sync_interval in that server's configuration"},
	} {
		var out, errb bytes.Buffer
		code := run(context.Background(), c.args, Stdio{In: strings.NewReader(""), Out: &out, Err: &errb})
		if code != 2 || !strings.Contains(errb.String(), c.want) {
			t.Errorf("weir %s: exit %d, %q; want 2 and %q", strings.Join(c.args, " "), code, errb.String(), c.want)
		}
	}
}

// weir worker ls lists the live workers with their slots as used/total:
// two of 'weir up -workers 2 -slots 3' and a 'weir worker' without a
// limit, which the coordinator prefers for the first task of a job.
func TestWorkerList(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	log := slog.New(slog.DiscardHandler)
	dir := t.TempDir() // the worker of its own node checkpoints there too
	up, err := node.Start(ctx, node.Options{DataDir: dir, Port: -1, Coordinator: true, Workers: 2, WorkerID: "w",
		WorkerSlots: 3, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(up.Close)
	other, err := node.Start(ctx, node.Options{NATS: &natsconn.Options{URL: up.Server.ClientURL()}, DataDir: dir,
		CheckpointStore: node.StoreDir, Workers: 1, WorkerID: "x", Log: log,
		WorkerCaps: control.Caps{Memory: 1 << 30, MaxTaskMemory: 256 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(other.Close)
	for len(up.Manager.Control().LiveWorkers()) < 3 {
		select {
		case <-ctx.Done():
			t.Fatalf("live workers %v, want w, w-1 and x", up.Manager.Control().LiveWorkers())
		case <-time.After(20 * time.Millisecond):
		}
	}
	spec, err := jobspec.Parse("tap.yaml", []byte(`name: tap
sources: [{name: in, kind: nats, subject: in}]
sinks: [{name: out, kind: nats, subject: out, input: {from: in}}]
`), jobspec.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := up.API.Submit(ctx, control.SubmitRequest{Spec: spec}); err != nil {
		t.Fatal(err)
	}
	for {
		st, err := up.API.Job(ctx, "tap")
		if err == nil && st.State == control.JobRunning {
			break
		}
		if st.State.Terminal() {
			t.Fatalf("tap ended: %+v", st)
		}
		select {
		case <-ctx.Done():
			t.Fatalf("tap not running: %+v (%v)", st, err)
		case <-time.After(20 * time.Millisecond):
		}
	}
	var out, errb bytes.Buffer
	if code := run(ctx, []string{"worker", "ls", "-nats", up.Server.ClientURL()}, Stdio{In: strings.NewReader(""), Out: &out, Err: &errb}); code != 0 {
		t.Fatalf("weir worker ls exited %d: %s", code, errb.String())
	}
	host, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	// x's memory budget and cap, from its heartbeats: the tap job has no
	// operator, so nothing of it is used.
	want := regexp.MustCompile(`^WORKER +HOST +STATE +SLOTS +MEMORY +CAPS +LAST HEARD\n` +
		`w +` + regexp.QuoteMeta(host) + ` +ready +1/3 +0/- +- +[0-9.]+m?s ago\n` +
		`w-1 +` + regexp.QuoteMeta(host) + ` +ready +0/3 +0/- +- +[0-9.]+m?s ago\n` +
		`x +` + regexp.QuoteMeta(host) + ` +ready +1/- +0/1GiB +task 256MiB +[0-9.]+m?s ago\n$`)
	if !want.MatchString(out.String()) {
		t.Errorf("weir worker ls:\n%s", out.String())
	}

	// The flags may come first, as with weir job and weir module: weir
	// worker -nats URL ls lists the same workers, and starts none (it
	// did, and ran until interrupted, ignoring ls); another argument is
	// refused before a worker starts.
	out.Reset()
	errb.Reset()
	if code := run(ctx, []string{"worker", "-nats", up.Server.ClientURL(), "ls"}, Stdio{In: strings.NewReader(""), Out: &out, Err: &errb}); code != 0 {
		t.Fatalf("weir worker -nats URL ls exited %d: %s", code, errb.String())
	}
	if !want.MatchString(out.String()) {
		t.Errorf("weir worker -nats URL ls:\n%s", out.String())
	}
	out.Reset()
	errb.Reset()
	if code := run(ctx, []string{"worker", "-nats", up.Server.ClientURL(), "list"}, Stdio{In: strings.NewReader(""), Out: &out, Err: &errb}); code != 2 ||
		!strings.Contains(errb.String(), `worker: unexpected argument "list"`) {
		t.Errorf("weir worker -nats URL list: exit %d, %q; want 2 and the argument refused", code, out.String()+errb.String())
	}
}

// A weir worker started before weir up says that no coordinator answers
// yet (it used to say "joined"), and is taken on by the weir up that
// starts later.
func TestWorkerBeforeUpSaysItWaitsForACoordinator(t *testing.T) {
	srv := embeddedtest.Server(t, embedded.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	url := srv.ClientURL()
	wctx, stopWorker := context.WithCancel(ctx)
	defer stopWorker()
	w, wdone := &upOutput{}, make(chan int, 1)
	go func() {
		wdone <- run(wctx, []string{"worker", "-nats", url, "-id", "early", "-data", t.TempDir()},
			Stdio{In: strings.NewReader(""), Out: &w.out, Err: &w.errb})
	}()
	w.await(t, ctx, wdone, "level=INFO msg=\"worker early connected to "+url+"; no coordinator answers there yet: it joins the one that weir up -nats "+url+" starts\"\n")
	out, stop, done := upOn(t, ctx, url)
	out.await(t, ctx, done, "weir is up")
	var ls syncBuffer
	for !strings.Contains(ls.String(), "early ") {
		ls = syncBuffer{}
		if code := run(ctx, []string{"worker", "ls", "-nats", url}, Stdio{In: strings.NewReader(""), Out: &ls, Err: &ls}); code != 0 {
			t.Fatalf("weir worker ls exited %d: %s", code, ls.String())
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the early worker was not taken on: %s", ls.String())
		case <-time.After(50 * time.Millisecond):
		}
	}
	stop()
	<-done
	stopWorker()
	<-wdone
}

// weir up on a port something listens on already (most often a NATS
// server of the user's own) says what to do: use it with -nats, or give
// another -port.
func TestUpOnATakenPortSuggestsNATS(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	// A data directory of its own (that it makes), and one there already:
	// the refusal leaves neither a lock file nor the directory it made.
	made, there := filepath.Join(t.TempDir(), "new"), t.TempDir()
	for _, data := range []string{made, there} {
		var out, errb syncBuffer
		code := run(ctx, []string{"up", "-port", strconv.Itoa(port), "-data", data}, Stdio{In: strings.NewReader(""), Out: &out, Err: &errb})
		want := fmt.Sprintf("weir: port %d is in use (a NATS server already? run on it with -nats nats://127.0.0.1:%d; else give -port): ", port, port)
		if code != 1 || !strings.HasPrefix(errb.String(), want) {
			t.Errorf("exit %d, stderr %q; want 1 and %q", code, errb.String(), want)
		}
	}
	if _, err := os.Stat(made); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the data directory weir up made: %v, want it removed", err)
	}
	if entries, err := os.ReadDir(there); err != nil || len(entries) != 0 {
		t.Errorf("the data directory there already: %v %v, want it left empty as it was", entries, err)
	}
}

// weir up serves its data directory even when it cannot note its NATS URL
// there (DIR/weir-up.url, which only weir run -data's advice reads): it
// says so on one line, naming the file, and runs. It exited 1 after
// starting everything, for want of a hint.
func TestUpServesWhenItCannotNoteItsURL(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// A directory the shell would split: weir run -data quotes it.
	data := filepath.Join(t.TempDir(), "weir data")
	file := filepath.Join(data, servedFile)
	if err := os.MkdirAll(file, 0o755); err != nil { // no file can be written there
		t.Fatal(err)
	}
	port := natsconntest.FreePort(t)
	upCtx, stop := context.WithCancel(ctx)
	defer stop()
	out, done := &upOutput{}, make(chan int, 1)
	go func() {
		done <- run(upCtx, []string{"up", "-data", data, "-port", strconv.Itoa(port)}, Stdio{In: strings.NewReader(""), Out: &out.out, Err: &out.errb})
	}()
	out.await(t, ctx, done, "weir is up: NATS on ")
	stop()
	if code := <-done; code != 0 {
		t.Fatalf("weir up exited %d: %s", code, out.errb.String())
	}
	warn := regexp.MustCompile(`(?m)^weir up: note the NATS URL in ` + regexp.QuoteMeta(file) + `: .*; weir run -data '` +
		regexp.QuoteMeta(data) + `' cannot name port \d+ in its advice: remove or fix that file\n`)
	if !warn.MatchString(out.errb.String()) {
		t.Errorf("weir up said nothing of the file it could not write:\n%s", out.errb.String())
	}
}

// weir up -sync always says on its first line that the embedded server
// fsyncs every write; without -sync it says nothing of it.
func TestUpSaysHowItSyncs(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-sync", "always"}, ", every JetStream write fsynced before it is acknowledged, coordinator"},
		{[]string{"-sync", "5s"}, ", JetStream writes fsynced every 5s, coordinator"},
		{nil, ", coordinator"},
	} {
		data := t.TempDir()
		upCtx, stop := context.WithCancel(ctx)
		out, done := &upOutput{}, make(chan int, 1)
		args := append([]string{"up", "-data", data, "-port", strconv.Itoa(natsconntest.FreePort(t))}, c.args...)
		go func() {
			done <- run(upCtx, args, Stdio{In: strings.NewReader(""), Out: &out.out, Err: &out.errb})
		}()
		out.await(t, ctx, done, "weir is up: NATS on ")
		stop()
		if code := <-done; code != 0 {
			t.Fatalf("weir %s exited %d: %s", strings.Join(args, " "), code, out.errb.String())
		}
		if first := strings.SplitN(out.out.String(), "\n", 2)[0]; !strings.Contains(first, "data in "+data+c.want) {
			t.Errorf("weir %s said %q; want %q after the data directory", strings.Join(args, " "), first, c.want)
		}
	}
}

// weir up on JetStream checkpoints says when the data directory holds the
// jobs of runs on the default store, which it does not see.
func TestDirStoreHasJobs(t *testing.T) {
	dir := t.TempDir()
	if dirStoreHasJobs(dir) {
		t.Error("an empty data directory holds jobs")
	}
	if err := os.MkdirAll(filepath.Join(dir, "checkpoints", "_jobs", "jobs"), 0o755); err != nil {
		t.Fatal(err)
	}
	if !dirStoreHasJobs(dir) {
		t.Error("a data directory with job records holds none")
	}
}

// weir up on the default store says when JetStream holds the jobs of runs
// on the jetstream store, which it does not see: an SRE trial's jobs
// vanished from job ls and /metrics without a word.
func TestJetStreamHasJobs(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv := embeddedtest.Server(t, embedded.Config{})
	_, js := embeddedtest.Connect(t, srv)
	if jetStreamHasJobs(ctx, js) {
		t.Error("a JetStream without the bucket holds jobs")
	}
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: jetStreamJobsBucket})
	if err != nil {
		t.Fatal(err)
	}
	if jetStreamHasJobs(ctx, js) {
		t.Error("an empty bucket holds jobs")
	}
	if _, err := kv.Put(ctx, "jobs.wc", []byte("{}")); err != nil {
		t.Fatal(err)
	}
	if !jetStreamHasJobs(ctx, js) {
		t.Error("a bucket with a job record holds none")
	}
}

// A -metrics address in use names the flag and what to do (a trial got a
// bare "listen tcp …: bind: address already in use"), as a NATS port in
// use does.
func TestUpOnATakenMetricsAddressNamesTheFlag(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	addr := ln.Addr().String()
	var out, errb syncBuffer
	code := run(ctx, []string{"up", "-metrics", addr, "-data", t.TempDir()}, Stdio{In: strings.NewReader(""), Out: &out, Err: &errb})
	want := fmt.Sprintf("weir: up: -metrics %s is in use (another weir's metrics? give -metrics another address, or leave -metrics out): ", addr)
	if code != 1 || !strings.HasPrefix(errb.String(), want) {
		t.Errorf("exit %d, stderr %q; want 1 and %q", code, errb.String(), want)
	}
}

// weir up's worker is named by -id, as weir worker's is, and by default
// after the host alone: the same on every restart, so that a cordon holds
// across one and the metrics' worker label stays (it was HOSTNAME-PID).
func TestUpWorkerID(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	host, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-id", "edge-1", "-workers", "2"}, "edge-1\nedge-1-1"},
		{nil, host},
	} {
		port := natsconntest.FreePort(t)
		upCtx, stop := context.WithCancel(ctx)
		o, done := &upOutput{}, make(chan int, 1)
		args := append([]string{"up", "-data", t.TempDir(), "-port", strconv.Itoa(port)}, c.args...)
		go func() {
			done <- run(upCtx, args, Stdio{In: strings.NewReader(""), Out: &o.out, Err: &o.errb})
		}()
		o.await(t, ctx, done, "submit a job with: ")
		var ids []string
		for want := strings.Count(c.want, "\n") + 1; len(ids) < want; {
			var out, errb bytes.Buffer
			if code := run(ctx, []string{"worker", "ls", "-nats", fmt.Sprintf("nats://127.0.0.1:%d", port)}, Stdio{In: strings.NewReader(""), Out: &out, Err: &errb}); code != 0 {
				t.Fatalf("weir worker ls exited %d: %s", code, errb.String())
			}
			ids = nil
			for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n")[1:] {
				ids = append(ids, strings.Fields(line)[0])
			}
			select {
			case <-ctx.Done():
				t.Fatalf("workers listed: %q; want %q", ids, c.want)
			case <-time.After(20 * time.Millisecond):
			}
		}
		stop()
		if code := <-done; code != 0 {
			t.Fatalf("weir %s exited %d: %s", strings.Join(args, " "), code, o.errb.String())
		}
		if got := strings.Join(ids, "\n"); got != c.want {
			t.Errorf("weir %s: workers %q, want %q", strings.Join(args, " "), got, c.want)
		}
	}
}
