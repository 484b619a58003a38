package snapshot

import (
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"reflect"
	"strings"
	"testing"

	"github.com/weirhq/weir/abi"
	"github.com/weirhq/weir/transport/stream"
)

func sample() *Task {
	return &Task{
		Task:         "join[0]",
		CheckpointID: 7,
		Timestamp:    1234,
		Unaligned:    true,
		SourceOffset: []byte("seq:42"),
		ModuleState:  []byte{1, 0, 0, 0, 0},
		Inputs: []ChannelState{
			{Channel: 1, Elements: []stream.Element{
				stream.Records(abi.EncodeBatch(abi.Record{Key: []byte("k"), Value: []byte("2"), Timestamp: 5})),
				stream.Records(abi.EncodeBatch(abi.Record{Key: []byte("k"), Value: []byte("9")})),
			}},
		},
		Outputs: []ChannelState{
			{Channel: 0, Elements: []stream.Element{
				stream.Records(abi.EncodeBatch(abi.Record{Value: []byte("1")})),
				stream.BarrierElement(stream.Barrier{ID: 6, Timestamp: 9, Type: stream.Savepoint, Unaligned: true}),
				stream.Cancel(3),
				stream.EndOfData(),
				stream.EndOfPartition(),
			}},
		},
		EndedPorts: []int{0, 2},
	}
}

func TestRoundTrip(t *testing.T) {
	in := sample()
	b := Encode(in)
	out, err := Read(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(in, out) {
		t.Fatalf("round trip:\n%+v\n%+v", in, out)
	}
	if got := in.ChannelStateBytes(); got != int64(len(in.Inputs[0].Elements[0].Batch)+len(in.Inputs[0].Elements[1].Batch)+len(in.Outputs[0].Elements[0].Batch)) {
		t.Fatalf("channel state bytes %d", got)
	}
	empty := &Task{Task: "t"}
	out, err = Decode(Encode(empty))
	if err != nil || !reflect.DeepEqual(empty, out) {
		t.Fatalf("empty: %v %+v", err, out)
	}
}

func TestDecodeRejects(t *testing.T) {
	b := Encode(sample())
	cases := map[string][]byte{
		"short":    b[:5],
		"magic":    append([]byte("XEIRSNAP"), b[8:]...),
		"checksum": append(append([]byte(nil), b[:len(b)-1]...), b[len(b)-1]^1),
		"version":  append(append([]byte(Magic), 2), b[9:]...),
	}
	for name, c := range cases {
		if _, err := Decode(c); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

type store interface {
	Put(ctx context.Context, key string, r io.Reader) error
	Get(ctx context.Context, key string) (io.ReadCloser, error)
	Delete(ctx context.Context, prefix string) error
	List(ctx context.Context, prefix string) ([]string, error)
}

func TestMemStore(t *testing.T) { testStore(t, NewMemStore()) }

func testStore(t *testing.T, s store) {
	ctx := context.Background()
	for _, k := range []string{"chk-1/a", "chk-1/b", "chk-2/a"} {
		if err := s.Put(ctx, k, strings.NewReader(k)); err != nil {
			t.Fatal(err)
		}
	}
	rc, err := s.Get(ctx, "chk-1/b")
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(rc)
	rc.Close()
	if string(got) != "chk-1/b" {
		t.Fatalf("got %q", got)
	}
	keys, _ := s.List(ctx, "chk-1/")
	if !reflect.DeepEqual(keys, []string{"chk-1/a", "chk-1/b"}) {
		t.Fatalf("list %v", keys)
	}
	if err := s.Delete(ctx, "chk-1/"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(ctx, "chk-1/a"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("deleted: %v", err)
	}
	keys, _ = s.List(ctx, "")
	if !reflect.DeepEqual(keys, []string{"chk-2/a"}) {
		t.Fatalf("left %v", keys)
	}
}
