package sink

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/weirhq/weir/abi"
)

// A core sink refuses a record whose message would exceed the server's
// max_payload before it publishes anything of the batch, naming the
// record, its key and size and the limit (a trial's job failed with
// nats.go's bare "maximum payload exceeded", of no failure kind). Its
// count of the headers is exact: the largest record that fits, keyed and
// timestamped or bare, is published.
func TestCoreSinkRefusesRecordsLargerThanAMessage(t *testing.T) {
	srv := startServer(t)
	nc, _ := connect(t, srv)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sub, err := nc.SubscribeSync("bout")
	must(t, err)
	s, err := NewCore(nc, "bout")
	must(t, err)
	s.Timestamps = true
	max := int(nc.MaxPayload())
	const ts = 1700000000000
	keyedFits := max - natsHeaderFrame - len(KeyHeader) - natsHeaderField - len("key") -
		len(TimeHeader) - natsHeaderField - len("1700000000000")

	var b abi.Builder
	b.Add(nil, []byte("before"), 0)
	b.Add([]byte("key"), make([]byte, keyedFits+1), ts)
	err = s.Write(ctx, b.Bytes())
	want := fmt.Sprintf(`core sink bout: record 2 of the batch (key "key"): record too large for a NATS message: a record of %d bytes (key 3, value %d) and its headers (%d bytes) exceed the server's max_payload of %d bytes; emit smaller records, or raise the server's max_payload`,
		keyedFits+4, keyedFits+1, max-keyedFits-len("key"), max)
	if !errors.Is(err, ErrRecordTooLarge) || err.Error() != want {
		t.Fatalf("write of a record one byte too large:\n%v\nwant\n%s", err, want)
	}

	b.Reset()
	b.Add([]byte("key"), make([]byte, keyedFits), ts)
	b.Add(nil, make([]byte, max), 0) // no headers: the value alone
	must(t, s.Write(ctx, b.Bytes()))
	if _, err := s.PreCommit(context.Background(), 1); err != nil {
		t.Fatal(err)
	}
	for i, wantLen := range []int{keyedFits, max} {
		m, err := sub.NextMsg(30 * time.Second)
		if err != nil || len(m.Data) != wantLen {
			t.Fatalf("message %d: %v (%v), want the record of %d bytes, and nothing of the refused batch", i, m, err, wantLen)
		}
	}
}

// The at-least-once sink refuses a record too large for a message, as the
// exactly-once sink does, when it is written, in every publish mode: not a
// publish error of no kind from nats.go or an atomic batch that fails
// later, nothing of the batch published. A record within its bound of the
// headers goes through.
func TestAtLeastOnceRefusesRecordsLargerThanAMessage(t *testing.T) {
	for _, mode := range publishModes {
		t.Run("publish="+string(mode), func(t *testing.T) {
			nc, js, ctx := outSetup(t, outStream(mode))
			s, err := NewAtLeastOnce(ctx, nc, AtLeastOnceConfig{Stream: "OUT", Subject: "out", IdleCommit: time.Hour})
			must(t, err)
			defer s.Close()
			max := int(nc.MaxPayload())
			var b abi.Builder
			b.Add([]byte("k0"), []byte("before"), 0)
			b.Add([]byte("key"), make([]byte, max), 1)
			err = s.Write(ctx, b.Bytes())
			if !errors.Is(err, ErrRecordTooLarge) ||
				!strings.Contains(err.Error(), fmt.Sprintf(`record 2 of the batch (key "key"): record too large for a NATS message: a record of %d bytes (key 3, value %d)`, max+3, max)) ||
				!strings.Contains(err.Error(), fmt.Sprintf("max_payload of %d bytes", max)) {
				t.Fatalf("write of a %d-byte value: %v", max, err)
			}
			fits := max - 3 - len(KeyHeader) - MessageOverhead
			b.Reset()
			b.Add([]byte("key"), make([]byte, fits), 1)
			must(t, s.Write(ctx, b.Bytes()))
			must(t, s.EndOfInput(ctx))
			if got := readStream(t, ctx, js, "OUT"); len(got) != 1 || len(got[0].value) != fits {
				t.Fatalf("stream holds %d messages, want the one that fits", len(got))
			}
		})
	}
}
