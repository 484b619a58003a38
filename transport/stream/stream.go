// Package stream defines what flows on a weir channel — record batches,
// checkpoint barriers, cancel markers and end-of-partition — and the two ends
// of a channel that every transport (in-process, NATS) implements.
//
// A channel connects one producing subtask to one consuming subtask and
// keeps order. Control elements travel in-band with the data, so a barrier
// separates exactly the records before it from those after it. Flow control
// is credit based: a Sender blocks rather than drop, so backpressure reaches
// the sources.
package stream

import (
	"context"
	"errors"
	"fmt"

	"github.com/weirhq/weir/abi"
)

// Kind tells what an Element carries.
type Kind uint8

// Element kinds.
const (
	// KindRecords carries an abi record batch.
	KindRecords Kind = iota + 1
	// KindBarrier carries a checkpoint barrier.
	KindBarrier
	// KindCancel carries a cancel marker: the checkpoint it names was aborted
	// upstream, and a task aligning on it stops and releases its channels.
	KindCancel
	// KindEndOfPartition says the channel will carry nothing more.
	KindEndOfPartition
	// KindEndOfData says the producer's input ended: no records follow on
	// the channel, but barriers still do (the job's final savepoint), as
	// Flink's EndOfData. A consumer ends the operator's input port once
	// every channel of it said so.
	KindEndOfData
)

// String names the kind.
func (k Kind) String() string {
	switch k {
	case KindRecords:
		return "records"
	case KindBarrier:
		return "barrier"
	case KindCancel:
		return "cancel-marker"
	case KindEndOfPartition:
		return "end-of-partition"
	case KindEndOfData:
		return "end-of-data"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// CheckpointType distinguishes periodic checkpoints from user savepoints.
type CheckpointType uint8

// Checkpoint types.
const (
	Checkpoint CheckpointType = iota
	// Savepoint is taken on demand and is always aligned.
	Savepoint
)

// String names the type.
func (t CheckpointType) String() string {
	if t == Savepoint {
		return "savepoint"
	}
	return "checkpoint"
}

// Barrier is a checkpoint barrier: every record before it on a channel
// belongs to checkpoint ID, every record after it to a later one.
type Barrier struct {
	ID        int64          // checkpoint id, increasing per job
	Timestamp int64          // when the coordinator triggered it, ms since the epoch
	Type      CheckpointType // checkpoint or savepoint
	// Unaligned marks a barrier sent as a priority element: it overtook data
	// queued ahead of it, and that data is part of the checkpoint's channel
	// state.
	Unaligned bool
}

// Element is one item on a channel.
type Element struct {
	Kind Kind
	// Batch is the abi record batch of a KindRecords element. The sender
	// hands it over: nobody modifies it after Send.
	Batch []byte
	// Barrier is set for KindBarrier.
	Barrier Barrier
	// CheckpointID is the aborted checkpoint of a KindCancel element.
	CheckpointID int64
}

// Records returns a records element.
func Records(batch []byte) Element { return Element{Kind: KindRecords, Batch: batch} }

// BarrierElement returns a barrier element.
func BarrierElement(b Barrier) Element { return Element{Kind: KindBarrier, Barrier: b} }

// Cancel returns a cancel marker for checkpoint id.
func Cancel(id int64) Element { return Element{Kind: KindCancel, CheckpointID: id} }

// EndOfPartition returns an end-of-partition element.
func EndOfPartition() Element { return Element{Kind: KindEndOfPartition} }

// EndOfData returns an end-of-data element.
func EndOfData() Element { return Element{Kind: KindEndOfData} }

// Size is the number of payload bytes the element accounts for in credit and
// buffer budgets: the batch size for records, a small constant otherwise.
func (e Element) Size() int {
	if e.Kind == KindRecords {
		return len(e.Batch)
	}
	return 32
}

// Count is the number of records the element carries (0 for control
// elements and for a malformed batch).
func (e Element) Count() int {
	if e.Kind != KindRecords {
		return 0
	}
	n, err := abi.BatchCount(e.Batch)
	if err != nil {
		return 0
	}
	return n
}

// String describes the element for logs.
func (e Element) String() string {
	switch e.Kind {
	case KindRecords:
		return fmt.Sprintf("records(%d, %dB)", e.Count(), len(e.Batch))
	case KindBarrier:
		return fmt.Sprintf("barrier(%d)", e.Barrier.ID)
	case KindCancel:
		return fmt.Sprintf("cancel(%d)", e.CheckpointID)
	}
	return e.Kind.String()
}

// Sender is the producing end of one channel.
type Sender interface {
	// Send appends e to the channel. It blocks while the receiver has not
	// granted credit for it and returns when ctx is done or the channel
	// failed. It never drops an element. When Send returns an error the
	// element was not sent, so a caller interrupted through ctx may send it
	// again later without duplicating it.
	Send(ctx context.Context, e Element) error
	// SendPriority puts e — an unaligned barrier — ahead of every element
	// still queued at the sender, and returns those overtaken elements in
	// their order. They are still delivered, after e; the caller records
	// them as output channel state of the checkpoint. Priority elements need
	// no credit.
	SendPriority(ctx context.Context, e Element) (overtaken []Element, err error)
	// Close releases the sender. It does not send EndOfPartition: send that
	// explicitly at the end of a bounded stream.
	Close() error
}

// Delivery is an element as a Receiver hands it out.
type Delivery struct {
	Element
	// Overtaken is set on a priority (unaligned) barrier that jumped
	// elements already queued at the receiver: those elements, in order.
	// They are still delivered by the following Polls; the consuming task
	// records them as input channel state.
	Overtaken []Element
}

// Receiver is the consuming end of one channel.
type Receiver interface {
	// Poll returns the next element without blocking; ok is false when none
	// is queued. Taking an element returns its credit to the sender. After
	// an error the channel is failed: the task must fail and recover.
	Poll() (d Delivery, ok bool, err error)
	// Notify registers fn, called from any goroutine whenever Poll may have
	// something new (an element or an error). Call it once, before Poll.
	Notify(fn func())
	// Close releases the receiver.
	Close() error
}

// PriorityPoller is implemented by receivers that can hand out a priority
// element (an unaligned barrier) queued ahead of everything else without
// taking ordinary data. A task whose output is backpressured uses it to see
// unaligned barriers while it does not take new records; with receivers that
// lack it, such a task sees the barrier once its output drains.
type PriorityPoller interface {
	// PollPriority returns the next element only if it is a priority
	// element; ok is false otherwise.
	PollPriority() (d Delivery, ok bool, err error)
}

// BarrierPrioritizer is implemented by receivers that can turn a barrier
// already queued at the receiver into a priority element. A task whose
// aligned checkpoint timed out (aligned-checkpoint timeout) uses it so that
// the barriers of its slow channels overtake the data queued before them
// instead of waiting behind it.
type BarrierPrioritizer interface {
	// QueuedBarrier returns the first ordinary barrier queued at the
	// receiver and not yet polled, if any: the task learns that a checkpoint
	// is coming before the data ahead of its barrier was processed.
	QueuedBarrier() (b Barrier, ok bool)
	// PrioritizeBarrier moves the queued barrier of checkpoint id ahead of
	// the ordinary elements queued before it. The next Poll returns it,
	// marked Unaligned, with those elements as Delivery.Overtaken (they are
	// still delivered after it). found is false when no such barrier is
	// queued (yet).
	PrioritizeBarrier(id int64) (found bool, err error)
}

// ErrClosed is returned by a channel end used after Close.
var ErrClosed = errors.New("channel closed")

// QueueReporter is a Receiver that can tell how many records it holds
// that its task has not taken: a task reports the sum over its inputs, so
// that a job behind its input shows where (a source's unread count misses
// what the channels after it hold).
type QueueReporter interface {
	QueuedRecords() int
}

// Resizer is a Receiver whose buffer can change size while the channel
// runs: a task that debloats its input buffers (host.Config.Debloat)
// sizes each to what it takes in the target time, so that an aligned
// barrier waits behind about that much data and an unaligned checkpoint
// stores about that much. SetBuffer asks for a buffer of n bytes and
// returns the size in effect, which the transport keeps between the
// channel's configured size (the most) and the least it can work with
// (a remote channel's largest frame). A smaller buffer takes effect as
// the receiver's task takes what is queued beyond it; nothing queued is
// dropped.
type Resizer interface {
	SetBuffer(n int) int
}

// ElementLimiter is a Sender that takes record batches up to a size: a
// task cuts a larger batch into batches of at most MaxElementBytes at
// record boundaries before it sends them (a record larger than that goes
// alone), so that a channel sized by its receiver (Resizer) holds about
// that much and not one large batch past it. 0 means no limit.
type ElementLimiter interface {
	MaxElementBytes() int
}

// ChannelError reports a channel that lost data or its connection. The task
// that owns the channel must fail so the job recovers from its checkpoint.
type ChannelError struct {
	Channel string // e.g. "wordcount[0] -> sink[1]"
	Err     error
}

// Error names the channel and the cause: "channel <name>: <cause>", or
// "channel <name> closed" for ErrClosed (not "channel <name>: channel
// closed").
func (e *ChannelError) Error() string {
	if e.Err == ErrClosed {
		return fmt.Sprintf("channel %s closed", e.Channel)
	}
	return fmt.Sprintf("channel %s: %v", e.Channel, e.Err)
}

// Unwrap returns the cause.
func (e *ChannelError) Unwrap() error { return e.Err }
