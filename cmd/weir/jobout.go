package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirhq/weir/coordinator/control"
	"github.com/weirhq/weir/coordinator/jobspec"
)

// jobOutputOptions are weir job output's flags.
type jobOutputOptions struct {
	sink      string        // -sink: the one sink to follow ("": every sink)
	fromStart bool          // -from-start: all a JetStream sink's stream holds
	last      int           // -last: the last N records of a JetStream sink's stream
	forDur    time.Duration // -for: stop after this long (0: never)
	show      int           // -show: stop after this many records (-1: never; 0 is refused)
	untilNow  bool          // -until-now: stop once what the streams held at the start is shown
}

// check reports a mistake in the flags of weir job output.
func (o jobOutputOptions) check() error {
	switch {
	case o.last < 0:
		return usagef("job output: -last %d: give a number of records, 1 or more", o.last)
	case o.fromStart && o.last > 0:
		return usagef("job output: give -from-start or -last, not both")
	case o.show == 0:
		// weir run's -show 0 prints no records; here it stood for no
		// limit. Neither is taken for the other silently.
		return usagef("job output: -show 0 would show no records (as weir run -show 0 prints none): give 1 or more, or -1 (the default) for no limit")
	case o.show < -1:
		return usagef("job output: -show %d: give a number of records, 1 or more (-1: no limit)", o.show)
	case o.forDur < 0:
		return usagef("job output: -for %s: give a duration above 0 (0: no limit)", o.forDur)
	case o.untilNow && !o.fromStart && o.last == 0:
		return usagef("job output: -until-now shows what the streams hold now: give -from-start or -last N with it")
	}
	return nil
}

// what says where a JetStream sink's output is read from: its stream, on
// the subjects its sink writes now (subjects: a restore with another
// subject leaves the earlier output on the earlier one, not shown).
func (o jobOutputOptions) what(subjects string) string {
	switch {
	case o.fromStart:
		return "all it holds on " + subjects
	case o.last == 1:
		return "its last record on " + subjects
	case o.last > 0:
		return fmt.Sprintf("its last %d records on %s", o.last, subjects)
	}
	return "new records on " + subjects
}

// jobOutputPoll is how often weir job output asks whether the job ended.
const jobOutputPoll = 500 * time.Millisecond

// jobOutput follows what job's sinks output, as weir run prints it, until
// the job ends (once every record its JetStream sinks' streams held then
// is printed), -for passed, -show records were printed, or ctx ends
// (Ctrl-C). A JetStream sink's output is what its stream stores, read by
// an ordered consumer from the stream's next sequence (or all it holds,
// or the last N records; of a job that has ended, from the first record
// it stored since its submit: endedStart); a core NATS sink's is what it publishes while
// weir job output listens. Records go to std.Out, what weir job output
// says of them to std.Err, so that the records can be piped.
func jobOutput(ctx context.Context, std Stdio, nc *nats.Conn, api *control.APIClient, job string, o jobOutputOptions) error {
	notices := &apiNotices{w: std.Err}
	api.Waiting = notices.waiting
	st, err := api.Job(ctx, job)
	if err != nil {
		return apiErr("job output", err)
	}
	notices.answered(control.APIJob)
	sinks, err := outputSinks(st, o.sink)
	if err != nil {
		return err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("job output %s: %w", job, err)
	}
	if o.forDur > 0 {
		// -for ends ctx without giving it a deadline: nats.go bounds a
		// JetStream request by its default timeout only under a context
		// without one, and each request of the follow loop would wait as
		// long as -for had left when no server answers it (an election).
		var cancel context.CancelFunc
		ctx, cancel = context.WithCancel(ctx)
		defer cancel()
		defer time.AfterFunc(o.forDur, cancel).Stop()
	}
	// -show -1 is no limit (limit 0), as weir run's -show -1 is.
	out := &output{std: std, show: -1, limit: max(o.show, 0), full: make(chan struct{}), bare: len(sinks) == 1,
		bySink: map[string]int{}, js: js, sinks: sinks, job: job}
	for _, s := range sinks {
		var stop func()
		if s.Kind == jobspec.KindJetStream {
			start, last, err := outputStart(ctx, js, job, s, o)
			if err != nil {
				return err
			}
			ended := ""
			if st.State.Terminal() && !o.fromStart && o.last == 0 {
				// Nothing new comes from a job that ended: its output
				// is what it stored since its submit.
				if start, ended, err = endedStart(ctx, js, st, s, last); err != nil {
					return err
				}
			}
			until := uint64(0)
			if o.untilNow {
				if until = last; until < start {
					fmt.Fprintf(std.Err, "showing sink %s: stream %s holds nothing on %s\n", s.Name, s.Stream, sinkSubjects(s))
					continue // a watch up to 0 would be one without an end
				}
			}
			stop, err = out.watchStream(ctx, s, start, until)
			if err != nil {
				return err
			}
			if o.untilNow {
				// The sequences may hold messages on other subjects (or
				// none, deleted): the count of the records says what
				// comes (a trial read "from sequence 1 to 1001" as 1001
				// records, and was shown 1000).
				what := o.what(sinkSubjects(s))
				if n, err := countStored(ctx, js, s, start); err == nil {
					what += ": " + plural(n, "record")
				}
				fmt.Fprintf(std.Err, "showing sink %s: stream %s from sequence %d to %d (%s)\n", s.Name, s.Stream, start, until, what)
			} else if ended != "" {
				fmt.Fprintf(std.Err, "following sink %s: stream %s from sequence %d (%s)\n", s.Name, s.Stream, start, ended)
			} else {
				fmt.Fprintf(std.Err, "following sink %s: stream %s from sequence %d (%s)\n", s.Name, s.Stream, start, o.what(sinkSubjects(s)))
			}
		} else if o.untilNow {
			fmt.Fprintf(std.Err, "skipping sink %s: core NATS subject %s keeps no history to show\n", s.Name, sinkSubjects(s))
			continue
		} else {
			if stop, err = out.watchSubjects(nc, s); err != nil {
				return err
			}
			// The server has the subscription before the line says so.
			fctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			err := nc.FlushWithContext(fctx)
			cancel()
			if err != nil {
				return fmt.Errorf("job output %s: sink %s: %w", job, s.Name, err)
			}
			fmt.Fprintf(std.Err, "following sink %s: core NATS subject %s: its output is seen only while followed, no history\n",
				s.Name, sinkSubjects(s))
		}
		defer stop()
	}
	if o.untilNow {
		return untilNow(ctx, std, out)
	}
	tick := time.NewTicker(jobOutputPoll)
	defer tick.Stop()
	for {
		if st.State.Terminal() {
			// Everything the streams hold now is printed before weir
			// job output says the job ended: the job's last commits are
			// stored before its state says it ended. (A watch of a
			// stream that is gone would wait for it for ever.)
			if err := sinkStreamsThere(ctx, js, job, sinks); err != nil {
				return err
			}
			out.settle(ctx, 365*24*time.Hour) // until ctx ends
			if ctx.Err() != nil {
				return nil
			}
			n, _ := out.state()
			fmt.Fprintf(std.Err, "job %s %s; %s shown\n", job, howEnded(st), countOf(n, "record"))
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-out.full:
			return nil
		case <-tick.C:
		}
		if err := sinkStreamsThere(ctx, js, job, sinks); err != nil {
			return err
		}
		out.unstall(ctx, time.Now(), outputStall, std.Err)
		next, err := api.Job(ctx, job)
		switch {
		case err == nil:
			notices.answered(control.APIJob)
			st = next
		case ctx.Err() != nil:
			return nil
		case errors.Is(err, control.ErrUnavailable), errors.Is(err, context.DeadlineExceeded):
			// The coordinator is away (restarting): the output is
			// followed on, and whether the job ended asked again.
		default:
			return apiErr("job output", err)
		}
	}
}

// untilNow waits until each of out's stream watches has shown what its
// stream held when it started (streamWatch.until), or until -show or -for
// ends it, and says how many records that was. A watch's handled
// sequence moves on only after its record is printed, and later records
// are passed over: nothing is left to wait for (settle would wait for a
// running job's new output too).
func untilNow(ctx context.Context, std Stdio, out *output) error {
	for _, w := range out.streams {
		for !w.shownUntil(ctx) {
			select {
			case <-ctx.Done():
				return nil
			case <-out.full:
				return nil
			case <-time.After(20 * time.Millisecond):
			}
			out.unstall(ctx, time.Now(), outputStall, std.Err)
		}
	}
	n, _ := out.state()
	fmt.Fprintf(std.Err, "%s shown: all the sinks' streams held on their subjects when weir job output started\n", countOf(n, "record"))
	return nil
}

// howEnded says how the job st ended, for weir job output's last line:
// its state, a failed job's with its reason; a stopped job (weir job
// stop: canceled after a savepoint, control.JobStatus.StoppedWithSavepoint)
// as stopped, with the savepoint to restore it from.
func howEnded(st control.JobStatus) string {
	switch {
	case st.State == control.JobFailed && st.Reason != "":
		return fmt.Sprintf("%s (%s)", st.State, st.Reason)
	case st.State == control.JobCanceled && st.StoppedWithSavepoint != 0:
		return fmt.Sprintf("stopped with savepoint %d", st.StoppedWithSavepoint)
	}
	return string(st.State)
}

// outputSinks returns the sinks of the job st that weir job output
// follows: every one, or the one named name.
func outputSinks(st control.JobStatus, name string) ([]jobspec.Sink, error) {
	if len(st.Sinks) == 0 {
		return nil, fmt.Errorf("job %s: the coordinator does not say which sinks the job has (a weir up older than this weir?): upgrade weir up, or watch the sinks' subjects with nats sub", st.Name)
	}
	if name == "" {
		return st.Sinks, nil
	}
	names := make([]string, len(st.Sinks))
	for i, s := range st.Sinks {
		if s.Name == name {
			return []jobspec.Sink{s}, nil
		}
		names[i] = s.Name
	}
	return nil, fmt.Errorf("job %s has no sink %q (its sinks: %s)", st.Name, name, strings.Join(names, ", "))
}

// outputStart returns the stream sequence weir job output reads the
// JetStream sink s from: the stream's next (new records), its first
// (-from-start), or that of the last o.last records on the sink's
// subjects; and the stream's last sequence now.
func outputStart(ctx context.Context, js jetstream.JetStream, job string, s jobspec.Sink, o jobOutputOptions) (start, last uint64, err error) {
	st, err := js.Stream(ctx, s.Stream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return 0, 0, fmt.Errorf("job %s: sink %s: stream %s does not exist (deleted?): there is no output to follow", job, s.Name, s.Stream)
	}
	if err != nil {
		return 0, 0, fmt.Errorf("job %s: sink %s: stream %s: %w", job, s.Name, s.Stream, err)
	}
	state := st.CachedInfo().State
	switch {
	case o.fromStart:
		return max(state.FirstSeq, 1), state.LastSeq, nil
	case o.last > 0:
		start, err := lastStart(ctx, js, s, state, o.last)
		if err != nil {
			return 0, 0, fmt.Errorf("job %s: sink %s: stream %s: %w", job, s.Name, s.Stream, err)
		}
		return start, state.LastSeq, nil
	}
	return state.LastSeq + 1, state.LastSeq, nil
}

// lastStart returns the stream sequence of the n-th last message the
// stream of sink s holds on the sink's subjects (its first sequence when
// it holds n or fewer): a binary search over the stream's sequences,
// counting what it holds from each (countStored). The stream may store
// other subjects, and have gaps (deleted messages): the sequences alone
// do not tell.
func lastStart(ctx context.Context, js jetstream.JetStream, s jobspec.Sink, state jetstream.StreamState, n int) (uint64, error) {
	lo, hi := max(state.FirstSeq, 1), state.LastSeq+1 // count(lo) >= n > count(hi)
	total, err := countStored(ctx, js, s, lo)
	if err != nil || total <= n {
		return lo, err
	}
	for lo+1 < hi {
		mid := lo + (hi-lo)/2
		c, err := countStored(ctx, js, s, mid)
		if err != nil {
			return 0, err
		}
		if c >= n {
			lo = mid
		} else {
			hi = mid
		}
	}
	return lo, nil
}

// sinkStreamsThere reports a JetStream sink whose stream was deleted:
// its ordered consumer would wait for it for ever.
func sinkStreamsThere(ctx context.Context, js jetstream.JetStream, job string, sinks []jobspec.Sink) error {
	for _, s := range sinks {
		if s.Kind != jobspec.KindJetStream {
			continue
		}
		if _, err := js.Stream(ctx, s.Stream); errors.Is(err, jetstream.ErrStreamNotFound) {
			return fmt.Errorf("job %s: sink %s: stream %s was deleted: there is no more output to follow", job, s.Name, s.Stream)
		}
	}
	return nil
}

// countOf says n things: "1 record", "2 records", "0 records".
func countOf(n int, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return fmt.Sprintf("%d %ss", n, thing)
}
