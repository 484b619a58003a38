package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirhq/weir/coordinator/jobspec"
	"github.com/weirhq/weir/transport/embedded"
	"github.com/weirhq/weir/transport/embedded/embeddedtest"
)

// weir stream add creates a stream as weir run -create-streams does for a
// sink (atomic and batched publish, the duplicate window an exactly-once
// sink with the default checkpoints needs, no limits), with the limits
// given: a trial pre-loading a backfill stream had to reach for the nats
// CLI. It refuses weir's and NATS's own names and subjects, as a job spec
// is refused, and subjects another stream stores, naming it.
func TestStreamAdd(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv := embeddedtest.Server(t, embedded.Config{})
	_, js := embeddedtest.Connect(t, srv)
	weir := func(args ...string) (int, string, string) {
		var out, errb syncBuffer
		code := run(ctx, append([]string{"stream"}, append(args, "-nats", srv.ClientURL())...), Stdio{In: strings.NewReader(""), Out: &out, Err: &errb})
		return code, out.String(), errb.String()
	}
	code, out, errs := weir("add", "BACKFILL", "-subjects", "bf.>,bf.a,other.*", "-max-bytes", "1GiB")
	if want := "created stream BACKFILL (subjects bf.>, other.*, 1 replica(s))\n" +
		"  storage file, duplicate window 2m10s, limits: max-bytes 1GiB, discard old; atomic and batched publish allowed\n"; code != 0 || out != want || errs != "" {
		t.Fatalf("add: exit %d, %q %q; want\n%s", code, out, errs, want)
	}
	st, err := js.Stream(ctx, "BACKFILL")
	if err != nil {
		t.Fatal(err)
	}
	// What weir run -create-streams gives a sink's stream of a job with the
	// default checkpoints.
	spec, err := jobspec.Parse("j.yaml", []byte(`name: j
sources: [{name: in, kind: nats, subject: x}]
sinks: [{name: out, kind: jetstream, stream: BACKFILL, subject: "bf.{key}", guarantee: exactly-once, input: {from: in}}]
`), jobspec.Options{})
	if err != nil {
		t.Fatal(err)
	}
	want := streamsToCreate(spec, 1)[0]
	if c := st.CachedInfo().Config; c.Duplicates != want.Duplicates || !c.AllowAtomicPublish || !c.AllowBatchPublish ||
		c.Storage != jetstream.FileStorage || c.Replicas != 1 || c.MaxBytes != 1<<30 || c.MaxAge != 0 {
		t.Errorf("BACKFILL: %+v; want the duplicate window %s of -create-streams, atomic and batched publish, file storage, max-bytes 1GiB", c, want.Duplicates)
	}
	if code, out, errs := weir("add", "MEM", "-subjects", "mem.x", "-storage", "memory", "-dupe-window", "30s", "-max-age", "1h"); code != 0 ||
		out != "created stream MEM (subjects mem.x, 1 replica(s))\n  storage memory, duplicate window 30s, limits: max-age 1h0m0s, discard old; atomic and batched publish allowed\n" {
		t.Errorf("add -storage memory: exit %d, %q %q", code, out, errs)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"add", "OTHER", "-subjects", "x.>,bf.b"}, "weir: create stream OTHER (subjects x.>, bf.b): stream BACKFILL stores some of them already (its subjects: bf.>, other.*); " +
			"read or write stream BACKFILL (weir stream info BACKFILL), or choose subjects no stream stores: "},
		{[]string{"add", "BACKFILL", "-subjects", "y.>"}, "weir: stream add BACKFILL: there is a stream BACKFILL already (subjects bf.>, other.*): weir stream edit BACKFILL changes its limits, weir stream rm BACKFILL removes it\n"},
		{[]string{"add", "CTL", "-subjects", "weir.>"}, "weir: stream add CTL: subject \"weir.>\" overlaps weir.ctl.> (weir's control subjects: a job could cancel or deploy other jobs and read their specs), which jobs may not read or write; choose subjects of your own\n"},
		{[]string{"add", "KV_weir_jobs", "-subjects", "z"}, "weir: stream add KV_weir_jobs: the name of one of weir's own streams (KV_weir_*, OBJ_weir_*) or the NATS server's ($MQTT_*), which jobs may not read or write; name a stream of your own\n"},
		{[]string{"add", "X", "-subjects", "a.*.c,a.b.*"}, "weir: stream add X: subjects \"a.*.c\" and \"a.b.*\" overlap, which a stream's subjects may not: give one that stores both\n"},
		{[]string{"add", "X", "-subjects", "a", "-max-age", "1m"}, "weir: stream add X: -max-age 1m0s is shorter than its default duplicate window 2m10s (what an exactly-once sink with the default checkpoints needs), which JetStream refuses: " +
			"give -max-age 2m10s (or longer), or -dupe-window 1m0s (or shorter) where no exactly-once sink writes it\n"},
		{[]string{"add", "X"}, "weir: stream add X: give -subjects, the subjects it stores (e.g. -subjects 'orders.>,refunds.*')\n"},
		{[]string{"add", "X", "-subjects", "a", "-storage", "disk"}, "weir: stream add X: -storage \"disk\": file or memory\n"},
		{[]string{"info", "BACKFILL", "-subjects", "a"}, "weir: stream info: -subjects, -replicas and -storage are flags of stream add (a stream's subjects, replicas and storage: the nats CLI's stream edit)\n"},
	} {
		code, out, errs := weir(c.args...)
		if code == 0 || out != "" || !strings.HasPrefix(errs, c.want) {
			t.Errorf("%v: exit %d, %q %q; want it refused with\n%s", c.args, code, out, errs, c.want)
		}
	}
	// Without -replicas, as many as the coordinator keeps its job records
	// with, as weir run -nats gives the streams it creates.
	if _, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: jetStreamJobsBucket}); err != nil {
		t.Fatal(err)
	}
	if code, out, errs := weir("add", "REPL", "-subjects", "repl"); code != 0 || !strings.HasSuffix(out,
		"stream(s) REPL: 1 replica(s), as the coordinator keeps its job records (weir up -replicas 1); -replicas N sets another\n") {
		t.Errorf("add without -replicas beside a coordinator's buckets: exit %d, %q %q", code, out, errs)
	}
	if _, err := js.Stream(ctx, "OTHER"); err == nil {
		t.Error("stream OTHER was created over BACKFILL's subjects")
	}
}
