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

// portLog records every record it processes as "port:value", in order.
type portLog struct{ seen []string }

func (o *portLog) Process(_ context.Context, port int, batch []byte, _ func(int, []byte) error) error {
	rs, err := abi.DecodeBatch(batch)
	for _, r := range rs {
		o.seen = append(o.seen, fmt.Sprintf("%d:%s", port, r.Value))
	}
	return err
}
func (o *portLog) EndOfInput(context.Context, int, func(int, []byte) error) error { return nil }
func (o *portLog) Snapshot(context.Context, io.Writer) error                      { return nil }
func (o *portLog) Restore(context.Context, io.Reader) error                       { return nil }
func (o *portLog) CheckpointComplete(context.Context, int64) error                { return nil }
func (o *portLog) Close(context.Context) error                                    { return nil }

// kvBatch is one batch of records keyed and valued as given.
func kvBatch(kv ...string) stream.Element {
	var rs []abi.Record
	for i := 0; i < len(kv); i += 2 {
		rs = append(rs, abi.Record{Key: []byte(kv[i]), Value: []byte(kv[i+1]), Timestamp: 1})
	}
	return stream.Records(abi.EncodeBatch(rs...))
}

// Under a channel plan a task replays the channel state its pieces name,
// in their order, on their ports, keeping only its own keys where a piece
// says so, before its live input; the channel state of the snapshot it
// restores from is left to others, neither replayed nor sent again.
func TestRestoreChannels(t *testing.T) {
	ctx := context.Background()
	store := snapshot.NewMemStore()
	put := func(key string, snap *snapshot.Task) {
		if err := store.Put(ctx, key, bytes.NewReader(snapshot.Encode(snap))); err != nil {
			t.Fatal(err)
		}
	}
	// Keys of subtask 1 of 2 and of subtask 0.
	var mine, other []string
	for i := 0; len(mine) < 3 || len(other) < 3; i++ {
		k := fmt.Sprintf("key%d", i)
		if partition.KeyChannel([]byte(k), 2) == 1 {
			mine = append(mine, k)
		} else {
			other = append(other, k)
		}
	}
	put("j/chk-4/op-0", &snapshot.Task{Task: "op-0", CheckpointID: 4,
		Inputs: []snapshot.ChannelState{{Channel: 0, Elements: []stream.Element{
			kvBatch(mine[0], "a1", other[0], "x1", mine[1], "a2"), kvBatch(other[1], "x2")}}},
		Outputs: []snapshot.ChannelState{{Channel: 0, Elements: []stream.Element{kvBatch("k", "not-sent")}}}})
	put("j/chk-4/op-1", &snapshot.Task{Task: "op-1", CheckpointID: 4,
		Inputs: []snapshot.ChannelState{{Channel: 0, Elements: []stream.Element{kvBatch("k", "own-not-replayed")}},
			{Channel: 1, Elements: []stream.Element{kvBatch("b", "b1", "b", "b2")}}}})
	put("j/chk-4/src-0", &snapshot.Task{Task: "src-0", CheckpointID: 4,
		Outputs: []snapshot.ChannelState{{Channel: 1, Elements: []stream.Element{kvBatch(mine[2], "a3", other[2], "x3")}}}})
	put("j/chk-4/odd", &snapshot.Task{Task: "odd", CheckpointID: 4,
		Inputs: []snapshot.ChannelState{{Channel: 0, Elements: []stream.Element{stream.EndOfPartition()}}}})

	run := func(op *portLog, pieces []host.ChannelPiece) (string, error) {
		var inputs []host.Input
		for port, live := range []string{"live0", "live0b", "live1"} {
			s, r := local.New(local.Options{})
			if err := s.Send(ctx, kvBatch("l", live)); err != nil {
				t.Fatal(err)
			}
			if err := s.Send(ctx, stream.EndOfPartition()); err != nil {
				t.Fatal(err)
			}
			inputs = append(inputs, host.Input{Port: min(port, 1), Receiver: r})
		}
		out, outR := local.New(local.Options{})
		task, err := host.New(host.Config{Name: "op-1", Operator: op, Inputs: inputs,
			Outputs: []host.Output{{Senders: []stream.Sender{out}}},
			Store:   store, Restore: "j/chk-4/op-1", Subtask: 1, Parallelism: 2,
			ChannelPlan: true, RestoreChannels: pieces})
		if err != nil {
			t.Fatal(err)
		}
		err = task.Run(ctx)
		var sent []string
		for {
			d, ok, _ := outR.Poll()
			if !ok {
				break
			}
			if d.Kind == stream.KindRecords {
				rs, _ := abi.DecodeBatch(d.Batch)
				for _, r := range rs {
					sent = append(sent, string(r.Value))
				}
			}
		}
		return strings.Join(sent, ","), err
	}
	op := &portLog{}
	sent, err := run(op, []host.ChannelPiece{
		{Handle: "j/chk-4/op-0", Channel: 0, Port: 0, ByKey: true},
		{Handle: "j/chk-4/src-0", Output: true, Channel: 1, Port: 0, ByKey: true},
		{Handle: "j/chk-4/op-1", Channel: 1, Port: 1},
		{Handle: "j/chk-4/op-0", Output: true, Channel: 3, Port: 1}, // no such channel: nothing
	})
	if err != nil {
		t.Fatal(err)
	}
	replayed := strings.Join(op.seen[:min(len(op.seen), 5)], ",")
	if want := "0:a1,0:a2,0:a3,1:b1,1:b2"; replayed != want {
		t.Errorf("replayed %s, want %s", replayed, want)
	}
	if live := strings.Join(op.seen[min(len(op.seen), 5):], ","); len(op.seen) != 8 || !strings.Contains(live, "0:live0") || !strings.Contains(live, "1:live1") {
		t.Errorf("processed %v: want the replay, then the three live records", op.seen)
	}
	if sent != "" {
		t.Errorf("sent %s: the restored snapshot's output channel state is another task's to replay", sent)
	}

	_, err = run(&portLog{}, []host.ChannelPiece{{Handle: "j/chk-4/odd", Channel: 0, Port: 0}})
	if !errors.Is(err, host.ErrCannotRescale) || !strings.Contains(err.Error(), "end-of-partition") {
		t.Errorf("a control element in channel state: %v, want ErrCannotRescale naming it", err)
	}
	_, err = run(&portLog{}, []host.ChannelPiece{{Handle: "j/chk-4/op-0", Channel: 0, Port: 5}})
	if !errors.Is(err, host.ErrCannotRescale) || !strings.Contains(err.Error(), "input port 5") {
		t.Errorf("a piece for a port the task lacks: %v, want ErrCannotRescale naming the port", err)
	}
}
