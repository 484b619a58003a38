package worker

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/weirhq/weir/coordinator/control"
	"github.com/weirhq/weir/coordinator/jobspec"
	"github.com/weirhq/weir/coordinator/registry"
	"github.com/weirhq/weir/host"
	"github.com/weirhq/weir/host/snapshot"
	"github.com/weirhq/weir/host/wasm"
	"github.com/weirhq/weir/transport/sink"
	"github.com/weirhq/weir/transport/source"
)

// A sink's longer ack timeout lengthens the duplicate window its stream
// needs: a commit may wait that long before recovery re-commits.
func TestDuplicateWindow(t *testing.T) {
	ck := jobspec.Checkpointing{Interval: 10 * time.Second, Timeout: time.Minute}
	for _, c := range []struct {
		ack  time.Duration
		want time.Duration
	}{
		{0, 10*time.Second + time.Minute + sink.RecoveryAllowance},
		{5 * time.Second, 10*time.Second + time.Minute + sink.RecoveryAllowance},
		{45 * time.Second, 10*time.Second + time.Minute + sink.RecoveryAllowance + 35*time.Second},
	} {
		if got := DuplicateWindow(ck, jobspec.Sink{AckTimeout: c.ack}); got != c.want {
			t.Errorf("ack timeout %v: window %v, want %v", c.ack, got, c.want)
		}
	}
}

func TestUnrecoverable(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{fmt.Errorf("source: %w", source.ErrOffsetGone), true},
		{fmt.Errorf("source: %w", source.ErrOffsetAhead), true},
		{fmt.Errorf("source: %w", source.ErrOffsetMismatch), true},
		// A running source's loss follows the restart strategy: the
		// restore refuses (ErrOffsetGone) with the same advice.
		{fmt.Errorf("source: %w", source.ErrMessagesLost), false},
		{fmt.Errorf("sink: %w", sink.ErrStreamNotDurable), true},
		{fmt.Errorf("sink: %w", sink.ErrDuplicateWindowTooShort), true},
		{fmt.Errorf("sink: %w", sink.ErrBadKey), true},
		{fmt.Errorf("sink: %w", sink.ErrRecordTooLarge), true},
		// An atomic batch larger than the stream's limit never fits; one
		// past the room left may, once room is made.
		{fmt.Errorf("commit: %w", &sink.StreamFullError{Stream: "OUT", Limit: "max_msgs", Err: errors.New("maximum messages exceeded"), Batch: 20, Max: 15}), true},
		{fmt.Errorf("commit: %w", &sink.StreamFullError{Stream: "OUT", Limit: "max_msgs", Err: errors.New("maximum messages exceeded"), Batch: 20, Max: 25, Held: 10}), false},
		{fmt.Errorf("commit: %w", &sink.StreamFullError{Stream: "OUT", Limit: "max_msgs", Err: errors.New("maximum messages exceeded")}), false},
		// A stream's subjects edited while the job ran: an edit back lets
		// a restart commit.
		{fmt.Errorf("exactly-once sink out: commit of checkpoint 3: %w", sink.ErrSubjectNotStored), false},
		{fmt.Errorf("exactly-once sink out: recover checkpoint 3: %w", sink.ErrStagedSubjectNotStored), false},
		{fmt.Errorf("exactly-once sink out: recover checkpoint 3: %w: record 2: %w", sink.ErrStagedSubjectNotStored, sink.ErrBadKey), false},
		{fmt.Errorf("exactly-once sink out: recover checkpoint 3: %w", sink.ErrStagedStreamNotFound), true},
		{fmt.Errorf("sink: recover checkpoint 3: %w: staged checkpoint 3: subject out.{KEY}", sink.ErrMalformedState), true},
		{fmt.Errorf("load: %w", &wasm.ValidationError{Module: "m", Kind: wasm.KindMissingExport, Detail: "missing export weir_process"}), true},
		{control.Unrecoverable(errors.New("x")), true},
		// Over the registry's size limit: every attempt is refused so.
		{&registry.TooLargeError{Module: "big@1", Size: 2 << 20, Limit: 1 << 20}, true},
		{fmt.Errorf("restore: %w", host.ErrCannotRescale), true},
		{fmt.Errorf("operator: %w", host.ErrPortEnded), true},
		{fmt.Errorf("restore: j/chk-3/op-0: %w: checksum mismatch", snapshot.ErrCorrupt), true},
		{&wasm.TrapError{Operator: "op", Export: "weir_process"}, false},
		{fmt.Errorf("restore j/chk-3/op-0: %w", &wasm.OperatorError{Operator: "op", Export: "weir_restore", Message: "unknown state version"}), true},
		{fmt.Errorf("restore j/chk-3/op-0: %w", &wasm.TrapError{Operator: "op", Export: "weir_restore"}), true},
		{fmt.Errorf("restore j/chk-3/op-0: %w", &wasm.DeadlineError{Operator: "op", Export: "weir_restore"}), false},
		{&wasm.OperatorError{Operator: "op", Export: "weir_process"}, false},
		{fmt.Errorf("sink: %w", context.DeadlineExceeded), false},
		{errors.New("connection closed"), false},
	} {
		if got := Unrecoverable(c.err); got != c.want {
			t.Errorf("Unrecoverable(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

// A source spec's key option becomes the transport's; a spec stored before
// the option existed reads the header.
func TestKeyFrom(t *testing.T) {
	for key, want := range map[string]source.KeyFrom{
		"":                     source.KeyFromHeader,
		jobspec.KeyFromHeader:  source.KeyFromHeader,
		jobspec.KeyFromSubject: source.KeyFromSubject,
	} {
		if got, err := keyFrom(&jobspec.Source{Name: "in", Key: key}); err != nil || got != want {
			t.Errorf("key %q: %v, %v; want %v", key, got, err, want)
		}
	}
	if _, err := keyFrom(&jobspec.Source{Name: "in", Key: "topic"}); err == nil || !strings.Contains(err.Error(), `source in: unknown key "topic"`) {
		t.Errorf("unknown key: %v", err)
	}
}

// An exactly-once sink's staged output is bounded in a job that takes
// periodic checkpoints (the sink's default), not in one that takes none:
// its output waits for the end of input by design.
func TestMaxStaged(t *testing.T) {
	for _, c := range []struct {
		ck   jobspec.Checkpointing
		want int
	}{
		{jobspec.Checkpointing{Interval: 10 * time.Second}, 0},
		{jobspec.Checkpointing{Interval: 10 * time.Second, Disabled: true}, -1},
		{jobspec.Checkpointing{}, -1},
	} {
		if got := maxStaged(c.ck); got != c.want {
			t.Errorf("maxStaged(%+v) = %d, want %d", c.ck, got, c.want)
		}
	}
}
