// Command gen publishes generated lines of text to the wordcount example's
// LINES stream, for running the example at volume against 'weir up':
//
//	go run ./cmd/weir up &
//	go run ./cmd/weir run -nats nats://127.0.0.1:4222 examples/wordcount/job.yaml &
//	go run ./examples/wordcount/gen -n 100000
//
// It publishes to the NATS server -nats names, by default $WEIR_NATS's
// (as weir's commands do), else nats://127.0.0.1:4222. It creates the stream if it is missing. The words follow a Zipf
// distribution, so some counts grow fast and most stay small. LINES
// stores each line once: after a lost connection or a server restart gen
// publishes again what the stream did not acknowledge, which drops what
// it stored already by message id (one per line, per run: the same seed
// run twice publishes its lines twice) — as long as the outage is shorter
// than the stream's duplicate window; else gen fails, saying so.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirhq/weir/transport/ingest"
	"github.com/weirhq/weir/transport/natsconn"
)

var words = strings.Fields(`the a weir river stream record barrier checkpoint operator state
task channel snapshot align flow water exactly once count word job worker wasm module
key value batch sink source jetstream nats credit backpressure unaligned savepoint`)

// natsEnv is the environment variable weir's commands take the NATS
// server's URL from when -nats is not given; gen does the same.
const natsEnv = "WEIR_NATS"

// defaultURL is $WEIR_NATS, else nats://127.0.0.1:4222 (weir up's).
func defaultURL() string {
	if u := os.Getenv(natsEnv); u != "" {
		return u
	}
	return nats.DefaultURL
}

func main() {
	url := flag.String("nats", defaultURL(), "NATS server URL (default from $"+natsEnv+", else "+nats.DefaultURL+")")
	n := flag.Int("n", 10000, "lines to publish")
	perLine := flag.Int("words", 8, "words per line")
	seed := flag.Uint64("seed", 1, "random seed (the same seed publishes the same lines)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, os.Stderr, *url, *n, *perLine, *seed); err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(1)
	}
}

// run publishes n lines of perLine words to url's stream LINES, each
// once: through a lost connection or a server restart it publishes again
// what LINES did not acknowledge, saying so on log, for as long as the
// stream's duplicate window lets it drop what it stored already
// (transport/ingest).
func run(ctx context.Context, log io.Writer, url string, n, perLine int, seed uint64) error {
	nc, err := nats.Connect(url, append(ingest.ConnOptions(), nats.Name("weir gen"))...)
	if err != nil {
		return fmt.Errorf("connect %s (is 'weir up' running? one elsewhere: -nats URL, or $%s): %w", natsconn.Redact(url), natsEnv, err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	if _, err := js.Stream(ctx, "LINES"); errors.Is(err, jetstream.ErrStreamNotFound) {
		if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "LINES", Subjects: []string{"lines.>"}}); err != nil {
			return fmt.Errorf("create stream LINES: %w", err)
		}
	} else if err != nil {
		return err
	}
	p, err := ingest.New(ctx, nc, ingest.Config{Stream: "LINES", IDPrefix: ingest.Nonce() + ".",
		Retrying: func(r ingest.Retry) { fmt.Fprintf(log, "gen: %s\n", r) }})
	if err != nil {
		return err
	}
	rng := rand.New(rand.NewPCG(seed, seed))
	zipf := rand.NewZipf(rand.New(rand.NewPCG(seed, 2)), 1.2, 1, uint64(len(words)-1))
	start := time.Now()
	var line strings.Builder
	for i := 1; i <= n; i++ {
		line.Reset()
		for w := 0; w < perLine; w++ {
			if w > 0 {
				line.WriteByte(' ')
			}
			line.WriteString(words[zipf.Uint64()])
		}
		m := nats.NewMsg(fmt.Sprintf("lines.gen%d", rng.IntN(8)))
		m.Data = []byte(line.String())
		if err := p.Publish(ctx, i, m); err != nil {
			return err
		}
	}
	if err := p.Flush(ctx); err != nil {
		return err
	}
	fmt.Printf("published %d lines (%d words) in %s\n", n, n*perLine, time.Since(start).Round(time.Millisecond))
	return nil
}
