package node

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirhq/weir/coordinator/control"
	"github.com/weirhq/weir/coordinator/jobspec"
	"github.com/weirhq/weir/guests/go/guestbuild"
)

// TestResumeFallsBackFromACorruptSnapshot is a user trial's: weir up
// stopped, a task snapshot of the job's newest checkpoint truncated by
// hand, weir up again. The job failed for good ("corrupt task snapshot
// … not restarted"), though a resume promises the newest checkpoint that
// restores. Now the resumed job takes that checkpoint for unusable,
// restores the one before, says so among its warnings, and its
// exactly-once output stays once: nothing was committed after the older
// checkpoint here.
func TestResumeFallsBackFromACorruptSnapshot(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end restore: skipped in -short")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	n := restartable(t, ctx, dir)
	defer func() { n.Close() }()
	upper := guestbuild.MustBuild(t, "github.com/weirhq/weir/guests/go/examples/uppercase")
	if _, err := n.Registry.Push(ctx, "upper", upper, 0, nil); err != nil {
		t.Fatal(err)
	}
	mustStream(t, ctx, n.JS, jetstream.StreamConfig{Name: "IN", Subjects: []string{"in"}})
	mustSinkStream(t, ctx, n.JS, "OUT", "out")
	spec, err := jobspec.Parse("up.yaml", []byte(`name: up
sources: [{name: in, kind: jetstream, stream: IN}]
operators: [{name: upper, module: upper, inputs: [{from: in}]}]
sinks: [{name: out, kind: jetstream, stream: OUT, subject: out, guarantee: exactly-once, input: {from: upper}}]
checkpointing: {interval: 100ms}
restart: {strategy: fixed-delay, delay: 100ms, attempts: 3}
`), jobspec.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.API.Submit(ctx, control.SubmitRequest{Spec: spec}); err != nil {
		t.Fatal(err)
	}
	publish := func(from, to int) {
		t.Helper()
		for i := from; i < to; i++ {
			if _, err := n.JS.Publish(ctx, "in", fmt.Appendf(nil, "m%d", i)); err != nil {
				t.Fatal(err)
			}
		}
	}
	stored := func() uint64 {
		s, err := n.JS.Stream(ctx, "OUT")
		if err != nil {
			t.Fatal(err)
		}
		return s.CachedInfo().State.Msgs
	}
	publish(0, 20)
	waitUntil(t, ctx, "20 outputs", func() bool { return stored() == 20 })
	// Two checkpoints after every output was committed: the newest is
	// damaged, and the one before restores with nothing to publish again.
	st, err := n.API.Job(ctx, "up")
	if err != nil {
		t.Fatal(err)
	}
	last := st.LatestCheckpoint
	before := waitJob(t, ctx, n, "up", "two more checkpoints", func(st control.JobStatus) bool { return st.LatestCheckpoint >= last+2 })
	n.Close()

	dirs, _ := filepath.Glob(filepath.Join(dir, "checkpoints", "up", "chk-*"))
	var newest int64
	for _, d := range dirs {
		id, err := strconv.ParseInt(strings.TrimPrefix(filepath.Base(d), "chk-"), 10, 64)
		if _, statErr := os.Stat(filepath.Join(d, "_metadata")); err == nil && statErr == nil {
			newest = max(newest, id)
		}
	}
	if newest < before.LatestCheckpoint {
		t.Fatalf("newest stored checkpoint %d, want %d or later (%v)", newest, before.LatestCheckpoint, dirs)
	}
	file := filepath.Join(dir, "checkpoints", "up", fmt.Sprintf("chk-%d", newest), "upper-0")
	fi, err := os.Stat(file)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(file, fi.Size()/2); err != nil {
		t.Fatal(err)
	}

	n = restartable(t, ctx, dir)
	st = waitJob(t, ctx, n, "up", "the job resumed from an older checkpoint", func(st control.JobStatus) bool {
		return st.State.Terminal() || st.State == control.JobRunning && st.LastFailure != nil
	})
	if st.State != control.JobRunning {
		t.Fatalf("job %s: %s", st.State, st.Reason)
	}
	if f := st.LastFailure; f.Kind != control.FailureCheckpointCorrupt || !strings.Contains(f.Reason, "corrupt task snapshot") {
		t.Errorf("last failure %+v; want %s naming the corrupt snapshot", f, control.FailureCheckpointCorrupt)
	}
	note := fmt.Sprintf("as its newer checkpoint %d is unusable", newest)
	if !slices.ContainsFunc(st.Warnings, func(w string) bool {
		return strings.Contains(w, note) && strings.Contains(w, "committed again")
	}) {
		t.Errorf("warnings %q; want one saying %q", st.Warnings, note)
	}
	t.Log(st.Warnings)

	publish(20, 30)
	waitUntil(t, ctx, "30 outputs", func() bool { return stored() >= 30 })
	now := waitJob(t, ctx, n, "up", "a checkpoint after the output", func(now control.JobStatus) bool {
		return now.LatestCheckpoint > st.LatestCheckpoint+1
	})
	if got := stored(); got != 30 {
		t.Fatalf("OUT stores %d messages, want 30 (each output once)", got)
	}
	seen := map[string]int{}
	cons, err := n.JS.OrderedConsumer(ctx, "OUT", jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	for range 30 {
		m, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
		if err != nil {
			t.Fatal(err)
		}
		seen[string(m.Data())]++
	}
	for i := range 30 {
		if v := fmt.Sprintf("M%d", i); seen[v] != 1 {
			t.Errorf("output %s stored %d times", v, seen[v])
		}
	}

	// A coordinator restarted again does not restore the damaged one.
	n.Close()
	n = restartable(t, ctx, dir)
	waitJob(t, ctx, n, "up", "resumed again", func(st control.JobStatus) bool {
		return st.State == control.JobRunning && st.Attempt > now.Attempt && st.LatestCheckpoint > now.LatestCheckpoint
	})
	again, err := n.API.Job(ctx, "up")
	if err != nil {
		t.Fatal(err)
	}
	if f := again.LastFailure; f != nil && f.Attempt > now.Attempt {
		t.Errorf("after a second coordinator restart: failure %+v", f)
	}
}
