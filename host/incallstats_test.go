package host_test

import (
	"context"
	"testing"
	"time"

	"github.com/weirhq/weir/abi"
	"github.com/weirhq/weir/guests/go/guestbuild"
	"github.com/weirhq/weir/host"
	"github.com/weirhq/weir/host/barrier"
	"github.com/weirhq/weir/host/wasm"
	"github.com/weirhq/weir/transport/local"
	"github.com/weirhq/weir/transport/storage"
	"github.com/weirhq/weir/transport/stream"
)

// TestStatsNameTheSnapshotCall: a task whose operator is in weir_snapshot
// says so in its Stats, with the checkpoint, not only how long it has been
// in a call: a trial's weir job status called an operator snapshotting a
// large state "stuck (a loop?) or very slow on one record". The snapshot's
// time counts as busy.
func TestStatsNameTheSnapshotCall(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	bin := guestbuild.MustBuild(t, "github.com/weirhq/weir/guests/go/internal/sdktest")
	e, err := wasm.NewEngine(wasm.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(context.Background())
	m, err := e.Load(ctx, "op", bin, wasm.Limits{CallTimeout: time.Minute, SnapshotTimeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	op, err := m.Instantiate(ctx, wasm.InstanceConfig{Name: "op", Config: []byte("snaploop")}) // loops in Snapshot
	if err != nil {
		t.Fatal(err)
	}
	defer op.Close(context.Background())
	store, _ := storage.NewDir(t.TempDir())
	si, ri := local.New(local.Options{Name: "up->op"})
	so, _ := local.New(local.Options{Name: "op->down"})
	rc, _ := ackWaiter()
	task, err := host.New(host.Config{Name: "op-0", Operator: op, Inputs: []host.Input{{Receiver: ri}},
		Outputs:       []host.Output{{Senders: []stream.Sender{so}}},
		Checkpointing: host.Checkpointing{Mode: barrier.Aligned}, Store: store, Listener: rc})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- task.Run(ctx) }()
	if err := si.Send(ctx, stream.BarrierElement(stream.Barrier{ID: 7})); err != nil {
		t.Fatal(err)
	}
	for {
		s := task.Stats()
		if s.InCallExport == abi.ExportSnapshot {
			if s.InCallCheckpoint != 7 {
				t.Errorf("in weir_snapshot of checkpoint %d, want 7", s.InCallCheckpoint)
			}
			// The task processed no input: what it is busy with is the
			// snapshot, which weir job status's BUSY counts.
			if s.Busy <= 0 {
				t.Errorf("busy %v while in weir_snapshot, want the snapshot's time", s.Busy)
			}
			break
		}
		if s.InCallExport != "" {
			t.Fatalf("in %s", s.InCallExport)
		}
		time.Sleep(time.Millisecond)
	}
	cancel() // interrupts the call
	<-done
	if s := task.Stats(); s.InCallExport != "" || s.InCallCheckpoint != 0 {
		t.Errorf("after the call: in %q of checkpoint %d", s.InCallExport, s.InCallCheckpoint)
	}
}
