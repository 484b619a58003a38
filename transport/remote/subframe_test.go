package remote

import (
	"context"
	"encoding/binary"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/weirhq/weir/abi"
	"github.com/weirhq/weir/transport/stream"
)

// A sender and a receiver of this version shrink the window below a frame:
// the receiver starts at StartWindow (16 KiB, under the 256 KiB frame) and
// holds no more than that, the sender cuts frames to the credit it has and
// holds about half the window, and a record larger than the window raises
// it (the sender's probe says what it needs) instead of stalling. Every
// record arrives once, in order, with the barrier in its place.
func TestSubFrameWindow(t *testing.T) {
	const window, start = 1 << 20, 16 << 10
	cfg := Config{Subject: "weir.test.subframe", Window: window, StartWindow: start, MinWindow: start}
	ctx, snd, rcv := pair(t, cfg)
	if got := rcv.SetBuffer(1); got != start {
		t.Fatalf("SetBuffer(1) = %d, want MinWindow %d (below the frame of 256 KiB)", got, start)
	}

	var big atomic.Bool // set before the record larger than the window is sent
	var mu sync.Mutex
	held := 0 // the most the receiver held before that
	c := collect(ctx, rcv, func() {
		time.Sleep(100 * time.Microsecond)
		if !big.Load() {
			now, _ := rcv.QueuedBytes()
			mu.Lock()
			held = max(held, now)
			mu.Unlock()
		}
	})
	const batches, per = 1500, 16 // 24 000 records of 64 B: ~1.9 MB, ~120 windows
	var sentMax int
	for i := 0; i < batches; i++ {
		if i == batches/2 {
			if err := snd.Send(ctx, stream.BarrierElement(stream.Barrier{ID: 7})); err != nil {
				t.Fatal(err)
			}
		}
		if err := snd.Send(ctx, stream.Records(seqBatch(uint64(i*per), per, 64))); err != nil {
			t.Fatal(err)
		}
		_, m := snd.QueuedBytes()
		sentMax = max(sentMax, m)
	}
	big.Store(true)
	const bigValue = 40 << 10
	if err := snd.Send(ctx, stream.Records(seqBatch(batches*per, 1, bigValue))); err != nil {
		t.Fatal(err)
	}
	if err := snd.Send(ctx, stream.EndOfPartition()); err != nil {
		t.Fatal(err)
	}
	<-c.done
	if c.err != nil {
		t.Fatal(c.err)
	}
	var barrierAt = -1
	var elems []stream.Element
	for _, d := range c.elems {
		if d.Kind == stream.KindBarrier {
			barrierAt = len(recordsIn(t, elems))
		}
		elems = append(elems, d.Element)
	}
	seqs := recordsIn(t, elems)
	if len(seqs) != batches*per+1 {
		t.Fatalf("received %d records, want %d", len(seqs), batches*per+1)
	}
	for i, s := range seqs {
		if s != uint64(i) {
			t.Fatalf("record %d has seq %d", i, s)
		}
	}
	if barrierAt != batches/2*per {
		t.Errorf("barrier after %d records, want %d", barrierAt, batches/2*per)
	}
	mu.Lock()
	defer mu.Unlock()
	if held > start {
		t.Errorf("the receiver held %d bytes with a window of %d", held, start)
	}
	// The sender holds half the window (its frames) plus the element
	// being added once it heard the window; before, at most a start frame.
	elem := ElementWireSize(stream.Records(seqBatch(0, per, 64)))
	if bound := startFrameBytes + elem; sentMax > bound {
		t.Errorf("the sender held %d bytes, want at most %d", sentMax, bound)
	}
	if got := rcv.SetBuffer(1); got < 2*bigValue {
		t.Errorf("after a record of %d bytes the window shrinks to %d, want at least twice the record", bigValue, got)
	}
}

// oldSender is a sender as it was before sub-frame windows: it probes
// without headers, publishes a frame only once the credit covers all of
// it, and reads only the credit message's data.
type oldSender struct {
	nc      *nats.Conn
	data    string
	mu      sync.Mutex
	granted uint64
}

func newOldSender(t *testing.T, nc *nats.Conn, cfg Config) *oldSender {
	t.Helper()
	s := &oldSender{nc: nc, data: cfg.Subject + ".d"}
	sub, err := nc.Subscribe(cfg.Subject+".c", func(m *nats.Msg) {
		if len(m.Data) != 8 {
			t.Errorf("credit message of %d bytes", len(m.Data))
			return
		}
		s.mu.Lock()
		s.granted = max(s.granted, binary.LittleEndian.Uint64(m.Data))
		s.mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sub.Unsubscribe() })
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := nc.Publish(s.data, EncodeFrame(0, FlagProbe, nil)); err != nil {
		t.Fatal(err)
	}
	return s
}

// send publishes frames, each once its credit is there, probing every
// 100ms while it waits, as the old sender did.
func (s *oldSender) send(ctx context.Context, frames [][]stream.Element) error {
	var sent uint64
	for i, f := range frames {
		buf := EncodeFrame(uint64(i+1), 0, f)
		for {
			s.mu.Lock()
			ok := sent+uint64(len(buf)) <= s.granted
			s.mu.Unlock()
			if ok {
				break
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(100 * time.Millisecond):
			}
			if err := s.nc.Publish(s.data, EncodeFrame(0, FlagProbe, nil)); err != nil {
				return err
			}
		}
		if err := s.nc.Publish(s.data, buf); err != nil {
			return err
		}
		sent += uint64(len(buf))
	}
	return s.nc.Flush()
}

// A receiver of this version with a sender that does not say it cuts
// frames to its credit (an older worker in a rolling upgrade) keeps the
// one-frame floor: its probe raises a window that started below a frame
// (StartWindow) to a frame, and the sender, which waits for a whole
// frame's credit, delivers everything, whether it probed before the
// receiver was there or after.
func TestOlderSenderKeepsTheFrameFloor(t *testing.T) {
	for _, senderFirst := range []bool{false, true} {
		name := "receiver-first"
		if senderFirst {
			name = "sender-first"
		}
		t.Run(name, func(t *testing.T) {
			const window, frame, start = 1 << 20, 64 << 10, 16 << 10
			cfg := Config{Subject: "weir.test.old." + name, Window: window, MaxFrameBytes: frame, StartWindow: start, MinWindow: start}
			srv := startServer(t)
			ncS, ncR := connect(t, srv), connect(t, srv)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			var snd *oldSender
			if senderFirst {
				snd = newOldSender(t, ncS, cfg)
			}
			rcv, err := NewReceiver(ncR, cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer rcv.Close()
			if !senderFirst {
				snd = newOldSender(t, ncS, cfg)
			}
			c := collect(ctx, rcv, nil)
			// Frames of nearly a frame each, more than the start window.
			const frames, per = 20, 700 // 700 records of 64 B: ~56 KB
			var fs [][]stream.Element
			for i := 0; i < frames; i++ {
				fs = append(fs, []stream.Element{stream.Records(seqBatch(uint64(i*per), per, 64))})
			}
			fs = append(fs, []stream.Element{stream.EndOfPartition()})
			if size := len(EncodeFrame(1, 0, fs[0])); size <= start || size > frame {
				t.Fatalf("test frame of %d bytes: want more than the start window %d, at most a frame %d", size, start, frame)
			}
			if err := snd.send(ctx, fs); err != nil {
				t.Fatalf("older sender: %v (stalled for want of a frame's credit?)", err)
			}
			<-c.done
			if c.err != nil {
				t.Fatal(c.err)
			}
			seqs := recordsIn(t, elementsOf(c.elems))
			if len(seqs) != frames*per {
				t.Fatalf("received %d records, want %d", len(seqs), frames*per)
			}
			for i, s := range seqs {
				if s != uint64(i) {
					t.Fatalf("record %d has seq %d", i, s)
				}
			}
			if got := rcv.SetBuffer(1); got != frame {
				t.Fatalf("SetBuffer(1) = %d with an older sender, want the frame %d", got, frame)
			}
		})
	}
}

// cutBatch cuts at record boundaries within the room it is given.
func TestCutBatch(t *testing.T) {
	b := seqBatch(0, 10, 64) // records of 16+64 bytes
	rec := abi.RecordSize(0, 64)
	piece, rest, _, err := cutBatch(b, abi.BatchHeaderSize+3*rec+rec/2)
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := abi.BatchCount(piece); n != 3 {
		t.Fatalf("piece of %d records, want 3", n)
	}
	if n, _ := abi.BatchCount(rest); n != 7 {
		t.Fatalf("rest of %d records, want 7", n)
	}
	if len(piece)+len(rest) != len(b)+abi.BatchHeaderSize {
		t.Fatalf("piece %d + rest %d bytes, batch %d", len(piece), len(rest), len(b))
	}
	piece, _, first, err := cutBatch(b, rec)
	if err != nil || piece != nil || first != abi.BatchHeaderSize+rec {
		t.Fatalf("room under one record: piece %v, first %d (want %d), err %v", piece != nil, first, abi.BatchHeaderSize+rec, err)
	}
}
