// Command gen publishes generated lines of text to the wordcount example's
// LINES stream, for running the example at volume against 'weir up':
//
//	go run ./cmd/weir up &
//	go run ./cmd/weir run -nats nats://127.0.0.1:4222 examples/wordcount/job.yaml &
//	go run ./examples/wordcount/gen -n 100000
//
// It creates the stream if it is missing. The words follow a Zipf
// distribution, so some counts grow fast and most stay small.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

var words = strings.Fields(`the a weir river stream record barrier checkpoint operator state
task channel snapshot align flow water exactly once count word job worker wasm module
key value batch sink source jetstream nats credit backpressure unaligned savepoint`)

func main() {
	url := flag.String("nats", nats.DefaultURL, "NATS server URL")
	n := flag.Int("n", 10000, "lines to publish")
	perLine := flag.Int("words", 8, "words per line")
	seed := flag.Uint64("seed", 1, "random seed (the same seed publishes the same lines)")
	flag.Parse()
	if err := run(*url, *n, *perLine, *seed, ackWait); err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(1)
	}
}

// ackWait bounds how long gen waits without any acknowledgement from the
// server: past it the server is down or stuck, and gen says so instead of
// waiting for its overall deadline. A server that acknowledges slowly but
// steadily (a busy 'weir up') is waited for.
const ackWait = 30 * time.Second

// waitAcks waits until every line published so far (sent of them) is
// acknowledged, failing once wait passes without any acknowledgement.
func waitAcks(ctx context.Context, js jetstream.JetStream, sent int, wait time.Duration) error {
	t := time.NewTimer(wait)
	defer t.Stop()
	// PublishAsyncComplete says nothing of progress: the number of acks
	// still pending does, looked at a few times per wait.
	tick := time.NewTicker(max(wait/10, time.Millisecond))
	defer tick.Stop()
	pending := js.PublishAsyncPending()
	for {
		select {
		case <-js.PublishAsyncComplete():
			return nil
		case <-tick.C:
			if p := js.PublishAsyncPending(); p < pending {
				pending = p
				t.Reset(wait)
			}
		case <-t.C:
			return fmt.Errorf("no acknowledgement for %s after %d lines sent (is the NATS server up? lines sent before it went down may be stored or lost)", wait, sent)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// run publishes n lines of perLine words to url, failing once the server
// has acknowledged nothing for ackWait.
func run(url string, n, perLine int, seed uint64, ackWait time.Duration) error {
	nc, err := nats.Connect(url)
	if err != nil {
		return fmt.Errorf("connect %s: %w", url, err)
	}
	defer nc.Close()
	// A publish the server did not acknowledge (it went down, or refused
	// the message) is counted, so that gen does not claim lines LINES
	// never stored.
	var failed atomic.Int64
	var firstErr atomic.Pointer[error]
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncErrHandler(func(_ jetstream.JetStream, _ *nats.Msg, err error) {
		failed.Add(1)
		firstErr.CompareAndSwap(nil, &err)
	}))
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if _, err := js.Stream(ctx, "LINES"); errors.Is(err, jetstream.ErrStreamNotFound) {
		if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "LINES", Subjects: []string{"lines.>"}}); err != nil {
			return fmt.Errorf("create stream LINES: %w", err)
		}
	} else if err != nil {
		return err
	}
	rng := rand.New(rand.NewPCG(seed, seed))
	zipf := rand.NewZipf(rand.New(rand.NewPCG(seed, 2)), 1.2, 1, uint64(len(words)-1))
	start := time.Now()
	var line strings.Builder
	for i := 0; i < n; i++ {
		line.Reset()
		for w := 0; w < perLine; w++ {
			if w > 0 {
				line.WriteByte(' ')
			}
			line.WriteString(words[zipf.Uint64()])
		}
		subject := fmt.Sprintf("lines.gen%d", rng.IntN(8))
		if _, err := js.PublishAsync(subject, []byte(line.String())); err != nil {
			return fmt.Errorf("publish line %d: %w", i+1, err)
		}
		// Bound the acks outstanding: a busy server acks more slowly than
		// gen publishes, and PublishAsync gives up when too many wait.
		if i%1024 == 1023 {
			if err := waitAcks(ctx, js, i+1, ackWait); err != nil {
				return err
			}
		}
	}
	if err := waitAcks(ctx, js, n, ackWait); err != nil {
		return err
	}
	if f := failed.Load(); f > 0 {
		// A refused line was not stored; one whose acknowledgement was
		// lost (a server restart, a timeout) may have been.
		return fmt.Errorf("%d of %d lines were not acknowledged as stored (the first: %v); refused lines are not in the stream, lines with no answer may be", f, n, *firstErr.Load())
	}
	fmt.Printf("published %d lines (%d words) in %s\n", n, n*perLine, time.Since(start).Round(time.Millisecond))
	return nil
}
