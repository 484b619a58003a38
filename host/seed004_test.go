package host_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weirhq/weir/abi"
	"github.com/weirhq/weir/host"
	"github.com/weirhq/weir/host/barrier"
	"github.com/weirhq/weir/host/snapshot"
	"github.com/weirhq/weir/transport/local"
	"github.com/weirhq/weir/transport/storage"
	"github.com/weirhq/weir/transport/stream"
)

// seedResult is what one run of seed 004's example produced.
type seedResult struct {
	output      string // everything the join's output channel carried, in order
	left, right string // the join's state in checkpoint 1
	inputState  string // input channel state of checkpoint 1, "ch:values;..."
	outputState string // output channel state of checkpoint 1
	unaligned   bool
	alignment   time.Duration
	declines    []string
}

// runSeed004 runs seed 004's join example through one join task: channel 0
// (left) carries 2 before barrier 1 and 9, 4 after it; channel 1 (right)
// carries 2, 9, 7 before barrier 1 and 4 after it. The join's output channel
// already holds a result "1" when the task starts (the seed's figure a). Every
// element is queued before the task runs, so the round-robin gate makes the
// interleaving deterministic.
func runSeed004(t *testing.T, mode barrier.Mode, op host.Operator, clock func() time.Time) seedResult {
	t.Helper()
	ctx := context.Background()
	store, err := storage.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	s0, r0 := local.New(local.Options{Name: "left->join", PriorityAtReceiver: true})
	s1, r1 := local.New(local.Options{Name: "right->join", PriorityAtReceiver: true})
	so, ro := local.New(local.Options{Name: "join->sink"})
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(so.Send(ctx, rec("1", "1")))
	b1 := stream.Barrier{ID: 1, Timestamp: seedTrigger.UnixMilli()}
	must(s0.Send(ctx, rec("2", "2")))
	if mode == barrier.Unaligned {
		// Upstream sends its unaligned barrier as a priority element: it
		// jumps the 2 queued at the join's input.
		b1.Unaligned = true
		_, err := s0.SendPriority(ctx, stream.BarrierElement(b1))
		must(err)
	} else {
		must(s0.Send(ctx, stream.BarrierElement(b1)))
	}
	for _, v := range []string{"9", "4"} {
		must(s0.Send(ctx, rec(v, v)))
	}
	must(s0.Send(ctx, stream.EndOfPartition()))
	for _, v := range []string{"2", "9", "7"} {
		must(s1.Send(ctx, rec(v, v)))
	}
	must(s1.Send(ctx, stream.BarrierElement(stream.Barrier{ID: 1, Timestamp: seedTrigger.UnixMilli()})))
	must(s1.Send(ctx, rec("4", "4")))
	must(s1.Send(ctx, stream.EndOfPartition()))

	rc := newRecorder()
	task, err := host.New(host.Config{
		Name:          "join-0",
		Operator:      op,
		Inputs:        []host.Input{{Port: 0, Receiver: r0}, {Port: 1, Receiver: r1}},
		Outputs:       []host.Output{{Senders: []stream.Sender{so}}},
		Checkpointing: host.Checkpointing{Mode: mode, AlignmentTimeout: 10 * time.Second},
		Store:         store,
		Listener:      rc,
		Clock:         clock,
	})
	must(err)
	must(task.Run(ctx))

	var res seedResult
	var out []stream.Element
	for {
		d, ok, err := ro.Poll()
		must(err)
		if !ok {
			break
		}
		out = append(out, d.Element)
	}
	res.output = render(t, out)
	res.declines = rc.declines
	h := rc.handle(1, "join-0")
	if h == "" {
		t.Fatalf("checkpoint 1 not acknowledged; declines %v, failures %v", rc.declines, rc.failed)
	}
	r, err := store.Get(ctx, h)
	must(err)
	snap, err := snapshot.Read(r)
	r.Close()
	must(err)
	left, right, err := decodeJoinState(snap.ModuleState)
	must(err)
	res.left, res.right = values(left), values(right)
	var in []string
	for _, c := range snap.Inputs {
		in = append(in, string(rune('0'+c.Channel))+":"+render(t, c.Elements))
	}
	res.inputState = strings.Join(in, ";")
	for _, c := range snap.Outputs {
		res.outputState = render(t, c.Elements)
	}
	m := host.MetricsFromMap(rc.metrics[1]["join-0"])
	res.unaligned = snap.Unaligned
	if m.Unaligned != snap.Unaligned {
		t.Fatalf("metric unaligned %v, snapshot %v", m.Unaligned, snap.Unaligned)
	}
	res.alignment = m.AlignmentDuration
	return res
}

func checkSeed(t *testing.T, got, want seedResult) {
	t.Helper()
	if got.output != want.output {
		t.Errorf("output channel: got %q, want %q", got.output, want.output)
	}
	if got.left != want.left || got.right != want.right {
		t.Errorf("operator state: got left=%q right=%q, want left=%q right=%q", got.left, got.right, want.left, want.right)
	}
	if got.inputState != want.inputState {
		t.Errorf("input channel state: got %q, want %q", got.inputState, want.inputState)
	}
	if got.outputState != want.outputState {
		t.Errorf("output channel state: got %q, want %q", got.outputState, want.outputState)
	}
	if got.unaligned != want.unaligned {
		t.Errorf("unaligned: got %v", got.unaligned)
	}
	if len(got.declines) != 0 {
		t.Errorf("declines: %v", got.declines)
	}
}

// seedTrigger is when seed 004's checkpoint was triggered (the barriers'
// timestamp) and where the fake clocks start.
var seedTrigger = time.Unix(1000, 0)

// seed004Want is what each mode must produce for seed 004's example.
//
//   - Aligned (the seed's aligned figures b and c): channel 0 is blocked after
//     its barrier; 9 and 4 wait in the alignment buffer; the snapshot holds
//     left 2 and right 2, 9, 7; no channel state.
//   - At-least-once: nothing blocks, so 9 and 4 of channel 0 are processed
//     before the checkpoint and land in its state although they follow the
//     barrier: after a restore they are replayed again (duplicates, no loss).
//   - Unaligned (the seed's unaligned figures): channel 0's barrier is taken
//     first and snapshots at once (empty state); it overtook 2 at the input
//     and the result 1 at the output, and 2, 9, 7 of channel 1 arrive before
//     its barrier: all of that is channel state. Processing never stopped:
//     2|2 and 9|9 follow the forwarded barrier.
//   - Aligned with timeout: alignment starts at channel 0's barrier; while
//     channel 1's 9 is processed the (fake) clock passes the timeout, so the
//     checkpoint switches to unaligned: the snapshot holds what was processed
//     (left 2, right 2, 9); channel 0's post-barrier 9 and 4 are NOT channel
//     state; channel 1's pre-barrier 7 is; the queued output 1 and 2|2 is
//     output channel state.
var seed004Want = map[barrier.Mode]seedResult{
	barrier.Aligned: {
		output: "1 2|2 B1 9|9 4|4 EOP",
		left:   "2", right: "2,9,7",
	},
	barrier.AtLeastOnce: {
		output: "1 2|2 9|9 B1 4|4 EOP",
		left:   "2,9,4", right: "2,9,7",
	},
	barrier.Unaligned: {
		output: "B1 1 2|2 9|9 4|4 EOP",
		left:   "", right: "",
		inputState:  "0:2;1:2 9 7",
		outputState: "1",
		unaligned:   true,
	},
	barrier.AlignedTimeout: {
		output: "B1 1 2|2 9|9 4|4 EOP",
		left:   "2", right: "2,9",
		inputState:  "1:7",
		outputState: "1 2|2",
		unaligned:   true,
	},
}

// checkSeed004 runs seed 004's example in every mode with join operators
// from newJoin.
func checkSeed004(t *testing.T, newJoin func() host.Operator) {
	for _, mode := range []barrier.Mode{barrier.Aligned, barrier.AtLeastOnce, barrier.Unaligned, barrier.AlignedTimeout} {
		t.Run(mode.String(), func(t *testing.T) {
			op := &probe{Operator: newJoin()}
			var clock func() time.Time
			if mode == barrier.AlignedTimeout {
				var now atomic.Int64
				now.Store(seedTrigger.UnixNano())
				clock = func() time.Time { return time.Unix(0, now.Load()) }
				op.onRecord = func(port int, r abi.Record) error {
					if port == 1 && string(r.Value) == "9" {
						now.Add(int64(time.Minute))
					}
					return nil
				}
			}
			got := runSeed004(t, mode, op, clock)
			checkSeed(t, got, seed004Want[mode])
			if mode == barrier.AlignedTimeout && got.alignment != time.Minute {
				t.Errorf("alignment duration %v, want 1m", got.alignment)
			}
		})
	}
	// Aligned with timeout, but the task starts after the checkpoint's
	// timeout (counted from the trigger) already passed while both barriers
	// still wait behind data: they are prioritized from the queues at once
	// and the checkpoint is exactly the unaligned one.
	t.Run("aligned-timeout-late", func(t *testing.T) {
		late := seedTrigger.Add(time.Minute)
		got := runSeed004(t, barrier.AlignedTimeout, &probe{Operator: newJoin()}, func() time.Time { return late })
		checkSeed(t, got, seed004Want[barrier.Unaligned])
	})
}

// TestSeed004 runs seed 004's example with the native Go join.
func TestSeed004(t *testing.T) {
	checkSeed004(t, func() host.Operator { return &joinOp{} })
}
