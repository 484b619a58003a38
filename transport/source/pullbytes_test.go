package source

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// A source's pull requests ask for PullMaxBytes at most, its lanes
// together, each its share but never less than two of the largest
// messages the server takes (a request smaller than one message would
// never be answered with it): requests of PullMaxMessages alone asked
// for 400 MB of 100 KB records, which the server queued to the
// connection past its max_pending and cut it as a slow consumer.
func TestPullBytesPerLane(t *testing.T) {
	srv := startServer(t)
	nc, js := connect(t, srv)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	createStream(t, ctx, js, jetstream.StreamConfig{Name: "P", Subjects: []string{"p.*.x"}})
	two := 2 * (int(nc.MaxPayload()) + 4<<10)
	for _, c := range []struct {
		cfg  JetStreamConfig
		want int
	}{
		{JetStreamConfig{Stream: "P"}, DefaultPullMaxBytes},
		{JetStreamConfig{Stream: "P", PullMaxBytes: 64 << 20}, 64 << 20},
		{JetStreamConfig{Stream: "P", PullMaxBytes: 1 << 10}, two},
		{JetStreamConfig{Stream: "P", Partitions: 2, PartitionFilter: "p.{p}.x", PullMaxBytes: 32 << 20}, 16 << 20},
		{JetStreamConfig{Stream: "P", Partitions: 16, PartitionFilter: "p.{p}.x"}, two},
	} {
		s, err := NewJetStream(js, c.cfg)
		if err != nil {
			t.Fatal(err)
		}
		if got := s.laneBytes(); got != c.want {
			t.Errorf("%d lanes, PullMaxBytes %d: each asks for %d bytes, want %d", len(s.lanes), c.cfg.PullMaxBytes, got, c.want)
		}
		s.Close()
	}
}

// Records of 100 KB, more than the server's max_pending of them in the
// stream, come through without the server cutting the connection.
func TestLargeRecordsKeepTheConnection(t *testing.T) {
	srv := startServer(t)
	nc, js := connect(t, srv)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	createStream(t, ctx, js, jetstream.StreamConfig{Name: "BIG", Subjects: []string{"big"}})
	const count = 1000
	value := make([]byte, 100_000)
	for range count {
		if _, err := js.PublishAsync("big", value); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-ctx.Done():
		t.Fatal(ctx.Err())
	}
	s, err := NewJetStream(js, JetStreamConfig{Stream: "BIG"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	recs, off := pollRecords(t, ctx, s, count)
	if seq, _ := DecodeOffset(off); len(recs) != count || seq != count {
		t.Fatalf("%d records up to sequence %d, want %d", len(recs), seq, count)
	}
	if r, sc := nc.Stats().Reconnects, srv.NATSServer().NumSlowConsumers(); r != 0 || sc != 0 {
		t.Fatalf("%d reconnects, %d slow consumers cut by the server: want none", r, sc)
	}
}
