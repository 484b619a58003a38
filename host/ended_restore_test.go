package host_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
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

func runTotals(t *testing.T, cfg host.Config, in []stream.Element) (*totalsOp, string, error) {
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
			break // the task failed and closed its input
		}
	}
	var got []stream.Element
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case err := <-done:
			return op, render(t, got), err
		default:
		}
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
	return op, render(t, got), nil
}

// A rescaled restore from a checkpoint in which old subtask 0 had ended
// its port (its totals went out before its barrier: committed with that
// checkpoint) and old subtask 1 had not (forward edges, or an unaligned
// barrier that overtook the end-of-data queued for subtask 1) is refused:
// ending the port again would emit subtask 0's totals a second time, and
// not ending it would lose subtask 1's.
func TestMergedRestoreOfAPartlyEndedPortIsRefused(t *testing.T) {
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
	_, out, err := runTotals(t, host.Config{Store: store, RestoreMerged: []string{"j/chk-7/count-0", "j/chk-7/count-1"},
		Subtask: 0, Parallelism: 1}, []stream.Element{stream.EndOfData()})
	if !errors.Is(err, host.ErrCannotRescale) || !strings.Contains(err.Error(), "input port 0 had ended in 1 of the 2 old subtasks of checkpoint 7") {
		t.Fatalf("merged restore: %v (output %q), want ErrCannotRescale naming the port", err, out)
	}
	// Ended in every old subtask: the port stays ended, nothing repeats.
	store = snapshot.NewMemStore()
	for _, s := range []*snapshot.Task{
		{Task: "count-0", CheckpointID: 8, ModuleState: a, EndedPorts: []int{0}},
		{Task: "count-1", CheckpointID: 8, ModuleState: b, EndedPorts: []int{0}},
	} {
		if err := store.Put(ctx, "j/chk-8/"+s.Task, bytes.NewReader(snapshot.Encode(s))); err != nil {
			t.Fatal(err)
		}
	}
	op, out, err := runTotals(t, host.Config{Store: store, RestoreMerged: []string{"j/chk-8/count-0", "j/chk-8/count-1"},
		Subtask: 0, Parallelism: 1}, []stream.Element{stream.EndOfData()})
	if err != nil || out != "EOD" || op.ends != 0 {
		t.Fatalf("merged restore of an ended port: %v, output %q, %d ends; want EOD alone", err, out, op.ends)
	}
}

// A task restored from a snapshot whose port ended (a finished bounded
// job's final savepoint) and given more input — the job resubmitted from
// that savepoint with a later stop, or none — fails with ErrPortEnded
// naming the port, before the operator sees a record after its end:
// processing them would never end the port again, and their final output
// would be lost.
func TestRestoredEndedPortRefusesMoreInput(t *testing.T) {
	ctx := context.Background()
	store := snapshot.NewMemStore()
	a := abi.AppendKeyedEntry([]byte(abi.KeyedStateMagic), []byte("apple"), []byte("3"))
	if err := store.Put(ctx, "j/chk-9/count", bytes.NewReader(snapshot.Encode(&snapshot.Task{Task: "count", CheckpointID: 9, ModuleState: a, EndedPorts: []int{0}}))); err != nil {
		t.Fatal(err)
	}
	op, out, err := runTotals(t, host.Config{Store: store, Restore: "j/chk-9/count"},
		[]stream.Element{rec("apple", "x"), stream.EndOfData()})
	if !errors.Is(err, host.ErrPortEnded) || !strings.Contains(err.Error(), "records after the end of an input port: port 0 ended before checkpoint 9, which the task restored") || op.process != 0 {
		t.Fatalf("restored ended port given records: %v, %d Process calls (output %q); want ErrPortEnded before any", err, op.process, out)
	}
}
