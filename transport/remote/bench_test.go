package remote

import (
	"context"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/weirhq/weir/abi"
	"github.com/weirhq/weir/transport/stream"
)

const benchBatchRecords = 1024

func benchBatch() []byte {
	var b abi.Builder
	v := make([]byte, 64)
	for i := 0; i < benchBatchRecords; i++ {
		b.Add(nil, v, 0)
	}
	return append([]byte(nil), b.Bytes()...)
}

// BenchmarkRemoteChannel64B moves 64-byte records (1024 per batch) through
// a remote channel between two connections on the embedded server; one op
// is one record.
func BenchmarkRemoteChannel64B(b *testing.B) {
	srv := startServer(b)
	benchChannel(b, connect(b, srv), connect(b, srv))
}

// BenchmarkRawCoreNATSBatches is the baseline for BenchmarkRemoteChannel64B:
// the same batch bytes published on a core subject to a subscriber, with no
// framing, credit or decoding (and no protection against drops).
func BenchmarkRawCoreNATSBatches(b *testing.B) {
	srv := startServer(b)
	ncP, ncS := connect(b, srv), connect(b, srv)
	batch := benchBatch()
	msgs := (b.N + benchBatchRecords - 1) / benchBatchRecords
	done := make(chan struct{})
	got := 0
	sub, err := ncS.Subscribe("raw.batches", func(m *nats.Msg) {
		got++
		if got == msgs {
			close(done)
		}
	})
	if err != nil {
		b.Fatal(err)
	}
	_ = sub.SetPendingLimits(-1, -1)
	_ = ncS.Flush()
	b.SetBytes(64)
	b.ResetTimer()
	for i := 0; i < msgs; i++ {
		if err := ncP.Publish("raw.batches", batch); err != nil {
			b.Fatal(err)
		}
	}
	<-done
}

func benchChannel(b *testing.B, ncS, ncR *nats.Conn) {
	cfg := Config{Subject: "weir.bench.ch"}
	rcv, err := NewReceiver(ncR, cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer rcv.Close()
	snd, err := NewSender(ncS, cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer snd.Close()
	ctx := context.Background()
	batch := benchBatch()
	batches := (b.N + benchBatchRecords - 1) / benchBatchRecords
	wake := make(chan struct{}, 1)
	rcv.Notify(func() {
		select {
		case wake <- struct{}{}:
		default:
		}
	})
	done := make(chan int)
	go func() {
		n := 0
		for {
			d, ok, err := rcv.Poll()
			if err != nil {
				b.Error(err)
				done <- n
				return
			}
			if !ok {
				<-wake
				continue
			}
			if d.Kind == stream.KindEndOfPartition {
				done <- n
				return
			}
			n += d.Count()
		}
	}()
	b.SetBytes(64)
	b.ResetTimer()
	for i := 0; i < batches; i++ {
		if err := snd.Send(ctx, stream.Records(batch)); err != nil {
			b.Fatal(err)
		}
	}
	if err := snd.Send(ctx, stream.EndOfPartition()); err != nil {
		b.Fatal(err)
	}
	n := <-done
	b.StopTimer()
	if n != batches*benchBatchRecords {
		b.Fatalf("received %d records, want %d", n, batches*benchBatchRecords)
	}
	b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "records/s")
}
