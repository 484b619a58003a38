package job

import (
	"context"
	"errors"
	"log/slog"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/weirhq/weir/coordinator/control"
	"github.com/weirhq/weir/coordinator/jobspec"
)

// A spec from the raw job API (JSON, no jobspec.Parse) whose sources or
// sinks reach weir's or NATS's own subjects or streams is refused at
// submit and at restore, in one line naming the field and what it
// overlaps — the attacks an adversarial tenant's trial ran from specs
// alone — and leaves the running job as it was. The cancel of that job
// is logged with the requester's reply subject.
func TestSubmitRefusesReservedSubjects(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var logs lockedLog
	e := setupWith(t, ctx, Options{Log: slog.New(slog.NewTextHandler(&logs, nil))})
	e.fleet.start(ctx, "w1")
	e.waitWorkers(1)
	e.submitRunning(t, ctx, spec(t, "victim", ""))

	natsSink := func(subj string) func(s *jobspec.Spec) {
		return func(s *jobspec.Spec) {
			s.Sinks[0].Kind, s.Sinks[0].Stream, s.Sinks[0].Subject, s.Sinks[0].Guarantee = jobspec.KindNATS, "", subj, jobspec.AtMostOnce
		}
	}
	natsSource := func(subj string) func(s *jobspec.Spec) {
		return func(s *jobspec.Spec) {
			s.Sources[0].Kind, s.Sources[0].Stream, s.Sources[0].Filter, s.Sources[0].Subject = jobspec.KindNATS, "", "", subj
		}
	}
	for _, tc := range []struct {
		name, want string
		edit       func(s *jobspec.Spec)
	}{
		{"cancel other jobs", `sinks[0].subject: sink "out" publishes to "weir.ctl.api.cancel", which overlaps weir.ctl.>`, natsSink("weir.ctl.api.cancel")},
		{"delete streams", `which overlaps $JS.>`, natsSink("$JS.API.STREAM.DELETE.{key}")},
		{"overwrite job records", `sinks[0].stream: sink "out" writes to stream KV_weir_jobs, one of weir's own`, func(s *jobspec.Spec) {
			s.Sinks[0].Stream, s.Sinks[0].Subject = "KV_weir_jobs", "$KV.weir_jobs.{key}"
		}},
		{"read deploys", `sources[0].subject: source "in" reads "weir.ctl.>", which overlaps weir.ctl.>`, natsSource("weir.ctl.>")},
		{"read job records", `sources[0].stream: source "in" reads stream KV_weir_jobs`, func(s *jobspec.Spec) { s.Sources[0].Stream = "KV_weir_jobs" }},
		{"read checkpoint state", `source "in" reads stream OBJ_weir_state`, func(s *jobspec.Spec) { s.Sources[0].Stream = "OBJ_weir_state" }},
		{"read everything", `source "in" reads ">", which overlaps weir.ctl.>`, natsSource(">")},
	} {
		s := spec(t, "tenant", "")
		tc.edit(s)
		st, err := e.api.Submit(ctx, control.SubmitRequest{Spec: s})
		if !errors.Is(err, control.ErrInvalid) || !strings.Contains(err.Error(), tc.want) || strings.Count(err.Error(), "\n") > 1 {
			t.Errorf("%s: Submit = %s, %v; want ErrInvalid saying %q", tc.name, st.State, err, tc.want)
		}
		s.Name = "victim"
		if _, err := e.api.Restore(ctx, control.RestoreRequest{Job: "victim", From: "1", Spec: s}); !errors.Is(err, control.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Restore = %v; want ErrInvalid saying %q", tc.name, err, tc.want)
		}
	}
	jobs, err := e.api.Jobs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(jobs) != 1 || jobs[0].Name != "victim" || jobs[0].State != control.JobRunning {
		t.Errorf("jobs = %+v, want only victim, running", jobs)
	}

	if _, err := e.api.CancelJob(ctx, "victim"); err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`msg="cancel requested" job=victim reply=_INBOX\.\S+`).MatchString(logs.String()) {
		t.Errorf("the cancel is not logged with its reply subject:\n%s", logs.String())
	}
}

// Under another control prefix the coordinator refuses that prefix too;
// with AllowSystemSubjects (weir up -allow-system-subjects) it takes what
// it would refuse.
func TestSubmitReservedOptions(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	e := setupWith(t, ctx, Options{Prefix: "acme.ctl"})
	api := control.NewAPIClient(e.mgr.opts.NC, "acme.ctl")
	s := spec(t, "tenant", "")
	s.Sinks[0].Kind, s.Sinks[0].Stream, s.Sinks[0].Subject, s.Sinks[0].Guarantee = jobspec.KindNATS, "", "acme.ctl.api.cancel", jobspec.AtMostOnce
	if _, err := api.Submit(ctx, control.SubmitRequest{Spec: s}); !errors.Is(err, control.ErrInvalid) || !strings.Contains(err.Error(), "overlaps acme.ctl.>") {
		t.Errorf("Submit under prefix acme.ctl = %v; want ErrInvalid, overlaps acme.ctl.>", err)
	}

	e = setupWith(t, ctx, Options{AllowSystemSubjects: true})
	s = spec(t, "admin", "")
	s.Sources[0].Kind, s.Sources[0].Stream, s.Sources[0].Subject = jobspec.KindNATS, "", "$SYS.>"
	if _, err := e.api.Submit(ctx, control.SubmitRequest{Spec: s}); err != nil {
		t.Errorf("Submit with AllowSystemSubjects: %v", err)
	}
}
