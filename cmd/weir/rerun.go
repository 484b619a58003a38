package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirhq/weir/coordinator/control"
	"github.com/weirhq/weir/coordinator/jobspec"
)

// firstSince returns the stream sequence of the first message the
// stream of JetStream sink s holds on the sink's subjects that was stored
// at or after t, and how many it holds from there on (0 and 0 when none).
// A job's run begins at its submit (control.JobStatus.Submitted, the
// coordinator's clock; the stream's is the NATS server's): what its sinks
// stored since is its output, where no other job writes the subjects.
func firstSince(ctx context.Context, js jetstream.JetStream, s jobspec.Sink, t time.Time) (seq uint64, n int, err error) {
	cons, err := js.CreateConsumer(ctx, s.Stream, jetstream.ConsumerConfig{
		FilterSubjects:    []string{sinkSubjects(s)},
		DeliverPolicy:     jetstream.DeliverByStartTimePolicy,
		OptStartTime:      &t,
		AckPolicy:         jetstream.AckNonePolicy,
		InactiveThreshold: time.Minute, // removed by the server if the delete below fails
	})
	if err != nil {
		return 0, 0, err
	}
	defer func() { _ = js.DeleteConsumer(context.WithoutCancel(ctx), s.Stream, cons.CachedInfo().Name) }()
	if n = int(cons.CachedInfo().NumPending); n == 0 {
		return 0, 0, nil
	}
	m, err := cons.Next(jetstream.FetchMaxWait(summaryWait))
	if err != nil {
		return 0, 0, err
	}
	md, err := m.Metadata()
	if err != nil {
		return 0, 0, err
	}
	return md.Sequence.Stream, n, nil
}

// earlierOutput says what the JetStream sinks of the job st, which has
// ended, stored since its submit: "stream OUT: 1000 records", one part
// per stream that holds some; "" when none holds any (or cannot say).
func earlierOutput(ctx context.Context, js jetstream.JetStream, st control.JobStatus, spec *jobspec.Spec) string {
	sinks := st.Sinks
	if len(sinks) == 0 {
		sinks = spec.Sinks // a coordinator that does not say
	}
	var parts []string
	for _, s := range sinks {
		if s.Kind != jobspec.KindJetStream || st.Submitted.IsZero() {
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, rerunProbe)
		_, n, err := firstSince(cctx, js, s, st.Submitted)
		cancel()
		if err == nil && n > 0 {
			parts = append(parts, fmt.Sprintf("stream %s: %s on %s", s.Stream, plural(n, "record"), sinkSubjects(s)))
		}
	}
	return strings.Join(parts, ", ")
}

// finishedRerun is checkRerun's refusal of a job that finished (a bounded
// job, not drained) and whose sinks' streams hold what it stored (held,
// earlierOutput's): a new run reads its streams from the start and would
// store that output again, as a stopped or drained job's would (a trial
// ran the batch word count four times, and each word's total went 4, 8,
// 12, 16, while every summary said "6 records in"). where and hint say
// where weir job rm reaches the job (checkRerun's).
func finishedRerun(st control.JobStatus, held, where, hint string) error {
	return fmt.Errorf("job %s finished, and its sinks' streams hold the output it committed (%s): a new run reads its streams from the start and would repeat that output; "+
		"give the spec another name to run it again, or remove the finished job first to run it under this name all the same%s: weir job rm%s %s",
		st.Name, held, where, hint, shellQuote(st.Name))
}

// endedStart returns where weir job output reads JetStream sink s of the
// job st, which has ended, without -from-start or -last: from the first
// record the sink stored since the job's submit (its output: nothing new
// comes), and what the line that says so puts in brackets. A trial's
// weir job output of a finished job printed "from sequence 47 (new
// records)", then "0 records shown".
func endedStart(ctx context.Context, js jetstream.JetStream, st control.JobStatus, s jobspec.Sink, last uint64) (uint64, string, error) {
	seq, n, err := firstSince(ctx, js, s, st.Submitted)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return 0, "", fmt.Errorf("job %s: sink %s: stream %s does not exist (deleted?): there is no output to show", st.Name, s.Name, s.Stream)
	}
	if err != nil {
		return 0, "", fmt.Errorf("job %s: sink %s: stream %s: %w", st.Name, s.Name, s.Stream, err)
	}
	if n == 0 {
		return last + 1, fmt.Sprintf("job %s stored nothing on %s since its submit; -from-start shows all the stream holds", st.Name, sinkSubjects(s)), nil
	}
	return seq, fmt.Sprintf("what job %s stored on %s since its submit: %s; -from-start shows all the stream holds",
		st.Name, sinkSubjects(s), plural(n, "record")), nil
}
