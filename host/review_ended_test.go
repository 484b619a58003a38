package host_test

import (
	"bytes"
	"context"
	"io"
	"testing"
	"time"

	"github.com/weirhq/weir/abi"
	"github.com/weirhq/weir/host"
	"github.com/weirhq/weir/host/snapshot"
	"github.com/weirhq/weir/transport/local"
	"github.com/weirhq/weir/transport/stream"
)

// totalsOp is wordcount {emit: final} in miniature: keyed state key →
// total, emitted (value = total) at the end of its input; like the shipped
// guest it keeps its state after EndOfInput.
type totalsOp struct {
	totals  map[string]string
	ends    int
	process int
}

func (o *totalsOp) Process(context.Context, int, []byte, func(int, []byte) error) error {
	o.process++
	return nil
}
func (o *totalsOp) EndOfInput(_ context.Context, _ int, emit func(int, []byte) error) error {
	o.ends++
	var rs []abi.Record
	for k, v := range o.totals {
		rs = append(rs, abi.Record{Key: []byte(k), Value: []byte(k + "=" + v)})
	}
	if len(rs) == 0 {
		return nil
	}
	return emit(0, abi.EncodeBatch(rs...))
}
func (o *totalsOp) Snapshot(context.Context, io.Writer) error { return nil }
func (o *totalsOp) Restore(_ context.Context, r io.Reader) error {
	b, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	o.totals = map[string]string{}
	return abi.KeyedEntries(b, func(k, v []byte) error {
		o.totals[string(k)] = string(v)
		return nil
	})
}
func (o *totalsOp) CheckpointComplete(context.Context, int64) error { return nil }
func (o *totalsOp) Close(context.Context) error                     { return nil }

func runTotals(t *testing.T, cfg host.Config, in []stream.Element) (*totalsOp, string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	si, ri := local.New(local.Options{Name: "src->count"})
	so, ro := local.New(local.Options{Name: "count->out"})
	op := &totalsOp{}
	cfg.Name, cfg.Operator = "count", op
	cfg.Inputs = []host.Input{{Receiver: ri}}
	cfg.Outputs = []host.Output{{Senders: []stream.Sender{so}}}
	task, err := host.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- task.Run(ctx) }()
	for _, e := range in {
		if err := si.Send(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	var got []stream.Element
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		d, ok, _ := ro.Poll()
		if !ok {
			time.Sleep(time.Millisecond)
			continue
		}
		got = append(got, d.Element)
		if d.Kind == stream.KindEndOfData {
			break
		}
	}
	cancel()
	<-done
	return op, render(t, got)
}

// A rescaled restore from a checkpoint in which old subtask 0 had ended
// its port (its totals went out before its barrier: committed with that
// checkpoint) and old subtask 1 had not: the merged task ends the port
// again, and the operator's EndOfInput emits subtask 0's totals a second
// time (apple=3). Possible with forward edges, or with unaligned
// checkpoints (a barrier overtakes the end-of-data queued for subtask 1).
func TestReviewMergedRestoreRepeatsAnEndedSubtasksFinalOutput(t *testing.T) {
	ctx := context.Background()
	store := snapshot.NewMemStore()
	a := abi.AppendKeyedEntry([]byte(abi.KeyedStateMagic), []byte("apple"), []byte("3"))
	b := abi.AppendKeyedEntry([]byte(abi.KeyedStateMagic), []byte("fig"), []byte("2"))
	for _, s := range []*snapshot.Task{
		{Task: "count-0", CheckpointID: 7, ModuleState: a, EndedPorts: []int{0}},
		{Task: "count-1", CheckpointID: 7, ModuleState: b},
	} {
		if err := store.Put(ctx, "j/chk-7/"+s.Task, bytes.NewReader(snapshot.Encode(s))); err != nil {
			t.Fatal(err)
		}
	}
	_, out := runTotals(t, host.Config{Store: store, RestoreMerged: []string{"j/chk-7/count-0", "j/chk-7/count-1"},
		Subtask: 0, Parallelism: 1}, []stream.Element{stream.EndOfData()})
	if out != "fig=2 EOD" {
		t.Errorf("merged restore: output %q, want fig=2 EOD (apple's total was committed before the checkpoint)", out)
	}
}

// A task restored from a snapshot whose port ended (a finished bounded
// job's final savepoint) and given more input — the job resubmitted from
// that savepoint with a later stop, or none — processes records on a port
// whose EndOfInput already ran and never ends it again: the totals of the
// new input are never emitted, and the job "finishes" without them.
func TestReviewRestoreEndedPortTakesMoreInput(t *testing.T) {
	ctx := context.Background()
	store := snapshot.NewMemStore()
	a := abi.AppendKeyedEntry([]byte(abi.KeyedStateMagic), []byte("apple"), []byte("3"))
	if err := store.Put(ctx, "j/chk-9/count", bytes.NewReader(snapshot.Encode(&snapshot.Task{Task: "count", CheckpointID: 9, ModuleState: a, EndedPorts: []int{0}}))); err != nil {
		t.Fatal(err)
	}
	op, out := runTotals(t, host.Config{Store: store, Restore: "j/chk-9/count"},
		[]stream.Element{rec("apple", "x"), stream.EndOfData()})
	if op.process > 0 && op.ends == 0 {
		t.Errorf("restored ended port: %d Process calls after its EndOfInput, no EndOfInput again (output %q): new input is never finalized", op.process, out)
	}
}
