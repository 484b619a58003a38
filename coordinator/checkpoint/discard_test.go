package checkpoint

import (
	"bytes"
	"context"
	"reflect"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirhq/weir/coordinator/control"
	"github.com/weirhq/weir/transport/embedded/embeddedtest"
	"github.com/weirhq/weir/transport/storage"
)

// A runner drops a completed checkpoint that retention let go by the keys
// its metadata names — each task's snapshot, the sink's commit marker —
// with no listing of either bucket: a JetStream bucket lists all of its
// objects, every job's, to find those under one checkpoint's prefix, and a
// discard would cost in proportion to them. Nothing of the checkpoint is
// left, and nothing of another.
func TestRunnerDiscardsACompletedCheckpointByKey(t *testing.T) {
	ctx := context.Background()
	nc, js := embeddedtest.JetStream(t)
	meta, err := storage.NewKV(ctx, js, storage.DefaultMetaBucket, 0)
	if err != nil {
		t.Fatal(err)
	}
	state, err := storage.NewObjectStore(ctx, js, storage.DefaultStateBucket, 0)
	if err != nil {
		t.Fatal(err)
	}
	cat := &Catalog{Meta: meta, State: state}
	put := func(job string, id int64) *Metadata {
		t.Helper()
		md := &Metadata{Job: job, ID: id, Handles: map[string]string{},
			Metrics: map[string]map[string]int64{"sink-0": {control.MetricCommitReport: 1}, "src-0": {control.MetricCommitReport: 0}}}
		for _, task := range []string{"src-0", "sink-0"} {
			k := StateKey(job, id, task)
			if err := state.Put(ctx, k, bytes.NewReader([]byte("state"))); err != nil {
				t.Fatal(err)
			}
			md.Handles[task] = k
		}
		if err := cat.Write(ctx, md); err != nil {
			t.Fatal(err)
		}
		if err := state.Put(ctx, StateKey(job, id, "sink-0")+CommitMarkerSuffix, bytes.NewReader(nil)); err != nil {
			t.Fatal(err)
		}
		return md
	}
	put("other", 1)
	first := put("j", 1)
	put("j", 2)

	listings, err := nc.SubscribeSync(jetstream.DefaultAPIPrefix + "STREAM.INFO.>")
	if err != nil {
		t.Fatal(err)
	}
	watches, err := nc.SubscribeSync(jetstream.DefaultAPIPrefix + "CONSUMER.CREATE.>")
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	r := NewRunner(NewMachine("j", Config{}, nil, 0), cat, &fakeEffects{}, RunnerOptions{})
	r.discard(ctx, DiscardAction{ID: first.ID, Completed: first})
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	if n, _, _ := listings.Pending(); n != 0 {
		t.Errorf("%d stream infos (listings) for one discard; want none", n)
	}
	if n, _, _ := watches.Pending(); n != 0 {
		t.Errorf("%d consumers (watches) for one discard; want none", n)
	}
	_ = listings.Unsubscribe()
	_ = watches.Unsubscribe()

	if ids, err := cat.IDs(ctx, "j"); err != nil || !reflect.DeepEqual(ids, []int64{2}) {
		t.Errorf("checkpoints of j after the discard: %v, %v; want [2]", ids, err)
	}
	keys, err := state.List(ctx, "")
	want := []string{
		"j/chk-2/sink-0", "j/chk-2/sink-0.committed", "j/chk-2/src-0",
		"other/chk-1/sink-0", "other/chk-1/sink-0.committed", "other/chk-1/src-0",
	}
	if err != nil || !reflect.DeepEqual(keys, want) {
		t.Errorf("state after the discard: %v, %v; want %v", keys, err, want)
	}
}
