package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirhq/weir/cmd/weir/internal/node"
	"github.com/weirhq/weir/cmd/weir/internal/worker"
	"github.com/weirhq/weir/coordinator/control"
	"github.com/weirhq/weir/coordinator/job"
	"github.com/weirhq/weir/coordinator/jobspec"
	"github.com/weirhq/weir/coordinator/modref"
	"github.com/weirhq/weir/coordinator/registry"
	"github.com/weirhq/weir/internal/spell"
	"github.com/weirhq/weir/transport/ingest"
	"github.com/weirhq/weir/transport/natsconn"
	"github.com/weirhq/weir/transport/sink"
	"github.com/weirhq/weir/transport/source"
	"github.com/weirhq/weir/transport/subject"
)

func init() {
	register(command{Name: "run", Summary: "deploy a job and follow it (embedded NATS unless -nats)", Run: runRun})
}

const runUsage = `[flags] JOB.yaml

Deploys the job and follows it: state changes and completed checkpoints, in
the order they happened, and the records its sinks output; once each, what
weir job status says of a job in trouble (checkpoints failing in a row and
what to change, a restart loop, the bottleneck); at the end, how many. A JetStream sink's output is what its
stream stores, read from the stream as a consumer of it would: a commit that
failed, or was published again after a recovery, is not output (once). A core
NATS sink's is what it publishes. Without -nats it starts the embedded default — NATS
with JetStream, the coordinator and a worker in this process, streams the job
names created on the fly — and stops everything at the end (-port pins its
NATS port, -metrics serves its Prometheus metrics, as weir up's do). An operator
module may be a Go package directory, which weir builds (GOOS=wasip1), or a
Rust, C, C++, AssemblyScript or WAT source file (.rs, .c, .cpp, .ts, .wat), which it
builds against the SDK it carries (guests/README.md), once what refuses a run
at once (an -input it cannot read, a -data directory another weir holds, a
-nats it cannot reach, a job of the name that has not ended, a stream the
job names that does not exist with -create-streams=false, a source filter
or sink subject its stream does not store (a stream there, or one
-create-streams would create for another source or sink), a job of the
name stopped with a savepoint: run again, it would read its streams from
the start and repeat the output it committed, so weir run says how to
restore it instead; a bounded job of the name that finished, while its
sinks' streams hold what it stored: give another name, or weir job rm it
first; one canceled or failed after a checkpoint runs again, saying so)
has not. Ctrl-C while -input publishes says how many records the stream
acknowledged and the command that publishes the rest (-from-line). A module that is a
local file, Go package or source goes to the module registry (once per
content) and the job names it by its digest (sha256:…), so that workers on
other machines can load it.`

// runOptions are weir run's flags.
type runOptions struct {
	spec     string // the spec's file, as given
	nats     natsFlags
	data     string
	inputs   inputFlags
	forDur   time.Duration
	idle     time.Duration
	show     int
	cancel   bool
	create   bool
	replicas int
	// replicasSet says -replicas was given; replicasNote why the streams
	// weir run creates have the replicas they have when it was not
	// (defaultReplicas).
	replicasSet  bool
	replicasNote string

	verbose  bool
	time     bool   // -time
	fromLine int    // -from-line: the first -input's line to start at
	port     int    // -port: of the embedded NATS server, 0 a free one
	metrics  string // -metrics: serve Prometheus metrics there
	// allowSystem is -allow-system-subjects: the spec may reach weir's
	// and NATS's own subjects and streams (the embedded coordinator
	// takes it; with -nats that coordinator's weir up flag decides).
	allowSystem bool
}

func runRun(ctx context.Context, std Stdio, args []string) error {
	fs := newFlags(std, "run", runUsage)
	var o runOptions
	o.nats.register(fs, "", "NATS server URL of a running weir (default: start the embedded one)")
	o.nats.registerWait(fs)
	fs.StringVar(&o.data, "data", "", "data directory of the embedded default (default: a temporary one)")
	fs.IntVar(&o.port, "port", 0, "client port of the embedded NATS server, as weir up's (0: a free one)")
	fs.StringVar(&o.metrics, "metrics", "", "serve Prometheus metrics on http://ADDR/metrics (e.g. 127.0.0.1:9464), as weir up does; not with -nats (weir up -metrics serves that coordinator's)")
	fs.Var(&o.inputs, "input", "publish the lines ('key<TAB>value' or 'value') of FILE ('-': stdin) to the job's first source, or of SOURCE=FILE to that source (repeatable); a keyed line goes on its key's subject where the source's subjects end in a wildcard (lines.> → lines.<key>); a source with a stop gets its input before the job is submitted; a JetStream stream stores each line once: after a lost connection weir run publishes again what it did not acknowledge (message ids: this run's, the input's place among the -input flags, the line's number), within the stream's duplicate window (10s at least, else refused); a line the stream refuses (a limit, a subject it does not store) fails weir run")
	fs.DurationVar(&o.forDur, "for", 0, "stop following after this long (0: until the job ends, -idle or Ctrl-C)")
	fs.DurationVar(&o.idle, "idle", 3*time.Second, "with -input: stop once the output of the input is committed — every source the input went to has read all of it, and the sinks stored a checkpoint taken after that, in one attempt of the job — and the output has been quiet this long (0: never); input to a core NATS source, which cannot say what it read, counts as committed with a checkpoint after one that completed after it; a job whose sources all have a stop is followed until it ends")
	fs.IntVar(&o.show, "show", 20, "print at most this many output records, and of the summary's latest value per key at most this many keys of each sink (0: none, the summary counts each sink's; -1: all; as weir job output -show N stops after N)")
	fs.BoolVar(&o.cancel, "cancel", false, "with -nats: cancel the job when weir run stops — at Ctrl-C before the summary, also one whose submit it cut short, running or waiting for room (the embedded default always does)")
	fs.BoolVar(&o.create, "create-streams", true, "create the JetStream streams the job names when they do not exist")
	fs.IntVar(&o.replicas, "replicas", 1, "with -nats: servers of a cluster that keep each stream -create-streams makes, 1-5; not given: as many as the coordinator keeps its job records with (weir up -replicas), at most the cluster's servers")
	fs.BoolVar(&o.verbose, "v", false, "log what the coordinator and workers do (the operators' own lines are logged from info up either way; -v adds their debug lines)")
	fs.BoolVar(&o.time, "time", false, timeFlagUsage)
	fs.IntVar(&o.fromLine, "from-line", 0, fromLineUsage+" (an interrupted -input says what to give)")
	fs.BoolVar(&o.allowSystem, "allow-system-subjects", false, "let the spec read and write weir's own subjects and streams (weir.ctl.>, weir.data.>, KV_weir_*, OBJ_weir_*) and NATS's ($JS.>, $KV.>, _INBOX.>, ...), as weir up -allow-system-subjects does; with -nats, that coordinator's own flag decides")
	pos, err := positional(fs, args, func(a []string) error { return parseFlags(fs, a) })
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		fs.Usage()
		return usagef("run: want one JOB.yaml")
	}
	o.replicasSet = flagGiven(fs, "replicas")
	if o.replicas < 1 || o.replicas > 5 || (o.nats.url == "" && o.replicas > 1) {
		return usagef("run: -replicas %d: 1 to 5, and above 1 only on a NATS cluster (-nats)", o.replicas)
	}
	if o.time && len(o.inputs) == 0 {
		return usagef("run: -time says how -input files' lines start; give -input too")
	}
	if o.fromLine < 0 || o.fromLine > 0 && len(o.inputs) == 0 {
		return usagef("run: -from-line %d: give a line number, 1 or more, of the first -input, and -input", o.fromLine)
	}
	if o.show < -1 {
		return usagef("run: -show %d: give a number of records, 0 or more (0: none; -1: all)", o.show)
	}
	if o.nats.url != "" && (o.port != 0 || o.metrics != "") {
		return usagef("run: -port and -metrics are the embedded server's: not with -nats")
	}
	if o.port < 0 || o.port > 65535 {
		return usagef("run: -port %d: want a port, 1 to 65535 (0: a free one)", o.port)
	}
	o.spec = pos[0]
	spec, err := jobspec.ParseFile(pos[0], jobspec.Options{CheckModule: checkModuleFile, Reserved: jobspec.Reserved{Allow: o.allowSystem}})
	if err != nil {
		return err
	}
	// What refuses the run at once — an -input it cannot publish, a data
	// directory another weir holds, a NATS it cannot reach, a job of the
	// name that runs, a stream that is not there or does not store what
	// the spec reads or writes — does so before modules are built, which
	// takes seconds.
	if err := checkInputs("-input", spec, o.inputs); err != nil {
		return err
	}

	var n *node.Node
	embedded := o.nats.url == ""
	var metricsLn net.Listener
	if o.metrics != "" {
		if metricsLn, err = listenMetrics("run", o.metrics); err != nil {
			return err
		}
		defer metricsLn.Close()
	}
	if embedded {
		port := o.port
		if port == 0 {
			port = -1 // a free one
		}
		dir := o.data
		if dir == "" {
			if dir, err = os.MkdirTemp("", "weir-run-"); err != nil {
				return err
			}
			defer os.RemoveAll(dir)
		}
		n, err = node.Start(ctx, node.Options{DataDir: dir, Port: port, Coordinator: true, Workers: 1, Log: logger(std, o.verbose),
			OperatorLog: operatorLogger(std, o.verbose), AllowSystemSubjects: o.allowSystem})
		if err != nil {
			if errors.Is(err, syscall.EADDRINUSE) {
				return fmt.Errorf("port %d is in use (a NATS server already? run on it with -nats %s; else give another -port, or none): %w",
					o.port, shellQuote(fmt.Sprintf("nats://127.0.0.1:%d", o.port)), err)
			}
			return inUseHint(err, o.data)
		}
		fmt.Fprintf(std.Out, "embedded NATS on %s, coordinator and worker in this process\n", n.Server.ClientURL())
		if metricsLn != nil {
			defer serveMetrics(metricsLn, n)()
			fmt.Fprintf(std.Out, "metrics on http://%s/metrics\n", metricsLn.Addr())
		}
		if u := os.Getenv(natsEnv); u != "" {
			// $WEIR_NATS is the other commands' default; weir run's is
			// its own NATS, which a user who set it did not expect.
			fmt.Fprintf(std.Out, "note: $%s is set (%s), but weir run starts its own NATS unless -nats says otherwise: weir run -nats \"$%s\" … runs the job there\n",
				natsEnv, natsconn.Redact(u), natsEnv)
		}
	} else {
		// A server that does not answer (a frozen process) is waited for
		// up to the connect timeout: the user is told, as by the other
		// commands (connectNATS).
		connecting := func() func() { return natsNotice(&o.nats, std.Err) }
		if n, err = node.Start(ctx, node.Options{NATS: o.nats.options("weir run"), CheckpointStore: node.StoreJetStream,
			Connecting: connecting}); err != nil {
			if _, ok := errors.AsType[*node.ConnectError](err); ok {
				return unreachableNATS(&o.nats, err)
			}
			return err
		}
	}
	defer n.Close()
	n.API.Timeout = o.nats.waitTimeout()
	notices := &apiNotices{w: std.Err}
	n.API.Waiting = notices.waiting
	// The job's status and the streams the spec names are a request
	// each: a refusal they foresee (a job of the name that has not
	// ended, a stream that is not there or does not store a source's
	// filter or a sink's subject: job.CheckStreams, the submit's own
	// check) comes before the build and the push, which take seconds and
	// store modules for a job that never runs. The submit still refuses
	// what changed since.
	note, err := checkRerun(ctx, n.API, n.JS, spec, pos[0], o, embedded)
	if err != nil {
		return err
	}
	// The streams -create-streams would create are checked as they will
	// be once created, after the build: the submit finds them so.
	var creating map[string]jetstream.StreamConfig
	if o.create && !embedded && !o.replicasSet {
		o.replicas, o.replicasNote = defaultReplicas(coordinatorReplicas(ctx, n.JS), clusterServers(n.Conn))
	}
	if o.create {
		creating = map[string]jetstream.StreamConfig{}
		for _, cfg := range streamsToCreate(spec, o.replicas) {
			creating[cfg.Name] = cfg
		}
	}
	if err := job.CheckStreams(ctx, n.JS, spec, rerunProbe, creating); err != nil {
		return interruptedIn(ctx, "checking the job's streams", err)
	}
	// A stop (end, a time) that finds nothing to read is refused here,
	// before -create-streams creates a stream for a run that never starts
	// (the submit would refuse it, after): a stream to be created holds
	// nothing, and one -input publishes to is the submit's to judge.
	fed := map[string]bool{}
	for _, in := range o.inputs {
		if src, _ := inputSource(spec, in); src != nil && src.Kind == jobspec.KindJetStream {
			fed[src.Stream] = true
		}
	}
	if err := job.CheckStops(ctx, n.JS, spec, rerunProbe, creating, fed); err != nil {
		return err
	}
	if note != "" {
		fmt.Fprintf(std.Err, "weir: %s\n", note)
	}
	for _, w := range slices.Concat(jobspec.Unread(spec), jobspec.OutputPorts(spec), jobspec.FeedbackLoops(spec)) {
		fmt.Fprintf(std.Err, "weir: warning: %s\n", w)
	}
	builder := &moduleBuilder{std: std}
	defer builder.Close()
	built, err := builder.buildSpec(ctx, spec)
	if err != nil {
		return err
	}
	if err := pushLocalModules(ctx, std.Out, n.Registry, spec, built); err != nil {
		return err
	}
	// A registry reference the coordinator would refuse at submit is
	// refused before any stream is created for a job that never runs.
	if err := checkRegistryModules(ctx, std.Err, n.Registry, spec, filepath.Dir(pos[0])); err != nil {
		return err
	}
	if o.create {
		missing := missingStreams(ctx, n.JS, spec)
		if err := createStreams(ctx, std, n.JS, spec, o.replicas); err != nil {
			return interruptedIn(ctx, "creating the job's streams", err)
		}
		sayReplicas(std, missing, o.replicas, o.replicasNote, clusterServers(n.Conn))
	}
	return follow(ctx, std, n, spec, o, embedded, notices)
}

// checkRerun looks at the job of spec's name, if there is one. One that
// has not ended is refused as the submit would refuse it (submitRefused),
// before anything is built or pushed for a run that would not start.
//
// Else it looks at the job's earlier run, if it ended after it
// completed a checkpoint: that run committed output up to the checkpoint,
// and a new run reads its streams from the start, so its sinks' streams
// get that output again (exactly-once holds within a run and its
// restores, not across runs). A job stopped with a savepoint — stopped to
// go on later — is refused, saying how to restore it with the spec at
// specPath, on the -nats server or where weir up serves the -data
// directory (a spec of another name starts over). One canceled or failed
// after a checkpoint runs again, as weir run always ran it: the note says
// that it repeats that output and how a restore would have gone on
// instead. A finished job (a bounded one run again) whose sinks' streams
// hold what it stored since its submit is refused as a stopped one is
// (finishedRerun); one that stored nothing, and one that completed no
// checkpoint, which committed no output to repeat, run again as they are. The earlier run is asked for once, briefly and
// without a notice: a coordinator that does not answer, or a job the
// name does not have, is the submit's to say.
func checkRerun(ctx context.Context, api *control.APIClient, js jetstream.JetStream, spec *jobspec.Spec, specPath string, o runOptions, embedded bool) (note string, err error) {
	if embedded && o.data == "" {
		return "", nil // a fresh directory: no job ran there
	}
	name := spec.Name
	probe := *api
	probe.Waiting = nil
	pctx, cancel := context.WithTimeout(ctx, rerunProbe)
	defer cancel()
	st, err := probe.Job(pctx, name)
	if err != nil {
		return "", nil
	}
	if !st.State.Terminal() {
		return "", submitRefused(job.NotEnded(name, st.State), spec, o, embedded, 0)
	}
	if st.State == control.JobFinished && st.Drained {
		// Its final savepoint restores into nothing (its sources would
		// read on past their end), and a run from the start repeats it all.
		next := "start over (with start: new on a JetStream source, it reads what is stored from its submit on)"
		if h := control.ContinueHint(st.DrainedAt); h != "" {
			next = "continue after it (" + h + ")"
		}
		return "", fmt.Errorf("job %s was drained with savepoint %d: a new run reads its streams from the start and would repeat the output it committed; "+
			"give the spec another name to %s", name, st.DrainedWithSavepoint, next)
	}
	where, hint := " with", o.nats.hint()
	if embedded {
		d := servedBy(o.data)
		where, hint = " with "+d.up+" running", d.hint()
	}
	if st.State == control.JobFinished {
		if held := earlierOutput(ctx, js, st, spec); held != "" {
			return "", finishedRerun(st, held, where, hint)
		}
		return "", nil // it stored nothing to repeat
	}
	if st.LatestCheckpoint == 0 {
		return "", nil
	}
	restore := fmt.Sprintf("weir job restore%s %s -from %d -spec %s", hint, shellQuote(name), st.LatestCheckpoint, shellQuote(specPath))
	if st.StoppedWithSavepoint != 0 {
		return "", fmt.Errorf("job %s stopped with savepoint %d: a new run reads its streams from the start and would repeat the output it committed; "+
			"go on from there%s: %s (or give the spec another name to start over)", name, st.StoppedWithSavepoint, where, restore)
	}
	return fmt.Sprintf("job %s %s after checkpoint %d completed: this run reads its streams from the start and repeats the output committed up to it "+
		"(to go on from there instead%s: %s)", name, st.State, st.LatestCheckpoint, where, restore), nil
}

// rerunProbe bounds checkRerun's question, and each of the stream
// checks' (job.CheckStreams).
const rerunProbe = 2 * time.Second

// apiNotices tells w what weir run waits for once a request of the job
// API has had no answer for a second (control.APIClient.Waiting), as
// connectAPI does for the other commands — but once per wait: weir run
// asks for the job's status every moment, and while the coordinator does
// not answer (an election in its storage, a restart) every poll would
// say so again. A request of an operation is said again only once one
// of that operation got an answer (answered).
type apiNotices struct {
	w    io.Writer
	mu   sync.Mutex
	said map[string]bool // operations said waiting for since their last answer
}

// waiting is control.APIClient.Waiting.
func (a *apiNotices) waiting(op string, wait time.Duration) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.said[op] {
		return
	}
	if a.said == nil {
		a.said = map[string]bool{}
	}
	a.said[op] = true
	sayAPIWait(a.w, op, wait)
}

// answered notes that the coordinator answered a request of op: the next
// one that waits is said again.
func (a *apiNotices) answered(op string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.said, op)
}

// checkRegistryModules reports the first operator whose module names a
// registry entry (NAME@VERSION, NAME, sha256:DIGEST) that reg lacks, as
// the coordinator's submit does. An operator whose module is a bare NAME
// while dir, the spec's directory, holds a module source of that name
// (localNamesake) runs the registry's latest NAME all the same: a note
// on w says which version, and that ./NAME would build the local one.
func checkRegistryModules(ctx context.Context, w io.Writer, reg *registry.Registry, spec *jobspec.Spec, dir string) error {
	for _, op := range spec.Operators {
		ref, err := modref.Parse(op.Module)
		if err != nil || ref.Kind == modref.File {
			continue
		}
		local := localNamesake(dir, ref)
		if err := registry.Check(ctx, reg, ref); err != nil {
			if local != "" {
				return fmt.Errorf("operator %s: module %s: %w; to build %s beside the spec, write module: %s", op.Name, op.Module, err, local, local)
			}
			return fmt.Errorf("operator %s: module %s: %w", op.Name, op.Module, err)
		}
		if local != "" {
			which := "the registry's " + ref.Name
			if ms, err := reg.Find(ctx, ref); err == nil && len(ms) > 0 {
				latest := slices.MaxFunc(ms, func(a, b registry.Module) int { return a.Version - b.Version })
				which = "the registry's latest, " + latest.Ref()
			}
			fmt.Fprintf(w, "weir: note: operator %s: module: %s is %s, not the %s beside the spec; write module: %s to build that one\n",
				op.Name, op.Module, which, local, local)
		}
	}
	return nil
}

// localNamesake returns the module source beside a job spec (in dir, its
// directory) that ref, a registry NAME without a version, leaves unused,
// as the spec would write it to use it: "./NAME" for a Go package
// directory NAME, "./NAME.wasm" (or .rs, .c, .ts, .wat) for a file. ""
// if there is none, or ref gives a version: a version is meant.
func localNamesake(dir string, ref modref.Ref) string {
	if dir == "" || ref.Kind != modref.Registry || ref.Version != 0 {
		return ""
	}
	if m, _ := filepath.Glob(filepath.Join(dir, ref.Name, "*.go")); len(m) > 0 {
		return "./" + ref.Name
	}
	for _, ext := range []string{".wasm", ".rs", ".c", ".ts", ".wat"} {
		if st, err := os.Stat(filepath.Join(dir, ref.Name+ext)); err == nil && !st.IsDir() {
			return "./" + ref.Name + ext
		}
	}
	return ""
}

// checkModuleFile reports a module file (or Go package directory) that is
// not there; registry references are checked by the coordinator.
func checkModuleFile(ref modref.Ref) error {
	if ref.Kind != modref.File {
		return nil
	}
	_, err := os.Stat(ref.Path)
	if errors.Is(err, os.ErrNotExist) {
		return errors.New("no such file")
	}
	return err
}

// createStreams creates the JetStream streams a job names that do not exist
// yet (streamsToCreate), each kept by replicas servers.
func createStreams(ctx context.Context, std Stdio, js jetstream.JetStream, spec *jobspec.Spec, replicas int) error {
	for _, cfg := range streamsToCreate(spec, replicas) {
		if _, err := js.Stream(ctx, cfg.Name); err == nil {
			continue
		} else if !errors.Is(err, jetstream.ErrStreamNotFound) {
			return fmt.Errorf("stream %s: %w", cfg.Name, err)
		}
		err := createStream(ctx, std, js, cfg,
			func(other string) string {
				return fmt.Sprintf("name %s in the spec, or choose subjects no stream stores", other)
			},
			"the job's sources and sinks on it name subjects that overlap (%s), and a stream's subjects may not: create the stream with subjects that store them all, or change the spec")
		if err != nil {
			return err
		}
	}
	return nil
}

// createStream creates the stream of cfg (weir run -create-streams, weir
// stream add) and says so on std.Out. A refusal says why and what to do:
// for a stream that stores some of its subjects already, that stream and
// useOther(its name); for subjects that overlap each other, overlapping
// (a format of the subjects); for more replicas than the servers keep,
// the flag.
func createStream(ctx context.Context, std Stdio, js jetstream.JetStream, cfg jetstream.StreamConfig, useOther func(other string) string, overlapping string) error {
	if _, err := js.CreateStream(ctx, cfg); err != nil {
		var apiErr *jetstream.APIError
		if errors.As(err, &apiErr) && apiErr.ErrorCode == errCodeSubjectOverlap {
			if other := streamStoring(ctx, js, cfg.Subjects); other != nil {
				return fmt.Errorf("create stream %s (subjects %s): stream %s stores some of them already (its subjects: %s); %s: %w",
					cfg.Name, strings.Join(cfg.Subjects, ", "), other.Name, strings.Join(other.Subjects, ", "), useOther(other.Name), err)
			}
		}
		if errors.As(err, &apiErr) && apiErr.ErrorCode == errCodeInvalidStreamConfig && strings.Contains(apiErr.Description, " overlaps with ") {
			return fmt.Errorf("create stream %s: "+overlapping+": %w", cfg.Name, strings.Join(cfg.Subjects, ", "), err)
		}
		if hint := replicasHint(err, cfg.Replicas); hint != "" {
			return fmt.Errorf("create stream %s: %s: %w", cfg.Name, hint, err)
		}
		return fmt.Errorf("create stream %s: %w", cfg.Name, err)
	}
	fmt.Fprintf(std.Out, "created stream %s (subjects %s, %d replica(s))\n", cfg.Name, strings.Join(cfg.Subjects, ", "), cfg.Replicas)
	return nil
}

// streamsToCreate returns the configuration createStreams gives each
// stream the job's JetStream sources and sinks name, where it does not
// exist, kept by replicas servers: the subjects of every source (its
// filter) and sink naming it, and a duplicate window long enough for
// each of them — a sink's what exactly-once needs, a source's the
// server's default (2m), within which -input publishes again what a lost
// connection left unacknowledged. A subject another of them covers is
// left out (a stream's subjects may not overlap); a sink's stream allows
// atomic and fast batches.
func streamsToCreate(spec *jobspec.Spec, replicas int) []jetstream.StreamConfig {
	var cfgs []jetstream.StreamConfig
	for _, s := range spec.Sources {
		if s.Kind == jobspec.KindJetStream {
			cfgs = addToStream(cfgs, s.Stream, sourceSubject(s), replicas, defaultDuplicateWindow, false)
		}
	}
	for _, s := range spec.Sinks {
		if s.Kind == jobspec.KindJetStream {
			cfgs = addToStream(cfgs, s.Stream, sinkSubjects(s), replicas, worker.DuplicateWindow(spec.Checkpointing, s), true)
		}
	}
	return cfgs
}

// addToStream adds to the configuration of stream name in cfgs (a new
// one, kept by replicas servers, if there is none) the subject subj of a
// source or sink (a sink's stream allows atomic and fast batches) and
// its duplicate window, and returns cfgs: a subject another covers is
// left out, and the window is the longest.
func addToStream(cfgs []jetstream.StreamConfig, name, subj string, replicas int, window time.Duration, sink bool) []jetstream.StreamConfig {
	i := slices.IndexFunc(cfgs, func(c jetstream.StreamConfig) bool { return c.Name == name })
	if i < 0 {
		cfgs = append(cfgs, jetstream.StreamConfig{Name: name, Replicas: replicas})
		i = len(cfgs) - 1
	}
	c := &cfgs[i]
	if !slices.ContainsFunc(c.Subjects, func(have string) bool { return subject.Covers(have, subj) }) {
		c.Subjects = slices.DeleteFunc(c.Subjects, func(have string) bool { return subject.Covers(subj, have) })
		c.Subjects = append(c.Subjects, subj)
	}
	c.Duplicates = max(c.Duplicates, window)
	c.AllowAtomicPublish = c.AllowAtomicPublish || sink
	c.AllowBatchPublish = c.AllowBatchPublish || sink
	return cfgs
}

// defaultDuplicateWindow is the duplicate window nats-server gives a
// stream created without one.
const defaultDuplicateWindow = 2 * time.Minute

// JetStream API error codes of a stream (or bucket) that asks for more
// replicas than the servers can keep.
const (
	errCodeReplicasNotSupported  jetstream.ErrorCode = 10074 // not a cluster
	errCodeInsufficientResources jetstream.ErrorCode = 10023 // too little storage (or too few servers)
	errCodeNoSuitablePeers       jetstream.ErrorCode = 10005 // too few servers
)

// replicasHint says what to do when err, from creating or scaling a stream
// or bucket with replicas (-replicas), is the server refusing that many;
// "" otherwise. The server says "replicas > 1 not supported in
// non-clustered mode", "no suitable peers for placement" or "insufficient
// resources", naming neither the flag nor the way out.
func replicasHint(err error, replicas int) string {
	var apiErr *jetstream.APIError
	if replicas <= 1 || !errors.As(err, &apiErr) {
		return ""
	}
	switch apiErr.ErrorCode {
	case errCodeReplicasNotSupported:
		return fmt.Sprintf("-replicas %d needs a NATS cluster, and this server is not clustered: give -replicas 1", replicas)
	case errCodeInsufficientResources, errCodeNoSuitablePeers:
		// A cluster that has just started counts its servers as they
		// report in: a few seconds.
		return fmt.Sprintf("-replicas %d needs %d servers of the cluster with JetStream and room to store, up and known to it (a cluster just started takes a few seconds): give at most as many replicas as there are",
			replicas, replicas)
	}
	return ""
}

// errCodeSubjectOverlap is the JetStream API's error code for a stream
// whose subjects overlap another stream's.
const errCodeSubjectOverlap jetstream.ErrorCode = 10065

// errCodeInvalidStreamConfig is the JetStream API's error code for a
// stream configuration it refuses (JSStreamInvalidConfigF), whatever the
// reason its description gives: "subject "a.>" overlaps with "a.b"" for
// subjects that overlap each other, but also a duplicate window longer
// than the max age, and others.
const errCodeInvalidStreamConfig jetstream.ErrorCode = 10052

// streamStoring returns the configuration of a stream that stores some of
// subjects, or nil if none is found.
func streamStoring(ctx context.Context, js jetstream.JetStream, subjects []string) *jetstream.StreamConfig {
	ctx, cancel := context.WithCancel(ctx) // ends the lister when a stream is found early
	defer cancel()
	l := js.ListStreams(ctx)
	for info := range l.Info() {
		for _, have := range info.Config.Subjects {
			for _, want := range subjects {
				if subject.Overlap(have, want) {
					cfg := info.Config
					return &cfg
				}
			}
		}
	}
	return nil
}

// inputSubject is the subject -input publishes a line with key (maybe
// empty) on, for a source reading pattern: the pattern's wildcards become
// "input", except a last one, which becomes the key where the key fits
// (on ">" a key of one or more tokens, on "*" one without dots), so that
// the stream keeps each key's lines on a subject of their own.
func inputSubject(pattern, key string) string {
	toks := strings.Split(pattern, ".")
	for i, t := range toks {
		if t != "*" && t != ">" {
			continue
		}
		toks[i] = "input"
		if i == len(toks)-1 && i > 0 && key != "" && (t == ">" || !strings.Contains(key, ".")) {
			tmpl, err := subject.Parse(strings.Join(toks[:i], ".") + "." + subject.KeyToken)
			if err == nil && tmpl.Check([]byte(key)) == nil {
				toks[i] = key
			}
		}
	}
	return strings.Join(toks, ".")
}

// sinkSubjects is the subject a sink publishes on, or for a keyed sink
// ("out.{key}") the filter of all it publishes on ("out.>").
func sinkSubjects(s jobspec.Sink) string {
	t, err := subject.Parse(s.Subject)
	if err != nil { // the spec was parsed: not reached
		return s.Subject
	}
	return t.Filter()
}

// watch follows what sink s outputs, from now on, until stop. A
// JetStream sink's output is what its stream stores, read as a consumer
// of the stream would (streamWatch): an exactly-once sink's commit that
// failed, and every attempt's publishes that the stream refused or
// dropped as duplicates, are no output — a subscription to its subjects
// saw and counted them all (20 000 records out of a job that stored
// 1 000). Others' (core NATS, at-most-once) is what they publish.
func (o *output) watch(ctx context.Context, nc *nats.Conn, s jobspec.Sink) (stop func(), err error) {
	if s.Kind == jobspec.KindJetStream && s.Guarantee != jobspec.AtMostOnce {
		if start, ok := storedSince(ctx, o.js, s); ok {
			o.since[s.Name] = start
		}
		st, err := o.js.Stream(ctx, s.Stream)
		if err == nil {
			return o.watchStream(ctx, s, st.CachedInfo().State.LastSeq+1, 0)
		}
		if !errors.Is(err, jetstream.ErrStreamNotFound) {
			return nil, fmt.Errorf("watch sink %s: stream %s: %w", s.Name, s.Stream, err)
		}
		// Not there (-create-streams=false): the job fails as it starts;
		// what the sink publishes meanwhile is watched as below.
	}
	return o.watchSubjects(nc, s)
}

// watchSubjects follows what sink s publishes on its subjects, from now
// on, through a subscription: a core NATS sink's output, which nothing
// keeps.
func (o *output) watchSubjects(nc *nats.Conn, s jobspec.Sink) (stop func(), err error) {
	sub, err := nc.Subscribe(sinkSubjects(s), func(m *nats.Msg) {
		if !batchEnd(m) {
			o.record(s.Name, m.Header, m.Data)
		}
	})
	if err != nil {
		return nil, fmt.Errorf("watch sink %s: %w", s.Name, err)
	}
	o.subs = append(o.subs, sinkSub{s.Name, sub})
	return func() { _ = sub.Unsubscribe() }, nil
}

// sinkSub is the subscription that watches a sink that is not
// JetStream's, with the sink's name.
type sinkSub struct {
	sink string
	sub  *nats.Subscription
}

// streamWatch reads what a JetStream sink's stream stores on the sink's
// subjects through an ordered consumer, made again from the first
// message not handled when it stalls (output.unstall).
type streamWatch struct {
	spec   jobspec.Sink
	sink   string // the sink's name
	stream string // its stream's
	filter string // its subjects (sinkSubjects)
	// mu guards cons and cc, which unstall replaces, and the handling of
	// a message: a consumer stopped for a new one may deliver one more.
	mu   sync.Mutex
	cons jetstream.Consumer
	cc   jetstream.ConsumeContext
	// handled is the stream sequence of the latest message handled
	// (printed, counted); the one before the first to read until then.
	handled atomic.Uint64
	// until, if not 0, is the last stream sequence to show (weir job
	// output -until-now): later messages are passed over.
	until uint64
	// seen and since are unstall's: the handled sequence it saw last,
	// and since when.
	seen  uint64
	since time.Time
	// asking is caughtUp's question in flight, if any, asked the
	// consumer it asks, askedAt when; under mu.
	asking  chan bool
	asked   jetstream.Consumer
	askedAt time.Time
}

// consumer returns w's ordered consumer and its consume context.
func (w *streamWatch) consumer() (jetstream.Consumer, jetstream.ConsumeContext) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.cons, w.cc
}

// stop stops w's consumer.
func (w *streamWatch) stop() {
	_, cc := w.consumer()
	cc.Stop()
}

// shownUntil reports whether w has shown every message of its stream up
// to w.until: it handled that sequence, or one after it, or it caught up
// with the stream (the last message up to until was on another subject,
// and none came since).
func (w *streamWatch) shownUntil(ctx context.Context) bool {
	return w.handled.Load() >= w.until || w.caughtUp(ctx)
}

// watchStream follows what sink s's stream stores on the sink's subjects
// from sequence start on (weir run: the stream's next sequence), each
// message once; up to sequence until only, if it is not 0.
func (o *output) watchStream(ctx context.Context, s jobspec.Sink, start, until uint64) (stop func(), err error) {
	w := &streamWatch{spec: s, sink: s.Name, stream: s.Stream, filter: sinkSubjects(s), until: until}
	w.handled.Store(start - 1)
	if err := o.consume(ctx, w, start); err != nil {
		return nil, err
	}
	o.streams = append(o.streams, w)
	return w.stop, nil
}

// consume starts w's ordered consumer from stream sequence start.
func (o *output) consume(ctx context.Context, w *streamWatch, start uint64) error {
	cons, err := o.js.OrderedConsumer(ctx, w.stream, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{w.filter},
		DeliverPolicy:  jetstream.DeliverByStartSequencePolicy,
		OptStartSeq:    start,
	})
	if err != nil {
		return fmt.Errorf("watch sink %s: stream %s: %w", w.sink, w.stream, err)
	}
	// Bounded by bytes: 500 messages (nats.go's default) of 100 KB ask
	// for 50 MB at once, on the connection that an embedded weir's
	// worker shares, whose own consumers ask for more: the server cuts
	// a connection as a slow consumer once 64 MiB wait for it.
	cc, err := cons.Consume(func(m jetstream.Msg) { o.handle(w, m) },
		jetstream.PullMaxMessagesWithBytesLimit(500, source.PullBytes(o.js.Conn(), source.DefaultPullMaxBytes)))
	if err != nil {
		return fmt.Errorf("watch sink %s: stream %s: %w", w.sink, w.stream, err)
	}
	w.mu.Lock()
	w.cons, w.cc = cons, cc
	w.mu.Unlock()
	return nil
}

// handle prints and counts message m of w's stream, once: a consumer
// unstall replaced may deliver a message its successor delivers too.
func (o *output) handle(w *streamWatch, m jetstream.Msg) {
	w.mu.Lock()
	defer w.mu.Unlock()
	md, err := m.Metadata()
	switch {
	case err == nil && md.Sequence.Stream <= w.handled.Load():
		return // handled already
	case err == nil && w.until != 0 && md.Sequence.Stream > w.until:
		w.handled.Store(md.Sequence.Stream)
		return // after what the stream held when it was asked for
	}
	if o.ours(w.spec, m.Headers()) {
		o.record(w.sink, m.Headers(), m.Data())
	}
	if err == nil {
		w.handled.Store(md.Sequence.Stream)
	}
}

// outputStall is how long a stream watch may hand on nothing while its
// stream holds a message on its subjects after the last it handled,
// before unstall makes its consumer again.
const outputStall = 20 * time.Second

// unstall makes the consumer of each of o's stream watches that stalled
// again, from the first message it did not handle, saying so on log: one
// that handed on nothing for after (by now) while its stream holds a
// message on its subjects after the last it handled. An ordered consumer
// lost with its server (a cluster's server that went away) is asked for
// under the same name again and again, for minutes, where the server
// answers that it is offline: the watch would show nothing more, without
// a word. It is called from one goroutine, the one following the job.
func (o *output) unstall(ctx context.Context, now time.Time, after time.Duration, log io.Writer) {
	for _, w := range o.streams {
		h := w.handled.Load()
		if h != w.seen || w.since.IsZero() {
			w.seen, w.since = h, now
			continue
		}
		if now.Sub(w.since) < after || w.until != 0 && h >= w.until {
			continue
		}
		w.since = now // looked at: again no sooner than after
		st, err := o.js.Stream(ctx, w.stream)
		if err != nil {
			continue
		}
		last, err := st.GetLastMsgForSubject(ctx, w.filter)
		if err != nil || last.Sequence <= h {
			continue // nothing to hand on
		}
		// The stalled consumer is stopped once the new one runs, and
		// not waited for: its Stop waits for the lock its attempts to
		// make its consumer again hold.
		_, old := w.consumer()
		if err := o.consume(ctx, w, h+1); err != nil {
			fmt.Fprintf(log, "sink %s: its stream's consumer handed on nothing for %s while stream %s holds message %d; following it again failed: %v\n",
				w.sink, after, w.stream, last.Sequence, err)
			continue
		}
		go old.Stop()
		fmt.Fprintf(log, "sink %s: its stream's consumer handed on nothing for %s while stream %s holds message %d (lost with its server?): following again from sequence %d\n",
			w.sink, after, w.stream, last.Sequence, h+1)
	}
}

// ours reports whether a message the stream of sink s holds on its
// subjects is the job's output. Another job's exactly-once sink may write
// to the same stream and subjects (two jobs' "windows.{key}"): an
// exactly-once sink's message ids start with its job's name
// ("<job>/<task>/<checkpoint>/<index>"), so a message with an id of
// another job's is not this one's. An at-least-once sink's records carry
// nothing to tell: all are taken as its.
func (o *output) ours(s jobspec.Sink, h nats.Header) bool {
	if o.job == "" || s.Guarantee != jobspec.ExactlyOnce {
		return true
	}
	id := h.Get(jetstream.MsgIDHeader)
	return id == "" || strings.HasPrefix(id, o.job+"/")
}

// caughtUp reports whether w has handled every message its stream stores
// on its subjects now: the server has none left to deliver, and the last
// it delivered is handled. It gives up (false) when ctx ends, and a
// question in flight goes on: the ordered consumer holds the lock Info
// takes for as long as it tries to create its consumer again, forever on
// a stream that was deleted, so a later call waits for the same question
// rather than asking another. Each question is bounded by
// natsconn.ElectionTry: an ordered consumer's Info is a request without
// nats.go's default timeout, and one that no server answered (a lost
// reply, an election) kept weir job output waiting for ever.
func (w *streamWatch) caughtUp(ctx context.Context) bool {
	called := time.Now()
	for {
		cons, _ := w.consumer()
		w.mu.Lock()
		if w.asking == nil || w.asked != cons {
			done := make(chan bool, 1)
			w.asking, w.asked, w.askedAt = done, cons, time.Now()
			go func() {
				ictx, cancel := context.WithTimeout(context.Background(), natsconn.ElectionTry)
				defer cancel()
				info, err := cons.Info(ictx)
				done <- err == nil && info.NumPending == 0 && w.handled.Load() >= info.Delivered.Stream
			}()
		}
		asking, at := w.asking, w.askedAt
		w.mu.Unlock()
		select {
		case ok := <-asking:
			w.mu.Lock()
			if w.asking == asking {
				w.asking = nil
			}
			w.mu.Unlock()
			if at.Before(called) {
				continue // asked before this call: ask again
			}
			return ok
		case <-ctx.Done():
			return false
		}
	}
}

// lagging is a sink whose watch had not handled all its output when the
// summary gave up waiting: stream is its stream, or empty for a sink that
// is not JetStream's.
type lagging struct {
	sink, stream string
}

func (l lagging) String() string {
	if l.stream == "" {
		return "sink " + l.sink
	}
	return fmt.Sprintf("sink %s (stream %s)", l.sink, l.stream)
}

// catchUp waits until w caught up with its stream (caughtUp), and reports
// whether it did before ctx ended.
func (w *streamWatch) catchUp(ctx context.Context) bool {
	for !w.caughtUp(ctx) {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(20 * time.Millisecond):
		}
	}
	return true
}

// settle ends the watch of every sink once every record the server sent
// it so far is handled (printed, counted), each step bounded by wait: the
// watch of a JetStream sink's stream waits until it caught up with the
// stream, or wait passed; the subscriptions of the other sinks are then
// drained, whatever happened to the stream watches, within a wait of
// their own. It returns the watches that did not catch up, and the
// subscriptions that did not finish draining: the summary's figures miss
// some of their records.
//
// The server sends a sink's records to the watch as it takes them from
// the sink — its acknowledgement, from the stream's goroutine, may
// overtake that by a moment, but the job's status says it ended requests
// later; they may still be on the wire, though, or queued for the
// subscription's handler, which runs on a goroutine of its own. Drain
// flushes the connection (what the server sent before is then received)
// and closes the subscription once its queue is handled. Without it weir
// run summed up a finished job with committed records still queued:
// missing from the latest values, printed after the summary.
func (o *output) settle(ctx context.Context, wait time.Duration) (behind []lagging) {
	// A stream's watch has read all the stream stores once the server
	// has nothing left to deliver to it, and it handled what it got.
	streams, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	for _, w := range o.streams {
		if !w.catchUp(streams) {
			behind = append(behind, lagging{w.sink, w.stream})
			// Stop waits for the lock caughtUp's Info may wait for; what
			// the watch handles meanwhile is not output (o.summed).
			go w.stop()
			continue
		}
		w.stop()
	}
	subs, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	type closing struct {
		sink   string
		closed <-chan nats.SubStatus
	}
	var draining []closing
	for _, s := range o.subs {
		closed := s.sub.StatusChanged(nats.SubscriptionClosed)
		if err := s.sub.Drain(); err == nil { // else closed already, or its connection is
			draining = append(draining, closing{s.sink, closed})
		}
	}
	for _, d := range draining {
		select {
		case <-d.closed:
		case <-subs.Done():
			behind = append(behind, lagging{sink: d.sink})
		}
	}
	return behind
}

// storedSince returns where a jetstream sink's stream stands now, for
// countStored to count what the job stores after it: the stream's next
// sequence, and false if the stream is missing or may drop what was
// stored (limits on messages, bytes, age or messages per subject: the
// word count's latest value per key, say), so that what it holds later
// does not count what was stored.
func storedSince(ctx context.Context, js jetstream.JetStream, s jobspec.Sink) (uint64, bool) {
	st, err := js.Stream(ctx, s.Stream)
	if err != nil {
		return 0, false
	}
	info := st.CachedInfo()
	if c := info.Config; c.MaxMsgs > 0 || c.MaxBytes > 0 || c.MaxAge > 0 || c.MaxMsgsPerSubject > 0 || c.Retention != jetstream.LimitsPolicy {
		return 0, false
	}
	return info.State.LastSeq + 1, true
}

// countStored counts the messages a jetstream sink's stream holds on the
// sink's subjects from sequence start on (storedSince): the records the
// job stored, each once. A commit published again after a recovery, which
// JetStream dropped by its message ids, is not among them, though a
// subscriber to the subjects saw it twice.
func countStored(ctx context.Context, js jetstream.JetStream, s jobspec.Sink, start uint64) (int, error) {
	cons, err := js.CreateConsumer(ctx, s.Stream, jetstream.ConsumerConfig{
		FilterSubjects:    []string{sinkSubjects(s)},
		DeliverPolicy:     jetstream.DeliverByStartSequencePolicy,
		OptStartSeq:       start,
		AckPolicy:         jetstream.AckNonePolicy,
		InactiveThreshold: time.Minute, // removed by the server if the delete below fails
	})
	if err != nil {
		return 0, err
	}
	n := cons.CachedInfo().NumPending
	_ = js.DeleteConsumer(context.WithoutCancel(ctx), s.Stream, cons.CachedInfo().Name)
	return int(n), nil
}

// batchEnd reports whether m is the empty message that ends a JetStream
// fast batch (its reply subject says so: operation 3, "end of batch"):
// the server stores nothing for it, so it is no record.
func batchEnd(m *nats.Msg) bool {
	return len(m.Data) == 0 && len(m.Header) == 0 && strings.HasSuffix(m.Reply, ".3.$FI")
}

// sourceSubject is the subject (pattern) a source reads.
func sourceSubject(s jobspec.Source) string {
	switch {
	case s.PartitionFilter != "":
		return strings.Replace(s.PartitionFilter, source.PartitionToken, "*", 1)
	case s.Filter != "":
		return s.Filter
	case s.Subject != "":
		return s.Subject
	}
	return strings.ToLower(s.Stream) + ".>"
}

// inputFlags are the repeated -input flags: FILE or SOURCE=FILE.
type inputFlags []string

func (f *inputFlags) String() string     { return strings.Join(*f, ",") }
func (f *inputFlags) Set(v string) error { *f = append(*f, v); return nil }

// publishInputs publishes every -input file to its source, of those
// sources only takes (nil: every one): weir run publishes the input of
// bounded sources (with a stop, bounded) before the submit, so that their
// stop (end: the stream's end at the submit) covers it, and the others'
// after. nonce is this weir run's (ingest.Nonce): with the input's place
// among the -input flags and a line's number it makes the line's message
// id. A core NATS source's lines go out on nc; a JetStream source's on a
// connection of their own (dial, with ingest's options). as names the
// flag or command in what it says: "-input", or "input" (weir input).
// With timed, each line starts with its record's timestamp (-time). The
// first input is published from its line from on (-from-line; 0: all of
// it). An interrupt (ctx ended) that cuts an input short is an *inputCut,
// which names the inputs after it not published (later: those published
// after these) and leaves its resume to the caller.
func publishInputs(ctx context.Context, std Stdio, as string, timed bool, nc *nats.Conn, dial func(...nats.Option) (*nats.Conn, error), spec *jobspec.Spec, inputs inputFlags, only func(jobspec.Source) bool, nonce string, from int, later []string) (int, error) {
	total := 0
	var conn *nats.Conn // for JetStream sources, made at the first
	defer func() {
		if conn != nil {
			conn.Close()
		}
	}()
	for i, in := range inputs {
		src, file := inputSource(spec, in)
		if src == nil {
			name, _, _ := strings.Cut(in, "=")
			return total, noSource(as, in, name, spec)
		}
		if only != nil && !only(*src) {
			continue
		}
		var pub *ingest.Publisher
		if src.Kind == jobspec.KindJetStream {
			var err error
			if conn == nil {
				if conn, err = dial(ingest.ConnOptions()...); err != nil {
					return total, fmt.Errorf("%s %s: %w", as, file, err)
				}
			}
			pub, err = ingest.New(ctx, conn, ingest.Config{
				Stream:   src.Stream,
				IDPrefix: nonce + "." + strconv.Itoa(i) + ".",
				Retrying: func(r ingest.Retry) { fmt.Fprintf(std.Out, "%s %s: %s\n", as, file, r) },
			})
			if err != nil {
				return total, fmt.Errorf("%s %s: %w", as, file, err)
			}
		}
		start := 0
		if i == 0 {
			start = from
		}
		c, err := publishInput(ctx, as, timed, nc, pub, *src, file, std.In, start)
		total += c
		from := file
		if file == "-" {
			from = "standard input"
		}
		if bl := (badLine{}); errors.As(err, &bl) && c > 0 {
			// Part of the file is in: say how much, so that the rest can
			// be given without the part again.
			return total, fmt.Errorf("%w (the %d records before it were published from %s to %s)", err, c, from, src.Name)
		}
		if cut := (*inputCut)(nil); errors.As(err, &cut) {
			cut.as, cut.in, cut.index, cut.stream, cut.from = as, in, i, src.Stream, start
			cut.total = countRecords(file, start)
			cut.rest = cutInputs(spec, inputs, i, only, later)
			return total, cut
		}
		if err != nil {
			return total, err
		}
		fmt.Fprintf(std.Out, "published %d input records from %s to %s\n", c, from, src.Name)
	}
	return total, nil
}

// checkInputs reports the first -input flag that names a source the job
// lacks, or a file that is not there or is a directory, as publishInputs
// would, but before anything is started or published: an unbounded
// source's input is published only once the job runs. The file is not
// opened: a named pipe would wait for its writer, and lose what it wrote
// if closed. as is publishInputs'.
func checkInputs(as string, spec *jobspec.Spec, inputs inputFlags) error {
	for _, in := range inputs {
		src, file := inputSource(spec, in)
		if src == nil {
			name, _, _ := strings.Cut(in, "=")
			return noSource(as, in, name, spec)
		}
		if file == "-" {
			continue // standard input
		}
		st, err := os.Stat(file)
		if err != nil {
			return fmt.Errorf("%s: %w", as, err)
		}
		if st.IsDir() {
			return fmt.Errorf("%s %s: a directory, not a file of lines: give a file", as, file)
		}
	}
	return nil
}

// noSource is the error of an -input flag in (of as, the flag's name)
// whose SOURCE=, name, names none of spec's sources: it says which was
// most likely meant, else which there are.
func noSource(as, in, name string, spec *jobspec.Spec) error {
	names := make([]string, len(spec.Sources))
	for i, src := range spec.Sources {
		names[i] = src.Name
	}
	if c := spell.Closest(name, names); c != "" {
		return fmt.Errorf("%s %s: the job has no source %q (did you mean %s?)", as, in, name, c)
	}
	return fmt.Errorf("%s %s: the job has no source %q (its sources: %s)", as, in, name, strings.Join(names, ", "))
}

// hasStop reports whether src has a stop: weir run publishes its -input
// before the submit (publishInputs).
func hasStop(src jobspec.Source) bool { return src.Stop != "" || src.StopSequence != 0 }

// inputSource resolves an -input flag, FILE or SOURCE=FILE, to the source
// it feeds (the job's first without SOURCE=; nil for a name the job does
// not have) and the file.
func inputSource(spec *jobspec.Spec, in string) (*jobspec.Source, string) {
	name, file, named := strings.Cut(in, "=")
	if !named {
		name, file = "", in
	}
	for j := range spec.Sources {
		if name == "" || spec.Sources[j].Name == name {
			return &spec.Sources[j], file
		}
	}
	return nil, file
}

// inputHint returns the weir input command that gives the job of spec
// that runs the input of o's -input flags (hint: its -nats flag, as
// natsFlags.hint gives it), or "" when there is none, or a source it goes
// to stops at the end (stop: end), which that job reads no further
// (weir input refuses it).
func inputHint(spec *jobspec.Spec, o runOptions, hint string) string {
	if len(o.inputs) == 0 {
		return ""
	}
	args := make([]string, 0, len(o.inputs))
	for _, in := range o.inputs {
		if src, _ := inputSource(spec, in); src == nil || src.Stop == jobspec.StopEnd {
			return ""
		}
		args = append(args, shellQuote(in))
	}
	if o.time {
		hint += " -time"
	}
	return fmt.Sprintf("weir input%s %s %s", hint, shellQuote(o.spec), strings.Join(args, " "))
}

// publishInput publishes the lines of file ("-": stdin) to src, from its
// line from on: with pub to a JetStream source's stream, else on nc. as
// and timed are publishInputs': with timed a line's leading timestamp goes
// in the message's source.TimeHeader. An interrupt (ctx ended) that cuts
// a JetStream source's input short is an *inputCut that says how far the
// stream acknowledged it, its count what was acknowledged.
func publishInput(ctx context.Context, as string, timed bool, nc *nats.Conn, pub *ingest.Publisher, src jobspec.Source, file string, stdin io.Reader, from int) (int, error) {
	var f io.Reader = stdin
	if file != "-" {
		of, err := os.Open(file)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", as, err)
		}
		defer of.Close()
		f = of
	}
	pattern := sourceSubject(src)
	count, lineNo := 0, 0
	// A line that cannot be published ends the input: what came before
	// it is stored (acknowledged) first, as publishInputs says.
	bad := func(err error) (int, error) {
		if pub != nil {
			if ferr := pub.Flush(ctx); ferr != nil {
				return count, fmt.Errorf("%w; and of what came before it: %w", err, ferr)
			}
		} else {
			fctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			ferr := nc.FlushWithContext(fctx)
			cancel()
			if ferr != nil {
				return count, fmt.Errorf("%w; and of what came before it: %w", err, ferr)
			}
		}
		return count, badLine{err}
	}
	// cut says, of an error that an interrupt caused, what the stream
	// holds: the records before line at (the one in hand, or the next to
	// read) went out, and those in flight are waited for, briefly; at the
	// end of the input (ended), once they are all stored, nothing is cut.
	cut := func(at int, ended bool, err error) (int, error) {
		if pub == nil || ctx.Err() == nil {
			return count, err
		}
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cutWait)
		acked, next := pub.Acknowledged(actx)
		cancel()
		if next == 0 {
			if ended {
				return acked, nil // all of it is stored: no cut
			}
			next = at
		}
		return acked, &inputCut{acked: acked, next: next, err: err}
	}
	maxLine := maxInputLine
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), maxLine)
	for sc.Scan() {
		lineNo++
		line := sc.Text()
		if line == "" || lineNo < from {
			continue
		}
		var ts int64
		if timed {
			t, rest, err := cutTimestamp([]byte(line))
			if err != nil {
				return bad(fmt.Errorf("%s %s: line %d: %w", as, file, lineNo, err))
			}
			ts, line = t, string(rest)
		}
		key, value, ok := strings.Cut(line, "\t")
		if !ok {
			key, value = "", line
		}
		subj := inputSubject(pattern, key)
		if src.Partitions > 0 {
			// A keyed line goes to its key's partition, so one subtask
			// reads every line of a key, in order; others take turns.
			p := count % src.Partitions
			if key != "" {
				p = source.PartitionOf(key, src.Partitions)
			}
			subj = inputSubject(strings.Replace(src.PartitionFilter, source.PartitionToken, strconv.Itoa(p), 1), key)
		}
		m := nats.NewMsg(subj)
		if key != "" {
			m.Header.Set(sink.KeyHeader, key)
		}
		if ts != 0 {
			m.Header.Set(source.TimeHeader, strconv.FormatInt(ts, 10))
		}
		m.Data = []byte(value)
		if max := nc.MaxPayload(); int64(len(line)) > max {
			return bad(fmt.Errorf("%s %s: line %d: a record of %d bytes does not fit in a NATS message (the server's max_payload is %d bytes)", as, file, lineNo, len(line), max))
		}
		if pub != nil {
			if err := pub.Publish(ctx, lineNo, m); err != nil {
				return cut(lineNo, false, fmt.Errorf("%s %s: %w", as, file, err))
			}
		} else if err := nc.PublishMsg(m); err != nil {
			return count, fmt.Errorf("%s: publish: %w", as, err)
		}
		count++
	}
	if err := sc.Err(); errors.Is(err, bufio.ErrTooLong) {
		return bad(fmt.Errorf("%s %s: line %d is longer than %d bytes", as, file, lineNo+1, maxLine))
	} else if err != nil {
		return cut(lineNo+1, false, fmt.Errorf("%s: %w", as, err))
	}
	if pub != nil {
		if err := pub.Flush(ctx); err != nil {
			return cut(lineNo+1, true, fmt.Errorf("%s %s: %w", as, file, err))
		}
		return count, nil
	}
	fctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return count, nc.FlushWithContext(fctx)
}

// maxInputLine is the longest line an input may have.
const maxInputLine = 16 << 20

// output collects what the job's sinks publish.
type output struct {
	mu   sync.Mutex
	std  Stdio
	show int
	// limit, if above 0, is how many records are taken at most (weir job
	// output -show): full is closed once there are as many, and the
	// records after them are dropped.
	limit int
	full  chan struct{}
	// bare prints records without their sink's name (one sink followed).
	bare bool
	n    int
	last time.Time
	// latest is the latest value per sink and key, for the summary; nil
	// keeps none.
	latest map[string]string
	bySink map[string]int // n per sink
	// since is where each jetstream sink's stream stood when the job was
	// submitted (storedSince), for the summary to count what it stored.
	since map[string]uint64
	js    jetstream.JetStream
	sinks []jobspec.Sink
	// job is the job's name: an exactly-once sink's records carry it at
	// the head of their message ids (ours).
	job     string
	subs    []sinkSub      // watch's of the sinks that are not JetStream's
	streams []*streamWatch // watch's of the JetStream sinks
	// summed is set once the summary is printed: a record after it, from
	// a watch that had not caught up, is neither printed nor counted.
	summed bool
	// held is what the streams -input publishes to held before, which
	// the job reads too: the summary's records in count it.
	held []heldInput
}

// spec returns the sink named name.
func (o *output) spec(name string) *jobspec.Sink {
	for i := range o.sinks {
		if o.sinks[i].Name == name {
			return &o.sinks[i]
		}
	}
	return nil
}

func (o *output) record(sinkName string, h nats.Header, data []byte) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.summed || o.limit > 0 && o.n >= o.limit {
		return // a watch that lagged behind the summary, stopping; or past -show
	}
	o.n++
	o.bySink[sinkName]++
	o.last = time.Now()
	key := h.Get(sink.KeyHeader)
	if o.latest != nil {
		o.latest[sinkName+"\x00"+key] = string(data)
	}
	if o.show < 0 || o.n <= o.show {
		name := sinkName
		if o.bare {
			name = ""
		}
		printRecord(o.std.Out, name, key, data)
	} else if o.n == o.show+1 {
		fmt.Fprintf(o.std.Out, "… more output not shown (-show)\n")
	}
	if o.n == o.limit {
		close(o.full)
	}
}

// printRecord prints one output record: "[SINK] KEY<TAB>VALUE", without
// the key where it has none, without "[SINK] " where sinkName is empty.
func printRecord(w io.Writer, sinkName, key string, value []byte) {
	prefix := ""
	if sinkName != "" {
		prefix = "[" + sinkName + "] "
	}
	if key != "" {
		fmt.Fprintf(w, "%s%s\t%s\n", prefix, key, value)
	} else {
		fmt.Fprintf(w, "%s%s\n", prefix, value)
	}
}

func (o *output) state() (int, time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.n, o.last
}

// submitRefused returns the error weir run ends with when the submit of
// spec is refused with err (in the words the user sees: apiErr's), or
// checkRerun foresees that it would be; published is how many -input
// records went out before. A refusal because a job of the name has not
// ended says how to reach that job, and how to give it more input where
// -input published none.
func submitRefused(err error, spec *jobspec.Spec, o runOptions, embedded bool, published int) error {
	if !errors.Is(err, control.ErrConflict) {
		return err
	}
	if embedded && o.data != "" {
		// The data directory of a weir run or weir up that was killed
		// resumed its job as this one started: the job is not this
		// run's to submit. More input goes to it where it runs on: the
		// NATS of weir up -data, on the port weir up served the
		// directory on last (servedBy) — not this run's, which ends
		// with it.
		sv := servedBy(o.data)
		feed := ""
		if published == 0 {
			hint := sv.hint()
			if sv.url == "" {
				hint = " -nats URL" // not known: named as sv.hint names it
			}
			if in := inputHint(spec, o, hint); in != "" {
				feed = "; -input publishes only with a job weir run submits: while weir up runs it, give it more input with " + in
			}
		}
		there := "there"
		if h := sv.hint(); h != "" {
			there += " (" + strings.TrimSpace(h) + ")"
		}
		return fmt.Errorf("%w (resumed from -data %s, where it ran before: %s lets it run on, and weir job cancel or stop %s ends it%s)",
			err, shellQuote(o.data), sv.up, there, feed)
	}
	if len(o.inputs) > 0 && published == 0 {
		// A job that runs, restored from a checkpoint say, is not this
		// run's to submit, and its input (published after the submit, for
		// an unbounded source) is not published: say how to give it more.
		if in := inputHint(spec, o, o.nats.hint()); in != "" {
			err = fmt.Errorf("%w, or give it more input with %s (-input publishes only with a job weir run submits)", err, in)
		}
	}
	if strings.Contains(err.Error(), "has not ended (it is ") {
		// The name is the spec's: under another one, the spec runs as a
		// second job.
		err = fmt.Errorf("%w; to run a second job beside it, its output going to the same sinks, give the spec another name (name: %s in %s)",
			err, spec.Name, o.spec)
	}
	return err
}

func follow(ctx context.Context, std Stdio, n *node.Node, spec *jobspec.Spec, o runOptions, embedded bool, notices *apiNotices) error {
	out := &output{std: std, show: o.show, latest: map[string]string{}, bySink: map[string]int{}, since: map[string]uint64{}, js: n.JS, sinks: spec.Sinks, job: spec.Name}
	for _, s := range spec.Sinks {
		stop, err := out.watch(ctx, n.Conn, s)
		if err != nil {
			return err
		}
		defer stop()
	}
	nonce := ingest.Nonce()
	if !embedded || o.data != "" {
		// What the streams held before: the job reads it too.
		out.held = heldBefore(ctx, n.JS, spec, o.inputs)
	}
	published, err := publishInputs(ctx, std, "-input", o.time, n.Conn, n.Dial, spec, o.inputs, hasStop, nonce, o.fromLine, unboundedInputs(spec, o.inputs))
	if cut := (*inputCut)(nil); errors.As(err, &cut) {
		cut.resume = runResume(spec, o, embedded, false, cut) // not submitted
	}
	if err != nil {
		return err
	}
	st, err := n.API.Submit(ctx, control.SubmitRequest{Spec: spec})
	if re := (*control.RemoteError)(nil); err != nil && !errors.As(err, &re) && ctx.Err() != nil && (embedded || o.cancel) {
		// Interrupted while the submit was on its way, unanswered: the
		// coordinator may have taken it, and the job, waiting for free
		// slots say, would start once room came free. It is this run's
		// (the name was free a moment ago, checkRerun; a refusal, of a
		// name another job holds, is an answer): canceled as at any
		// other interrupt; a job that was not submitted is no one's to
		// cancel.
		if cerr := cancelOnStop(ctx, n.API, spec.Name, o.nats.hint()); cerr != nil {
			return cerr
		}
		fmt.Fprintf(std.Out, "job %s: interrupted while it was submitted; canceled if the coordinator took it\n", spec.Name)
		return nil
	}
	if err != nil {
		return submitRefused(apiErr("submit "+spec.Name, err), spec, o, embedded, published)
	}
	fmt.Fprintf(std.Out, "job %s submitted: %s\n", st.Name, st.State)
	printGuarantees(ctx, std.Out, n.JS, spec, st.Guarantees, n.AtomicBatch, st.FsyncEachWrite)
	shared, spread := sharedNotes{}, spreadNotes{}
	shared.print(std.Err, st.Warnings)
	spread.print(std.Err, st.Warnings)
	// The submit line said the state already: only changes follow.
	said := stateReport{state: st.State, attempt: st.Attempt}
	notes := statusNotes{remedy: trapRemedy(o.nats.hint()), hint: o.nats.hint(), spec: spec}
	if embedded {
		// While the run lasts, its own server reaches the job.
		notes.hint = (&natsFlags{url: n.Server.ClientURL()}).hint()
		// The input -input stored in a stream stays with -data.
		stored := false
		for _, in := range o.inputs {
			if src, _ := inputSource(spec, in); src != nil && src.Kind == jobspec.KindJetStream {
				stored = true
			}
		}
		notes.remedy = rerunRemedy(servedBy(o.data), stored)
	}
	// cancel ends the job, once, where weir run ends it (the embedded
	// default, -cancel): at an interrupt before the summary, which may
	// take seconds, so that a second signal or a kill meanwhile does not
	// leave the job to start once slots come free; else as weir run
	// returns. A cancel that fails is said, with what ends the job.
	canceled := false
	cancelJob := func() {
		if canceled || said.state.Terminal() || !(embedded || o.cancel) {
			return
		}
		canceled = true
		if err := cancelOnStop(ctx, n.API, spec.Name, notes.hint); err != nil {
			fmt.Fprintf(std.Err, "weir: %v\n", err)
		}
	}
	// unanswered is when the coordinator last answered, once weir run
	// gives up on it: the state it said then is all it knows, and "keeps
	// running", followed by "no coordinator answers", asserted what it
	// cannot know.
	var unanswered time.Time
	answered := time.Now() // the submit's answer, then each status's
	stop := func() {
		switch {
		case said.state.Terminal():
		case embedded || o.cancel:
			cancelJob()
		case !unanswered.IsZero():
			h := o.nats.hint()
			fmt.Fprintf(std.Out, "job %s was %s when the coordinator last answered, %s ago; with no coordinator answering, weir run cannot tell whether it still runs: weir job status%s %s says, once weir up answers again\n",
				spec.Name, said.state, time.Since(unanswered).Round(time.Second), h, shellQuote(spec.Name))
		case said.state == control.JobCreated || said.state == control.JobRestarting:
			// Not running (waiting for a worker or free slots, or to
			// restart): it starts once it can, which "keeps running"
			// did not say.
			h := o.nats.hint()
			fmt.Fprintf(std.Out, "job %s is left %s, not running yet: it starts once a worker has room for it; follow its output with: weir job output%s %s; end it with: weir job cancel%s %s\n",
				spec.Name, said.state, h, shellQuote(spec.Name), h, shellQuote(spec.Name))
		default:
			h := o.nats.hint()
			fmt.Fprintf(std.Out, "job %s keeps running; follow its output with: weir job output%s %s; stop it with: weir job stop%s %s (a savepoint first), or weir job cancel%s %s\n",
				spec.Name, h, shellQuote(spec.Name), h, shellQuote(spec.Name), h, shellQuote(spec.Name))
		}
	}
	defer stop()

	inputDone := len(o.inputs) == 0
	bounded, toldWait := allBounded(spec), false
	// Without a stop the job runs on: weir run ends once the output of
	// the input is committed (inputCommit), or, with input to a core
	// NATS source, which cannot say what it read, after the output was
	// quiet for -idle past a checkpoint after a checkpoint that completed
	// after the input.
	commit, sound := newInputCommit(spec, o.inputs)
	var deadline <-chan time.Time
	var forEnd time.Time
	if o.forDur > 0 {
		forEnd = time.Now().Add(o.forDur)
		deadline = time.After(o.forDur)
	}
	seen := map[int64]string{}
	var inputCommittedAt int64 // first checkpoint completed after the input was published
	var publishedAt time.Time
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	var deaf time.Time // since when no coordinator has listened
	for {
		// The status request ends with -for too: while no coordinator
		// answers, one read waits seconds (control.APIClient.ReadAttempt).
		end := time.Now().Add(o.nats.waitTimeout())
		if !forEnd.IsZero() && forEnd.Before(end) {
			end = forEnd
		}
		pctx, cancel := context.WithDeadline(ctx, end)
		st, err := n.API.Job(pctx, spec.Name)
		cancel()
		if err == nil {
			notices.answered(control.APIJob)
			answered = time.Now()
		}
		if err != nil && ctx.Err() == nil && !forEnd.IsZero() && !time.Now().Before(forEnd) {
			// -for ends the following, also while no coordinator
			// answers.
			if !inputDone {
				sayUnpublished(std.Out, spec, o.inputs, "within -for", said.state)
			}
			summary(ctx, std.Out, out, published)
			return nil
		}
		if errors.Is(err, control.ErrUnavailable) && ctx.Err() == nil {
			// The coordinator is away (restarting): follow on for as
			// long as a request would wait for an answer.
			if deaf.IsZero() {
				deaf = time.Now()
			}
			if time.Since(deaf) >= o.nats.waitTimeout() {
				unanswered = answered
			} else {
				select {
				case <-tick.C:
				case <-ctx.Done():
				case <-deadline:
					// -for ends the following, also while no
					// coordinator answers.
					if !inputDone {
						sayUnpublished(std.Out, spec, o.inputs, "within -for", said.state)
					}
					summary(ctx, std.Out, out, published)
					return nil
				}
				continue
			}
		} else {
			deaf = time.Time{}
		}
		switch {
		case err != nil && ctx.Err() != nil:
			// Interrupted while it asked: there is no status to report
			// (a zero one printed 'job :  (attempt 0)').
			cancelJob()
			if !inputDone {
				sayUnpublished(std.Out, spec, o.inputs, "before the interrupt", said.state)
			}
			summary(ctx, std.Out, out, published)
			return nil
		case errors.Is(err, context.DeadlineExceeded):
			unanswered = answered
			return fmt.Errorf("job %s: no answer from the coordinator for %s (is weir up still running?)", spec.Name, o.nats.waitTimeout())
		case err != nil:
			return apiErr("job "+spec.Name, err)
		}
		cps, cpsErr := n.API.Checkpoints(ctx, spec.Name)
		if cpsErr == nil {
			notices.answered(control.APICheckpoints)
		}
		for i := range cps {
			if cps[i].Inputs == nil {
				// A coordinator that does not send the topology: the
				// spec's, for the slowest task the lines name.
				cps[i].Inputs = control.Topology(spec)
			}
			if cps[i].Outputs == nil {
				cps[i].Outputs = control.OutputTopology(spec)
			}
		}
		text, ended := lookNews(&said, seen, st, cps)
		fmt.Fprint(std.Out, text)
		shared.print(std.Err, st.Warnings)
		spread.print(std.Err, st.Warnings)
		for _, c := range ended {
			if c.Status == control.CheckpointCompleted && inputDone && len(o.inputs) > 0 && inputCommittedAt == 0 {
				inputCommittedAt = c.ID
			}
			fmt.Fprint(std.Out, notes.slowBarriers(st, c))
		}
		// What weir job status would say of a job in trouble, once.
		fmt.Fprint(std.Out, notes.news(st))
		out.unstall(ctx, time.Now(), outputStall, std.Err)
		if !inputDone && st.State == control.JobRunning {
			c, err := publishInputs(ctx, std, "-input", o.time, n.Conn, n.Dial, spec, o.inputs, func(s jobspec.Source) bool { return !hasStop(s) }, nonce, o.fromLine, nil)
			published += c
			if cut := (*inputCut)(nil); errors.As(err, &cut) {
				cut.resume = runResume(spec, o, embedded, true, cut)
			}
			if err != nil {
				return err
			}
			inputDone, publishedAt = true, time.Now()
		}
		if st.State.Terminal() {
			summary(ctx, std.Out, out, published)
			if st.State == control.JobFailed {
				if unpublished := unboundedInputs(spec, o.inputs); !inputDone && len(unpublished) > 0 {
					// Published once the job runs: it never did.
					return fmt.Errorf("job %s failed: %s; -input %s not published (the job failed before it ran)",
						st.Name, st.Reason, strings.Join(unpublished, ", "))
				}
				return fmt.Errorf("job %s failed: %s", st.Name, st.Reason)
			}
			return nil
		}
		committed := false
		if !bounded && sound && inputDone && o.idle > 0 {
			// Unread (NATS away), the streams are read at the next look.
			_ = commit.readEnds(ctx, n.JS, spec)
			committed = commit.done(st, cps, cpsErr == nil)
			if commit.blind {
				// A worker that does not say what its source read
				// (older than weir run): quiet output it is.
				sound = false
			}
		}
		if (committed || (inputCommittedAt > 0 && (bounded || !sound))) && o.idle > 0 {
			_, last := out.state()
			if last.Before(publishedAt) {
				last = publishedAt
			}
			if time.Since(last) > o.idle && (committed || st.LatestCheckpoint > inputCommittedAt) {
				if !bounded {
					summary(ctx, std.Out, out, published)
					return nil
				}
				// A bounded job ends by itself, and may be quiet until
				// then ({emit: final}): follow it on, saying once what a
				// job that does not end waits for.
				if !toldWait {
					toldWait = true
					what := "Ctrl-C cancels it"
					if !embedded {
						what = fmt.Sprintf("publish the rest, or stop it with: weir job stop%s %s", o.nats.hint(), shellQuote(spec.Name))
					}
					tellWait(ctx, std.Out, n.JS, spec, what)
				}
			}
		}
		select {
		case <-ctx.Done():
			cancelJob()
			if !inputDone {
				sayUnpublished(std.Out, spec, o.inputs, "before the interrupt", st.State)
			}
			summary(ctx, std.Out, out, published)
			return nil
		case <-deadline:
			if !inputDone {
				sayUnpublished(std.Out, spec, o.inputs, "within -for", st.State)
			}
			summary(ctx, std.Out, out, published)
			return nil
		case <-tick.C:
		}
	}
}

// sharedNotes prints the warnings of a job's status that another job
// writes a stream subject its sinks write (job.SharedSinkMark) as they
// come: the coordinator keeps them true as jobs start and end, so one
// comes when a job writing the subject starts after this one, and goes
// when either ends. Each is printed once while it holds (one that went
// and came back, again), as weir run prints the spec's own warnings
// before the submit; with -nats and without alike.
type sharedNotes map[string]bool

func (s sharedNotes) print(w io.Writer, warnings []string) {
	now := map[string]bool{}
	for _, x := range warnings {
		if !strings.Contains(x, job.SharedSinkMark) || now[x] {
			continue
		}
		now[x] = true
		if !s[x] {
			fmt.Fprintf(w, "weir: warning: %s\n", x)
		}
	}
	for x := range s {
		if !now[x] {
			delete(s, x)
		}
	}
	maps.Copy(s, now)
}

// spreadNotes prints the warnings of a job's status of an operator that
// keeps keyed state in several subtasks behind an input not partitioned
// by key (job.SpreadStateKey) as they come: the status has one from the
// first completed checkpoint that shows such state, each naming the
// checkpoint. Each is printed once for the run, however many checkpoints
// (or coordinator restarts) show it again: what it says does not change
// while the job runs.
type spreadNotes map[string]bool

func (s spreadNotes) print(w io.Writer, warnings []string) {
	for _, x := range warnings {
		if k, ok := job.SpreadStateKey(x); ok && !s[k] {
			s[k] = true
			fmt.Fprintf(w, "weir: warning: %s\n", x)
		}
	}
}

// cancelOnStop cancels job as weir run ends it (interrupted, or at its
// end with -cancel or the embedded default), within cancelWait whatever
// ctx: an interrupt ended ctx. A job that ended meanwhile, or is not
// there (a submit interrupted before the coordinator took it), is no
// failure. hint is the -nats flag the error's command needs.
func cancelOnStop(ctx context.Context, api *control.APIClient, job, hint string) error {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cancelWait)
	defer cancel()
	_, err := api.CancelJob(cctx, job)
	if err == nil || errors.Is(err, control.ErrConflict) || errors.Is(err, control.ErrNotFound) {
		return nil
	}
	return fmt.Errorf("cancel job %s as weir run ends: %w; it may run on, or start once a worker has room: weir job cancel%s %s ends it",
		job, err, hint, shellQuote(job))
}

// cancelWait bounds the cancel of weir run's job as weir run ends.
const cancelWait = 10 * time.Second

// lookNews returns what weir run prints of one look at its job, st and
// its checkpoints cps (each line ending in a newline): the line said.news
// gives for st, and one for each checkpoint of the run that ended since
// it was printed last (seen, by ID: its status then), which it notes as
// printed. It returns those checkpoints too, in the order printed.
//
// The lines go in the order their events happened on the coordinator,
// whose clock dates them all: the status and the checkpoints are asked
// for one after the other, and a look that finds the job failed can find
// a checkpoint new too that completed before the failure — printed after
// the failure's line, it read as if it came after. So the checkpoints
// that ended by the time of the state's line (stateAt) come before it,
// the others after; with no such time (a coordinator that does not send
// it), the state's line comes first.
func lookNews(said *stateReport, seen map[int64]string, st control.JobStatus, cps []control.CheckpointInfo) (string, []control.CheckpointInfo) {
	cps = slices.Clone(cps)
	sort.Slice(cps, func(i, j int) bool { return cps[i].ID < cps[j].ID })
	var before, after []control.CheckpointInfo
	at := stateAt(st)
	for _, c := range cps {
		// An earlier run's checkpoints (the job's name ran before)
		// are no news of this one.
		if c.EarlierRun || c.Status == control.CheckpointPending || seen[c.ID] == c.Status {
			continue
		}
		seen[c.ID] = c.Status
		if end := c.Triggered.Add(c.Duration); !at.IsZero() && !c.Triggered.IsZero() && !end.After(at) {
			before = append(before, c)
		} else {
			after = append(after, c)
		}
	}
	var b strings.Builder
	for _, c := range before {
		printCheckpointLine(&b, c)
	}
	if line := said.news(st); line != "" {
		fmt.Fprintln(&b, line)
	}
	for _, c := range after {
		printCheckpointLine(&b, c)
	}
	return b.String(), append(before, after...)
}

// stateAt returns when what st's line says happened, on the coordinator's
// clock: for a restarting or failed job whose reason is its latest
// failure, that failure; else when the job's state was last set (zero:
// not known).
func stateAt(st control.JobStatus) time.Time {
	at := st.Updated
	f := st.Latest()
	if f != nil && (st.State == control.JobRestarting || st.State == control.JobFailed) && strings.HasPrefix(st.Reason, f.Reason) &&
		!f.Time.IsZero() && (at.IsZero() || f.Time.Before(at)) {
		at = f.Time
	}
	return at
}

// stateReport is what weir run last said of the state of the job it
// follows.
type stateReport struct {
	state   control.JobState
	attempt int
	reason  string           // the last reason printed
	failure *control.Failure // the last failure printed
	skipped int              // the newest attempt printed as not started
}

// news returns the line that reports st, or "" when st is no news, and
// notes what it said. News is a change of state; a new attempt of a
// running job (a restart passed between two looks); a new reason of a
// restarting one (the attempt it deployed failed too). The next attempt a
// restarting job deploys is not: the state says when it runs. Nor is a
// job created again once it was seen otherwise: only a job's start is
// created (a coordinator of an earlier version listed a job it resumed as
// created, with the attempt that had run, so weir run printed 'created
// (attempt 1)' between running and 'running (attempt 2)'). A reason is
// printed once; so is a failure: a running job's line says which one it
// restarted after (control.JobStatus.LastFailure) unless the restarting
// line said it already. A line whose attempt is numbered past attempts
// that were not started since the attempt said before (a deploy that lost
// its worker, planned again as the next attempt) says why each was not
// (control.JobStatus.Skipped), once.
func (r *stateReport) news(st control.JobStatus) string {
	switch {
	case st.State == control.JobCreated && r.state == control.JobCreated && st.Reason != "" && st.Reason != r.reason:
		// A job that waits to be placed (no live worker, no free
		// slots) says for what, once per reason.
		r.reason = st.Reason
		return fmt.Sprintf("job %s: %s, %s", st.Name, st.State, st.Reason)
	case st.State == control.JobCreated && r.state != control.JobCreated:
		return ""
	case st.State != r.state:
	case st.State == control.JobRunning && st.Attempt != r.attempt:
	case st.State == control.JobRestarting && st.Reason != "" && st.Reason != r.reason:
	default:
		return ""
	}
	changed := st.State != r.state
	prev := r.attempt
	r.state, r.attempt = st.State, st.Attempt
	line := fmt.Sprintf("job %s: %s (attempt %d)", st.Name, st.State, st.Attempt)
	f := st.Latest()
	if f != nil && r.failure != nil && f.Attempt == r.failure.Attempt && f.Time.Equal(r.failure.Time) {
		f = nil // said
	}
	switch {
	case st.State == control.JobRunning && st.Latest() == nil && st.Reason != "" && st.Reason != r.reason:
		// A coordinator of an earlier version kept the cause of the
		// failover as a running job's reason (one older still sent no
		// failures).
		r.reason = st.Reason
		line += ", restarted after: " + st.Reason
	case st.State == control.JobRunning:
		// The failure this attempt recovers from: of the attempt before,
		// or of one since the attempt said last — a deploy that lost its
		// worker, planned again, took an attempt number of its own. Not
		// one of an earlier run's: a job submitted again numbers its
		// attempts on from its earlier runs' and lists their failures,
		// all older than its submit (the coordinator's clock both), which
		// tells them apart however far the submit's answer saw the first
		// attempt go (its attempt number did not: the answer may come
		// after the first deploy began).
		if f != nil && !f.Time.Before(st.Submitted) && f.Attempt < st.Attempt && (f.Attempt == st.Attempt-1 || prev > 0 && f.Attempt >= prev) {
			line += ", restarted after: " + f.Reason
			r.failure = f
		}
	case st.Reason != "" && (changed || st.Reason != r.reason):
		// A state it changed to says why, also when the reason is the
		// one said last time (a second failover for the same cause).
		r.reason = st.Reason
		line += ": " + st.Reason
		if f != nil && strings.HasPrefix(st.Reason, f.Reason) {
			r.failure = f
		}
	}
	for _, sk := range slices.Backward(st.Skipped) { // oldest first
		if sk.Attempt >= prev && sk.Attempt > r.skipped && sk.Attempt < st.Attempt {
			line += "; " + sk.String()
			r.skipped = sk.Attempt
		}
	}
	return line
}

// allBounded reports whether every source of spec has a stop: the job
// then finishes by itself.
func allBounded(spec *jobspec.Spec) bool {
	for _, s := range spec.Sources {
		if s.Kind != jobspec.KindJetStream || (s.Stop == "" && s.StopSequence == 0) {
			return false
		}
	}
	return true
}

// tellWait says, for a bounded job that is quiet, which source waits for
// its stream to reach a stop sequence: the job does not finish until the
// stream holds it. what says what the user can do.
func tellWait(ctx context.Context, w io.Writer, js jetstream.JetStream, spec *jobspec.Spec, what string) {
	for _, s := range spec.Sources {
		sp, err := jobspec.ParseStop(s.Stop)
		if err != nil || sp.Seq == 0 {
			continue // end or a time: resolved at submit to a message the stream held
		}
		st, err := js.Stream(ctx, s.Stream)
		if err != nil {
			continue
		}
		if last := st.CachedInfo().State.LastSeq; last < sp.Seq {
			fmt.Fprintf(w, "job %s waits: source %s stops after sequence %d, and stream %s holds up to %d (%s)\n",
				spec.Name, s.Name, sp.Seq, s.Stream, last, what)
		}
	}
}

// printGuarantees says what each source and sink guarantees, so that a
// core-NATS source's at-most-once is not a surprise, and how each
// JetStream sink will publish on its stream; fsyncEachWrite, what the
// coordinator said of its server (control.JobStatus.FsyncEachWrite).
func printGuarantees(ctx context.Context, w io.Writer, js jetstream.JetStream, spec *jobspec.Spec, gs []control.Guarantee, atomicBatch int, fsyncEachWrite bool) {
	sinks := map[string]jobspec.Sink{}
	for _, s := range spec.Sinks {
		sinks[s.Name] = s
	}
	if gs == nil { // the coordinator's, which knows where sources start, or the spec's
		gs = job.Guarantees(spec, fsyncEachWrite)
	}
	for _, g := range gs {
		if s, ok := sinks[g.Name]; ok && g.Role == "sink" && s.Kind == jobspec.KindJetStream && s.Guarantee != jobspec.AtMostOnce {
			g.Text += "; " + publishModeOf(ctx, js, s, atomicBatch, fsyncEachWrite)
		}
		fmt.Fprintf(w, "  %s\n", g)
	}
}

// publishModeOf says how a jetstream sink will publish on its stream,
// with atomic batches of atomicBatch messages (0: the default; weir run
// with -nats does not know the remote workers' setting): at-least-once,
// fast, atomic or async (auto: atomic where the server fsyncs every
// write, fsyncEachWrite); exactly-once, with its plan.
func publishModeOf(ctx context.Context, js jetstream.JetStream, s jobspec.Sink, atomicBatch int, fsyncEachWrite bool) string {
	unknown := func(err error) string { return fmt.Sprintf("publish mode unknown: %v", err) }
	st, err := js.Stream(ctx, s.Stream)
	if err != nil {
		return unknown(err)
	}
	info := st.CachedInfo() // js.Stream has just asked for it
	if s.Guarantee == jobspec.AtLeastOnce {
		mode, err := sink.ResolveAtLeastOnceMode(sink.PublishMode(s.Publish), info.Config, fsyncEachWrite)
		if err != nil {
			return unknown(err)
		}
		if mode == sink.PublishAtomic {
			if atomicBatch <= 0 {
				atomicBatch = sink.MaxAtomicBatch
			}
			return fmt.Sprintf("publish mode atomic on stream %s, batches of up to %d", s.Stream, min(atomicBatch, sink.MaxAtomicChunk))
		}
		return fmt.Sprintf("publish mode %s on stream %s", mode, s.Stream)
	}
	plan, err := sink.PlanPublish(sink.PublishMode(s.Publish), info.Config, atomicBatch)
	if err != nil {
		return unknown(err)
	}
	return fmt.Sprintf("publish mode %s on stream %s%s", plan.Mode, s.Stream, plan.Detail())
}

func printCheckpointLine(w io.Writer, c control.CheckpointInfo) {
	kind := "checkpoint"
	if c.Savepoint {
		kind = "savepoint"
	}
	switch c.Status {
	case control.CheckpointCompleted:
		slowest := ""
		if t, ok := c.Slowest(); ok {
			slowest = "; slowest " + t.String()
		}
		fmt.Fprintf(w, "%s %d completed in %s: %s, %s (longest alignment %s), %d tasks%s\n", kind, c.ID,
			c.Duration.Round(time.Millisecond), size(c.Size), alignedOf(c), c.Alignment.Round(time.Microsecond), c.Acked, slowest)
	case control.CheckpointFailed:
		verb := "failed"
		if c.Aborted {
			verb = "aborted" // cut by a failover, a stop or a newer one: no failure of its own
		}
		fmt.Fprintf(w, "%s %d %s: %s\n", kind, c.ID, verb, c.Reason)
	}
}

// partialNote is the line that says the summary's figures miss some
// records of the sinks behind, whose watch did not catch up: the latest
// values always, the records out if countPartial; and where to see what
// their streams hold.
func partialNote(behind []lagging, countPartial bool) string {
	names := make([]string, len(behind))
	var streams []string
	for i, l := range behind {
		names[i] = l.String()
		if l.stream != "" && !slices.Contains(streams, l.stream) {
			streams = append(streams, l.stream)
		}
	}
	what := "the latest values"
	if countPartial {
		what = "the records out and the latest values"
	}
	note := fmt.Sprintf("partial summary: the watch of %s had not caught up; %s miss some of their records",
		strings.Join(names, ", "), what)
	if len(streams) > 0 {
		note += fmt.Sprintf(" (what a stream holds: weir stream info %s)", strings.Join(streams, ", "))
	}
	return note
}

// summaryWait bounds each step of the summary: settling the watches of
// the JetStream sinks, draining the other sinks' subscriptions, counting
// what each stream stored.
const summaryWait = 5 * time.Second

// summary prints the records in and out and the latest value per key,
// once the records delivered so far are handled (output.settle): it ends
// the watch of the sinks.
// The records out of a jetstream sink are those its stream stored
// (countStored) where the stream keeps all it stored, else those the
// watch read from the stream. Each step has a bound of its own
// (summaryWait), so that a watch still behind a big output
// leaves the count of the stream time of its own; a line then says which
// figures are partial, and where to see the real ones.
func summary(ctx context.Context, w io.Writer, out *output, published int) {
	ctx = context.WithoutCancel(ctx) // the summary of a job interrupted is printed
	behind := out.settle(ctx, summaryWait)
	stored := map[string]int{}
	for _, name := range slices.Sorted(maps.Keys(out.since)) {
		s := out.spec(name)
		if s == nil {
			continue
		}
		if s.Guarantee == jobspec.ExactlyOnce && !slices.ContainsFunc(behind, func(l lagging) bool { return l.sink == name }) {
			// The watch read what the stream stored, each message once,
			// and counted this job's alone (ours, by message id); the
			// stream's count would add another job's output on the same
			// subjects (two jobs' 5 000 each summed up as 10 000 out).
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, summaryWait)
		n, err := countStored(cctx, out.js, *s, out.since[name])
		cancel()
		if err == nil {
			stored[name] = n
		}
	}
	// The records out miss some of a lagging sink's unless its stream's
	// count stands in for what the watch read.
	countPartial := false
	for _, l := range behind {
		if _, ok := stored[l.sink]; !ok {
			countPartial = true
		}
	}
	out.mu.Lock()
	defer out.mu.Unlock()
	out.summed = true
	n := out.n
	for name, c := range stored {
		n += c - out.bySink[name]
	}
	// With several sinks, each one's count: an empty one (an operator's
	// reader on a port it emits nothing to, jobspec.OutputPorts) shows.
	per := ""
	if len(out.sinks) > 1 {
		var parts []string
		for _, s := range out.sinks {
			c, ok := stored[s.Name]
			if !ok {
				c = out.bySink[s.Name]
			}
			parts = append(parts, fmt.Sprintf("%s %d", s.Name, c))
		}
		per = " (" + strings.Join(parts, ", ") + ")"
	}
	if published > 0 || len(out.held) > 0 {
		fmt.Fprintf(w, "%s, %s out%s\n", inWords(published, out.held), plural(n, "record"), per)
	} else {
		fmt.Fprintf(w, "%s out%s\n", plural(n, "record"), per)
	}
	if len(behind) > 0 {
		fmt.Fprintln(w, partialNote(behind, countPartial))
	}
	if len(out.latest) == 0 {
		return
	}
	// Each sink's keys apart: two sinks of the same keys (an exactly-once
	// one on agg.{key}, a core one for a dashboard) each have them, and
	// their sum counts every key twice (a trial's 99 000 users read
	// "198272 keys").
	bySink := map[string][]string{}
	for k := range out.latest {
		s, key, _ := strings.Cut(k, "\x00")
		bySink[s] = append(bySink[s], key)
	}
	sinks := slices.Sorted(maps.Keys(bySink))
	if out.show == 0 {
		// -show 0: no records; the counts alone.
		var counts []string
		for _, s := range sinks {
			counts = append(counts, fmt.Sprintf("%s %d keys", s, len(bySink[s])))
		}
		if len(sinks) == 1 {
			counts[0] = fmt.Sprintf("%d keys", len(bySink[sinks[0]]))
		}
		fmt.Fprintf(w, "latest value per key: %s (-show N lists them)\n", strings.Join(counts, ", "))
		return
	}
	fmt.Fprintln(w, "latest value per key:")
	for _, s := range sinks {
		keys := bySink[s]
		sort.Strings(keys)
		// As many keys of each sink as -show allows records (-1: all).
		for i, key := range keys {
			if out.show > 0 && i == out.show {
				of := ""
				if len(sinks) > 1 {
					of = " of " + s
				}
				fmt.Fprintf(w, "  … %d more keys%s (-show)\n", len(keys)-out.show, of)
				break
			}
			fmt.Fprintf(w, "  [%s] %s\t%s\n", s, key, out.latest[s+"\x00"+key])
		}
	}
}

// unboundedInputs returns the -input flags of sources without a stop,
// which weir run publishes once the job runs.
func unboundedInputs(spec *jobspec.Spec, inputs inputFlags) []string {
	var out []string
	for _, in := range inputs {
		if src, _ := inputSource(spec, in); src != nil && !hasStop(*src) {
			out = append(out, in)
		}
	}
	return out
}

// sayUnpublished says which -input files weir run did not publish because
// the job, in state, did not run when (within -for, before an interrupt):
// an unbounded source's input goes out once the job runs, and a run that
// ended before then had summed up "0 records out" as if the job had
// processed nothing of it.
func sayUnpublished(w io.Writer, spec *jobspec.Spec, inputs inputFlags, when string, state control.JobState) {
	if unpublished := unboundedInputs(spec, inputs); len(unpublished) > 0 {
		fmt.Fprintf(w, "-input %s not published: the job did not run %s (%s)\n", strings.Join(unpublished, ", "), when, state)
	}
}

// badLine is the error of an input line that cannot be published (a
// missing timestamp, a record too large): the lines before it are.
type badLine struct{ error }

func (b badLine) Unwrap() error { return b.error }
