// Package remote carries a weir channel — record batches, barriers, cancel
// markers and end-of-partition, in order — between two tasks over NATS.
//
// One channel connects one producing subtask to one consuming subtask and
// uses two core NATS subjects derived from a base subject: base+".d" carries
// frames from the sender to the receiver, base+".c" carries credit from the
// receiver back to the sender.
//
//   - Batching: the sender packs elements into frames up to MaxFrameBytes
//     and publishes a partial frame after Linger, or at once when a control
//     element (barrier, cancel marker, end-of-partition) is queued.
//   - Flow control: the receiver grants credit in bytes (its window at
//     start — StartWindow, or Window — plus the wire size of every frame the
//     task has polled). The sender never publishes a frame whose bytes would
//     exceed what was granted, so at most Window bytes are ever in flight or
//     queued at the receiver: the server never cuts a slow consumer and
//     never drops, and a slow consumer slows its producer down. A task may
//     resize the window while the channel runs (Receiver.SetBuffer).
//   - Sub-frame windows: a sender cuts a frame at the credit it has (at
//     record boundaries) instead of waiting for a whole frame's credit, and
//     says so on its probes (a NATS header, which a worker that predates it
//     ignores); the receiver's credit messages say its window (a header
//     too), to which the sender sizes its frames and its queue. A receiver
//     shrinks its window below a frame, down to MinWindow, unless it heard a
//     probe without that header: an older sender, which waits for a whole
//     frame's credit, keeps the one-frame floor. A record the window cannot
//     carry raises it (the sender's probe says what it needs).
//   - Loss detection: every frame carries a per-channel sequence number. A
//     gap, a malformed frame or a disconnect of either end's NATS connection
//     fails the channel with a *stream.ChannelError; a channel never
//     continues silently after losing data. The task fails and the job
//     recovers from its last checkpoint, on fresh subjects (put the job
//     attempt into the base subject).
//   - Priority (unaligned) barriers jump every element queued at the sender
//     (SendPriority returns them) and at the receiver (Delivery.Overtaken).
package remote

import (
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/weirhq/weir/transport/stream"
)

// Config configures one end of a channel. Both ends must use the same
// Subject, Window and MaxFrameBytes.
type Config struct {
	// Channel names the channel in errors, e.g. "map[0] -> sink[1]".
	Channel string
	// Subject is the channel's base subject; it must be unique per channel
	// and per job attempt, e.g. "weir.data.job1.a3.map-0_sink-1_0".
	Subject string
	// Window is the receiver's credit in bytes; default 4 MiB. Keep the
	// sum of the windows of the channels a connection receives below the
	// server's max_pending (64 MiB by default).
	Window int
	// MaxFrameBytes caps a frame's size; default 256 KiB, at most half the
	// window and at most the server's max payload.
	MaxFrameBytes int
	// Linger is how long a partial frame waits for more elements; default 1ms.
	Linger time.Duration
	// ProbeInterval is how often a sender without credit asks the receiver
	// to repeat its grant (covers start-up order); default 100ms.
	ProbeInterval time.Duration
	// StartWindow is the window the receiver grants at first, before its
	// task sized it (stream.Resizer): a task that debloats its input starts
	// its channels small and grows them as it measures its pace (a slow
	// start), so that the first barrier of a new attempt does not wait
	// behind a whole Window of backlog. 0 means Window. Only the receiver
	// reads it.
	StartWindow int
	// MinWindow is the least the receiver's window shrinks to (SetBuffer,
	// StartWindow) with a sender that cuts frames to its credit; default
	// 16 KiB, at most MaxFrameBytes. With an older sender the least is
	// MaxFrameBytes. Only the receiver reads it.
	MinWindow int
}

// ErrRecordTooLarge is returned by Send for a record that does not fit in a
// frame.
var ErrRecordTooLarge = errors.New("record larger than the channel's max frame")

// ErrDisconnected is the cause of a ChannelError after the NATS connection
// dropped.
var ErrDisconnected = errors.New("NATS connection lost")

// ErrSequenceGap is the cause of a ChannelError after a frame went missing.
var ErrSequenceGap = errors.New("frame sequence gap")

func (c Config) withDefaults(nc *nats.Conn) (Config, error) {
	if c.Subject == "" {
		return c, errors.New("remote channel: empty subject")
	}
	if c.Channel == "" {
		c.Channel = c.Subject
	}
	if c.Window <= 0 {
		c.Window = 4 << 20
	}
	if c.MaxFrameBytes <= 0 {
		c.MaxFrameBytes = 256 << 10
	}
	if c.MaxFrameBytes > c.Window/2 {
		c.MaxFrameBytes = c.Window / 2
	}
	if mp := int(nc.MaxPayload()); mp > 0 && c.MaxFrameBytes > mp {
		c.MaxFrameBytes = mp
	}
	if c.MaxFrameBytes < FrameHeaderSize+64 {
		return c, fmt.Errorf("remote channel %s: max frame of %d bytes is too small", c.Channel, c.MaxFrameBytes)
	}
	if c.MinWindow <= 0 {
		c.MinWindow = 16 << 10
	}
	c.MinWindow = min(max(c.MinWindow, FrameHeaderSize+64), c.MaxFrameBytes)
	if c.StartWindow <= 0 || c.StartWindow > c.Window {
		c.StartWindow = c.Window
	}
	if c.Linger <= 0 {
		c.Linger = time.Millisecond
	}
	if c.ProbeInterval <= 0 {
		c.ProbeInterval = 100 * time.Millisecond
	}
	return c, nil
}

// batchRoom is the most of a record batch a frame holds: the frame less
// its header and the element's kind and length.
func (c Config) batchRoom() int { return roomOf(c.MaxFrameBytes) }

// roomOf is the most of a record batch a frame of size bytes holds.
func roomOf(size int) int { return size - FrameHeaderSize - 5 }

// NATS headers of a channel's messages. A worker that predates them reads
// a message's data only, and ignores them.
const (
	// headerCuts, on a probe, says that the sender cuts frames to the
	// credit it has: its receiver may grant less than a frame.
	headerCuts = "Weir-Cuts"
	// headerNeed, on a probe, is the size of the frame the sender waits
	// for credit for, when its first element cannot be cut smaller (one
	// record, or a control element).
	headerNeed = "Weir-Need"
	// headerWindow, on a credit message, is the receiver's window in
	// effect.
	headerWindow = "Weir-Window"
)

func (c Config) dataSubject() string    { return c.Subject + ".d" }
func (c Config) controlSubject() string { return c.Subject + ".c" }

// watchConn calls fail when nc leaves the CONNECTED state. The returned
// stop function unregisters the watcher.
func watchConn(nc *nats.Conn, fail func(error)) (stop func()) {
	ch := nc.StatusChanged(nats.DISCONNECTED, nats.RECONNECTING, nats.CLOSED)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for st := range ch {
			fail(fmt.Errorf("%w (%s)", ErrDisconnected, st))
		}
	}()
	if st := nc.Status(); st != nats.CONNECTED {
		fail(fmt.Errorf("%w (%s)", ErrDisconnected, st))
	}
	return func() {
		nc.RemoveStatusListener(ch)
		<-done
	}
}

func chanErr(cfg Config, err error) error {
	return &stream.ChannelError{Channel: cfg.Channel, Err: err}
}
