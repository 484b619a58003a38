package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirhq/weir/coordinator/registry"
	"github.com/weirhq/weir/transport/embedded"
	"github.com/weirhq/weir/transport/embedded/embeddedtest"
)

// weir stream lists the streams with their size and limits, shows one,
// and changes its limits, saying what changed: the advice weir gives for a
// stream (a duplicate window too short, a stream that grows without
// bound) names these commands, not another tool's.
func TestStreamCommand(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv := embeddedtest.Server(t, embedded.Config{})
	_, js := embeddedtest.Connect(t, srv)
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "COUNTS", Subjects: []string{"counts.>"}, Duplicates: time.Minute}); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := js.Publish(ctx, "counts.a", []byte("1")); err != nil {
			t.Fatal(err)
		}
	}
	weir := func(args ...string) (int, string, string) {
		var out, errb syncBuffer
		code := run(ctx, append([]string{"stream"}, append(args, "-nats", srv.ClientURL())...), Stdio{In: strings.NewReader(""), Out: &out, Err: &errb})
		return code, out.String(), errb.String()
	}
	if code, out, errs := weir("ls"); code != 0 || !strings.Contains(out, "STREAM  SUBJECTS  MESSAGES") ||
		!strings.Contains(out, "COUNTS  counts.>  3") || !strings.Contains(out, "1m0s         none") {
		t.Errorf("ls: %d\n%s%s", code, out, errs)
	}
	if code, out, errs := weir("edit", "COUNTS", "-max-age", "24h", "-dupe-window", "2m", "-max-bytes", "1GiB"); code != 0 ||
		out != "stream COUNTS: duplicate window 1m0s → 2m0s, max age none → 24h0m0s, max bytes none → 1GiB\n" {
		t.Errorf("edit: %d %q %q", code, out, errs)
	}
	// ls shows, with the limits, what the stream does once one is
	// reached (discard old: committed output goes without a word).
	if code, out, errs := weir("ls"); code != 0 || !strings.Contains(out, "max-age 24h0m0s, max-bytes 1GiB, discard old") {
		t.Errorf("ls after edit: %d\n%s%s", code, out, errs)
	}
	st, err := js.Stream(ctx, "COUNTS")
	if err != nil {
		t.Fatal(err)
	}
	if c := st.CachedInfo().Config; c.MaxAge != 24*time.Hour || c.Duplicates != 2*time.Minute || c.MaxBytes != 1<<30 {
		t.Errorf("config after edit: %+v", c)
	}
	if code, out, _ := weir("info", "COUNTS"); code != 0 || !strings.Contains(out, "stream COUNTS: subjects counts.>; 3 messages") ||
		!strings.Contains(out, "duplicate window 2m0s, limits: max-age 24h0m0s, max-bytes 1GiB, discard old\n") {
		t.Errorf("info: %d\n%s", code, out)
	}
	if code, _, errs := weir("info", "CONTS"); code != 1 || errs != "weir: no stream \"CONTS\" (did you mean COUNTS?): weir stream ls lists them\n" {
		t.Errorf("info of a misspelled stream: %d %q", code, errs)
	}
	for _, args := range [][]string{{"edit", "COUNTS"}, {"info", "COUNTS", "-max-age", "1h"}, {"ls", "x"}, {"lst"}} {
		if code, _, _ := weir(args...); code != 2 {
			t.Errorf("%v: exit %d, want 2 (usage)", args, code)
		}
	}
}

// weir's own streams — the buckets of its job records, module registry,
// checkpoints — are listed apart, saying what they hold, and weir stream
// rm refuses them even with -force: removing one loses that for every job
// (a trial removed the module registry while a job ran).
func TestStreamRmRefusesWeirsOwn(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv := embeddedtest.Server(t, embedded.Config{})
	_, js := embeddedtest.Connect(t, srv)
	if _, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "weir_jobs"}); err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateObjectStore(ctx, jetstream.ObjectStoreConfig{Bucket: "weir_modules", Description: "weir operator modules"}); err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "LINES", Subjects: []string{"lines"}}); err != nil {
		t.Fatal(err)
	}
	weir := func(args ...string) (int, string, string) {
		var out, errb syncBuffer
		code := run(ctx, append([]string{"stream"}, append(args, "-nats", srv.ClientURL())...), Stdio{In: strings.NewReader(""), Out: &out, Err: &errb})
		return code, out.String(), errb.String()
	}
	code, out, errs := weir("ls")
	if code != 0 || !strings.Contains(out, "LINES") || strings.Contains(out, "KV_weir_jobs  ") ||
		!strings.HasSuffix(out, "weir's own: KV_weir_jobs (job records), OBJ_weir_modules (the module registry)\n") {
		t.Errorf("ls: %d\n%s%s", code, out, errs)
	}
	code, _, errs = weir("rm", "LINES", "OBJ_weir_modules", "-force")
	if code != 1 || !strings.HasPrefix(errs, "weir: stream rm OBJ_weir_modules: weir's own stream (the module registry): weir keeps its state there, for every job; nothing removed") {
		t.Errorf("rm of the module registry: %d %q", code, errs)
	}
	for _, name := range []string{"LINES", "OBJ_weir_modules"} {
		if _, err := js.Stream(ctx, name); err != nil {
			t.Errorf("%s after a refused rm: %v", name, err)
		}
	}
}

// weir stream edit refuses a max age shorter than the stream's duplicate
// window (or a window past its max age) itself, naming the flags that
// fix it: the server's refusal ("duplicates window can not be larger then
// max age") named neither, and gave no thought to an exactly-once sink's
// window.
func TestStreamEditSaysWhichFlagsAWindowPastTheMaxAgeNeeds(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv := embeddedtest.Server(t, embedded.Config{})
	_, js := embeddedtest.Connect(t, srv)
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "IN", Subjects: []string{"in.>"}, Duplicates: 2 * time.Minute}); err != nil {
		t.Fatal(err)
	}
	weir := func(args ...string) (int, string, string) {
		var out, errb syncBuffer
		code := run(ctx, append([]string{"stream"}, append(args, "-nats", srv.ClientURL())...), Stdio{In: strings.NewReader(""), Out: &out, Err: &errb})
		return code, out.String(), errb.String()
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-max-age", "1m"}, "weir: stream edit IN: its duplicate window 2m0s is longer than -max-age 1m0s, which JetStream refuses: " +
			"give -dupe-window 1m0s (or shorter), or -max-age 2m0s (or longer) to keep the window an exactly-once sink may need; nothing changed\n"},
		{[]string{"-max-age", "1m", "-dupe-window", "90s"}, "weir: stream edit IN: -dupe-window 1m30s is longer than -max-age 1m0s, which JetStream refuses: " +
			"give -dupe-window 1m0s (or shorter), or -max-age 1m30s (or longer) to keep the window an exactly-once sink may need; nothing changed\n"},
	} {
		if code, out, errs := weir(append([]string{"edit", "IN"}, c.args...)...); code != 1 || out != "" || errs != c.want {
			t.Errorf("edit %v: exit %d, %q %q; want 1 and\n%s", c.args, code, out, errs, c.want)
		}
	}
	if code, out, errs := weir("edit", "IN", "-max-age", "1m", "-dupe-window", "1m"); code != 0 ||
		out != "stream IN: duplicate window 2m0s → 1m0s, max age none → 1m0s\n" {
		t.Errorf("edit as advised: exit %d, %q %q", code, out, errs)
	}
	if code, _, errs := weir("edit", "IN", "-dupe-window", "5m"); code != 1 ||
		errs != "weir: stream edit IN: -dupe-window 5m0s is longer than its max age 1m0s, which JetStream refuses: give -dupe-window 1m0s (or shorter), or -max-age 5m0s (or longer) to keep the window an exactly-once sink may need; nothing changed\n" {
		t.Errorf("edit -dupe-window past the max age: exit %d, %q", code, errs)
	}
}

// weir stream waits out an election of the stream's leader (a cluster
// that lost its quorum for a moment), as weir's own requests do: it used
// to fail after its 30 s, with a request that no server answered. So does
// weir module, opening the registry's buckets.
func TestStreamCommandWaitsOutAnElection(t *testing.T) {
	if testing.Short() {
		t.Skip("a three-server cluster: skipped in -short")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	servers := embeddedtest.Cluster(t, ctx, 3)
	_, js := embeddedtest.ConnectTo(t, servers[0].ClientURL())
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "COUNTS", Subjects: []string{"counts.>"}, Replicas: 3}); err != nil {
		t.Fatal(err)
	}
	if _, err := registry.Open(ctx, js, "", 3); err != nil { // the module registry's buckets, kept by the three
		t.Fatal(err)
	}
	stay, restart := embeddedtest.NoQuorum(t, ctx, js, "COUNTS", servers)
	type result struct {
		code     int
		out, err string
	}
	weir := func(args ...string) <-chan result {
		done := make(chan result, 1)
		go func() {
			var out, errb syncBuffer
			code := run(ctx, append(args, "-nats", stay.ClientURL()), Stdio{In: strings.NewReader(""), Out: &out, Err: &errb})
			done <- result{code, out.String(), errb.String()}
		}()
		return done
	}
	info, modules := weir("stream", "info", "COUNTS"), weir("module", "ls")
	// A second for their first tries (a replica may answer stream info
	// without a leader: that is no failure either).
	time.Sleep(time.Second)
	restart()
	if r := <-info; r.code != 0 || !strings.Contains(r.out, "stream COUNTS: subjects counts.>") {
		t.Errorf("weir stream info once the quorum is back: exit %d\n%s%s", r.code, r.out, r.err)
	}
	if r := <-modules; r.code != 0 {
		t.Errorf("weir module ls once the quorum is back: exit %d\n%s%s", r.code, r.out, r.err)
	}
}
