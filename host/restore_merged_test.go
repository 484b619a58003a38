package host_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/weirhq/weir/abi"
	"github.com/weirhq/weir/host"
	"github.com/weirhq/weir/host/partition"
	"github.com/weirhq/weir/host/snapshot"
	"github.com/weirhq/weir/transport/local"
	"github.com/weirhq/weir/transport/stream"
)

// mergingSource ends at once; it records the offset it was sought to and
// merges offsets by joining them with commas.
type mergingSource struct{ sought string }

func (s *mergingSource) Poll(ctx context.Context) ([]byte, []byte, error) { return nil, nil, io.EOF }
func (s *mergingSource) Seek(ctx context.Context, off []byte) error {
	s.sought = string(off)
	return nil
}
func (s *mergingSource) CheckpointComplete(context.Context, int64, []byte) error { return nil }
func (s *mergingSource) Close() error                                            { return nil }
func (s *mergingSource) MergeOffsets(offs [][]byte) ([]byte, error) {
	return bytes.Join(offs, []byte(",")), nil
}

// plainSource cannot merge offsets.
type plainSource struct{}

func (plainSource) Poll(ctx context.Context) ([]byte, []byte, error)        { return nil, nil, io.EOF }
func (plainSource) Seek(context.Context, []byte) error                      { return nil }
func (plainSource) CheckpointComplete(context.Context, int64, []byte) error { return nil }
func (plainSource) Close() error                                            { return nil }

// A source task of a rescaled vertex restores from every old subtask's
// snapshot: it seeks to their merged offsets. Snapshots holding anything
// but an offset, or a source that cannot merge, are refused.
func TestRestoreMerged(t *testing.T) {
	ctx := context.Background()
	store := snapshot.NewMemStore()
	put := func(key string, snap *snapshot.Task) {
		if err := store.Put(ctx, key, bytes.NewReader(snapshot.Encode(snap))); err != nil {
			t.Fatal(err)
		}
	}
	put("j/chk-5/in-0", &snapshot.Task{Task: "in-0", CheckpointID: 5, SourceOffset: []byte("p0")})
	put("j/chk-5/in-1", &snapshot.Task{Task: "in-1", CheckpointID: 5, SourceOffset: []byte("p1")})
	put("j/chk-5/in-2", &snapshot.Task{Task: "in-2", CheckpointID: 5, SourceOffset: []byte("p2"),
		Outputs: []snapshot.ChannelState{{Channel: 0, Elements: []stream.Element{rec("k", "v")}}}})
	put("j/chk-4/in-3", &snapshot.Task{Task: "in-3", CheckpointID: 4, SourceOffset: []byte("p3")})
	run := func(src host.Source, handles ...string) error {
		s, _ := local.New(local.Options{})
		task, err := host.New(host.Config{Name: "in-0", Source: src, Outputs: []host.Output{{Senders: []stream.Sender{s}}},
			Store: store, RestoreMerged: handles})
		if err != nil {
			t.Fatal(err)
		}
		return task.Run(ctx)
	}
	src := &mergingSource{}
	if err := run(src, "j/chk-5/in-0", "j/chk-5/in-1"); err != nil {
		t.Fatal(err)
	}
	if src.sought != "p0,p1" {
		t.Errorf("sought %q, want the merged p0,p1", src.sought)
	}
	for _, c := range []struct {
		src     host.Source
		handles []string
		want    string
	}{
		{&mergingSource{}, []string{"j/chk-5/in-0", "j/chk-5/in-2"}, "j/chk-5/in-2 holds channel state, or state of another kind of task"},
		{&mergingSource{}, []string{"j/chk-5/in-0", "j/chk-4/in-3"}, "j/chk-4/in-3 is of checkpoint 4, the others of 5"},
		{plainSource{}, []string{"j/chk-5/in-0"}, "needs a source whose offsets merge"},
		{&mergingSource{}, []string{"j/chk-5/missing"}, "restore from 1 merged snapshots"},
	} {
		err := run(c.src, c.handles...)
		var te *host.TaskError
		if err == nil || !strings.Contains(err.Error(), c.want) || !errors.As(err, &te) {
			t.Errorf("restore from %v: %v, want a task error saying %q", c.handles, err, c.want)
		}
	}
}

// stateOp keeps the state it was restored with.
type stateOp struct{ restored []byte }

func (o *stateOp) Process(context.Context, int, []byte, func(int, []byte) error) error { return nil }
func (o *stateOp) EndOfInput(context.Context, int, func(int, []byte) error) error      { return nil }
func (o *stateOp) Snapshot(context.Context, io.Writer) error                           { return nil }
func (o *stateOp) Restore(_ context.Context, r io.Reader) error {
	b, err := io.ReadAll(r)
	o.restored = b
	return err
}
func (o *stateOp) CheckpointComplete(context.Context, int64) error { return nil }
func (o *stateOp) Close(context.Context) error                     { return nil }

// An operator task of a rescaled vertex restores the keyed state entries
// of all old subtasks whose key routes to it: every key lands on exactly
// one new subtask. Opaque state cannot be split.
func TestRestoreMergedKeyedState(t *testing.T) {
	ctx := context.Background()
	store := snapshot.NewMemStore()
	keys := []string{"apple", "fig", "pear", "plum", "kiwi", "lime", "date"}
	olds := make([][]byte, 2)
	for i := range olds {
		olds[i] = []byte(abi.KeyedStateMagic)
	}
	for _, k := range keys {
		i := partition.KeyChannel([]byte(k), 2)
		olds[i] = abi.AppendKeyedEntry(olds[i], []byte(k), []byte("n-"+k))
	}
	handles := []string{"j/chk-3/count-0", "j/chk-3/count-1"}
	for i, h := range handles {
		if err := store.Put(ctx, h, bytes.NewReader(snapshot.Encode(&snapshot.Task{Task: h, CheckpointID: 3, ModuleState: olds[i]}))); err != nil {
			t.Fatal(err)
		}
	}
	if err := store.Put(ctx, "j/chk-3/opaque", bytes.NewReader(snapshot.Encode(&snapshot.Task{CheckpointID: 3, ModuleState: []byte("\x01state")}))); err != nil {
		t.Fatal(err)
	}
	run := func(op *stateOp, subtask, parallelism int, handles ...string) error {
		s, r := local.New(local.Options{})
		if err := s.Send(ctx, stream.EndOfPartition()); err != nil {
			t.Fatal(err)
		}
		task, err := host.New(host.Config{Name: "count", Operator: op, Inputs: []host.Input{{Receiver: r}},
			Store: store, RestoreMerged: handles, Subtask: subtask, Parallelism: parallelism})
		if err != nil {
			t.Fatal(err)
		}
		return task.Run(ctx)
	}
	got := map[string]int{}
	for sub := 0; sub < 3; sub++ {
		op := &stateOp{}
		if err := run(op, sub, 3, handles...); err != nil {
			t.Fatal(err)
		}
		err := abi.KeyedEntries(op.restored, func(k, v []byte) error {
			if partition.KeyChannel(k, 3) != sub || string(v) != "n-"+string(k) {
				t.Errorf("subtask %d of 3 restored %s=%s", sub, k, v)
			}
			got[string(k)]++
			return nil
		})
		if err != nil {
			t.Fatalf("subtask %d restored %q: %v", sub, op.restored, err)
		}
	}
	for _, k := range keys {
		if got[k] != 1 {
			t.Errorf("key %s restored %d times", k, got[k])
		}
	}
	if err := run(&stateOp{}, 0, 3, handles[0], "j/chk-3/opaque"); !errors.Is(err, abi.ErrNotKeyedState) {
		t.Errorf("opaque state: %v, want ErrNotKeyedState", err)
	}
}

// mergingSink records what each task's state it re-commits.
type mergingSink struct{ recovered []string }

func (s *mergingSink) Write(context.Context, []byte) error              { return nil }
func (s *mergingSink) PreCommit(context.Context, int64) ([]byte, error) { return nil, nil }
func (s *mergingSink) Commit(context.Context, int64) error              { return nil }
func (s *mergingSink) Recover(ctx context.Context, id int64, st []byte) error {
	return s.RecoverTask(ctx, "self", id, st)
}
func (s *mergingSink) EndOfInput(context.Context) error { return nil }
func (s *mergingSink) Close() error                     { return nil }
func (s *mergingSink) RecoverTask(_ context.Context, task string, id int64, st []byte) error {
	s.recovered = append(s.recovered, fmt.Sprintf("%s@%d:%s", task, id, st))
	return nil
}

// A sink task of a shrunk vertex re-commits each old subtask's staged
// output as that subtask (SinkMerger), its own included.
func TestRestoreMergedSink(t *testing.T) {
	ctx := context.Background()
	store := snapshot.NewMemStore()
	for _, task := range []string{"out-0", "out-2"} {
		snap := &snapshot.Task{Task: task, CheckpointID: 8, SinkState: []byte("staged by " + task)}
		if err := store.Put(ctx, "j/chk-8/"+task, bytes.NewReader(snapshot.Encode(snap))); err != nil {
			t.Fatal(err)
		}
	}
	sk := &mergingSink{}
	s, r := local.New(local.Options{})
	if err := s.Send(ctx, stream.EndOfPartition()); err != nil {
		t.Fatal(err)
	}
	task, err := host.New(host.Config{Name: "out-0", Sink: sk, Inputs: []host.Input{{Receiver: r}},
		Store: store, RestoreMerged: []string{"j/chk-8/out-0", "j/chk-8/out-2"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := task.Run(ctx); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(sk.recovered, " "); got != "out-0@8:staged by out-0 out-2@8:staged by out-2" {
		t.Errorf("recovered %q", got)
	}
}

// A task that chains a source and an operator restores both from the old
// subtasks' snapshots: the keys that route to it, and the source at the
// merged offsets — not at its start, which would read everything again.
func TestRestoreMergedSourceAndOperator(t *testing.T) {
	ctx := context.Background()
	store := snapshot.NewMemStore()
	handles := []string{"j/chk-6/in-0", "j/chk-6/in-1"}
	for i, h := range handles {
		state := abi.AppendKeyedEntry([]byte(abi.KeyedStateMagic), []byte(fmt.Sprint("k", i)), []byte("v"))
		snap := &snapshot.Task{Task: h, CheckpointID: 6, SourceOffset: []byte(fmt.Sprint("p", i)), ModuleState: state}
		if err := store.Put(ctx, h, bytes.NewReader(snapshot.Encode(snap))); err != nil {
			t.Fatal(err)
		}
	}
	src, op := &mergingSource{}, &stateOp{}
	s, _ := local.New(local.Options{})
	task, err := host.New(host.Config{Name: "in-0", Source: src, Operator: op, Outputs: []host.Output{{Senders: []stream.Sender{s}}},
		Store: store, RestoreMerged: handles, Subtask: 0, Parallelism: 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := task.Run(ctx); err != nil {
		t.Fatal(err)
	}
	if src.sought != "p0,p1" {
		t.Errorf("source sought %q, want the merged p0,p1", src.sought)
	}
	n := 0
	if err := abi.KeyedEntries(op.restored, func(k, v []byte) error { n++; return nil }); err != nil || n != 2 {
		t.Errorf("operator restored %d keys (%v), want both", n, err)
	}
}

// fixedStateOp snapshots the bytes it holds.
type fixedStateOp struct {
	stateOp
	state []byte
}

func (o *fixedStateOp) Snapshot(_ context.Context, w io.Writer) error {
	_, err := w.Write(o.state)
	return err
}

// A task reports metric keyed_state for state in the keyed layout; state
// that claims the layout but breaks it fails the snapshot, naming the
// operator's checkpoint, instead of failing some later rescale.
func TestKeyedStateSnapshot(t *testing.T) {
	good := abi.AppendKeyedEntry([]byte(abi.KeyedStateMagic), []byte("k"), []byte("v"))
	for _, c := range []struct {
		name  string
		state []byte
		keyed int64
		fail  string
	}{
		{"keyed", good, 1, ""},
		{"opaque", []byte("\x01opaque"), 0, ""},
		{"malformed", good[:len(good)-1], 0, "state starts with \"WKS1\" but is not in the keyed layout"},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := newFixture(t, []int{0}, local.Options{})
			f.send(0, rec("a", "a"), b(1), eop)
			err := f.task(&fixedStateOp{state: c.state}, host.Checkpointing{}).Run(context.Background())
			if c.fail != "" {
				if err == nil || !strings.Contains(err.Error(), c.fail) {
					t.Fatalf("run: %v, want an error saying %q", err, c.fail)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			f.rc.mu.Lock()
			defer f.rc.mu.Unlock()
			if got := f.rc.metrics[1]["x"][host.MetricKeyedState]; got != c.keyed {
				t.Errorf("keyed_state %d, want %d", got, c.keyed)
			}
		})
	}
}
