package source

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirhq/weir/abi"
)

// timeHeader returns the Weir-Time header message i carries: none for
// every third, a value that is no number or 0 for some (ignored), else
// an event time an hour before now plus i.
func timeHeader(i int, base int64) string {
	switch i % 6 {
	case 0, 3:
		return ""
	case 1:
		return "yesterday"
	case 4:
		return "0"
	}
	return strconv.FormatInt(base+int64(i), 10)
}

// checkTimes checks each record's timestamp: its Weir-Time header's, or,
// for messages without a valid one, a time between before and after (the
// store or ingestion time).
func checkTimes(t *testing.T, what string, recs []abi.Record, base, before, after int64) {
	t.Helper()
	for _, r := range recs {
		i, err := strconv.Atoi(string(r.Value))
		if err != nil {
			t.Fatalf("record value %q", r.Value)
		}
		if h := timeHeader(i, base); h != "" && h != "0" && h != "yesterday" {
			if want := base + int64(i); r.Timestamp != want {
				t.Errorf("%s: message %d (Weir-Time %s) has timestamp %d, want %d", what, i, h, r.Timestamp, want)
			}
		} else if r.Timestamp < before || r.Timestamp > after {
			t.Errorf("%s: message %d (Weir-Time %q) has timestamp %d, want the time it was stored or taken, in [%d, %d]",
				what, i, h, r.Timestamp, before, after)
		}
		if string(r.Key) != "k" {
			t.Errorf("%s: message %d keyed %q, want its Weir-Key k", what, i, r.Key)
		}
	}
}

// A record's timestamp is its message's Weir-Time header (the event's
// time), where that is a number of milliseconds other than 0; else the
// time the stream stored the message (JetStream) or the source took it
// (core), as before.
func TestSourcesTakeTheEventTimeHeader(t *testing.T) {
	nc, js := connect(t, startServer(t))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	base := time.Now().Add(-time.Hour).UnixMilli()
	const n = 60
	msg := func(subj string, i int) *nats.Msg {
		m := nats.NewMsg(subj)
		m.Data = []byte(strconv.Itoa(i))
		m.Header.Set(KeyHeader, "k")
		if h := timeHeader(i, base); h != "" {
			m.Header.Set(TimeHeader, h)
		}
		return m
	}

	core, err := NewCore(nc, CoreConfig{Subject: "events"})
	must(t, err)
	defer core.Close()
	before := time.Now().UnixMilli()
	for i := range n {
		must(t, nc.PublishMsg(msg("events", i)))
	}
	recs, _ := pollRecords(t, ctx, core, n)
	checkTimes(t, "core", recs, base, before, time.Now().UnixMilli())

	createStream(t, ctx, js, jetstream.StreamConfig{Name: "EV", Subjects: []string{"ev"}})
	before = time.Now().UnixMilli()
	for i := range n {
		if _, err := js.PublishMsg(ctx, msg("ev", i)); err != nil {
			t.Fatal(err)
		}
	}
	after := time.Now().UnixMilli()
	src, err := NewJetStream(js, JetStreamConfig{Stream: "EV"})
	must(t, err)
	defer src.Close()
	recs, _ = pollRecords(t, ctx, src, n)
	checkTimes(t, "jetstream", recs, base, before, after)
}
