package job

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirhq/weir/coordinator/control"
	"github.com/weirhq/weir/coordinator/jobspec"
)

// CheckStops refuses spec, as the submit does (control.ErrInvalid, in the
// submit's words), when a JetStream source's stop that resolves at the
// submit (end, a time) finds no message up to it in the source's stream,
// or is a time still to come: the source would read nothing. A caller
// that creates streams before it submits (weir run -create-streams)
// checks first, so that a run refused leaves no stream behind: creating
// (nil for none) holds the streams it creates where they do not exist,
// which it creates empty; fed holds those it publishes input to before
// the submit (weir run -input), whose sources' stops the submit alone
// can tell. Any other answer (JetStream slow, a stream missing that is
// not created: CheckStreams says so) is left to the submit.
//
// Each stream is asked for once per source, bounded by timeout.
func CheckStops(ctx context.Context, js jetstream.JetStream, spec *jobspec.Spec, timeout time.Duration,
	creating map[string]jetstream.StreamConfig, fed map[string]bool) error {
	for _, src := range spec.Sources {
		if src.Kind != jobspec.KindJetStream || src.StopSequence != 0 || fed[src.Stream] {
			continue
		}
		sp, err := jobspec.ParseStop(src.Stop)
		if err != nil || (!sp.End && sp.Time.IsZero()) {
			continue // a sequence (the source waits for it), none, or the spec's check to refuse
		}
		c, cancel := context.WithTimeout(ctx, timeout)
		_, err = resolveStop(c, js, src.Stream, sp)
		cancel()
		if _, ok := creating[src.Stream]; ok && errors.Is(err, jetstream.ErrStreamNotFound) {
			err = noMessageUpTo(src.Stream) // created empty
		}
		if errors.Is(err, control.ErrInvalid) {
			return fmt.Errorf("submit %s: source %s: stop %s: %w", spec.Name, src.Name, src.Stop, err)
		}
	}
	return nil
}
