// Package sink writes a task's output records to NATS: a core subject
// (at-most-once), a JetStream stream at-least-once (asynchronous publish,
// acknowledgements awaited at every checkpoint), or a JetStream stream
// exactly-once (output staged in the checkpoint and published when the
// checkpoint completes, with deterministic message ids that JetStream
// deduplicates).
//
// Every record becomes one NATS message: data = the record's value, the
// Weir-Key header = its key (omitted when empty).
package sink

import (
	"context"
	"fmt"
	"sync"

	"github.com/nats-io/nats.go"
	"github.com/weirhq/weir/abi"
)

// KeyHeader carries a record's key.
const KeyHeader = "Weir-Key"

// CoreGuarantee is the delivery guarantee of a core-subject sink.
const CoreGuarantee = "at-most-once: core NATS subject (subscribers that are down or slow miss messages; a replay after recovery may repeat some)"

// coreQueue is how many batches Write may hand to the publishing goroutine
// ahead of it.
const coreQueue = 2

// Core publishes records on a core NATS subject. Publishing runs on a
// goroutine of its own, so the task computes the next batch while the
// previous one goes out; at most a couple of batches wait in between.
type Core struct {
	nc      *nats.Conn
	subject string

	batches chan []byte
	stop    chan struct{}
	done    chan struct{}
	pending sync.WaitGroup // batches handed over and not yet published

	mu       sync.Mutex
	err      error
	closeOne sync.Once
}

// NewCore returns a sink that publishes on subject.
func NewCore(nc *nats.Conn, subject string) (*Core, error) {
	if subject == "" {
		return nil, fmt.Errorf("core sink: empty subject")
	}
	c := &Core{nc: nc, subject: subject, batches: make(chan []byte, coreQueue), stop: make(chan struct{}), done: make(chan struct{})}
	go c.run()
	return c, nil
}

// Guarantee describes the sink's delivery guarantee for the job status.
func (c *Core) Guarantee() string { return CoreGuarantee }

func (c *Core) run() {
	defer close(c.done)
	for {
		select {
		case b := <-c.batches:
			if err := c.publish(b); err != nil {
				c.mu.Lock()
				if c.err == nil {
					c.err = err
				}
				c.mu.Unlock()
			}
			c.pending.Done()
		case <-c.stop:
			return
		}
	}
}

func (c *Core) publish(batch []byte) error {
	it, err := abi.NewIter(batch)
	if err != nil {
		return fmt.Errorf("core sink %s: %w", c.subject, err)
	}
	for it.Next() {
		r := it.Record()
		if len(r.Key) == 0 {
			err = c.nc.Publish(c.subject, r.Value)
		} else {
			err = c.nc.PublishMsg(keyedMsg(c.subject, r))
		}
		if err != nil {
			return fmt.Errorf("core sink %s: publish: %w", c.subject, err)
		}
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("core sink %s: %w", c.subject, err)
	}
	return nil
}

func (c *Core) failed() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// Write hands batch to the publishing goroutine, waiting while it is a
// couple of batches behind. A publish error surfaces on a later call.
func (c *Core) Write(ctx context.Context, batch []byte) error {
	if err := c.failed(); err != nil {
		return err
	}
	if _, err := abi.BatchCount(batch); err != nil {
		return fmt.Errorf("core sink %s: %w", c.subject, err)
	}
	c.pending.Add(1)
	select {
	case c.batches <- batch:
		return nil
	case <-ctx.Done():
		c.pending.Done()
		return ctx.Err()
	case <-c.done:
		c.pending.Done()
		return fmt.Errorf("core sink %s: closed", c.subject)
	}
}

func keyedMsg(subject string, r abi.Record) *nats.Msg {
	return &nats.Msg{Subject: subject, Data: r.Value, Header: nats.Header{KeyHeader: []string{string(r.Key)}}}
}

// PreCommit publishes everything written and flushes the connection; a
// core sink stages nothing.
func (c *Core) PreCommit(ctx context.Context, id int64) ([]byte, error) {
	return nil, c.flush(ctx)
}

func (c *Core) flush(ctx context.Context) error {
	drained := make(chan struct{})
	go func() {
		c.pending.Wait()
		close(drained)
	}()
	select {
	case <-drained:
	case <-ctx.Done():
		return fmt.Errorf("core sink %s: flush: %w", c.subject, ctx.Err())
	}
	if err := c.failed(); err != nil {
		return err
	}
	if err := c.nc.FlushWithContext(ctx); err != nil {
		return fmt.Errorf("core sink %s: flush: %w", c.subject, err)
	}
	return nil
}

// Commit does nothing.
func (c *Core) Commit(ctx context.Context, id int64) error { return nil }

// Recover does nothing.
func (c *Core) Recover(ctx context.Context, id int64, state []byte) error { return nil }

// EndOfInput publishes everything written and flushes the connection.
func (c *Core) EndOfInput(ctx context.Context) error { return c.flush(ctx) }

// Close stops the publishing goroutine; batches not yet published are
// dropped (call EndOfInput or PreCommit first to deliver them). The
// connection belongs to the caller.
func (c *Core) Close() error {
	c.closeOne.Do(func() { close(c.stop) })
	<-c.done
	return nil
}
