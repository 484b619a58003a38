package host_test

import (
	"context"
	"encoding/binary"
	"testing"
	"time"

	"github.com/weirhq/weir/host"
	"github.com/weirhq/weir/host/barrier"
	"github.com/weirhq/weir/host/snapshot"
	"github.com/weirhq/weir/transport/local"
	"github.com/weirhq/weir/transport/storage"
	"github.com/weirhq/weir/transport/stream"
)

// blockingSource hands out its batches, then blocks until ctx is done.
type blockingSource struct {
	batches [][]byte
	pos     int
}

func (s *blockingSource) Poll(ctx context.Context) ([]byte, []byte, error) {
	if s.pos >= len(s.batches) {
		<-ctx.Done()
		return nil, nil, ctx.Err()
	}
	b := s.batches[s.pos]
	s.pos++
	return b, binary.LittleEndian.AppendUint64(nil, uint64(s.pos)), nil
}
func (s *blockingSource) Seek(context.Context, []byte) error                      { return nil }
func (s *blockingSource) CheckpointComplete(context.Context, int64, []byte) error { return nil }
func (s *blockingSource) Close() error                                            { return nil }

// ackWaiter returns a recorder whose acks are also sent on a channel.
func ackWaiter() (*recorder, chan int64) {
	rc := newRecorder()
	acks := make(chan int64, 16)
	rc.onAck = func(task string, id int64) { acks <- id }
	return rc, acks
}

func waitAck(t *testing.T, acks chan int64, rc *recorder) int64 {
	t.Helper()
	select {
	case id := <-acks:
		return id
	case <-time.After(30 * time.Second):
		rc.mu.Lock()
		defer rc.mu.Unlock()
		t.Fatalf("no acknowledgement; declines %v failures %v", rc.declines, rc.failed)
	}
	return 0
}

func readSnap(t *testing.T, store *storage.Dir, key string) *snapshot.Task {
	t.Helper()
	r, err := store.Get(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	s, err := snapshot.Read(r)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// A source blocked on a full output takes an unaligned checkpoint at once:
// the barrier overtakes the queued batch, and the batch the task could not
// send yet is output channel state too.
func TestUnalignedSourceUnderBackpressure(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	store, _ := storage.NewDir(t.TempDir())
	so, ro := local.New(local.Options{Name: "src->x", CapacityElements: 1})
	rc, acks := ackWaiter()
	src := &blockingSource{batches: [][]byte{rec("a", "a").Batch, rec("b", "b").Batch, rec("c", "c").Batch}}
	task, err := host.New(host.Config{Name: "src", Source: src, Outputs: []host.Output{{Senders: []stream.Sender{so}}},
		Checkpointing: host.Checkpointing{Mode: barrier.Unaligned}, Store: store, Listener: rc})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- task.Run(ctx) }()
	// Wait until a is queued and b blocks (the channel holds one element).
	for so.Waiting() == 0 {
		time.Sleep(time.Millisecond)
	}
	task.TriggerCheckpoint(stream.Barrier{ID: 1})
	if id := waitAck(t, acks, rc); id != 1 {
		t.Fatalf("ack %d", id)
	}
	snap := readSnap(t, store, rc.handle(1, "src"))
	if len(snap.Outputs) != 1 || render(t, snap.Outputs[0].Elements) != "a b" {
		t.Fatalf("output channel state %+v", snap.Outputs)
	}
	if off := binary.LittleEndian.Uint64(snap.SourceOffset); off != 2 {
		t.Fatalf("source offset %d, want 2 (a and b emitted)", off)
	}
	// Downstream sees the barrier first, then everything, nothing lost.
	var got []stream.Element
	for len(got) < 4 {
		d, ok, _ := ro.Poll()
		if ok {
			got = append(got, d.Element)
		} else {
			time.Sleep(time.Millisecond)
		}
	}
	if s := render(t, got); s != "B1 a b c" {
		t.Fatalf("channel carried %q", s)
	}
	cancel()
	<-done
}

// A task whose output is blocked still sees a priority barrier on its input
// (PollPriority), snapshots and acknowledges while the output stays full.
func TestUnalignedTaskWithBlockedOutput(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	store, _ := storage.NewDir(t.TempDir())
	si, ri := local.New(local.Options{Name: "up->x"})
	so, _ := local.New(local.Options{Name: "x->down", CapacityElements: 1})
	for _, v := range []string{"r1", "r2", "r3"} {
		if err := si.Send(ctx, rec(v, v)); err != nil {
			t.Fatal(err)
		}
	}
	rc, acks := ackWaiter()
	task, err := host.New(host.Config{Name: "x", Inputs: []host.Input{{Receiver: ri}},
		Outputs:       []host.Output{{Senders: []stream.Sender{so}}},
		Checkpointing: host.Checkpointing{Mode: barrier.Unaligned}, Store: store, Listener: rc})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- task.Run(ctx) }()
	// r1 is queued downstream, r2 blocks, r3 waits at the input.
	for so.Waiting() == 0 {
		time.Sleep(time.Millisecond)
	}
	over, err := si.SendPriority(ctx, stream.BarrierElement(stream.Barrier{ID: 1, Unaligned: true}))
	if err != nil || render(t, over) != "r3" {
		t.Fatalf("upstream overtaken %q %v", render(t, over), err)
	}
	if id := waitAck(t, acks, rc); id != 1 {
		t.Fatalf("ack %d", id)
	}
	snap := readSnap(t, store, rc.handle(1, "x"))
	if len(snap.Outputs) != 1 || render(t, snap.Outputs[0].Elements) != "r1 r2" || len(snap.Inputs) != 0 {
		t.Fatalf("channel state: in %+v out %+v", snap.Inputs, snap.Outputs)
	}
	cancel()
	<-done
}

// Restoring a snapshot sends the recovered output channel state before any
// new output and processes the recovered input channel state before any new
// input.
func TestRestoreReplaysChannelStateFirst(t *testing.T) {
	ctx := context.Background()
	store, _ := storage.NewDir(t.TempDir())
	j := &joinOp{}
	var state []byte
	{
		j.left = nil
		var w bytesBuf
		j.Snapshot(ctx, &w)
		state = w.b
	}
	snap := &snapshot.Task{Task: "join-0", CheckpointID: 3, Unaligned: true, ModuleState: state,
		Inputs: []snapshot.ChannelState{
			{Channel: 1, Elements: []stream.Element{rec("k", "R1")}},
			{Channel: 0, Elements: []stream.Element{rec("k", "L1")}},
		},
		Outputs: []snapshot.ChannelState{{Channel: 0, Elements: []stream.Element{rec("z", "old")}}},
	}
	if err := store.Put(ctx, "chk-3/join-0", bytesReader(snapshot.Encode(snap))); err != nil {
		t.Fatal(err)
	}
	s0, r0 := local.New(local.Options{})
	s1, r1 := local.New(local.Options{})
	so, ro := local.New(local.Options{})
	s0.Send(ctx, rec("k", "L2"))
	s0.Send(ctx, stream.EndOfPartition())
	s1.Send(ctx, stream.EndOfPartition())
	task, err := host.New(host.Config{Name: "join-0", Operator: &joinOp{},
		Inputs:  []host.Input{{Port: 0, Receiver: r0}, {Port: 1, Receiver: r1}},
		Outputs: []host.Output{{Senders: []stream.Sender{so}}}, Store: store, Restore: "chk-3/join-0"})
	if err != nil {
		t.Fatal(err)
	}
	if err := task.Run(ctx); err != nil {
		t.Fatal(err)
	}
	var got []stream.Element
	for {
		d, ok, _ := ro.Poll()
		if !ok {
			break
		}
		got = append(got, d.Element)
	}
	// old first; then R1 (no left yet), L1 → L1|R1, then the new L2 → L2|R1.
	if s := render(t, got); s != "old L1|R1 L2|R1 EOP" {
		t.Fatalf("output %q", s)
	}
}

// A task's Stats can be read while it runs: records in and out as they
// pass, and the time it has been blocked on a full output channel so far,
// growing while the send is still blocked.
func TestStatsWhileBlocked(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	so, ro := local.New(local.Options{Name: "src->x", CapacityElements: 1})
	src := &blockingSource{batches: [][]byte{rec("a", "a").Batch, rec("b", "b").Batch}}
	task, err := host.New(host.Config{Name: "src", Source: src, Outputs: []host.Output{{Senders: []stream.Sender{so}}}})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- task.Run(ctx) }()
	// a is queued, b blocks: the task has taken and emitted both.
	for so.Waiting() == 0 {
		_ = task.Stats() // concurrent reads are safe (-race)
		time.Sleep(time.Millisecond)
	}
	s := task.Stats()
	if s.RecordsIn != 2 || s.BatchesIn != 2 || s.RecordsOut != 2 || s.BatchesOut != 2 {
		t.Fatalf("stats %+v, want 2 records and batches in and out", s)
	}
	for task.Stats().Backpressured <= s.Backpressured {
		time.Sleep(time.Millisecond)
	}
	for n := 0; n < 2; {
		if _, ok, _ := ro.Poll(); ok {
			n++
		} else {
			time.Sleep(time.Millisecond)
		}
	}
	// Unblocked, the blocked time stops growing.
	for i := 0; ; i++ {
		a := task.Stats().Backpressured
		time.Sleep(10 * time.Millisecond)
		b := task.Stats().Backpressured
		if a == b {
			break
		}
		if i == 500 {
			t.Fatalf("backpressured still growing (%v then %v) with the output drained", a, b)
		}
	}
	cancel()
	<-done
}

// A source triggered for a stop savepoint takes no input after the
// barrier; when the savepoint is aborted it goes on.
func TestStopSavepointAborted(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	store, _ := storage.NewDir(t.TempDir())
	so, ro := local.New(local.Options{Name: "src->x"})
	rc, acks := ackWaiter()
	src := &blockingSource{batches: [][]byte{rec("a", "a").Batch, rec("b", "b").Batch}}
	task, err := host.New(host.Config{Name: "src", Source: src, Outputs: []host.Output{{Senders: []stream.Sender{so}}},
		Store: store, Listener: rc})
	if err != nil {
		t.Fatal(err)
	}
	task.TriggerStop(stream.Barrier{ID: 1, Type: stream.Savepoint})
	done := make(chan error, 1)
	go func() { done <- task.Run(ctx) }()
	if id := waitAck(t, acks, rc); id != 1 {
		t.Fatalf("ack %d", id)
	}
	time.Sleep(50 * time.Millisecond) // the polled batch waits
	if s := task.Stats(); s.RecordsIn != 0 {
		t.Fatalf("took %d records after the stop savepoint's barrier", s.RecordsIn)
	}
	task.AbortCheckpoint(1)
	var got []stream.Element
	for len(got) < 3 {
		if d, ok, _ := ro.Poll(); ok {
			got = append(got, d.Element)
		} else {
			time.Sleep(time.Millisecond)
		}
	}
	if s := render(t, got); s != "B1 a b" {
		t.Fatalf("channel carried %q", s)
	}
	if err := task.Rest(ctx); err != nil {
		t.Fatalf("rest: %v", err)
	}
	cancel()
	<-done
	if err := task.Rest(context.Background()); err == nil {
		t.Fatal("rest of a task that ended")
	}
}

// stopRaceSource hands out "a" at once and "b" once checkpoint 1
// completed; its CheckpointComplete posts the stop savepoint 2 just as "b"
// is ready, so the task finds the trigger and the batch at the same time.
type stopRaceSource struct {
	task    *host.Task
	pos     int
	release chan struct{} // closed by CheckpointComplete(1): Poll hands out "b"
	polled  chan struct{} // closed when Poll returned "b"
}

func (s *stopRaceSource) Poll(ctx context.Context) ([]byte, []byte, error) {
	s.pos++
	switch s.pos {
	case 1:
		return rec("a", "a").Batch, binary.LittleEndian.AppendUint64(nil, 1), nil
	case 2:
		select {
		case <-s.release:
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		}
		close(s.polled)
		return rec("b", "b").Batch, binary.LittleEndian.AppendUint64(nil, 2), nil
	}
	<-ctx.Done()
	return nil, nil, ctx.Err()
}

func (s *stopRaceSource) CheckpointComplete(_ context.Context, id int64, _ []byte) error {
	if id == 1 {
		close(s.release)
		<-s.polled
		time.Sleep(5 * time.Millisecond) // the batch waits for the task
		s.task.TriggerStop(stream.Barrier{ID: 2, Type: stream.Savepoint})
	}
	return nil
}

func (s *stopRaceSource) Seek(context.Context, []byte) error { return nil }
func (s *stopRaceSource) Close() error                       { return nil }

// A stop savepoint's trigger that arrives together with a polled batch
// goes first, and the batch waits: nothing after the barrier is processed,
// whichever the task sees first.
func TestStopTriggerBeforePolledBatch(t *testing.T) {
	for i := 0; i < 20; i++ {
		func() {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			store, _ := storage.NewDir(t.TempDir())
			so, ro := local.New(local.Options{Name: "src->x"})
			rc, acks := ackWaiter()
			src := &stopRaceSource{release: make(chan struct{}), polled: make(chan struct{})}
			task, err := host.New(host.Config{Name: "src", Source: src, Outputs: []host.Output{{Senders: []stream.Sender{so}}},
				Store: store, Listener: rc})
			if err != nil {
				t.Fatal(err)
			}
			src.task = task
			done := make(chan error, 1)
			go func() { done <- task.Run(ctx) }()
			var got []stream.Element
			read := func(n int) {
				for len(got) < n {
					if d, ok, _ := ro.Poll(); ok {
						got = append(got, d.Element)
					} else {
						time.Sleep(time.Millisecond)
					}
				}
			}
			read(1)
			task.TriggerCheckpoint(stream.Barrier{ID: 1, Type: stream.Checkpoint})
			if id := waitAck(t, acks, rc); id != 1 {
				t.Fatalf("ack %d", id)
			}
			task.NotifyCheckpointComplete(1)
			if id := waitAck(t, acks, rc); id != 2 {
				t.Fatalf("ack %d", id)
			}
			time.Sleep(20 * time.Millisecond)
			for d, ok, _ := ro.Poll(); ok; d, ok, _ = ro.Poll() {
				got = append(got, d.Element)
			}
			if s := render(t, got); s != "a B1 B2" {
				t.Fatalf("run %d: channel carried %q before the stop savepoint was aborted, want \"a B1 B2\"", i, s)
			}
			task.AbortCheckpoint(2)
			read(4)
			if s := render(t, got); s != "a B1 B2 b" {
				t.Fatalf("run %d: channel carried %q after the abort", i, s)
			}
			cancel()
			<-done
		}()
	}
}

// waitSink is a sink whose commits end when release is closed (Waiter).
type waitSink struct{ release chan struct{} }

func (s *waitSink) Write(context.Context, []byte) error              { return nil }
func (s *waitSink) PreCommit(context.Context, int64) ([]byte, error) { return nil, nil }
func (s *waitSink) Commit(context.Context, int64) error              { return nil }
func (s *waitSink) Recover(context.Context, int64, []byte) error     { return nil }
func (s *waitSink) EndOfInput(context.Context) error                 { return nil }
func (s *waitSink) Close() error                                     { return nil }
func (s *waitSink) Wait(ctx context.Context) error {
	select {
	case <-s.release:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Rest returns only once the sink's commits have ended (Waiter): a stopped
// job's output is published before its tasks are canceled.
func TestRestWaitsForSinkCommits(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, ri := local.New(local.Options{Name: "x->sink"})
	ws := &waitSink{release: make(chan struct{})}
	task, err := host.New(host.Config{Name: "sink", Inputs: []host.Input{{Receiver: ri}}, Sink: ws})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- task.Run(ctx) }()
	rested := make(chan error, 1)
	go func() { rested <- task.Rest(ctx) }()
	select {
	case err := <-rested:
		t.Fatalf("rest returned (%v) while the sink's commit was running", err)
	case <-time.After(50 * time.Millisecond):
	}
	close(ws.release)
	if err := <-rested; err != nil {
		t.Fatalf("rest: %v", err)
	}
	cancel()
	<-done
}

// A task behind its output reports the records its input channels still
// hold (Stats.QueuedRecords): what weir job status shows as "N queued",
// where a job's backlog sits behind a slow step.
func TestStatsCountQueuedInput(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	si, ri := local.New(local.Options{Name: "up->x"})
	so, _ := local.New(local.Options{Name: "x->down", CapacityElements: 1})
	for _, v := range []string{"r1", "r2", "r3", "r4"} {
		if err := si.Send(ctx, rec(v, v)); err != nil {
			t.Fatal(err)
		}
	}
	task, err := host.New(host.Config{Name: "x", Inputs: []host.Input{{Receiver: ri}},
		Outputs: []host.Output{{Senders: []stream.Sender{so}}}})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- task.Run(ctx) }()
	// r1 is queued downstream, r2 blocks on it, r3 and r4 wait at the input.
	for so.Waiting() == 0 {
		time.Sleep(time.Millisecond)
	}
	if n := task.Stats().QueuedRecords; n != 2 {
		t.Errorf("queued %d records, want 2", n)
	}
	cancel()
	<-done
}
