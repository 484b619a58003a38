package main

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

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
