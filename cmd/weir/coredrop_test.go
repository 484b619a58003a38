package main

import (
	"bytes"
	"errors"
	"regexp"
	"strings"
	"testing"

	"github.com/weirhq/weir/coordinator/control"
)

// weir job status shows a core source's backlog — what its subscription
// buffers, in messages and bytes, against its limit — where UNREAD read
// "-", and a line for the messages it dropped: the source and the task,
// the count, why, and what to do. A trial's job lost 42 999 messages
// while its status showed nothing amiss.
func TestJobStatusShowsACoreSourcesDrops(t *testing.T) {
	pending := func(n int64) *int64 { return &n }
	var b bytes.Buffer
	printTasks(&b, []control.TaskStatus{
		{Task: "in-0", Stats: control.TaskStats{RecordsIn: 107001, SourcePending: pending(61000), CoreSubscription: &control.CoreSubscription{
			Dropped: 42999, PendingBytes: 63 << 20, LimitMessages: 500000, LimitBytes: 64 << 20}}},
		{Task: "calm-0", Stats: control.TaskStats{SourcePending: pending(0), CoreSubscription: &control.CoreSubscription{
			LimitMessages: 500000, LimitBytes: 64 << 20}}},
		{Task: "spin-0", Busy: 0.99},
	})
	got := b.String()
	rows := strings.Split(got, "\n")
	for i, want := range []string{
		`^in-0 .* 107001 .* 61000 \(63\.0 MiB buffered, limit 64\.0 MiB\)$`,
		`^calm-0 .* 0$`,
	} {
		if !regexp.MustCompile(want).MatchString(rows[i+1]) {
			t.Errorf("job status tasks:\n%s\nrow %d does not match %s", got, i+1, want)
		}
	}
	want := "dropped: source in (task in-0) lost 42999 messages in this attempt: the job fell behind its input, and core NATS, " +
		"which has no flow control, dropped what came past the source's pending limit (500000 messages or 64.0 MiB); to keep up, " +
		"raise the parallelism of the slow operator (the bottleneck) or make it faster; pending-messages and pending-bytes raise " +
		"the limit (the worker's memory) for bursts; a JetStream source (kind: jetstream) loses nothing\n"
	if strings.Count(got, "dropped:") != 1 || !strings.HasSuffix(got, want) {
		t.Errorf("job status tasks:\n%s\nwant it to end with\n%s", got, want)
	}
}

// weir run says a core source's drops as they first come, then each time
// their count doubled — not on every poll — and again from the first in
// a new attempt, whose count starts from 0.
func TestRunSaysACoreSourcesDrops(t *testing.T) {
	status := func(attempt int, dropped int64) control.JobStatus {
		return control.JobStatus{Name: "j", State: control.JobRunning, Attempt: attempt, Tasks: []control.TaskStatus{
			{Task: "in-0", Stats: control.TaskStats{CoreSubscription: &control.CoreSubscription{Dropped: dropped, LimitMessages: 1000, LimitBytes: 64 << 20}}}}}
	}
	var notes statusNotes
	var said []string
	for _, st := range []control.JobStatus{status(1, 0), status(1, 100), status(1, 150), status(1, 199), status(1, 200), status(1, 399), status(2, 10)} {
		if s := notes.news(st); s != "" {
			said = append(said, regexp.MustCompile(`lost \d+`).FindString(s))
		}
	}
	if got := strings.Join(said, ", "); got != "lost 100, lost 200, lost 10" {
		t.Errorf("weir run said %s; want lost 100, lost 200, lost 10", got)
	}
}

// weir job cancel and stop say what a core source's subscription held:
// they discard it. A trial's cancel discarded some 350 000 messages
// without a word.
func TestCancelSaysWhatACoreSourceHeld(t *testing.T) {
	pending := func(n int64) *int64 { return &n }
	st := control.JobStatus{Name: "j", State: control.JobRunning, Tasks: []control.TaskStatus{
		{Task: "in-0", Stats: control.TaskStats{SourcePending: pending(350000), CoreSubscription: &control.CoreSubscription{PendingBytes: 60 << 20}}},
		{Task: "in-1", Stats: control.TaskStats{SourcePending: pending(0), CoreSubscription: &control.CoreSubscription{}}},
		{Task: "orders-0", Stats: control.TaskStats{SourcePending: pending(12)}}, // a stream keeps them
	}}
	var b bytes.Buffer
	printDiscarded(&b, st, nil)
	want := "source in (task in-0): the messages its subscription held, 350000 at its latest report, are discarded (core NATS cannot deliver them again)\n"
	if b.String() != want {
		t.Errorf("printed %q, want %q", b.String(), want)
	}
	b.Reset()
	printDiscarded(&b, st, errors.New("no status"))
	if b.Len() > 0 {
		t.Errorf("printed %q without the job's status", b.String())
	}
}
