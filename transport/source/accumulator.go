package source

import (
	"context"
	"errors"
	"sync"

	"github.com/weirhq/weir/abi"
)

// ErrClosed is returned by Poll after Close.
var ErrClosed = errors.New("source closed")

// accumulator gathers the messages a subscription delivers into one record
// batch that Poll takes at once, so a task makes one operator call for
// everything that arrived since its last Poll. It holds at most one batch:
// a full batch blocks the delivering goroutine until Poll takes it.
type accumulator struct {
	maxRecords, maxBytes int

	mu     sync.Mutex
	space  *sync.Cond
	b      abi.Builder
	last   uint64 // offset of the last message added or skipped
	taken  uint64 // offset returned by the last take
	err    error
	closed bool
	ready  chan struct{} // capacity 1: something to take
	done   chan struct{} // closed by close
}

func newAccumulator(maxRecords, maxBytes int) *accumulator {
	if maxRecords <= 0 {
		maxRecords = 4096
	}
	if maxBytes <= 0 {
		maxBytes = 1 << 20
	}
	a := &accumulator{maxRecords: maxRecords, maxBytes: maxBytes, ready: make(chan struct{}, 1), done: make(chan struct{})}
	a.space = sync.NewCond(&a.mu)
	return a
}

func (a *accumulator) signal() {
	select {
	case a.ready <- struct{}{}:
	default:
	}
}

// add appends one record with offset off, waiting while the batch is full.
// It reports false once the accumulator is closed.
func (a *accumulator) add(key, value []byte, ts int64, off uint64) bool {
	a.mu.Lock()
	for !a.closed && a.b.Len() > 0 && (a.b.Len() >= a.maxRecords || a.b.Size() >= a.maxBytes) {
		a.space.Wait()
	}
	if a.closed {
		a.mu.Unlock()
		return false
	}
	first := a.b.Len() == 0
	a.b.Add(key, value, ts)
	a.last = off
	a.mu.Unlock()
	if first {
		// Later records join a batch the taker was already told about.
		a.signal()
	}
	return true
}

// skip advances the offset past a message this subtask does not read.
func (a *accumulator) skip(off uint64) {
	a.mu.Lock()
	a.last = off
	a.mu.Unlock()
}

// fail makes the next take return err.
func (a *accumulator) fail(err error) {
	a.mu.Lock()
	if a.err == nil {
		a.err = err
	}
	a.mu.Unlock()
	a.signal()
}

// take waits for records and returns them as a new batch with the offset of
// the last message covered.
func (a *accumulator) take(ctx context.Context) ([]byte, uint64, error) {
	for {
		a.mu.Lock()
		if a.closed {
			a.mu.Unlock()
			return nil, 0, ErrClosed
		}
		if a.b.Len() > 0 {
			out := append([]byte(nil), a.b.Bytes()...)
			a.b.Reset()
			a.taken = a.last
			a.mu.Unlock()
			a.space.Broadcast()
			return out, a.taken, nil
		}
		if a.err != nil {
			err := a.err
			a.mu.Unlock()
			return nil, 0, err
		}
		a.mu.Unlock()
		select {
		case <-a.ready:
		case <-a.done:
		case <-ctx.Done():
			return nil, 0, ctx.Err()
		}
	}
}

func (a *accumulator) close() {
	a.mu.Lock()
	if !a.closed {
		a.closed = true
		close(a.done)
	}
	a.mu.Unlock()
	a.space.Broadcast()
}
