package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirhq/weir/coordinator/control"
	"github.com/weirhq/weir/coordinator/jobspec"
)

// jobStreams returns the JetStream streams job st reads (its sources) or
// writes (its sinks), each with what the job does with it: "reads it
// (source lines)", "writes it (sink counts)".
func jobStreams(st control.JobStatus) map[string][]string {
	out := map[string][]string{}
	for _, s := range st.Sources {
		if s.Kind == jobspec.KindJetStream && s.Stream != "" {
			out[s.Stream] = append(out[s.Stream], "reads it (source "+s.Name+")")
		}
	}
	for _, s := range st.Sinks {
		if s.Kind == jobspec.KindJetStream && s.Stream != "" {
			out[s.Stream] = append(out[s.Stream], "writes it (sink "+s.Name+")")
		}
	}
	return out
}

// streamUsers returns, for each of streams, what the jobs jobs list do
// with it: "job wc (running) writes it (sink counts)". ended says
// whether to count the jobs that have ended (else only the others).
func streamUsers(jobs []control.JobStatus, streams []string, ended bool) map[string][]string {
	out := map[string][]string{}
	for _, j := range jobs {
		if j.State.Terminal() != ended {
			continue
		}
		uses := jobStreams(j)
		for _, s := range streams {
			for _, u := range uses[s] {
				out[s] = append(out[s], fmt.Sprintf("job %s (%s) %s", j.Name, j.State, u))
			}
		}
	}
	return out
}

// leftLine returns the line weir job rm prints of what the removal of
// job st leaves — the JetStream streams it read or wrote that are still
// there, and the registry's versions of the modules it ran — with the
// command that removes each, for those no other job uses ("" when it
// leaves nothing). jobs are the jobs left.
func leftLine(ctx context.Context, nc *nats.Conn, st control.JobStatus, jobs []control.JobStatus, hint string) string {
	others := slices.DeleteFunc(slices.Clone(jobs), func(j control.JobStatus) bool { return j.Name == st.Name })
	var parts []string
	if streams := slices.Sorted(maps.Keys(jobStreams(st))); len(streams) > 0 {
		if js, err := jetstream.New(nc); err == nil {
			streams = slices.DeleteFunc(streams, func(s string) bool {
				_, err := js.Stream(ctx, s)
				return errors.Is(err, jetstream.ErrStreamNotFound)
			})
		}
		users := map[string][]string{}
		for s, us := range streamUsers(others, streams, false) {
			users[s] = us
		}
		for s, us := range streamUsers(others, streams, true) {
			users[s] = append(users[s], us...)
		}
		if p := leftPart("stream", streams, func(s string) string { return jobNames(users[s]) }, "weir stream rm"+hint+" %s"); p != "" {
			parts = append(parts, p)
		}
	}
	if len(st.Modules) > 0 {
		// The registry's versions of the modules it ran (by digest), and
		// the other jobs that run each.
		var all []registryModule
		if reg, err := openRegistry(ctx, nc, ""); err == nil {
			if ms, err := reg.List(ctx); err == nil {
				for _, m := range ms {
					all = append(all, registryModule{m.Ref(), m.Digest})
				}
			}
		}
		ran := map[string]bool{}
		for _, m := range st.Modules {
			ran[m.Digest] = true
		}
		var mods []string
		used := map[string][]string{}
		for _, m := range all {
			if !ran[m.digest] {
				continue
			}
			mods = append(mods, m.ref)
			for _, j := range others {
				for _, jm := range j.Modules {
					if jm.Digest == m.digest && !slices.Contains(used[m.ref], "job "+j.Name) {
						used[m.ref] = append(used[m.ref], "job "+j.Name)
					}
				}
			}
		}
		slices.Sort(mods)
		if p := leftPart("module", slices.Compact(mods), func(r string) string { return strings.Join(used[r], ", ") }, "weir module rm"+hint+" %s"); p != "" {
			parts = append(parts, p)
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return fmt.Sprintf("left: %s", strings.Join(parts, "; "))
}

// registryModule is a version in the registry: its reference (NAME@V)
// and digest.
type registryModule struct{ ref, digest string }

// leftPart says what of kind is left ("streams LINES, COUNTS (job b's
// too): weir stream rm LINES"): each name, with the jobs that still use
// it, and the one command (cmd, %s the names) that removes the others.
func leftPart(kind string, names []string, usedBy func(string) string, cmd string) string {
	if len(names) == 0 {
		return ""
	}
	var said, free []string
	for _, n := range names {
		if u := usedBy(n); u != "" {
			verb := "uses" // "job b uses it too"; "job b, job c use it too"
			if strings.Contains(u, ", ") {
				verb = "use"
			}
			said = append(said, n+" ("+u+" "+verb+" it too)")
			continue
		}
		said = append(said, n)
		free = append(free, n)
	}
	if len(names) > 1 {
		kind += "s"
	}
	out := kind + " " + strings.Join(said, ", ")
	if len(free) > 0 {
		out += ": " + fmt.Sprintf(cmd, strings.Join(free, " "))
	}
	return out
}

// jobNames returns the names of the jobs uses name ("job wc (running)
// writes it …"), once each, joined: "job wc, job other".
func jobNames(uses []string) string {
	var names []string
	for _, u := range uses {
		f := strings.Fields(u)
		if len(f) >= 2 && !slices.Contains(names, "job "+f[1]) {
			names = append(names, "job "+f[1])
		}
	}
	return strings.Join(names, ", ")
}
