package host_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/weirhq/weir/host"
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
		{&mergingSource{}, []string{"j/chk-5/in-0", "j/chk-5/in-2"}, "j/chk-5/in-2 holds more than a source offset"},
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
