package main

import (
	"context"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirhq/weir/cmd/weir/internal/worker"
	"github.com/weirhq/weir/coordinator/jobspec"
	"github.com/weirhq/weir/transport/embedded"
	"github.com/weirhq/weir/transport/embedded/embeddedtest"
)

// A stream weir run would create for a sink, on subjects another stream
// stores already, is refused by the server with "subjects overlap with an
// existing stream"; weir run names that stream and what to do.
func TestCreateStreamsNamesTheOverlappingStream(t *testing.T) {
	_, js := embeddedtest.JetStream(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, cfg := range []jetstream.StreamConfig{{Name: "A", Subjects: []string{"a"}}, {Name: "TOTALS", Subjects: []string{"counts.*.total"}}} {
		if _, err := js.CreateStream(ctx, cfg); err != nil {
			t.Fatal(err)
		}
	}
	spec := &jobspec.Spec{Name: "j", Sinks: []jobspec.Sink{{Name: "out", Kind: jobspec.KindJetStream, Stream: "OUT", Subject: "counts.{key}.total",
		Guarantee: jobspec.ExactlyOnce}}}
	err := createStreams(ctx, Stdio{Out: io.Discard, Err: io.Discard}, js, spec, 1)
	want := "create stream OUT (subjects counts.*.total): stream TOTALS stores some of them already (its subjects: counts.*.total); name TOTALS in the spec, or choose subjects no stream stores: "
	if err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("createStreams: %v\nwant it to start %q", err, want)
	}
}

// -replicas above 1 on a server that is not clustered is refused, by
// weir run's stream creation and by weir up's buckets, with a line that
// names the flag and what to give: the server says only "replicas > 1
// not supported in non-clustered mode".
func TestReplicasOnASingleServerNameTheFlag(t *testing.T) {
	srv := embeddedtest.Server(t, embedded.Config{})
	_, js := embeddedtest.Connect(t, srv)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	spec := &jobspec.Spec{Name: "j", Sinks: []jobspec.Sink{{Name: "out", Kind: jobspec.KindJetStream, Stream: "OUT", Subject: "out",
		Guarantee: jobspec.ExactlyOnce}}}
	err := createStreams(ctx, Stdio{Out: io.Discard, Err: io.Discard}, js, spec, 3)
	want := "create stream OUT: -replicas 3 needs a NATS cluster, and this server is not clustered: give -replicas 1: "
	if err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("createStreams: %v\nwant it to start %q", err, want)
	}
	var out, errb syncBuffer
	code := run(ctx, []string{"up", "-nats", srv.ClientURL(), "-replicas", "3", "-data", t.TempDir()},
		Stdio{In: strings.NewReader(""), Out: &out, Err: &errb})
	if want := "weir: -replicas 3 needs a NATS cluster, and this server is not clustered: give -replicas 1: "; code != 1 || !strings.HasPrefix(errb.String(), want) {
		t.Errorf("weir up -replicas 3: exit %d, stderr %q; want 1 and %q", code, errb.String(), want)
	}
}

// -replicas above the servers of a cluster is refused, by weir run's
// stream creation and by weir up's buckets, with a line that names the
// flag and what to give: the server says only "no suitable peers for
// placement" (or "insufficient resources").
func TestReplicasAboveTheClusterNameTheFlag(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	servers := embeddedtest.Cluster(t, ctx, 2)
	_, js := embeddedtest.ConnectTo(t, servers[0].ClientURL())
	spec := &jobspec.Spec{Name: "j", Sinks: []jobspec.Sink{{Name: "out", Kind: jobspec.KindJetStream, Stream: "OUT", Subject: "out",
		Guarantee: jobspec.ExactlyOnce}}}
	err := createStreams(ctx, Stdio{Out: io.Discard, Err: io.Discard}, js, spec, 3)
	want := "create stream OUT: -replicas 3 needs 3 servers of the cluster with JetStream"
	if err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("createStreams: %v\nwant it to start %q", err, want)
	}
	var out, errb syncBuffer
	code := run(ctx, []string{"up", "-nats", servers[1].ClientURL(), "-replicas", "3", "-data", t.TempDir()},
		Stdio{In: strings.NewReader(""), Out: &out, Err: &errb})
	if want := "weir: -replicas 3 needs 3 servers of the cluster with JetStream"; code != 1 || !strings.HasPrefix(errb.String(), want) {
		t.Errorf("weir up -replicas 3: exit %d, stderr %q; want 1 and %q", code, errb.String(), want)
	}
}

// A stream several sources and sinks of a job name is created once, with
// every one's subjects (none another covers: a stream's subjects may not
// overlap) and the longest duplicate window any needs; a sink's allows
// batches. Subjects that overlap without one covering the other are
// refused with a line that says so.
func TestCreateStreamsForAStreamNamedTwice(t *testing.T) {
	_, js := embeddedtest.JetStream(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ck := jobspec.Checkpointing{Interval: time.Second, Timeout: 10 * time.Second}
	spec := &jobspec.Spec{Name: "j", Checkpointing: ck,
		Sources: []jobspec.Source{{Name: "in", Kind: jobspec.KindJetStream, Stream: "EVENTS", Filter: "events.in"}},
		Sinks: []jobspec.Sink{
			{Name: "one", Kind: jobspec.KindJetStream, Stream: "OUT", Subject: "out.one", Guarantee: jobspec.ExactlyOnce},
			{Name: "keyed", Kind: jobspec.KindJetStream, Stream: "OUT", Subject: "out.{key}", Guarantee: jobspec.ExactlyOnce},
			{Name: "two", Kind: jobspec.KindJetStream, Stream: "OUT", Subject: "out.two", Guarantee: jobspec.AtLeastOnce},
			{Name: "back", Kind: jobspec.KindJetStream, Stream: "EVENTS", Subject: "events.out", Guarantee: jobspec.ExactlyOnce},
		}}
	if err := createStreams(ctx, Stdio{Out: io.Discard, Err: io.Discard}, js, spec, 1); err != nil {
		t.Fatal(err)
	}
	window := worker.DuplicateWindow(ck, spec.Sinks[0])
	for _, want := range []struct {
		name     string
		subjects []string
		window   time.Duration
	}{{"OUT", []string{"out.>"}, window}, {"EVENTS", []string{"events.in", "events.out"}, max(window, defaultDuplicateWindow)}} {
		st, err := js.Stream(ctx, want.name)
		if err != nil {
			t.Fatal(err)
		}
		cfg := st.CachedInfo().Config
		if !slices.Equal(cfg.Subjects, want.subjects) || cfg.Duplicates != want.window ||
			!cfg.AllowAtomicPublish || !cfg.AllowBatchPublish {
			t.Errorf("stream %s: subjects %v, duplicate window %v, atomic %v, batch %v; want %v, %v, true, true", want.name,
				cfg.Subjects, cfg.Duplicates, cfg.AllowAtomicPublish, cfg.AllowBatchPublish, want.subjects, want.window)
		}
	}

	spec = &jobspec.Spec{Name: "j", Checkpointing: ck, Sinks: []jobspec.Sink{
		{Name: "a", Kind: jobspec.KindJetStream, Stream: "CROSS", Subject: "c.a.{key}", Guarantee: jobspec.ExactlyOnce},
		{Name: "b", Kind: jobspec.KindJetStream, Stream: "CROSS", Subject: "c.{key}.b", Guarantee: jobspec.ExactlyOnce},
	}}
	err := createStreams(ctx, Stdio{Out: io.Discard, Err: io.Discard}, js, spec, 1)
	want := "create stream CROSS: the job's sources and sinks on it name subjects that overlap (c.a.>, c.*.b), and a stream's subjects may not: create the stream with subjects that store them all, or change the spec: "
	if err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("createStreams: %v\nwant it to start %q", err, want)
	}
}

// The server refuses stream configurations for many reasons under one
// error code (10052, JSStreamInvalidConfigF): only its "overlaps with"
// is said to be overlapping subjects; another keeps the server's words.
func TestCreateStreamOtherInvalidConfig(t *testing.T) {
	_, js := embeddedtest.JetStream(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg := jetstream.StreamConfig{Name: "BAD", Subjects: []string{"bad"}, MaxAge: time.Minute, Duplicates: time.Hour}
	err := createStream(ctx, Stdio{Out: io.Discard, Err: io.Discard}, js, cfg, func(string) string { return "" }, "subjects %s overlap")
	if err == nil || strings.Contains(err.Error(), "overlap") || !strings.Contains(err.Error(), "duplicates window can not be larger then max age") {
		t.Fatalf("createStream: %v; want the server's reason, not overlapping subjects", err)
	}
}
