package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirhq/weir/abi"
	"github.com/weirhq/weir/coordinator/control"
	"github.com/weirhq/weir/coordinator/jobspec"
	"github.com/weirhq/weir/host/wasm"
	"github.com/weirhq/weir/transport/natsconn"
)

func init() {
	register(command{Name: "job", Summary: "list, follow the output of, stop, cancel, savepoint, restore or remove jobs", Run: runJob})
	register(command{Name: "checkpoint", Summary: "list or remove a job's checkpoints and savepoints", Run: runCheckpoint})
}

// jobSubcommand is one of weir job's subcommands.
type jobSubcommand struct {
	name     string
	synopsis string // what follows "weir job NAME" on its usage line
	help     string // what it does: lines as its usage prints them
	note     string // a paragraph its own help adds, "" for none
	args     int    // how many arguments it takes: the job, or none
}

// jobSubcommands are weir job's subcommands, in the order its help lists
// them. Each takes the connection flags and -wait, and its own flags
// (jobFlags.flagSet): none takes another's.
var jobSubcommands = []jobSubcommand{
	{name: "ls", synopsis: "[-json]", help: "every job with its state", note: attemptsNote},
	{name: "status", synopsis: "JOB [-json]", args: 1, note: attemptsNote, help: `one job: state, guarantees, checkpoints completed and
failed (while they fail: how many in a row and why),
and each running task's records in/out, rates,
busy and backpressured time; a JetStream source's
UNREAD: the messages of its input the source task
has not processed yet — what its stream holds past
what the task handed on to the job's channels,
records it fetched and holds included (not those in
the channels after it, which their credit bounds),
with how fast that changes; of an operator or sink
task, the records its input channels hold (N queued);
the bottleneck: a task busy most of the time (or an
exactly-once sink waiting on its commits); the
failures it keeps, newest first, each with its
attempt and KIND (trap, memory-limit, deploy, ...:
docs/OPERATIONS.md)`},
	{name: "output", synopsis: "JOB [-sink NAME] [-from-start | -last N] [-for D] [-show N]", args: 1, help: `follow what the job's sinks output (every sink, or
-sink's), each record as weir run prints it, on
stdout ("[SINK] " before each line when there are
several sinks); a JetStream sink's output is what its
stream stores, from new records on (-from-start: all
it holds; -last N: its last N; of a job that has
ended: what it stored since its submit); a core NATS sink's is
what it publishes while followed, no history. Stops
at Ctrl-C, -for, -show N (after N records; -1, the
default: no limit; 0 is refused: in weir run it prints
none), or once the job has ended and
all its streams held then is shown ("job JOB finished;
N records shown", on stderr; of a stopped job: "job JOB
stopped with savepoint ID; ...")`},
	{name: "stop", synopsis: "[-drain] JOB", args: 1, note: endedNote, help: `stop a job with a savepoint: nothing after it is
processed, so restoring it repeats no output;
-drain ends its input instead (Flink's stop --drain):
every source stops where it has read to, the
operators emit their end-of-input output (the last
windows, totals), the sinks commit it all with a
final savepoint, exactly once, and the job ends
finished, as a bounded job does; more input then
needs a new job`},
	{name: "cancel", synopsis: "JOB", args: 1, note: endedNote, help: "stop a job at once (restore it from its latest checkpoint)"},
	{name: "savepoint", synopsis: "JOB", args: 1, note: endedNote, help: "take an aligned savepoint now; the job runs on"},
	{name: "restore", synopsis: "JOB -from ID|latest [-spec F [-create-streams]] [-allow-non-restored-state] [-allow-renumbered-ports]", args: 1,
		help: `restart a stopped job from checkpoint (or
savepoint) ID, or the latest completed one
(-from latest, which it names); with
-spec also at other parallelisms, from an
unaligned checkpoint too (its in-flight records go
to the new subtasks that take them now). Refused, saying
why: a spec that drops state, points a source at another
stream or partitioning, keys an input whose keyed state
is spread over subtasks, or leads an operator's output
ports to other readers (give inputs port: N)`},
	{name: "rm", synopsis: "JOB", args: 1, help: `remove a job that has ended (stop or cancel it first)
with every checkpoint and savepoint of it still
stored: it is listed no more; nothing restores it.
Refused while another job restores one of them on a
failover (it started from it). A job submitted again
under the name numbers its attempts and checkpoints
on past the removed one's. It says what it leaves: the
streams the job read or wrote and the registry's versions
of its modules, each with the command that removes it
(weir stream rm, weir module rm) unless another job uses
it`},
}

const (
	attemptsNote = `ATTEMPT numbers the job's deployments, across its runs; RESTARTS counts only the
restarts after failures, which restart.attempts bounds: an attempt that placed the
job again after a worker was lost (or refused its tasks) while deploying, or that
resumed it after a coordinator restart, is none — weir job status says how the
attempts came about when they are more than the restarts explain`
	endedNote = `stop, cancel and savepoint of a job that has ended (finished, failed, or canceled,
as a stopped job is) say when it ended and that there is nothing to do, and exit 1`
)

// jobSubcommandNamed returns weir job's subcommand name.
func jobSubcommandNamed(name string) (jobSubcommand, bool) {
	for _, c := range jobSubcommands {
		if c.name == name {
			return c, true
		}
	}
	return jobSubcommand{}, false
}

// usageLine is c's usage, from "weir job" on.
func (c jobSubcommand) usageLine() string {
	return strings.TrimSpace("weir job " + c.name + " " + c.synopsis)
}

// indent returns text with each line prefixed by prefix.
func indent(text, prefix string) string {
	return prefix + strings.ReplaceAll(text, "\n", "\n"+prefix)
}

// jobUsage is weir job's usage: every subcommand, as weir job -h says it.
func jobUsage() string {
	const column = 44 // where the subcommands' help starts
	var b strings.Builder
	names := make([]string, len(jobSubcommands))
	for i, c := range jobSubcommands {
		names[i] = c.name
	}
	fmt.Fprintf(&b, "%s [flags] [JOB]\n\n", strings.Join(names, "|"))
	for _, c := range jobSubcommands {
		help := indent(c.help, strings.Repeat(" ", column))
		if line := "  " + c.usageLine(); len(line) < column-1 {
			help = line + help[len(line):]
		} else {
			help = line + "\n" + help
		}
		b.WriteString(help + "\n")
	}
	fmt.Fprintf(&b, "\n%s\n\n%s\n\n", indent(attemptsNote, "  "), indent(endedNote, "  "))
	b.WriteString("  each subcommand takes its own flags ('weir job SUBCOMMAND -h' lists them) and these:")
	return b.String()
}

// jobFlags holds the flags of weir job's subcommands.
type jobFlags struct {
	nats             natsFlags
	from, spec       string
	allowNonRestored bool
	allowRenumbered  bool // restore -allow-renumbered-ports
	createStreams    bool // restore -create-streams
	drain            bool // stop -drain
	replicas         int  // restore -replicas
	replicasSet      bool // restore -replicas was given
	json             bool // ls, status -json
	output           jobOutputOptions
}

// flagSet returns the flags of weir job's subcommand sub ("": those every
// subcommand takes), which parse into f. It prints nothing: runJob says
// what is wrong with the flags, on one line, and prints -h's help.
func (f *jobFlags) flagSet(sub string) *flag.FlagSet {
	fs := flag.NewFlagSet(strings.TrimSpace("weir job "+sub), flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	f.nats.register(fs, defaultNATS, "NATS server URL")
	f.nats.registerWait(fs)
	switch sub {
	case "ls", "status":
		fs.BoolVar(&f.json, "json", false, "print the status as JSON (control.JobStatus; ls: an array of them) instead of the table")
	case "output":
		fs.StringVar(&f.output.sink, "sink", "", "follow only this sink (default: every sink of the job)")
		fs.BoolVar(&f.output.fromStart, "from-start", false, "all a JetStream sink's stream holds, not only new records")
		fs.IntVar(&f.output.last, "last", 0, "the last N records a JetStream sink's stream holds, then new ones")
		fs.DurationVar(&f.output.forDur, "for", 0, "stop after this long (0: until the job ends or Ctrl-C)")
		fs.IntVar(&f.output.show, "show", -1, "stop after this many records (-1: no limit; 0, which in weir run prints none, is refused: it would show nothing)")
		fs.BoolVar(&f.output.untilNow, "until-now", false, "with -from-start or -last N: stop once every record the sinks' streams held when it started is shown (a dump of what is there, which a running job's output does not cut short)")
	case "stop":
		fs.BoolVar(&f.drain, "drain", false, "end the job's input where its sources have read to, let the operators emit their end-of-input output, commit it all with a final savepoint and end finished")
	case "restore":
		fs.StringVar(&f.from, "from", "", "checkpoint ID (or JOB/ID) to restore from, or latest: the job's latest completed checkpoint or savepoint")
		fs.StringVar(&f.spec, "spec", "", "a new spec of the job (its name is JOB) to run instead of the last one")
		fs.BoolVar(&f.allowNonRestored, "allow-non-restored-state", false, "drop the state of operators the new spec no longer has, and start without their state the sources and operators whose state the new spec changes the meaning of (a source on another stream reads it from its start)")
		fs.BoolVar(&f.allowRenumbered, "allow-renumbered-ports", false, "let an operator's output ports lead to other readers than when the checkpoint was taken (its new build emits to the new ports)")
		fs.BoolVar(&f.createStreams, "create-streams", false, "with -spec: create the JetStream streams the spec names that do not exist (a sink moved to a new stream)")
		fs.IntVar(&f.replicas, "replicas", 1, "servers of a cluster that keep each stream -create-streams makes, 1-5; not given: as many as the coordinator keeps its job records with (weir up -replicas), at most the cluster's servers")
	}
	return fs
}

// printFlagsUsage prints usage, a blank line and the flags of fs to w.
func printFlagsUsage(w io.Writer, fs *flag.FlagSet, usage string) {
	fmt.Fprintf(w, "usage: %s\n\n", usage)
	fs.SetOutput(w)
	fs.PrintDefaults()
	fs.SetOutput(io.Discard)
}

// parseJobArgs parses weir job's arguments: the subcommand, its flags and
// its arguments. Flags every subcommand takes may come before the
// subcommand too; a flag the subcommand does not take is refused, naming
// it and the subcommand. -h prints the help of weir job, or of the
// subcommand, and returns flag.ErrHelp.
func parseJobArgs(std Stdio, args []string, f *jobFlags) (jobSubcommand, []string, error) {
	common := f.flagSet("")
	if err := common.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			printFlagsUsage(std.Err, common, "weir job "+jobUsage())
			return jobSubcommand{}, nil, err
		}
		if name, ok := undefinedFlag(err); ok {
			if subs := jobSubcommandsTaking(name); len(subs) > 0 {
				return jobSubcommand{}, nil, usagef("job: -%s is a flag of job %s: give it after the subcommand (weir job %s ... -%s ...)",
					name, strings.Join(subs, ", job "), subs[0], name)
			}
			return jobSubcommand{}, nil, usagef("job: no flag -%s (run 'weir job -h' for the subcommands, 'weir job SUBCOMMAND -h' for their flags)", name)
		}
		return jobSubcommand{}, nil, usagef("job: %v", err)
	}
	if common.NArg() == 0 {
		printFlagsUsage(std.Err, common, "weir job "+jobUsage())
		return jobSubcommand{}, nil, usagef("job: missing subcommand")
	}
	c, ok := jobSubcommandNamed(common.Arg(0))
	if !ok {
		names := make([]string, len(jobSubcommands))
		for i, c := range jobSubcommands {
			names[i] = c.name
		}
		return jobSubcommand{}, nil, usagef("job: unknown subcommand %q (%s%s or %s)", common.Arg(0),
			didYouMean(common.Arg(0), names), strings.Join(names[:len(names)-1], ", "), names[len(names)-1])
	}
	// The flags given before the subcommand are set again in its flag
	// set, whose registering set them back to their defaults.
	before := map[string]string{}
	common.Visit(func(fl *flag.Flag) { before[fl.Name] = fl.Value.String() })
	fs := f.flagSet(c.name)
	for name, value := range before {
		if err := fs.Set(name, value); err != nil {
			return c, nil, usagef("job %s: -%s: %v", c.name, name, err)
		}
	}
	pos, err := positional(fs, common.Args()[1:], func(a []string) error { return fs.Parse(a) })
	f.replicasSet = flagGiven(fs, "replicas")
	switch {
	case errors.Is(err, flag.ErrHelp):
		usage := c.usageLine() + " [connection flags] [-wait D]\n\n" + indent(c.help, "  ")
		if c.note != "" {
			usage += "\n\n" + indent(c.note, "  ")
		}
		printFlagsUsage(std.Err, fs, usage)
		return c, nil, err
	case err != nil:
		name, ok := undefinedFlag(err)
		if !ok {
			return c, nil, usagef("job %s: %v", c.name, err)
		}
		if subs := jobSubcommandsTaking(name); len(subs) > 0 {
			return c, nil, usagef("job %s: -%s is a flag of job %s, not of job %s (run 'weir job %s -h' for its flags)",
				c.name, name, strings.Join(subs, ", job "), c.name, c.name)
		}
		return c, nil, usagef("job %s: no flag -%s (run 'weir job %s -h' for its flags)", c.name, name, c.name)
	case c.name == "restore" && len(pos) == 2:
		// weir job restore JOB 494: the checkpoint goes after -from.
		return c, nil, usagef("job restore: want 'weir job restore JOB -from ID': did you mean -from %s? (weir job restore %s -from %s)", pos[1], pos[0], pos[1])
	case len(pos) == 0 && c.args > 0 && strings.Contains(c.usageLine(), " JOB"):
		return c, nil, usagef("job %s: which job? %s (weir job ls lists the jobs)", c.name, c.usageLine())
	case len(pos) != c.args:
		return c, nil, usagef("job %s: want %d argument(s): %s", c.name, c.args, c.usageLine())
	}
	return c, pos, nil
}

// undefinedFlag returns the name of the flag that err, from parsing
// flags, says is not defined.
func undefinedFlag(err error) (string, bool) {
	name, ok := strings.CutPrefix(err.Error(), "flag provided but not defined: -")
	return strings.TrimPrefix(name, "-"), ok
}

// jobSubcommandsTaking names the subcommands of weir job that take the
// flag name.
func jobSubcommandsTaking(name string) []string {
	var subs []string
	for _, c := range jobSubcommands {
		if new(jobFlags).flagSet(c.name).Lookup(name) != nil {
			subs = append(subs, c.name)
		}
	}
	return subs
}

// savepointWait is how long weir job savepoint and stop wait for the
// coordinator: a savepoint may take up to the job's checkpoint timeout
// (default 60 s), longer than other requests (-wait).
const savepointWait = 3 * time.Minute

// connectNATS connects to NATS with the shared connection flags, as the
// client name; a command does not wait for a server that is down. Its
// error names the server with its password or token hidden. One
// that does not answer (a frozen process) is waited for up to the connect
// timeout, before the next server listed: after noticeAfter, w is told.
// extra options go after weir's (nats.MaxReconnects(-1): a command that
// follows, and waits out a server restart).
func connectNATS(nf *natsFlags, name string, w io.Writer, extra ...nats.Option) (*nats.Conn, error) {
	o := nf.options(name)
	if o == nil {
		return nil, usagef("-nats: no NATS server URL")
	}
	stop := natsNotice(nf, w)
	nc, err := natsconn.Connect(*o, append([]nats.Option{nats.MaxReconnects(0)}, extra...)...)
	stop()
	if err != nil {
		return nil, unreachableNATS(nf, err)
	}
	return nc, nil
}

// unreachableNATS is err, a failed connect to nf's server, with what to
// check when no server answered there: whether weir up runs.
func unreachableNATS(nf *natsFlags, err error) error {
	if _, greeting := errors.AsType[*natsconn.GreetingError](err); greeting || !natsconn.Unreachable(err) {
		// Refused (authentication, TLS, a bad URL or file), or a
		// port that did not greet as NATS does: err says so and
		// names the server; asking whether weir up runs would send
		// the user looking in the wrong place.
		return err
	}
	if nf.url == defaultNATS {
		return fmt.Errorf("cannot reach NATS at %s (is 'weir up' running? one on another port: -nats URL, or $%s): %w", natsconn.Redact(nf.url), natsEnv, err)
	}
	return fmt.Errorf("cannot reach NATS at %s (is 'weir up' running?): %w", natsconn.Redact(nf.url), err)
}

// natsNotice tells w, once noticeAfter has passed without stop being
// called, that a command waits for the NATS server of nf to answer, and
// how long at most: each server listed is given the connect timeout,
// then asked what it is (natsconn.Options.MaxConnectWait).
func natsNotice(nf *natsFlags, w io.Writer) (stop func()) {
	o := natsconn.Options{URL: nf.url} // the connect timeout of nf.options: the default
	return notice(w, fmt.Sprintf("weir: waiting for NATS at %s to answer (a server that does not is left after %s, for the next one listed; weir gives up within %s)",
		natsconn.Redact(nf.url), natsconn.DefaultConnectTimeout, o.MaxConnectWait()))
}

// connectAPI connects to NATS and returns a job API client, which tells w
// what it waits for once the coordinator has not answered a request for a
// second (but a savepoint's or a stop's, whose command said so already).
func connectAPI(nf *natsFlags, w io.Writer, extra ...nats.Option) (*nats.Conn, *control.APIClient, error) {
	nc, err := connectNATS(nf, "weir cli", w, extra...)
	if err != nil {
		return nil, nil, err
	}
	c := control.NewAPIClient(nc, "")
	c.Timeout = nf.waitTimeout()
	c.Waiting = func(op string, wait time.Duration) { sayAPIWait(w, op, wait) }
	return nc, c, nil
}

// sayAPIWait tells w that a command waits for the coordinator to answer
// the job API request op (one of apiWaits; others are not said), for up
// to wait.
func sayAPIWait(w io.Writer, op string, wait time.Duration) {
	if what, ok := apiWaits[op]; ok {
		fmt.Fprintf(w, "weir: waiting for the coordinator to answer %s (for up to %s)\n", what, wait.Round(time.Second))
	}
}

// apiWaits names the job API's requests a command waits for, as weir
// tells the user (connectAPI).
var apiWaits = map[string]string{
	control.APISubmit:      "the submit",
	control.APIJobs:        "job ls",
	control.APIJob:         "the job's status",
	control.APICancel:      "job cancel",
	control.APIRestore:     "job restore",
	control.APICheckpoints: "the job's checkpoints",
	control.APIRemove:      "checkpoint rm",
	control.APIRemoveJob:   "job rm",
	control.APIWorkers:     "worker ls",
}

// noticeAfter is how long a command waits for NATS or the coordinator
// before it says what it waits for.
const noticeAfter = time.Second

// notice writes line to w once noticeAfter has passed, unless stop was
// called before; stop waits for a write under way.
func notice(w io.Writer, line string) (stop func()) {
	var (
		mu      sync.Mutex
		stopped bool
	)
	t := time.AfterFunc(noticeAfter, func() {
		mu.Lock()
		defer mu.Unlock()
		if !stopped {
			fmt.Fprintln(w, line)
		}
	})
	return func() {
		t.Stop()
		mu.Lock()
		stopped = true
		mu.Unlock()
	}
}

// apiErr returns err of the job API request what ("job status"). The
// coordinator's answer names what failed itself ("no job \"wc\"", "stop
// wc: the job is failed, not running"): only other errors (no answer, ...)
// get what in front, and no answer at all the hint that no coordinator
// runs.
func apiErr(what string, err error) error {
	if re := (*control.RemoteError)(nil); errors.As(err, &re) {
		return err
	}
	if errors.Is(err, control.ErrUnavailable) {
		// NATS is up (the connection worked), the coordinator is not.
		return fmt.Errorf("%s: no coordinator answers (is 'weir up' running on this NATS?): %w", what, err)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// positional parses flags that may come before or after positional
// arguments and returns the positionals.
func positional(fs interface {
	Parse([]string) error
	Args() []string
}, args []string, parse func([]string) error) ([]string, error) {
	var pos []string
	rest := args
	for {
		if err := parse(rest); err != nil {
			return nil, err
		}
		rest = fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		pos = append(pos, rest[0])
		rest = rest[1:]
	}
}

func runJob(ctx context.Context, std Stdio, args []string) error {
	var f jobFlags
	c, pos, err := parseJobArgs(std, args, &f)
	if err != nil {
		return err
	}
	nf := &f.nats
	job := ""
	if len(pos) > 0 {
		job = pos[0]
	}
	if c.name == "output" {
		if err := f.output.check(); err != nil {
			return err
		}
	}
	// A restore's own mistakes (no -from, a bad -spec) are said before
	// NATS is asked for, which could hide them behind a connection error.
	var restoreSpec *jobspec.Spec
	if c.name == "restore" {
		if f.from == "" {
			return usagef("job restore: -from is required: weir job restore %s -from ID (or -from latest)%s", job, latestHint(ctx, nf, job))
		}
		if f.createStreams && f.spec == "" {
			return usagef("job restore: -create-streams creates the streams of the spec -spec gives: give -spec")
		}
		if f.replicas < 1 || f.replicas > 5 {
			return usagef("job restore: -replicas %d: 1 to 5", f.replicas)
		}
		if f.spec != "" {
			if restoreSpec, err = jobspec.ParseFile(f.spec, jobspec.Options{CheckModule: checkModuleFile}); err != nil {
				return err
			}
			if err := (control.RestoreRequest{Job: job, From: f.from, Spec: restoreSpec}).CheckSpecName(); err != nil {
				return err
			}
		}
	}
	// A command answers and ends, and does not reconnect; weir job
	// output follows for as long as it is asked to, through a server
	// restart (weir up killed and started again) too.
	var extra []nats.Option
	if c.name == "output" {
		extra = append(extra, nats.MaxReconnects(-1))
	}
	nc, api, err := connectAPI(nf, std.Err, extra...)
	if err != nil {
		return err
	}
	defer nc.Close()
	// A cancel's or a stop's job as it was: what its core sources held,
	// which goes with it (printDiscarded). A nicety: not waited for long
	// while no coordinator answers, which the command itself says.
	var before control.JobStatus
	beforeErr := errors.New("not asked")
	jobBefore := func() {
		bctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		before, beforeErr = api.Job(bctx, job)
	}
	if c.name == "cancel" {
		jobBefore()
	}
	switch c.name {
	case "ls":
		jobs, err := api.Jobs(ctx)
		if err != nil {
			return apiErr("job ls", err)
		}
		if f.json {
			return printJSON(std.Out, jobs)
		}
		printJobs(std.Out, jobs, lsReasonWidth)
	case "status":
		st, err := api.Job(ctx, job)
		if err != nil {
			return apiErr("job status", err)
		}
		if f.json {
			return printJSON(std.Out, st)
		}
		printJobs(std.Out, []control.JobStatus{st}, 0)
		if l := drainingLine(st); l != "" {
			fmt.Fprintln(std.Out, l)
		}
		printAttempts(std.Out, st)
		printInARow(std.Out, st, trapRemedy(nf.hint()))
		printSkipped(std.Out, st)
		printRestoring(std.Out, st)
		if len(st.Guarantees) > 0 {
			fmt.Fprintln(std.Out, "guarantees:")
			for _, g := range st.Guarantees {
				fmt.Fprintf(std.Out, "  %s\n", g)
			}
		}
		for _, w := range st.Warnings {
			fmt.Fprintf(std.Out, "warning: %s\n", w)
		}
		if len(st.Modules) > 0 {
			reg, _ := openRegistry(ctx, nc, "") // versions are a nicety: none without it
			fmt.Fprintln(std.Out, "modules:")
			for _, l := range moduleLines(ctx, reg, st.Modules) {
				fmt.Fprintf(std.Out, "  %s\n", l)
			}
		}
		printCheckpointStats(std.Out, st, nf.hint())
		if len(st.Tasks) > 0 {
			fmt.Fprintln(std.Out, "tasks:")
			printTasks(std.Out, st.Tasks)
			printBottleneck(std.Out, st.Tasks)
		}
		if len(st.Failures) > 0 {
			fmt.Fprintln(std.Out, "failures (newest first):")
			printFailures(std.Out, st.Failures)
		}
	case "output":
		return jobOutput(ctx, std, nc, api, job, f.output)
	case "stop":
		if f.drain {
			return drainJob(ctx, std, api, job)
		}
		jobBefore()
		progress(ctx, api, std.Err, job, "stopping %s with a savepoint …\n")
		api.Timeout = savepointWait
		cp, err := api.StopJob(ctx, job)
		if err != nil {
			return savepointAdvice(apiErr("job stop", err))
		}
		fmt.Fprintf(std.Out, "job %s stopped with savepoint %d (%s); restore it with: weir job restore%s %s -from %d\n",
			cp.Job, cp.ID, size(cp.Size), nf.hint(), shellQuote(cp.Job), cp.ID)
		printDiscarded(std.Out, before, beforeErr)
	case "cancel":
		st, err := api.CancelJob(ctx, job)
		if err != nil {
			return apiErr("job cancel", err)
		}
		printDiscarded(std.Out, before, beforeErr)
		switch {
		case st.State == control.JobCanceled && st.LatestCheckpoint > 0:
			fmt.Fprintf(std.Out, "job %s: %s; restore it from its latest checkpoint with: weir job restore%s %s -from %d\n",
				st.Name, st.State, nf.hint(), shellQuote(st.Name), st.LatestCheckpoint)
		case st.State == control.JobCanceled && st.StartedFrom != "":
			// Restored from another job's checkpoint, it completed none
			// of its own: that one is where it goes on.
			fmt.Fprintf(std.Out, "job %s: %s; restore it from the checkpoint it started from with: weir job restore%s %s -from %s\n",
				st.Name, st.State, nf.hint(), shellQuote(st.Name), shellQuote(st.StartedFrom))
		default:
			fmt.Fprintf(std.Out, "job %s: %s\n", st.Name, st.State)
		}
	case "rm":
		// What it read, wrote and ran, for the line that says what the
		// removal leaves (nothing said when the status does not come).
		before, beforeErr := api.Job(ctx, job)
		api.Timeout = removeWait
		rm, err := api.RemoveJob(ctx, job)
		if err != nil {
			return apiErr("job rm", err)
		}
		// What the job itself was to be restored from is no news: it is
		// gone with them. Other ended jobs' advice that named them is.
		for i := range rm.Checkpoints {
			rm.Checkpoints[i].Readvised = slices.DeleteFunc(rm.Checkpoints[i].Readvised, func(r control.Readvised) bool { return r.Job == job })
		}
		printRemoved(std.Out, job, rm, nf.hint())
		what := "nothing of it was stored"
		switch n := len(rm.Checkpoints); n {
		case 0:
		case 1:
			what = "with its 1 checkpoint"
		default:
			what = fmt.Sprintf("with its %d checkpoints", n)
		}
		fmt.Fprintf(std.Out, "removed job %s (%s); a job submitted under its name numbers its attempts and checkpoints on past it\n", job, what)
		if beforeErr == nil {
			jobs, err := api.Jobs(ctx)
			if err == nil {
				if line := leftLine(ctx, nc, before, jobs, nf.hint()); line != "" {
					fmt.Fprintln(std.Out, line)
				}
			}
		}
	case "savepoint":
		progress(ctx, api, std.Err, job, "taking a savepoint of %s …\n")
		api.Timeout = savepointWait
		cp, err := api.Savepoint(ctx, job)
		if err != nil {
			return savepointAdvice(apiErr("job savepoint", err))
		}
		fmt.Fprintf(std.Out, "savepoint %d of %s: %s in %s, %s\n", cp.ID, cp.Job, cp.Status, cp.Duration.Round(time.Millisecond), size(cp.Size))
	case "restore":
		what := "checkpoint " + f.from
		if f.from == "latest" {
			latest, err := latestCompleted(ctx, api, job)
			if err != nil {
				return err
			}
			what = checkpointKind(latest) + " " + strconv.FormatInt(latest.ID, 10)
			fmt.Fprintf(std.Err, "-from latest: %s, the latest completed checkpoint or savepoint of %s\n", what, job)
			f.from = strconv.FormatInt(latest.ID, 10)
		}
		req := control.RestoreRequest{Job: job, From: f.from, AllowNonRestoredState: f.allowNonRestored, AllowRenumberedPorts: f.allowRenumbered}
		if spec := restoreSpec; spec != nil {
			// What the coordinator would refuse (a job of the name that
			// has not ended, a checkpoint that is not there, state the
			// spec would drop) is refused before the build and the push,
			// which take seconds and store modules for a run that would
			// not start.
			if f.createStreams {
				js, err := jetstream.New(nc)
				if err != nil {
					return fmt.Errorf("job restore %s: %w", job, err)
				}
				replicas, note := f.replicas, ""
				if !f.replicasSet {
					replicas, note = defaultReplicas(coordinatorReplicas(ctx, js), clusterServers(nc))
				}
				missing := missingStreams(ctx, js, spec)
				if err := createStreams(ctx, std, js, spec, replicas); err != nil {
					return err
				}
				sayReplicas(std, missing, replicas, note, clusterServers(nc))
			}
			check := req
			check.Spec = spec
			if err := checkRestore(ctx, api, check); err != nil {
				if !f.createStreams && strings.Contains(err.Error(), "does not exist") && strings.Contains(err.Error(), ": stream ") {
					return fmt.Errorf("%w; -create-streams creates the streams the spec names that do not exist", err)
				}
				return err
			}
			// As with weir run, a module may be a Go package directory or
			// a source file, and local modules go to the registry, where
			// every worker finds them.
			builder := &moduleBuilder{std: std}
			defer builder.Close()
			built, err := builder.buildSpec(ctx, spec)
			if err != nil {
				return err
			}
			reg, err := openRegistry(ctx, nc, "")
			if err != nil {
				return err
			}
			if err := pushLocalModules(ctx, std.Out, reg, spec, built); err != nil {
				return err
			}
			if err := checkRegistryModules(ctx, std.Err, reg, spec, filepath.Dir(f.spec)); err != nil {
				return err
			}
			req.Spec = spec
		}
		before, berr := api.Job(ctx, job) // what it had committed, for olderNote
		st, err := api.Restore(ctx, req)
		if err != nil {
			return apiErr("job restore", err)
		}
		fmt.Fprintf(std.Out, "job %s: restoring from %s\n", st.Name, what)
		for _, w := range st.Warnings {
			if strings.HasPrefix(w, "restored from checkpoint ") {
				fmt.Fprintf(std.Out, "  %s\n", w) // what -allow-non-restored-state let go
			}
		}
		if len(st.Modules) > 0 {
			// Which build each operator runs: without -spec the ended
			// run's, with it what the spec's references name now.
			what := "with the modules its last run ran (-spec runs others)"
			if restoreSpec != nil {
				what = "with the modules of " + f.spec
			}
			reg, _ := openRegistry(ctx, nc, "")
			fmt.Fprintf(std.Out, "  %s: %s\n", what, strings.Join(moduleLines(ctx, reg, st.Modules), ", "))
		}
		if berr == nil {
			if note := olderNote(before, f.from); note != "" {
				fmt.Fprintln(std.Out, note)
			}
		}
	}
	return nil
}

// latestCompleted returns job's latest completed checkpoint or savepoint
// (of this run or an earlier one still stored): what weir job restore
// -from latest restores.
func latestCompleted(ctx context.Context, api *control.APIClient, job string) (control.CheckpointInfo, error) {
	cps, err := api.Checkpoints(ctx, job)
	if err != nil {
		return control.CheckpointInfo{}, apiErr("job restore", err)
	}
	var latest control.CheckpointInfo
	for _, c := range cps {
		if c.Status == control.CheckpointCompleted && c.ID > latest.ID {
			latest = c
		}
	}
	if latest.ID == 0 {
		return latest, fmt.Errorf("job restore %s -from latest: the job has no completed checkpoint or savepoint to restore (weir checkpoint ls %s lists what is stored)", job, job)
	}
	return latest, nil
}

// checkpointKind is "savepoint" or "checkpoint", as c is.
func checkpointKind(c control.CheckpointInfo) string {
	if c.Savepoint {
		return "savepoint"
	}
	return "checkpoint"
}

// latestHint names, for weir job restore without -from, job's latest
// completed checkpoint or savepoint: "; its latest is savepoint 494 (-from
// 494)". It asks the coordinator briefly and quietly; "" when it cannot
// say (no coordinator, no such job, nothing completed).
func latestHint(ctx context.Context, nf *natsFlags, job string) string {
	nc, api, err := connectAPI(nf, io.Discard)
	if err != nil {
		return ""
	}
	defer nc.Close()
	api.Waiting = nil
	ctx, cancel := context.WithTimeout(ctx, restoreProbe)
	defer cancel()
	latest, err := latestCompleted(ctx, api, job)
	if err != nil {
		return ""
	}
	return fmt.Sprintf("; its latest is %s %d (-from %d)", checkpointKind(latest), latest.ID, latest.ID)
}

// checkRestore refuses, in the coordinator's words, what its restore would
// refuse of req (control.API.CheckRestore) before req.Spec's modules are
// built and pushed. The check is bounded by restoreProbe and asked
// without a notice; a coordinator that does not answer in time, or that
// does not know the check, lets it through: the restore says then.
func checkRestore(ctx context.Context, api *control.APIClient, req control.RestoreRequest) error {
	probe := *api
	probe.Waiting = nil
	pctx, cancel := context.WithTimeout(ctx, restoreProbe)
	defer cancel()
	err := probe.CheckRestore(pctx, req)
	var re *control.RemoteError
	if errors.As(err, &re) && !errors.Is(err, control.ErrUnavailable) {
		return apiErr("job restore", err)
	}
	return nil
}

// restoreProbe bounds checkRestore: it reads the checkpoint's metadata
// and the spec's streams.
const restoreProbe = 10 * time.Second

// progress prints format (with the job's name) to w before a request
// that may take a while — unless the job has ended, when the request is
// refused at once and the line would only precede the refusal.
func progress(ctx context.Context, api *control.APIClient, w io.Writer, job, format string) {
	if st, err := api.Job(ctx, job); err == nil && st.State.Terminal() {
		return
	}
	fmt.Fprintf(w, format, job)
}

// drainJob is weir job stop -drain: it asks the coordinator to drain job
// (control.JobDrainer) and waits until it finished, saying first what a
// core NATS source of it misses from now on.
func drainJob(ctx context.Context, std Stdio, api *control.APIClient, job string) error {
	if st, err := api.Job(ctx, job); err == nil && !st.State.Terminal() {
		fmt.Fprintf(std.Err, "draining %s: its sources end their input where they have read to; the operators' end-of-input output and a final savepoint follow …\n", job)
		for _, src := range st.Sources {
			if src.Kind == jobspec.KindNATS {
				fmt.Fprintf(std.Err, "source %s (core NATS) reads no more: what is published to %s from now on is not read by this job\n", src.Name, src.Subject)
			}
		}
	}
	api.Timeout = savepointWait
	cp, err := api.DrainJob(ctx, job)
	if err != nil {
		if errors.Is(err, control.ErrUnavailable) && !strings.Contains(err.Error(), "drain "+job) {
			return fmt.Errorf("job stop -drain: no coordinator answers, or it cannot drain jobs (an older weir up?): %w", err)
		}
		return savepointAdvice(apiErr("job stop -drain", err))
	}
	fmt.Fprintf(std.Out, "job %s drained: finished with final savepoint %d (%s), its operators' end-of-input output committed with it; more input needs a new job\n",
		cp.Job, cp.ID, size(cp.Size))
	if st, err := api.Job(ctx, job); err == nil {
		if h := control.ContinueHint(st.DrainedAt); h != "" {
			fmt.Fprintf(std.Out, "%s\n", h)
		}
	}
	return nil
}

// drainingLine is weir job status's line for a job being drained (weir
// job stop -drain) that has not finished yet, and for a drained job;
// "" for any other.
func drainingLine(st control.JobStatus) string {
	switch {
	case !st.Drained:
		return ""
	case st.State == control.JobFinished:
		more := "more input needs a new job"
		if h := control.ContinueHint(st.DrainedAt); h != "" {
			more += ": " + h
		}
		return fmt.Sprintf("drained (weir job stop -drain): its operators' end-of-input output is committed with final savepoint %d; %s", st.DrainedWithSavepoint, more)
	case st.State.Terminal():
		return ""
	}
	line := "draining (weir job stop -drain): its sources end their input (the subtasks of a JetStream source at one stream sequence, the highest any of them had read); it finishes with a final savepoint once the operators' end-of-input output went through"
	if h := control.ContinueHint(st.DrainedAt); h != "" {
		line += "; " + h
	}
	return line
}

// printJobs prints one line per job. CHECKPOINT is the job's latest
// completed checkpoint (control.JobStatus.LatestCheckpoint: a restored
// job's counts the one it started from), for a job started from another
// job's checkpoint that completed none of its own that one as OTHER/ID
// (what a failover restores), "-" when it has none. REASON
// says why the job is in its state now (none while it runs); LAST FAILURE
// is its newest failure, when and in which attempt, or "-": its reason
// only where REASON does not already give it (a restarting or failed
// job's).
// shownState is a job's state as weir shows it: a job canceled after its
// stop savepoint (weir job stop) shows as stopped, the command its user
// gave, not as if canceled at once.
func shownState(st control.JobStatus) string {
	if st.State == control.JobCanceled && st.StoppedWithSavepoint != 0 {
		return "stopped"
	}
	return string(st.State)
}

func printJobs(w io.Writer, jobs []control.JobStatus, width int) {
	cut := false
	shorten := func(s string) string {
		if width <= 0 || utf8.RuneCountInString(s) <= width {
			return s
		}
		cut = true
		r := []rune(s)
		return string(r[:width-1]) + "…"
	}
	defer func() {
		if cut {
			fmt.Fprintln(w, "(reasons cut short: weir job status JOB shows them whole)")
		}
	}()
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "JOB\tSTATE\tATTEMPT\tRESTARTS\tCHECKPOINT\tSINCE\tREASON\tLAST FAILURE")
	for _, j := range jobs {
		cp := "-"
		switch {
		case j.LatestCheckpoint > 0:
			cp = strconv.FormatInt(j.LatestCheckpoint, 10)
		case j.StartedFrom != "":
			cp = j.StartedFrom
		}
		reason := j.Reason
		if j.State == control.JobRunning {
			reason = "" // a coordinator without LastFailure kept the failure here
		}
		last := "-"
		if f := j.Latest(); f != nil {
			last = fmt.Sprintf("%s attempt %d", f.Time.UTC().Format(time.DateTime), f.Attempt)
			if reason == "" || !strings.HasPrefix(reason, f.Reason) {
				last += ": " + f.Reason
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%s\t%s\t%s\n", j.Name, shownState(j), j.Attempt, j.Restarts, cp,
			j.Updated.Format(time.TimeOnly), shorten(reason), shorten(last))
	}
	tw.Flush()
}

// lsReasonWidth is how many characters of a job's reason and last
// failure weir job ls shows: a reason may run to hundreds, and wrap the
// table past reading; weir job status shows them whole.
const lsReasonWidth = 72

// printInARow says how close a job failing over again and again is to
// failing for good (control.JobStatus.FailuresInARow), and when its
// latest failures all failed the same way (control.Failure.SameAs: of the
// same kind in the same task, on the same record where they name one)
// that restarting does not help, or that they failed on different records
// (a fault that comes and goes): RESTARTS and the failures list showed the
// loop, not that the restart strategy would give up, nor when. For an
// operator that traps on a record, or runs past its memory limit on one
// (control.FailureMemoryLimit), remedy says how the job goes on.
func printInARow(w io.Writer, st control.JobStatus, remedy func(control.JobStatus, remedyFix) string) {
	if failedOnABadRecord(st) {
		// Not restarted: every replay meets the record again.
		fix := remedyRecord
		if emittedTooLarge(st.Failures[0]) {
			fix = remedyEmit
			fmt.Fprintf(w, "an operator emitted a record too large for the operator it goes to; every replay would emit it again\n")
		} else {
			fmt.Fprintf(w, "a sink refused a record it cannot publish; the checkpoints hold none of it, and every replay would meet it again\n")
		}
		if remedy != nil {
			fmt.Fprintf(w, "%s\n", remedy(st, fix))
		}
		return
	}
	if failedOnAFullStream(st) {
		// Not restarted: every commit of the staged batch meets the
		// same refusal.
		fmt.Fprintln(w, "a sink's stream refused an atomic batch of a checkpoint's output larger than its limit; the batches are fixed when the output is staged, so every commit would meet the same refusal")
		if remedy != nil {
			fmt.Fprintf(w, "%s\n", remedy(st, remedyLimit))
		}
		return
	}
	if failedRestoring(st) {
		// Not restarted: every restore of the checkpoint with this build
		// fails the same way.
		fmt.Fprintln(w, "the operator failed restoring the checkpoint's state (weir_restore), as it would at every restart: the build does not read the state the checkpoint holds")
		if remedy != nil {
			fmt.Fprintf(w, "%s\n", remedy(st, remedyRestore))
		}
		return
	}
	n := st.FailuresInARow
	if n == 0 {
		return
	}
	indent := ""
	if !st.State.Terminal() && st.RestartAttempts > 0 {
		indent = "  "
		since := "the job started (no checkpoint completed)"
		if st.StartedFrom != "" {
			since = fmt.Sprintf("the job started from checkpoint %s (none of its own completed)", st.StartedFrom)
		}
		if st.LatestCheckpoint > 0 {
			since = fmt.Sprintf("checkpoint %d completed", st.LatestCheckpoint)
		}
		fmt.Fprintf(w, "failures in a row: %d since %s; restart.attempts allows %d restarts, failure %d fails the job\n",
			n, since, st.RestartAttempts, st.RestartAttempts+1)
	}
	same := min(n, len(st.Failures))
	if same < 2 {
		return
	}
	for _, f := range st.Failures[1:same] {
		if !f.SameKindAs(st.Failures[0]) {
			return
		}
	}
	if !onOneRecord(st.Failures[:same]) {
		// A panic at random, say: each restart goes on past the record
		// it failed on, and may run for long before the next.
		fmt.Fprintf(w, "%sthe last %d failed on different records: a fault that comes and goes, not one record\n", indent, same)
		return
	}
	// A memory limit's first: a failure of no kind after a refused grow
	// reads as a trap too.
	fix, hint := remedyNone, ""
	f := st.Failures[0]
	switch {
	case f.IsKind(control.FailureMemoryLimit):
		fix, hint = remedyMemory, " (an operator that runs past its memory limit on a record does so each time the record is read again after a restore)"
	case f.IsKind(control.FailureTrap):
		fix, hint = remedyOperator, " (an operator that traps on a record, or snapshotting the state it builds from them, does so again after each restore, as the same records are read again)"
	case f.IsKind(control.FailureDeadline) && (failedIn(f.Reason) == abi.ExportSnapshot || failedIn(f.Reason) == abi.ExportRestore):
		// Not a record: the state, which takes as long as it is large
		// (the hint below says which call).
		fix = remedySnapshotTimeout
	case f.IsKind(control.FailureDeadline):
		fix, hint = remedyTimeout, " (an operator that runs past its call deadline on a record, in a loop say, does so each time the record is read again after a restore)"
	case f.IsKind(control.FailureOperatorError), f.IsKind(control.FailureExit), f.IsKind(control.FailureFault):
		fix, hint = remedyOperator, " (an operator that fails on a record does so each time the record is read again after a restore)"
	case f.IsKind(control.FailureSinkRefused):
		fix, hint = remedyLimit, " (a sink's stream refused its output for one of its limits each time, and discards new messages)"
	case f.IsKind(control.FailureBadRecord):
		// Restarted: the input, core NATS subjects, replays nothing, and
		// each failure lost a record of its own.
		fix, hint = remedyRecord, " (a sink refused a record it cannot publish each time, and each such record is lost: the job's input cannot replay it)"
		if emittedTooLarge(f) {
			fix, hint = remedyEmit, " (an operator emitted a record too large for the operator it goes to each time, and each such record is lost: the job's input cannot replay it)"
		}
	}
	if fix != remedyNone && fix != remedyRecord && fix != remedyEmit && fix != remedyLimit {
		// Not on a record: the hint says where it failed instead.
		switch failedIn(f.Reason) {
		case abi.ExportSnapshot:
			hint = " (the operator failed in weir_snapshot, snapshotting its state: the same records build the same state again after each restore)"
		case abi.ExportRestore:
			hint = " (the operator failed in weir_restore, restoring its state from the checkpoint: it does so each time it restores that checkpoint)"
		case abi.ExportInit:
			hint = " (the operator failed as it started, in weir_init: it does so at every restart, before it reads a record)"
		case startFunction:
			hint = " (the operator failed as it started, in its start function: it does so at every restart, before it reads a record)"
		}
	}
	fmt.Fprintf(w, "%sthe last %d failed the same way: restarting does not help while the cause stays%s\n", indent, same, hint)
	if fix == remedyLimit && !st.State.Terminal() {
		// Still restarting: the next restart commits, once there is room.
		fmt.Fprintf(w, "%sto go on: %s; the next restart commits the output then\n", indent, fix.fix())
		return
	}
	if fix != remedyNone && remedy != nil {
		fmt.Fprintf(w, "%s%s\n", indent, remedy(st, fix))
	}
}

// onOneRecord reports whether failures, all alike (control.Failure.
// SameKindAs), failed the same way (control.Failure.SameAs): on one
// record, or each on none.
func onOneRecord(failures []control.Failure) bool {
	for _, f := range failures[1:] {
		if !f.SameAs(failures[0]) {
			return false
		}
	}
	return true
}

// startFunction is what host/wasm names a module's start function (or
// _initialize) in its failures' reasons, where it names exports.
const startFunction = "start function"

// failedIn returns the export (or startFunction) a failure's reason says
// its operator failed in — host/wasm's errors say "operator NAME: EXPORT:
// …" — or "" where it names none.
func failedIn(reason string) string {
	for _, e := range []string{abi.ExportProcess, abi.ExportEndOfInput, abi.ExportSnapshot, abi.ExportRestore, abi.ExportInit, startFunction} {
		if strings.Contains(reason, ": "+e+": ") {
			return e
		}
	}
	return ""
}

// failedOnABadRecord reports whether st is a job that failed, not
// restarted as every replay would meet it again, as a sink refused a
// record it cannot publish (control.FailureBadRecord). A job whose input
// cannot replay the record (core NATS subjects) follows its restart
// strategy instead, and one that strategy ended is not among them.
func failedOnABadRecord(st control.JobStatus) bool {
	return st.State == control.JobFailed && len(st.Failures) > 0 && st.Failures[0].IsKind(control.FailureBadRecord) &&
		strings.HasSuffix(st.Reason, notRestarted)
}

// failedOnAFullStream reports whether st is a job that failed, not
// restarted, as a sink's stream refused an atomic batch larger than its
// limit (control.FailureSinkRefused; sink.StreamFullError's TooLarge).
func failedOnAFullStream(st control.JobStatus) bool {
	return st.State == control.JobFailed && len(st.Failures) > 0 && st.Failures[0].IsKind(control.FailureSinkRefused) &&
		strings.HasSuffix(st.Reason, notRestarted)
}

// failedRestoring reports whether st is a job that failed, not restarted,
// as an operator failed in weir_restore: a new build that does not read
// the state an older one wrote (a trial's upgrade said only the failure).
func failedRestoring(st control.JobStatus) bool {
	return st.State == control.JobFailed && len(st.Failures) > 0 && strings.HasSuffix(st.Reason, notRestarted) &&
		failedIn(st.Failures[0].Reason) == abi.ExportRestore
}

// notRestarted ends the reason of a job the coordinator did not restart
// after a failure every restart would meet again (coordinator/job).
const notRestarted = "(not restarted: it would fail the same way again)"

// remedyFix is what a job that fails on a record again and again needs
// before it goes on (trapRemedy, rerunRemedy).
type remedyFix int

const (
	// remedyNone: no remedy is known.
	remedyNone remedyFix = iota
	// remedyOperator: a fixed build of the operator (a trap).
	remedyOperator
	// remedyMemory: a larger limits.memory for the operator
	// (control.FailureMemoryLimit).
	remedyMemory
	// remedyTimeout: a fixed operator, or a longer limits.timeout
	// (control.FailureDeadline).
	remedyTimeout
	// remedySnapshotTimeout: a longer limits.snapshot-timeout (and
	// limits.memory) for an operator whose weir_snapshot or weir_restore
	// ran past its deadline (control.FailureDeadline), or a fixed one.
	remedySnapshotTimeout
	// remedyRecord: an operator that emits records its sink can publish,
	// or a sink subject that takes their keys (control.FailureBadRecord).
	remedyRecord
	// remedyRestore: a build of the operator that reads the state the
	// checkpoint holds (failedRestoring).
	remedyRestore
	// remedyLimit: a sink stream's limit raised, or room made in it
	// (control.FailureSinkRefused); the spec stays as it is.
	remedyLimit
	// remedyEmit: an operator that emits records the operator they go to
	// can take (control.FailureBadRecord of emittedTooLarge).
	remedyEmit
)

// emittedTooLarge reports whether f is an operator's failure for a record
// it emitted over the input batch limit of the operator it goes to
// (wasm.ErrRecordTooLarge), not a sink's bad record.
func emittedTooLarge(f control.Failure) bool {
	return f.IsKind(control.FailureBadRecord) && strings.Contains(f.Reason, wasm.ErrRecordTooLarge.Error())
}

// fix says what to change, as the start of a remedy: "fix the operator".
func (f remedyFix) fix() string {
	switch f {
	case remedyMemory:
		return "raise the operator's limits.memory in the spec"
	case remedyRecord:
		return "fix the operator that emits the record (a key that forms the sink's subject, a smaller value) or the sink's subject (one without {key} takes any key)"
	case remedyEmit:
		return fmt.Sprintf("fix the operator that emits the record (an operator's input batch takes a record of up to %s less 20 bytes of framing: split a large value across several records)", jobspec.FormatSize(wasm.DefaultMaxBatchBytes))
	case remedyTimeout:
		return "fix the operator (or raise its limits.timeout in the spec, if the call needs longer)"
	case remedySnapshotTimeout:
		return "raise the operator's limits.snapshot-timeout in the spec, and its limits.memory if the failure says its memory was near it (or fix the operator, if it is stuck)"
	case remedyRestore:
		return "give the operator a build that reads the checkpoint's state (a new version that also reads the layout the old one wrote; weir exec NEW.wasm -restore F tries one on F, the task's snapshot JOB/chk-ID/TASK in the checkpoint store)"
	case remedyLimit:
		return "raise the limit of the sink's stream that the failure names, as it says (weir stream edit STREAM -max-msgs N, -max-bytes SIZE or -max-msgs-per-subject N)"
	}
	return "fix the operator"
}

// spec says what the spec a restore takes has changed.
func (f remedyFix) spec() string {
	switch f {
	case remedyMemory:
		return "the spec's limits.memory raised"
	case remedyRecord:
		return "the spec naming the fixed build or subject"
	case remedyTimeout:
		return "the spec naming the fixed build or a longer limits.timeout"
	case remedySnapshotTimeout:
		return "the spec's limits.snapshot-timeout raised"
	case remedyRestore:
		return "the spec's module: naming that build"
	case remedyLimit:
		return "" // no -spec: the job's own
	}
	return "the spec's module: naming the fixed build"
}

// specArg is a restore's -spec argument and what its spec has changed,
// after the -from argument: " -spec SPEC, the spec's …", or "" where the
// job's own spec stays.
func (f remedyFix) specArg() string {
	if f.spec() == "" {
		return ""
	}
	return " -spec SPEC, " + f.spec()
}

// rerunRemedy is trapRemedy for a job weir run started on an embedded
// NATS: the job goes with the run, so it is run again. With a data
// directory (-data: data.dir) the job, its checkpoints and its input stay
// there, and a job run again reads its streams from the start: one that
// completed a checkpoint would repeat the output committed with it, so it
// is restored where weir up -data serves the directory (data: the port
// weir up served it on last, else weir up's default, which weir job's
// default -nats names); without one it is run again, but with no -input
// where the run stored its input in a stream (stored), which would hold
// it twice.
func rerunRemedy(data dataServe, stored bool) func(control.JobStatus, remedyFix) string {
	return func(st control.JobStatus, f remedyFix) string {
		switch {
		case data.dir != "" && st.LatestCheckpoint > 0:
			return fmt.Sprintf("to go on: %s, then, with %s running, weir job restore%s %s -from %d%s "+
				"(its state and output carry over; run again, it would repeat the output it committed)",
				f.fix(), data.up, data.hint(), shellQuote(st.Name), st.LatestCheckpoint, f.specArg())
		case data.dir != "" && stored:
			return fmt.Sprintf("to go on: %s and run the job again without -input: its stream in -data %s holds the input already, "+
				"and -input would store it a second time", f.fix(), shellQuote(data.dir))
		}
		return "to go on: " + f.fix() + " and run the job again"
	}
}

// trapRemedy returns what says how a job whose operator traps on a record
// goes on: with a fixed build of the operator, restored from the job's
// latest checkpoint, so its state and the exactly-once output carry over
// (a restore takes a spec whose module names the new build); a job
// started from another job's checkpoint that completed none of its own,
// from that one (control.JobStatus.StartedFrom: what its failovers
// restore); or, with no checkpoint to restore, submitted again. The
// commands it prints carry hint (natsFlags.hint), as the user runs them
// against the job's server.
func trapRemedy(hint string) func(control.JobStatus, remedyFix) string {
	return func(st control.JobStatus, f remedyFix) string {
		cancel := ""
		if !st.State.Terminal() {
			cancel = fmt.Sprintf("weir job cancel%s %s, ", hint, shellQuote(st.Name))
		}
		from, carried := strconv.FormatInt(st.LatestCheckpoint, 10), "its state and output carry over"
		if st.LatestCheckpoint == 0 {
			if st.StartedFrom == "" {
				return fmt.Sprintf("to go on: %s%s and submit the job again (no checkpoint completed to restore)", cancel, f.fix())
			}
			from, carried = shellQuote(st.StartedFrom), "the checkpoint it started from, as none of its own is stored: that state carries over"
		}
		return fmt.Sprintf("to go on: %s%s, then weir job restore%s %s -from %s%s (%s)",
			cancel, f.fix(), hint, shellQuote(st.Name), from, f.specArg(), carried)
	}
}

// printAttempts says how a job's attempts came about when its restarts
// alone do not (control.JobStatus.AttemptsExplained): "attempt 12,
// restarts 0" read as a contradiction, where 9 attempts placed the job
// again after a worker was lost while deploying, and 1 resumed it after a
// coordinator restart — none of them a restart after failures, which is
// all RESTARTS (and restart.attempts) counts.
func printAttempts(w io.Writer, st control.JobStatus) {
	if s := st.AttemptsExplained(); s != "" {
		fmt.Fprintf(w, "%s (RESTARTS counts only the restarts after failures)\n", s)
	}
}

// printSkipped says why attempt numbers were skipped, one line each,
// newest first (control.JobStatus.Skipped): a deploy whose worker was
// lost, or that a worker refused, was planned again as the next attempt,
// with no failure, and the attempt and failures shown would leave a gap
// unexplained.
func printSkipped(w io.Writer, st control.JobStatus) {
	for _, s := range st.Skipped {
		fmt.Fprintln(w, s)
	}
}

// printRestoring says which tasks of a running job still restore their
// state (control.JobStatus.Restoring): until they all run, the job takes
// no checkpoints.
func printRestoring(w io.Writer, st control.JobStatus) {
	if len(st.Restoring) == 0 {
		return
	}
	from := ""
	if st.RestoredFrom > 0 {
		from = fmt.Sprintf(" from checkpoint %d", st.RestoredFrom)
	}
	fmt.Fprintf(w, "restoring: %d of %d tasks still restore their state%s (%s); checkpoints start once every task runs\n",
		len(st.Restoring), len(st.Assignment), from, strings.Join(st.Restoring, ", "))
}

// printTasks prints the running tasks' counters and rates, one per line.
func printTasks(w io.Writer, tasks []control.TaskStatus) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TASK\tWORKER\tRECORDS IN\tRECORDS OUT\tIN/S\tOUT/S\tBUSY\tBACKPRESSURED\tCHECKPOINTS\tMEMORY\tUNREAD")
	pct := func(f float64) string { return fmt.Sprintf("%.0f%%", 100*f) }
	for _, t := range tasks {
		unread := "-" // not a source, or one that cannot tell
		if p := t.Stats.SourcePending; p != nil {
			unread = strconv.FormatInt(*p, 10) + unreadTrend(*p, t.UnreadRate, t.InRate)
			if c := t.Stats.CoreSubscription; c != nil && *p > 0 {
				// A core source's backlog is memory of its worker, up
				// to its pending limit, past which it drops.
				unread += " (" + size(c.PendingBytes) + " buffered, limit " + size(c.LimitBytes) + ")"
			}
		}
		if s := t.Stats.AwaitedStop; s > 0 {
			// Read up to the stream's end; the stop lies ahead of it.
			unread = fmt.Sprintf("%s, waits for seq %d (stream at %d)", unread, s, t.Stats.StreamLastSeq)
		}
		if q := t.Stats.QueuedRecords; q > 0 && t.Stats.SourcePending == nil {
			// Not a source: the records its input channels hold, which
			// a source's UNREAD does not count.
			unread = strconv.FormatInt(q, 10) + " queued"
			if b := t.Stats.InputBufferBytes; b > 0 {
				// Debloated: the buffers hold about channels.debloat of
				// the task's pace.
				unread += " (buffers " + size(b) + ")"
			}
		}
		if t.Stats.InputEnded {
			unread = "ended" // its input ended: waits for the final savepoint
		}
		worker := t.Worker
		if t.WorkerSilent > 0 {
			worker += " (silent " + t.WorkerSilent.Round(100*time.Millisecond).String() + ")"
		}
		memory := "-" // not an operator, or a worker that does not say
		if t.Stats.MemoryLimit > 0 {
			memory = memoryCell(int64(t.Stats.MemoryBytes), int64(t.Stats.MemoryLimit))
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%.0f\t%.0f\t%s\t%s\t%d\t%s\t%s\n", t.Task, worker, t.Stats.RecordsIn, t.Stats.RecordsOut,
			t.InRate, t.OutRate, pct(t.Busy), pct(t.Backpressured), t.Stats.Checkpoints, memory, unread)
	}
	tw.Flush()
	var silent []string
	for _, t := range tasks {
		if t.WorkerSilent > 0 && !slices.Contains(silent, t.Worker) {
			silent = append(silent, t.Worker)
		}
	}
	for _, wk := range silent {
		fmt.Fprintf(w, "worker %s has not been heard from lately: its tasks' figures are from its last report (a worker stopped or cut off is declared lost once its heartbeat timeout passes)\n", wk)
	}
	for _, t := range tasks {
		if line := droppedLine(t); line != "" {
			fmt.Fprintln(w, line)
		}
	}
}

// printDiscarded says, for a job canceled or stopped whose status before
// was before (none: beforeErr), what each core NATS source task's
// subscription held: the cancel or stop discarded it, and core NATS
// cannot deliver it again. A trial's cancel discarded some 350 000
// messages without a word.
func printDiscarded(w io.Writer, before control.JobStatus, beforeErr error) {
	if beforeErr != nil {
		return
	}
	for _, t := range before.Tasks {
		if p := t.Stats.SourcePending; p != nil && *p > 0 && t.Stats.CoreSubscription != nil {
			fmt.Fprintf(w, "source %s (task %s): the messages its subscription held, %d at its latest report, are discarded (core NATS cannot deliver them again)\n",
				vertexOf(t.Task), t.Task, *p)
		}
	}
}

// droppedLine says, of a core NATS source task whose subscription dropped
// messages (control.CoreSubscription.Dropped), how many, why and what to
// do; "" for any other task. A trial's job lost 42 999 messages of 150 000
// while its status showed nothing amiss.
func droppedLine(t control.TaskStatus) string {
	c := t.Stats.CoreSubscription
	if c == nil || c.Dropped == 0 {
		return ""
	}
	return fmt.Sprintf("dropped: source %s (task %s) lost %d messages in this attempt: the job fell behind its input, and core NATS, "+
		"which has no flow control, dropped what came past the source's pending limit (%d messages or %s); to keep up, raise the "+
		"parallelism of the slow operator (the bottleneck) or make it faster; pending-messages and pending-bytes raise the limit "+
		"(the worker's memory) for bursts; a JetStream source (kind: jetstream) loses nothing",
		vertexOf(t.Task), t.Task, c.Dropped, c.LimitMessages, size(c.LimitBytes))
}

// printCheckpointStats says how a job's checkpoints fare
// (control.JobStatus.Checkpoints): how many completed and failed, the
// latest that completed, and — while they fail — how many in a row, the
// newest failure's reason, and what to change for one that expired. A
// job whose checkpoints kept expiring, failing it over onto the same
// checkpoint each time, said so only in its failures' reasons. The
// command it prints carries hint (natsFlags.hint).
func printCheckpointStats(w io.Writer, st control.JobStatus, hint string) {
	c := st.Checkpoints
	if c.Completed == 0 && c.Failed == 0 {
		return
	}
	latest := ""
	if c.LastID > 0 {
		latest = fmt.Sprintf("; latest completed: %d at %s (took %s, %s)", c.LastID,
			c.LastCompleted.UTC().Format(time.TimeOnly), c.LastDuration.Round(time.Millisecond), size(c.LastSize))
	}
	// The runner counts them in memory: a coordinator restart starts
	// them again (the checkpoints and their IDs carry over).
	aborted := ""
	if c.Aborted > 0 {
		aborted = fmt.Sprintf(", %d aborted (cut by a failover, a stop or a newer checkpoint: no failure)", c.Aborted)
	}
	fmt.Fprintf(w, "checkpoints: %d completed, %d failed%s since the coordinator started%s\n", c.Completed, c.Failed, aborted, latest)
	printCheckpointsFailing(w, st, hint)
}

// printCheckpointsFailing says, while a job's checkpoints fail, how many
// in a row, the newest failure's reason, what to change for one that
// expired, and whether the job fails over for them; nothing while they do
// not fail. weir job status and weir run share it; the weir checkpoint
// ls it prints carries hint (natsFlags.hint), to reach the job's server.
func printCheckpointsFailing(w io.Writer, st control.JobStatus, hint string) {
	c := st.Checkpoints
	if c.FailedInARow == 0 || c.LastFailedID == 0 {
		return
	}
	since := "none completed yet"
	if c.LastID > 0 {
		since = fmt.Sprintf("since %d completed", c.LastID)
	}
	fmt.Fprintf(w, "checkpoints failing: %d in a row, %s; the newest, %d at %s: %s\n", c.FailedInARow, since,
		c.LastFailedID, c.LastFailed.UTC().Format(time.TimeOnly), c.LastFailure)
	if c.LastFailedFor(control.CheckpointExpired) {
		fmt.Fprintf(w, "  %s; weir checkpoint ls%s %s shows which tasks did not ack\n", expiryAdvice(st), hint, shellQuote(st.Name))
	}
	if f := st.Latest(); f != nil && f.IsKind(control.FailureCheckpointsFailed) {
		from := "the start"
		if c.LastID > 0 {
			from = fmt.Sprintf("checkpoint %d", c.LastID)
		}
		fmt.Fprintf(w, "  the job fails over for them, each attempt from %s again; "+
			"checkpointing.tolerable-failures lets it run on through failed checkpoints\n", from)
	}
}

// savepointAdvice adds to err, a savepoint's or a stop's failure, what to
// change when the savepoint expired, on a line of its own: a Flink-user trial's stop failed with the expiry
// alone, where a checkpoint's gets the advice. A savepoint is always
// aligned, so the unaligned way out is not one for it.
func savepointAdvice(err error) error {
	if !strings.Contains(err.Error(), "expired after") {
		return err
	}
	return fmt.Errorf("%w\na savepoint is always aligned: its barriers queue behind the data in flight to a busy task (see weir job status, bottleneck); "+
		"make that task faster or raise its parallelism, or raise checkpointing.timeout, which bounds savepoints too", err)
}

// expiryAdvice says why a checkpoint of st's job expires and what to
// change, as fits the job's checkpointing mode (control.JobStatus
// .CheckpointMode): only aligned barriers wait at a task for its other
// inputs, and unaligned ones overtake the data in flight, so telling a job
// that takes unaligned checkpoints already to take them unaligned, or an
// at-least-once job that its barriers align, sent the user the wrong way.
// A coordinator that does not send the mode gets the aligned advice with
// the unaligned way out, as before.
func expiryAdvice(st control.JobStatus) string {
	const prefix = "a checkpoint expires when its barriers do not get through in time: "
	switch {
	case st.CheckpointMode == jobspec.ModeUnaligned:
		return prefix + "unaligned ones overtake the data in flight, so here a task was slow to take or store " +
			"its snapshot (an operator inside a long call, a large state or in-flight data to upload: see the " +
			"size) or a sink's commit held it up; raise checkpointing.timeout, or make the slow task " +
			"faster (see bottleneck)"
	case st.CheckpointMode == jobspec.ModeAtLeastOnce:
		return prefix + "at-least-once ones are not aligned, but they travel in order behind the data in " +
			"flight to a busy task (see bottleneck); make it faster or raise its parallelism, or raise " +
			"checkpointing.timeout; unaligned checkpoints (checkpointing.mode: unaligned) overtake that " +
			"data, and are exactly-once"
	case st.CheckpointMode == jobspec.ModeExactlyOnce && st.AlignedTimeout > 0:
		return prefix + fmt.Sprintf("aligned ones queue behind the data in flight to a busy task (see "+
			"bottleneck) and turn unaligned at a task only once its barrier is %s late, queued or aligning that "+
			"long after the trigger (checkpointing.aligned-timeout), and a task stuck inside a long call or "+
			"a slow commit holds them either way; make the busy task faster or raise its parallelism, raise "+
			"checkpointing.timeout, or take checkpoints unaligned from the start (checkpointing.mode: "+
			"unaligned)", st.AlignedTimeout)
	case st.CheckpointMode == jobspec.ModeExactlyOnce:
		return prefix + "aligned ones queue behind the data in flight to a busy task (see bottleneck); make " +
			"it faster or raise its parallelism, raise checkpointing.timeout, let them turn unaligned when " +
			"alignment lasts (checkpointing.aligned-timeout), or take them unaligned (checkpointing.mode: " +
			"unaligned), whose barriers overtake that data"
	}
	return prefix + "aligned ones queue behind the data in flight to a busy task (see bottleneck); make it " +
		"faster or raise its parallelism, raise checkpointing.timeout, or take checkpoints unaligned " +
		"(checkpointing.mode: unaligned), whose barriers overtake that data"
}

// mostOfTheTime is the share of its time a task must be busy, or an
// exactly-once sink wait on its commits, for weir job status to name it
// as what limits the job's rate.
const mostOfTheTime = 0.5

// printBottleneck names the task that limits a running job's rate, if one
// does: the busiest task, when it is busy most of the time, with the tasks
// backpressured most of the time (those before it wait for it to take
// their output); else an exactly-once sink that waits on its commits most
// of the time. The table has the numbers, but a user had to read them
// across every row to find the operator to fix.
func printBottleneck(w io.Writer, tasks []control.TaskStatus) {
	if _, line := stuckOf(tasks); line != "" {
		fmt.Fprintln(w, line) // not the bottleneck: faster per record would not help
		return
	}
	if _, line := bottleneckOf(tasks); line != "" {
		fmt.Fprintln(w, line)
	}
}

// stuckAfter is how long a task must have been in one call of its
// operator for stuckOf to say so: a call is handed about 100 ms of
// records at the operator's pace.
const stuckAfter = time.Second

// stuckOf returns the task that has been in one call of its operator the
// longest, at least stuckAfter (control.TaskStats.InCallNanos), and the
// line that says so; "" and "" when none has. Such a task is busy all the
// time, but it is stuck (a loop) or very slow on one record, not slow per
// record: the bottleneck's advice pointed the wrong way. A call in
// weir_snapshot or weir_restore (control.TaskStats.InCallExport) is named
// as that, with its checkpoint: the time goes to a large state.
func stuckOf(tasks []control.TaskStatus) (task, line string) {
	top := -1
	for i, t := range tasks {
		if time.Duration(t.Stats.InCallNanos) >= stuckAfter && (top < 0 || t.Stats.InCallNanos > tasks[top].Stats.InCallNanos) {
			top = i
		}
	}
	if top < 0 {
		return "", ""
	}
	t := tasks[top]
	d := time.Duration(t.Stats.InCallNanos).Round(100 * time.Millisecond)
	of := func(prep string) string {
		if t.Stats.InCallCheckpoint > 0 {
			return fmt.Sprintf(" %s checkpoint %d", prep, t.Stats.InCallCheckpoint)
		}
		return ""
	}
	switch t.Stats.InCallExport {
	case abi.ExportSnapshot:
		return t.Task, fmt.Sprintf("stuck: %s has been in weir_snapshot%s for %s, writing its operator's state — a large state (many keys), or stuck; the snapshot deadline (limits.snapshot-timeout) fails it if it goes on",
			t.Task, of("for"), d)
	case abi.ExportRestore:
		return t.Task, fmt.Sprintf("stuck: %s has been in weir_restore%s for %s, reading its operator's state — a large state (many keys), or stuck; the snapshot deadline (limits.snapshot-timeout) fails it if it goes on",
			t.Task, of("of"), d)
	case "", abi.ExportProcess, abi.ExportEndOfInput:
		return t.Task, fmt.Sprintf("stuck: %s has been in one call of its operator for %s — stuck (a loop?) or very slow on one record; the call deadline (limits.timeout) fails it if it goes on",
			t.Task, d)
	}
	return t.Task, fmt.Sprintf("stuck: %s has been in %s for %s — stuck (a loop?) or very slow; the call deadline (limits.timeout) fails it if it goes on",
		t.Task, t.Stats.InCallExport, d)
}

// bottleneckOf returns the task that limits a running job's rate and the
// line that names it (printBottleneck), or "" and "" when none does.
func bottleneckOf(tasks []control.TaskStatus) (task, line string) {
	pct := func(f float64) string { return fmt.Sprintf("%.0f%%", 100*f) }
	top := -1
	for i, t := range tasks {
		if t.Busy >= mostOfTheTime && (top < 0 || t.Busy > tasks[top].Busy) {
			top = i
		}
	}
	if top >= 0 {
		var waiting []control.TaskStatus
		for i, t := range tasks {
			if i != top && t.Backpressured >= mostOfTheTime {
				waiting = append(waiting, t)
			}
		}
		sort.SliceStable(waiting, func(i, j int) bool { return waiting[i].Backpressured > waiting[j].Backpressured })
		behind := ""
		if len(waiting) > 0 {
			names := make([]string, len(waiting))
			for i, t := range waiting {
				names[i] = t.Task + " " + pct(t.Backpressured)
			}
			behind = "; backpressured: " + strings.Join(names, ", ")
		}
		t := tasks[top]
		return t.Task, fmt.Sprintf("bottleneck: %s is busy %s of the time%s — make %s faster per record or raise its parallelism",
			t.Task, pct(t.Busy), behind, vertexOf(t.Task))
	}
	for _, t := range tasks {
		if t.Stats.SinkCommitted != nil && t.Backpressured >= mostOfTheTime {
			return t.Task, fmt.Sprintf("bottleneck: sink %s waits on its commits %s of the time — its stream takes the output slower than the job makes it",
				t.Task, pct(t.Backpressured))
		}
	}
	return "", ""
}

// statusNotes is what weir run has said of the job it follows beyond its
// state and checkpoints: the lines weir job status prints of a job in
// trouble — checkpoints failing in a row (with the advice for an expired
// one), a job failing over in a row (a restart loop), the bottleneck — so
// that a user watching weir run learns of them too, but each once rather
// than on every poll: a row of failures is said once it reaches two, and
// again only after it ended (a checkpoint completed); a bottleneck the
// first time each source, operator or sink is it — not each time another
// of its subtasks is the busiest, which with all of them busy nearly all
// the time changes from one poll to the next; a core source's dropped
// messages the first time, then each time their count doubled.
type statusNotes struct {
	checkpointRow bool             // said the checkpoints failing in the current row
	failureRow    bool             // said the failures in the current row
	bottlenecks   map[string]bool  // the vertices (vertexOf) said as the bottleneck, "stuck V" as stuck in a call
	dropped       map[string]int64 // by attempt and core source task ("2 in-0"): the count of dropped messages last said
	// remedy says how a job whose operator traps, or runs past its
	// memory limit, on a record goes on (trapRemedy, rerunRemedy); nil
	// says nothing.
	remedy func(control.JobStatus, remedyFix) string
	// hint is the -nats (natsFlags.hint) of the other commands it prints.
	hint string
	// queued says that an aligned checkpoint's barriers were said to wait
	// behind the data in flight (slowBarriers).
	queued bool
	// spec, if set, is the job's: slowBarriers names the task where the
	// barriers queued, not the last one they reached.
	spec *jobspec.Spec
}

// slowBarrier is how long an aligned checkpoint's barriers must have
// waited at a task, and for at least half of the checkpoint's time, for
// slowBarriers to say what lets them overtake the data.
const slowBarrier = time.Second

// slowBarriers returns, once, the line that says an aligned checkpoint c
// of st's job spent most of its time with its barriers queued behind the
// data in flight before a task or aligning there (c.Slowest: queued or
// alignment, not a sink's commit wait) — backpressure, which unaligned
// checkpoints overtake — and "" for any other checkpoint, one of a job
// that takes them unaligned or at-least-once, or with an aligned-timeout
// (it turns unaligned by itself, and its expiry advice says what else to
// do). Slowest tells where they queued from c.Inputs, the job's topology
// (the spec's, if set, where the coordinator sent none).
func (n *statusNotes) slowBarriers(st control.JobStatus, c control.CheckpointInfo) string {
	if n.queued || c.Status != control.CheckpointCompleted || c.Unaligned || c.Savepoint ||
		st.CheckpointMode != jobspec.ModeExactlyOnce || st.AlignedTimeout > 0 {
		return ""
	}
	if c.Inputs == nil {
		c.Inputs = control.Topology(n.spec)
	}
	if c.Outputs == nil {
		c.Outputs = control.OutputTopology(n.spec)
	}
	t, ok := c.Slowest()
	if !ok || t.Phase != control.PhaseQueued && t.Phase != control.PhaseAlignment && t.Phase != control.PhaseBlocked ||
		t.Duration < slowBarrier || 2*t.Duration < c.Duration {
		return ""
	}
	n.queued = true
	where := "queued behind the data in flight to it"
	switch {
	case t.Phase == control.PhaseAlignment:
		where = "aligning its inputs"
	case t.Phase == control.PhaseBlocked && t.Behind != "":
		where = fmt.Sprintf("queued while it was blocked sending its output (%s is slower than its input)", t.Behind)
	case t.Phase == control.PhaseBlocked:
		where = "queued while it was blocked sending its output (a task after it is slower than its input)"
	}
	return fmt.Sprintf("checkpoint %d waited %s of its %s for its barriers at %s, %s: aligned barriers travel behind "+
		"the records backpressure queues on each channel; unaligned checkpoints (checkpointing.mode: unaligned, or "+
		"aligned-timeout: 1s to turn so when late) overtake them, still exactly-once; a shorter channels.debloat (%s now) or "+
		"a smaller channels.buffer bounds them\n",
		c.ID, t.Duration.Round(time.Millisecond), c.Duration.Round(time.Millisecond), t.Task, where, debloatNow(n.spec))
}

// debloatNow says how the job's channels debloat, for advice.
func debloatNow(spec *jobspec.Spec) string {
	if spec == nil {
		return jobspec.DefaultDebloat.String()
	}
	if d := spec.Channels.DebloatTarget(); d > 0 {
		return d.String()
	}
	return "off"
}

// inARow is how many failures in a row, of checkpoints or of the job,
// make weir run say so: one is said by its own line already.
const inARow = 2

// news returns the lines to print for st (each ending in a newline), ""
// when there is nothing new to say, and notes what it said.
func (n *statusNotes) news(st control.JobStatus) string {
	var b strings.Builder
	switch c := st.Checkpoints; {
	case c.FailedInARow == 0:
		n.checkpointRow = false
	case c.FailedInARow >= inARow && !n.checkpointRow:
		n.checkpointRow = true
		printCheckpointsFailing(&b, st, n.hint)
	}
	switch {
	case (failedOnABadRecord(st) || failedRestoring(st)) && !n.failureRow:
		n.failureRow = true
		printInARow(&b, st, n.remedy)
	case st.FailuresInARow == 0:
		n.failureRow = false
	case st.FailuresInARow >= inARow && !n.failureRow:
		n.failureRow = true
		printInARow(&b, st, n.remedy)
	}
	for _, t := range st.Tasks {
		// A core source's drops: the first, then as their count
		// doubles, so a run that keeps dropping says so without a
		// line on every poll.
		c := t.Stats.CoreSubscription
		key := fmt.Sprintf("%d %s", st.Attempt, t.Task) // each attempt counts from 0
		if c == nil || c.Dropped == 0 || c.Dropped < 2*n.dropped[key] {
			continue
		}
		if n.dropped == nil {
			n.dropped = map[string]int64{}
		}
		n.dropped[key] = c.Dropped
		fmt.Fprintln(&b, droppedLine(t))
	}
	if st.State == control.JobRunning {
		// A task stuck in a call is said as that, not as the bottleneck.
		task, line := stuckOf(st.Tasks)
		key := "stuck " + vertexOf(task)
		if task == "" {
			task, line = bottleneckOf(st.Tasks)
			key = vertexOf(task)
		}
		if task != "" && !n.bottlenecks[key] {
			if n.bottlenecks == nil {
				n.bottlenecks = map[string]bool{}
			}
			n.bottlenecks[key] = true
			fmt.Fprintln(&b, line)
		}
	}
	return b.String()
}

// vertexOf returns the source, operator or sink of task ID task
// ("count-1": "count").
func vertexOf(task string) string { return control.VertexOf(task) }

// unreadTrend says how a source's unread messages, pending of them,
// change at rate (control.TaskStatus.UnreadRate; nil: not known):
// " (-8000/s, caught up in ~20s)" while it catches up on a backlog,
// " (+500/s, falling behind)" while it reads slower than the stream
// grows; nothing when nothing is unread or the count does not change, nor
// for fewer messages than the source reads in a second (inRate): those
// are in flight, not a backlog, and their count goes up and down.
// UNREAD alone did not say whether a backlog shrinks, nor how fast.
func unreadTrend(pending int64, rate *float64, inRate float64) string {
	if rate == nil || pending <= 0 || float64(pending) < inRate {
		return ""
	}
	switch r := *rate; {
	case r <= -0.5:
		eta := max(time.Duration(float64(pending)/-r*float64(time.Second)), time.Second)
		return fmt.Sprintf(" (%.0f/s, caught up in ~%s)", r, eta.Round(time.Second))
	case r >= 0.5:
		return fmt.Sprintf(" (+%.0f/s, falling behind)", r)
	}
	return ""
}

// printFailures prints a job's failure history, one per line, with each
// failure's kind (control.FailureKind; "-" when it has none). A wait for
// room that ran out again and again is one line, saying how often
// (control.Failure.Repeats) and till when.
func printFailures(w io.Writer, fs []control.Failure) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TIME\tATTEMPT\tKIND\tREASON")
	for _, f := range fs {
		kind := string(f.Kind)
		if kind == "" {
			kind = "-"
		}
		reason := f.Reason
		if f.Repeats > 0 {
			reason += fmt.Sprintf(" (ran out %d times more, the latest at %s: one wait, counted once)", f.Repeats, f.Last.UTC().Format(time.DateTime))
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\n", f.Time.UTC().Format(time.DateTime), f.Attempt, kind, reason)
	}
	tw.Flush()
}

const checkpointUsage = `ls [-all] JOB | rm JOB ID... | rm -earlier JOB

  weir checkpoint ls JOB   the last 100 checkpoints and savepoints of JOB but the
                           discarded ones (-all lists those too; a line counts them): id, status,
                           duration, size, longest alignment, aligned, unaligned or
                           at-least-once (one that failed: as the job's mode asks),
                           tasks acked of those that must ack (- if not known),
                           and the slowest task: the one that itself spent longest on
                           it, with the phase that took most of that and the sum of its
                           phases ("of its own"): queued (its barrier waited in the
                           task's input channels behind the data backpressure holds:
                           the task is slower than its input), blocked (of that, or
                           of a source's start delay, the time the task was blocked
                           sending its output: the task it sent to, which it names,
                           is slower than its input), start delay (a source
                           busy), commit wait (a sink's earlier commits), alignment,
                           snapshot, upload; the time the barrier took to reach the
                           tasks before it is not counted: the sink at the end of a
                           pipeline, reached last, is not named for it;
                           for one that failed or is pending, how many tasks did
                           not ack it (its reason names them).
                           Only the completed ones can be restored; discarded ones
                           were deleted past checkpointing.retained (one a job that
                           runs was started from, once that job needs it no more:
                           it completed one of its own, or ended; until then it is
                           listed completed, "kept past checkpointing.retained";
                           so is one whose output a kept checkpoint's exactly-once
                           sink snapshot names, and every one after it, until
                           nothing kept names it);
                           "removing" ones
                           are partly removed (a weir checkpoint rm was cut short):
                           never restored; the job's retention while it runs, the
                           coordinator as it starts, or weir checkpoint rm again
                           finishes them.
                           Checkpoints of earlier runs of the job (before the restore
                           or submit that began this run) that are still stored are
                           listed too, marked "earlier run": they can be restored, and
                           this run's retention does not delete them. Those earlier
                           runs discarded, or that failed, are not listed
  weir checkpoint rm JOB ID...
                           delete checkpoints or savepoints of JOB from storage for
                           good: the metadata and every task's snapshot; they can no
                           longer be restored, also if the removal is cut short (a
                           storage failure): marked first as being removed, such a
                           one is listed as "removing" until retention, the
                           coordinator's next start or rm again finishes it.
                           Refused, saying why, for one still
                           needed: what a job that has not ended restores on a
                           failover (its latest; for a restored job that completed
                           none of its own, the one it started from, of any job),
                           one being written, or one whose output a checkpoint still
                           stored names (an exactly-once sink's snapshot): the
                           refusal names that one, to remove first (given in the
                           same rm, in any order, it goes first). Exits 1 if any ID was refused or
                           is not stored. One a job that has ended was to be
                           restored from goes: a line after it names the job and
                           what it is restored from now (its newest checkpoint
                           left, else the one it started from; or none: it starts
                           afresh), as weir job status and ls say from then on
  weir checkpoint rm -earlier JOB
                           delete every checkpoint and savepoint that earlier runs of
                           JOB left stored (ls marks them "earlier run") and nothing
                           needs (nor a checkpoint still stored names), the leftover snapshots of their checkpoints that
                           never completed (and of the job's own run, once it has
                           ended), and sinks' commit markers written after their
                           checkpoint was deleted; lists what it removed (with
                           the line above after one a job that has ended was to
                           be restored from)`

// removeWait is how long weir checkpoint rm waits for the coordinator:
// removing many checkpoints from a JetStream object store takes a while.
const removeWait = 3 * time.Minute

func runCheckpoint(ctx context.Context, std Stdio, args []string) error {
	fs := newFlags(std, "checkpoint", checkpointUsage)
	var nf natsFlags
	nf.register(fs, defaultNATS, "NATS server URL")
	nf.registerWait(fs)
	earlier := fs.Bool("earlier", false, "rm: remove what earlier runs of the job left stored, instead of IDs")
	all := fs.Bool("all", false, "ls: list the discarded checkpoints too (retention deleted them: they cannot be restored)")
	pos, err := positional(fs, args, func(a []string) error { return parseFlags(fs, a) })
	if err != nil {
		return err
	}
	var ids []int64
	switch {
	case *all && len(pos) > 0 && pos[0] == "rm":
		return usagef("checkpoint rm: -all is a flag of checkpoint ls (it lists the discarded checkpoints too)")
	case len(pos) == 2 && pos[0] == "ls" && !*earlier:
	case len(pos) == 2 && pos[0] == "rm" && *earlier:
	case len(pos) > 2 && pos[0] == "rm" && !*earlier:
		for _, a := range pos[2:] {
			id, err := strconv.ParseInt(strings.TrimPrefix(a, "chk-"), 10, 64)
			if err != nil || id <= 0 {
				return usagef("checkpoint rm: %q is not a checkpoint ID", a)
			}
			ids = append(ids, id)
		}
	case len(pos) > 2 && pos[0] == "rm":
		return usagef("checkpoint rm: give checkpoint IDs or -earlier, not both")
	case len(pos) == 2 && pos[0] == "ls":
		return usagef("checkpoint ls: -earlier is a flag of checkpoint rm, not of checkpoint ls (ls lists what earlier runs left stored already, marked \"earlier run\")")
	default:
		fs.Usage()
		return usagef("checkpoint: want 'ls JOB', 'rm JOB ID...' or 'rm -earlier JOB'")
	}
	nc, api, err := connectAPI(&nf, std.Err)
	if err != nil {
		return err
	}
	defer nc.Close()
	job := pos[1]
	if pos[0] == "ls" {
		cps, err := api.Checkpoints(ctx, job)
		if err != nil {
			return apiErr("checkpoint ls", err)
		}
		shown, hidden := cps, 0
		if !*all {
			// Most of a long-running job's history is discarded by its
			// retention: those rows hid the few that can be restored.
			shown = slices.DeleteFunc(slices.Clone(cps), func(c control.CheckpointInfo) bool { return c.Status == control.CheckpointDiscarded })
			hidden = len(cps) - len(shown)
		}
		printCheckpoints(std.Out, shown)
		if hidden > 0 {
			fmt.Fprintf(std.Out, "(%s not shown: weir checkpoint ls -all%s %s lists them)\n",
				plural(hidden, "discarded checkpoint"), nf.hint(), shellQuote(job))
		}
		return nil
	}
	api.Timeout = removeWait
	if *earlier {
		rm, err := api.RemoveCheckpoints(ctx, control.RemoveRequest{Job: job, Earlier: true})
		if err != nil {
			return apiErr("checkpoint rm", err)
		}
		printRemoved(std.Out, job, rm, nf.hint())
		if len(rm.Checkpoints)+len(rm.Kept)+len(rm.Leftovers)+rm.StrayMarkers == 0 {
			fmt.Fprintf(std.Out, "%s: no checkpoints of earlier runs are stored\n", job)
		}
		return nil
	}
	// Like rm: each ID on its own, a refusal does not keep the others. One
	// refused as in use (ErrConflict: a later checkpoint given too names
	// it) is tried again once the others went, as long as one did. The
	// refusals are reported in the order the IDs were given.
	refused := map[int64]error{}
	for pending := ids; len(pending) > 0; {
		var again []int64
		removed := false
		for _, id := range pending {
			rm, err := api.RemoveCheckpoints(ctx, control.RemoveRequest{Job: job, ID: id})
			if err != nil {
				refused[id] = apiErr("checkpoint rm", err)
				var re *control.RemoteError
				if !errors.As(err, &re) {
					pending, again = nil, nil
					break // the coordinator did not answer: the next would fare no better
				}
				if errors.Is(err, control.ErrConflict) {
					again = append(again, id)
				}
				continue
			}
			delete(refused, id)
			removed = true
			printRemoved(std.Out, job, rm, nf.hint())
		}
		if !removed {
			break
		}
		pending = again
	}
	var failed error
	for _, id := range ids {
		if err, ok := refused[id]; ok {
			if failed != nil {
				printErr(std.Err, failed)
			}
			failed = err
			delete(refused, id) // an ID given twice is reported once
		}
	}
	return failed
}

// printRemoved lists what weir checkpoint rm removed, one line per
// checkpoint — after it, for each job that has ended that was to be
// restored from it, a line saying what it is restored from now
// (readvisedLine) — then what -earlier kept and the leftovers it deleted.
// The commands it prints carry hint (natsFlags.hint).
func printRemoved(w io.Writer, job string, rm control.Removed, hint string) {
	for _, c := range rm.Checkpoints {
		kind := "checkpoint"
		if c.Savepoint {
			kind = "savepoint"
		}
		what := size(c.Size)
		switch c.Status {
		case control.CheckpointCompleted:
		case control.CheckpointRemoving:
			what = "the rest of it: an earlier removal was cut short"
		default:
			what = "could not be restored"
		}
		if c.EarlierRun {
			what = "earlier run, " + what
		}
		fmt.Fprintf(w, "removed %s %d of %s (%s): %d storage objects\n", kind, c.ID, job, what, c.Objects)
		for _, r := range c.Readvised {
			fmt.Fprintln(w, readvisedLine(r, hint))
		}
	}
	for _, k := range rm.Kept {
		fmt.Fprintf(w, "kept: %s\n", k)
	}
	if len(rm.Leftovers) > 0 {
		ids := make([]string, len(rm.Leftovers))
		for i, id := range rm.Leftovers {
			ids[i] = strconv.FormatInt(id, 10)
		}
		fmt.Fprintf(w, "removed %d leftover storage objects of checkpoints of %s that never completed (%s)\n",
			rm.LeftoverObjects, job, strings.Join(ids, ", "))
	}
	if rm.StrayMarkers > 0 {
		fmt.Fprintf(w, "removed %d commit markers of checkpoints of %s that were written after their checkpoint was deleted\n", rm.StrayMarkers, job)
	}
}

// readvisedLine says, for a job that has ended whose advice (weir job
// status, ls, cancel) named a checkpoint just removed, what it names now
// (control.Readvised): the newest checkpoint of its own left, else the
// checkpoint of another job it started from, each with the restore to go
// on with; or, with none left, that it starts afresh.
func readvisedLine(r control.Readvised, hint string) string {
	head := fmt.Sprintf("job %s (%s) was to be restored from it", r.Job, r.State)
	switch {
	case r.LatestCheckpoint > 0:
		return fmt.Sprintf("%s; now from checkpoint %d, its newest left: weir job restore%s %s -from %d",
			head, r.LatestCheckpoint, hint, r.Job, r.LatestCheckpoint)
	case r.StartedFrom != "":
		return fmt.Sprintf("%s; now from %s, the checkpoint it started from: weir job restore%s %s -from %s",
			head, r.StartedFrom, hint, r.Job, r.StartedFrom)
	}
	return fmt.Sprintf("%s; none of its checkpoints is left: weir run%s SPEC starts it afresh", head, hint)
}

func printCheckpoints(w io.Writer, cps []control.CheckpointInfo) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tKIND\tSTATUS\tWHEN (UTC)\tDURATION\tSIZE\tALIGNMENT\tALIGNED\tTASKS\tSLOWEST\tREASON")
	now := time.Now().UTC()
	for _, c := range cps {
		kind := "checkpoint"
		if c.Savepoint {
			kind = "savepoint"
		}
		tasks := "-"
		if c.Total > 0 {
			tasks = fmt.Sprintf("%d/%d", c.Acked, c.Total)
		}
		slowest := slowestOf(c)
		reason := c.Reason
		switch {
		case c.EarlierRun && c.Status == control.CheckpointCompleted:
			reason = "earlier run: still stored, can be restored"
		case c.EarlierRun:
			reason = "earlier run: " + reason
		}
		status := c.Status
		if status == control.CheckpointFailed && c.Aborted {
			status = "aborted" // no failure of its own: a failover or a newer one cut it
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", c.ID, kind, status, whenOf(c, now), c.Duration.Round(time.Millisecond),
			size(c.Size), c.Alignment.Round(time.Microsecond), alignedOf(c), tasks, slowest, reason)
	}
	tw.Flush()
}

// slowestOf names the task that took longest in checkpoint c, with the
// phase that held it up, or "-" when no task reported. A checkpoint that
// did not complete and that some tasks never acked has its slowest among
// those: the acked tasks' times say nothing of them (the one task that
// acked an expired checkpoint at once was shown as its slowest), so it
// says how many did not ack — its reason names them.
func slowestOf(c control.CheckpointInfo) string {
	if c.Total > 0 && c.Acked < c.Total && c.Status != control.CheckpointCompleted &&
		c.Status != control.CheckpointDiscarded && c.Status != control.CheckpointRemoving {
		if c.Status == control.CheckpointPending {
			return fmt.Sprintf("%d of %d tasks not acked yet", c.Total-c.Acked, c.Total)
		}
		return fmt.Sprintf("%d of %d tasks never acked", c.Total-c.Acked, c.Total)
	}
	if t, ok := c.Slowest(); ok {
		return t.String()
	}
	return "-"
}

// whenOf says when checkpoint c was triggered and, unless pending, when
// it ended (completed, failed or aborted: triggered + duration), in UTC
// as one token: "09:12:03→09:12:04"; the date leads a trigger of another
// day than now ("05-17T09:12:03→…"); "-" when not known.
func whenOf(c control.CheckpointInfo, now time.Time) string {
	if c.Triggered.IsZero() {
		return "-"
	}
	t := c.Triggered.UTC()
	at := t.Format(time.TimeOnly)
	if y, m, d := t.Date(); y != now.Year() || m != now.Month() || d != now.Day() {
		at = t.Format("01-02T") + at
	}
	if c.Status == control.CheckpointPending {
		return at + "→"
	}
	return at + "→" + t.Add(c.Duration).Format(time.TimeOnly)
}

// alignedOf says how checkpoint c was taken: "unaligned" when a task's
// snapshot was; "aligned" for a savepoint, which always is (a failed one
// of an unaligned job was listed unaligned); "at-least-once" in a job of
// that mode (barriers tracked, inputs never aligned); else, for one
// completed, "aligned"; for one that did not complete, as the job's mode
// asks (the tasks that did not ack it say nothing of how they would have
// taken it); "-" when neither tells
// (one read back from storage that does not check out).
func alignedOf(c control.CheckpointInfo) string {
	switch {
	case c.Unaligned:
		return "unaligned"
	case c.Savepoint:
		return "aligned"
	case c.Mode == jobspec.ModeAtLeastOnce:
		return "at-least-once"
	case c.Status == control.CheckpointCompleted || c.Status == control.CheckpointDiscarded || c.Status == control.CheckpointRemoving:
		return "aligned"
	case c.Mode == jobspec.ModeUnaligned:
		return "unaligned"
	case c.Mode != "":
		return "aligned"
	}
	return "-"
}

// printJSON prints v as indented JSON (-json of job ls, job status and
// worker ls): the API's own structs, whose field names are stable; a nil
// list is an empty array.
func printJSON(w io.Writer, a any) error {
	switch x := a.(type) {
	case []control.JobStatus:
		if x == nil {
			a = []control.JobStatus{}
		}
	case []control.WorkerStatus:
		if x == nil {
			a = []control.WorkerStatus{}
		}
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(a); err != nil {
		return fmt.Errorf("print JSON: %w", err)
	}
	return nil
}

// memoryCell formats an operator's memory and its limit in one unit, the
// limit's, rounded to a tenth: 160.5MiB/256MiB (not 164352KiB/256MiB).
func memoryCell(used, limit int64) string {
	unit, div := "B", int64(1)
	for _, u := range []struct {
		suffix string
		size   int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if limit >= u.size {
			unit, div = u.suffix, u.size
			break
		}
	}
	f := func(n int64) string {
		return strings.TrimSuffix(strconv.FormatFloat(float64(n)/float64(div), 'f', 1, 64), ".0") + unit
	}
	return f(used) + "/" + f(limit)
}

// size formats a byte count.
func size(n int64) string {
	switch {
	case n >= 1<<30:
		return strconv.FormatFloat(float64(n)/(1<<30), 'f', 1, 64) + " GiB"
	case n >= 1<<20:
		return strconv.FormatFloat(float64(n)/(1<<20), 'f', 1, 64) + " MiB"
	case n >= 1<<10:
		return strconv.FormatFloat(float64(n)/(1<<10), 'f', 1, 64) + " KiB"
	}
	return strconv.FormatInt(n, 10) + " B"
}

// olderNote warns of a restore of job (its status before, st) from one of
// its own checkpoints older than its latest completed one: its sinks
// committed the output of the checkpoints since, and the restored job,
// reading from the older offsets, commits it again under new checkpoint
// IDs, which no sink's stream deduplicates. "" otherwise.
func olderNote(st control.JobStatus, from string) string {
	job, id := st.Name, from
	if j, i, ok := strings.Cut(from, "/"); ok {
		job, id = j, i
	}
	n, err := strconv.ParseInt(strings.TrimPrefix(id, "chk-"), 10, 64)
	if err != nil || job != st.Name || st.LatestCheckpoint <= n || len(st.Sinks) == 0 {
		return ""
	}
	return fmt.Sprintf("note: checkpoint %d is older than the job's latest, %d: the output its sinks committed after checkpoint %d is published again, as new output (restore from %d not to repeat it)",
		n, st.LatestCheckpoint, n, st.LatestCheckpoint)
}
