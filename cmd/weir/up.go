package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirhq/weir/cmd/weir/internal/metrics"
	"github.com/weirhq/weir/cmd/weir/internal/node"
	"github.com/weirhq/weir/coordinator/control"
	"github.com/weirhq/weir/coordinator/job"
	"github.com/weirhq/weir/coordinator/jobspec"
	"github.com/weirhq/weir/coordinator/lease"
	"github.com/weirhq/weir/coordinator/registry"
	"github.com/weirhq/weir/transport/natsconn"
	"github.com/weirhq/weir/transport/sink"
)

func init() {
	register(command{Name: "up", Summary: "start the coordinator and a worker, on embedded NATS or an existing one (-nats)", Run: runUp})
	register(command{Name: "worker", Summary: "run a worker that joins an existing NATS; ls lists the live ones, drain moves a worker's jobs off it", Run: runWorker})
}

// natsFlags are the connection flags every command that talks to NATS
// shares.
type natsFlags struct {
	url, creds, nkey, token, user, password, tlsCA, tlsCert, tlsKey string
	// env holds the names of the auth flags that were not given and took
	// their value from the environment (authEnv).
	env map[string]bool
	// wait is how long a request waits for the coordinator to answer
	// (-wait, commands that ask the coordinator; 0: defaultWait).
	wait time.Duration
}

// defaultWait is how long CLI requests wait for the coordinator by default.
const defaultWait = 30 * time.Second

// registerWait registers -wait, for commands that ask the coordinator.
func (f *natsFlags) registerWait(fs *flag.FlagSet) {
	fs.DurationVar(&f.wait, "wait", defaultWait, "how long a request waits for the coordinator to answer")
}

// waitTimeout is how long requests wait for the coordinator (-wait).
func (f *natsFlags) waitTimeout() time.Duration {
	if f.wait > 0 {
		return f.wait
	}
	return defaultWait
}

// hint returns the flags a printed command needs to reach the same server:
// -nats (password or token hidden; none for the server the command
// reaches without it: $WEIR_NATS's, else the default) and the auth flags
// given (connFlags).
func (f *natsFlags) hint() string {
	env := os.Getenv(natsEnv)
	if f.url == "" || f.url == env || env == "" && f.url == defaultNATS {
		return f.connFlags()
	}
	return " -nats " + shellQuote(natsconn.Redact(f.url)) + f.connFlags()
}

// authFlags are the NATS auth flags, in the order a printed command gives
// them; secret ones are never printed with their value.
var authFlags = []struct {
	name   string
	secret bool
	field  func(*natsFlags) *string
}{
	{"creds", false, func(f *natsFlags) *string { return &f.creds }},
	{"nkey", false, func(f *natsFlags) *string { return &f.nkey }},
	{"user", false, func(f *natsFlags) *string { return &f.user }},
	{"password", true, func(f *natsFlags) *string { return &f.password }},
	{"token", true, func(f *natsFlags) *string { return &f.token }},
	{"tlsca", false, func(f *natsFlags) *string { return &f.tlsCA }},
	{"tlscert", false, func(f *natsFlags) *string { return &f.tlsCert }},
	{"tlskey", false, func(f *natsFlags) *string { return &f.tlsKey }},
}

// authEnv is the environment variable that stands for auth flag name when
// it is not given (WEIR_NATS_PASSWORD for -password): a flag's value shows
// in ps, the environment's does not.
func authEnv(name string) string { return natsEnv + "_" + strings.ToUpper(name) }

// fromEnv fills in each auth flag not given from its environment variable
// (authEnv): flags win over the environment. Once is enough; again does
// nothing more.
func (f *natsFlags) fromEnv() {
	for _, a := range authFlags {
		p := a.field(f)
		if *p != "" {
			continue
		}
		if v := os.Getenv(authEnv(a.name)); v != "" {
			*p = v
			if f.env == nil {
				f.env = map[string]bool{}
			}
			f.env[a.name] = true
		}
	}
}

// connFlags returns the auth flags given to this command, as a printed
// command gives them again: files and user names as they are, a password
// or token as "…" (never its value). Those that came from the environment
// are left out: the next command in the same shell reads them there too.
func (f *natsFlags) connFlags() string {
	var b strings.Builder
	for _, a := range authFlags {
		v := *a.field(f)
		if v == "" || f.env[a.name] {
			continue
		}
		if a.secret {
			v = "…"
		} else {
			v = shellQuote(v)
		}
		b.WriteString(" -" + a.name + " " + v)
	}
	return b.String()
}

// natsEnv is the environment variable that, when set, stands for the
// -nats default (defaultNATS) of the commands that talk to a running weir:
// a weir up on another port (its URL is in DIR/weir-up.url) needs no
// -nats on every command.
const natsEnv = "WEIR_NATS"

func (f *natsFlags) register(fs *flag.FlagSet, def, help string) {
	if def == defaultNATS {
		if u := os.Getenv(natsEnv); u != "" {
			def, help = u, help+" (default from $"+natsEnv+")"
		} else {
			help += " ($" + natsEnv + " sets the default)"
		}
	}
	fs.StringVar(&f.url, "nats", def, help)
	helps := map[string]string{
		"creds":    "NATS credentials file (.creds)",
		"nkey":     "NATS nkey seed file",
		"token":    "NATS token (a flag shows in ps: prefer $" + authEnv("token") + ")",
		"user":     "NATS user",
		"password": "NATS password (a flag shows in ps: prefer $" + authEnv("password") + ")",
		"tlsca":    "PEM CA file to verify the server",
		"tlscert":  "PEM client certificate (mutual TLS)",
		"tlskey":   "PEM client key (mutual TLS)",
	}
	for _, a := range authFlags {
		h := helps[a.name]
		if !a.secret {
			h += " (default $" + authEnv(a.name) + ")"
		}
		fs.StringVar(a.field(f), a.name, "", h)
	}
}

// options returns the connection options, nil when no URL was given.
func (f *natsFlags) options(name string) *natsconn.Options {
	if f.url == "" {
		return nil
	}
	f.fromEnv()
	return &natsconn.Options{URL: f.url, Name: name, CredsFile: f.creds, NKeySeedFile: f.nkey, Token: f.token,
		User: f.user, Password: f.password, TLSCA: f.tlsCA, TLSCert: f.tlsCert, TLSKey: f.tlsKey}
}

// jetStreamJobsBucket is the KV bucket of job records under
// -checkpoint-store jetstream (coordinator.Config.StateDir).
const jetStreamJobsBucket = "weir_jobs"

// jetStreamHasJobs reports whether js holds job records of the jetstream
// checkpoint store: its bucket jetStreamJobsBucket has a key.
func jetStreamHasJobs(ctx context.Context, js jetstream.JetStream) bool {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	kv, err := js.KeyValue(ctx, jetStreamJobsBucket)
	if err != nil {
		return false
	}
	keys, err := kv.ListKeys(ctx)
	if err != nil {
		return false
	}
	defer func() { _ = keys.Stop() }()
	for range keys.Keys() {
		return true
	}
	return false
}

// dirStoreHasJobs reports whether the data directory dir holds job records
// of the default checkpoint store (dir): DIR/checkpoints/_jobs
// (coordinator.Config.StateDir) has an entry.
func dirStoreHasJobs(dir string) bool {
	entries, err := os.ReadDir(filepath.Join(dir, "checkpoints", "_jobs"))
	return err == nil && len(entries) > 0
}

// logger is the log of weir's own lines, on stderr: warnings and errors,
// and info too with verbose (-v).
func logger(std Stdio, verbose bool) *slog.Logger {
	lvl := slog.LevelInfo
	if !verbose {
		lvl = slog.LevelWarn
	}
	return slog.New(slog.NewTextHandler(std.Err, &slog.HandlerOptions{Level: lvl}))
}

// operatorLogger is the log of the operators' own lines (weir.log, stdout,
// stderr): from info up, and debug too with verbose. The operators' lines
// are their authors' output; a trial's info lines were hidden by the
// warnings-only log weir keeps of its own work by default.
func operatorLogger(std Stdio, verbose bool) *slog.Logger {
	lvl := slog.LevelInfo
	if verbose {
		lvl = slog.LevelDebug
	}
	return slog.New(slog.NewTextHandler(std.Err, &slog.HandlerOptions{Level: lvl}))
}

const upUsage = `[-data DIR] [-port N] [-sync always|D] [-id ID] [-workers N] [-slots N] [caps flags] [-worker-wait D] [-checkpoint-store dir|jetstream] [-metrics ADDR] [-max-module-size SIZE] [-allow-system-subjects]
       weir up -nats URL[,URL...] [-replicas N] [-id ID] [-workers N] [-slots N] [caps flags] [-worker-wait D] [auth flags] [-metrics ADDR] [-max-module-size SIZE] [-allow-system-subjects]

Starts weir on one machine: an embedded NATS server with JetStream (its store
under DIR; atomic batches of up to 20000 messages), the coordinator and
worker(s). DIR belongs to this process: a second weir up or weir run -data
on it is refused. weir up notes its NATS URL in DIR/weir-up.url, so that
weir run -data DIR names this port (and -host) in the commands it prints
for the directory's jobs (one that cannot be written is said, and weir up
serves on). Other machines join with
'weir worker -nats nats://THIS-HOST:PORT -atomic-batch 20000' (use
-checkpoint-store jetstream then, so that every worker reaches the
checkpoints). -metrics serves Prometheus metrics on http://ADDR/metrics:
every job's state, attempt, restarts and failures in a row, checkpoints
completed, failed and aborted (in all and in a row) and the latest one's
duration, size and time, and each running task's records,
busy and backpressured time, on whichever worker it runs; go_build_info
says the binary's version. http://ADDR/healthz answers 200 while the
coordinator answers, 503 with why when it does not (a liveness probe).

-sync says when the embedded server fsyncs JetStream writes (the streams
jobs read and write, and weir's own buckets). By default it does every 2m
(nats-server's default): a power loss or a crash of the machine (not of
weir: the OS keeps what it wrote) can lose what was acknowledged in that
time, exactly-once output included, which its checkpoint then records as
committed. -sync always fsyncs each write before acknowledging it, so that
output survives a power loss; -sync 1s narrows the window instead.
Checkpoints kept in DIR/checkpoints are fsynced either way. Under -sync
always a message published alone waits for its own fsync, an atomic batch
for one: at-least-once sinks in publish mode auto then publish atomic
batches where their stream allows atomic publish (allow_atomic), as
exactly-once sinks commit checkpoints of 10000+ records already.

A job with no live worker to run on (-workers 0 before any weir worker
joined, or every worker gone) waits for one, created or restarting with the
reason "waiting for a worker to join (none is live)", and deploys as soon as
one joins; the wait uses up no restart attempt. Only a wait longer than
-worker-wait counts as one failure of the job.

The in-process worker's ID is -id, by default the host name (with -workers
N the others add -1, -2, ...): the same on every restart, so that a
cordon (weir worker drain) holds across one and the metrics' worker label
stays. weir worker's default, HOSTNAME-PID, does not collide with it.

-slots caps the tasks each in-process worker runs, of all jobs (weir worker
-slots does for a worker of its own; 0, the default, is no limit). The
coordinator spreads each job's tasks over the live workers, counting the
tasks other jobs have on each, and never gives a worker more than its slots:
a job whose tasks do not fit waits like one with no worker, with the reason
"waiting for free slots: needs 4 tasks, workers have 2 free (w1 0 of 2, w2 2
of 4)", until a worker joins or another job ends.

The caps flags bound what jobs ask of each in-process worker, as weir worker's
do (docs/OPERATIONS.md, "Running weir for several teams"; -workers 0 keeps
tenant code out of this process):
` + capsUsage + `

-max-module-size SIZE (default 32MiB) is the largest module the module
registry takes: weir module push and weir run's push refuse a larger one
before validating or storing it, and every worker refuses to load one
(stored before the limit was lowered) before reading it. The coordinator
keeps it in the registry bucket's stream (metadata weir.max-module-size),
where every process on that NATS reads it.

A job's sources and sinks run on weir's own NATS connection: the
coordinator refuses, at submit and restore, every one that reaches weir's
subjects (weir.ctl.>, weir.data.>), NATS's ($JS.>, $KV.>, $O.>, $SYS.>,
$SRV.>, $MQTT.>, _INBOX.>, ...: docs/OPERATIONS.md lists them) or weir's
streams (KV_weir_*, OBJ_weir_*): a spec could otherwise cancel others'
jobs, read their specs and state, or delete streams. -allow-system-subjects lets specs reach them, for a
deployment whose every spec author is an admin; nothing in a spec can.

With -nats it starts no server: the coordinator and workers use an existing
NATS server or cluster (JetStream enabled), and keep job records, checkpoints
and modules in JetStream buckets. On a cluster give -replicas 3 (or 5), so
that those buckets survive the loss of a server; it also scales buckets that
exist already. Workers joining such a cluster need only -nats. One weir up
serves a NATS: its coordinator holds a lease there (a key of the JetStream
bucket weir_coordinator, renewed every few seconds, that expires 15s after
it was last renewed). A second weir up is refused while the first one
answers or renews its lease; one whose lease holder does not (a process
frozen, or killed) waits for that lease to expire, up to 15s, and takes
over. A coordinator that did not renew its lease in time (frozen, or NATS
without quorum) logs that it lapsed, acts no more and keeps trying: when it
finds the lease still its own (nobody took it over) it re-takes it and goes
on with its jobs; when another holds it, it stops, leaving its jobs to that
one, and weir up exits with an error saying so. When nobody is known to
hold it (its key expired after writes that may be its own renewals, their
answers lost: a quorum loss longer than 15s), weir up stops its
coordinator and starts it again in this process as it started it: it
campaigns for the lease (refused, and weir up exits, while another
answers or renews it), then resumes the jobs; its workers run on. A weir
up stopped with Ctrl-C releases its lease at once.

Stopped (Ctrl-C, SIGTERM, SIGHUP), weir up cancels no task of its jobs:
those on workers of other processes (weir worker) run on, as after a
crash, and the next weir up on the same directory (or NATS) resumes the
jobs and takes them over; weir job stop or weir job cancel ends a job.`

func runUp(ctx context.Context, std Stdio, args []string) error {
	fs := newFlags(std, "up", upUsage)
	data := fs.String("data", ".weir", "data directory (NATS store, checkpoints, spill files)")
	host := fs.String("host", "127.0.0.1", "listen address of the embedded NATS server")
	port := fs.Int("port", 4222, "client port of the embedded NATS server")
	workers := fs.Int("workers", 1, "in-process workers")
	slots := fs.Int("slots", 0, "most tasks each in-process worker runs at a time, of all jobs (0: no limit)")
	var cf capsFlags
	cf.register(fs, "each in-process worker")
	workerID := fs.String("id", "", "ID of the in-process worker, as weir worker -id (with -workers N the others are ID-1, ID-2, ...; default the host name, the same on every restart, so that a cordon and the metrics' worker label hold)")
	workerWait := fs.Duration("worker-wait", job.DefaultWorkerWait, "how long a job waits for a worker to join, or for free slots, before that counts as a failure")
	store := fs.String("checkpoint-store", "", "checkpoint storage: dir (DATA/checkpoints) or jetstream (shared); default dir, jetstream with -nats")
	var nf natsFlags
	nf.register(fs, "", "use this NATS server or cluster (comma-separated URLs) instead of starting the embedded one")
	replicas := fs.Int("replicas", 0, "with -nats: servers that keep each of weir's buckets, 1-5 (default: 1 for new buckets, existing ones as they are)")
	verbose := fs.Bool("v", false, "log what the coordinator and workers do (the operators' own lines are logged from info up either way; -v adds their debug lines)")
	metricsAddr := fs.String("metrics", "", "serve Prometheus metrics on http://ADDR/metrics (e.g. 127.0.0.1:9464)")
	syncFlag := fs.String("sync", "", "when the embedded server fsyncs JetStream writes: always (before acknowledging each), or every DURATION (default 2m, nats-server's)")
	maxModuleSize := fs.String("max-module-size", jobspec.FormatSize(registry.DefaultMaxModuleSize), "largest module the module registry takes (weir module push, weir run's push) and a worker loads")
	allowSystem := fs.Bool("allow-system-subjects", false, "let job specs read and write weir's own subjects and streams (weir.ctl.>, weir.data.>, KV_weir_*, OBJ_weir_*) and NATS's ($JS.>, $KV.>, $O.>, $SYS.>, _INBOX.>, ...): a spec could then cancel others' jobs, read their specs and state, delete streams; only where every spec author is an admin")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("up: unexpected argument %q", fs.Arg(0))
	}
	external := nf.url != ""
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if external && (set["host"] || set["port"]) {
		return usagef("up: -host and -port are the embedded server's; with -nats no server is started")
	}
	if external && set["sync"] {
		return usagef("up: -sync is the embedded server's; with -nats set sync_interval in that server's configuration")
	}
	syncAlways, syncInterval, err := parseSync(*syncFlag)
	if err != nil {
		return usagef("up: %v", err)
	}
	if *slots < 0 {
		return usagef("up: -slots %d: give 0 (no limit) or more", *slots)
	}
	caps, err := cf.caps("up")
	if err != nil {
		return err
	}
	if *workerWait <= 0 {
		return usagef("up: -worker-wait %v: give a positive duration", *workerWait)
	}
	moduleSize, err := jobspec.ParseSize(*maxModuleSize)
	if err != nil || moduleSize <= 0 {
		return usagef("up: -max-module-size %s: give a size, e.g. 64MiB", *maxModuleSize)
	}
	if *replicas < 0 || *replicas > 5 {
		return usagef("up: -replicas %d: JetStream keeps 1 to 5 replicas", *replicas)
	}
	if !external && *replicas > 1 {
		return usagef("up: -replicas %d needs a NATS cluster (-nats); the embedded server is a single one", *replicas)
	}
	var ln net.Listener
	if *metricsAddr != "" {
		var err error
		if ln, err = listenMetrics("up", *metricsAddr); err != nil {
			return err
		}
		defer ln.Close()
	}
	abs, err := filepath.Abs(*data)
	if err != nil {
		return err
	}
	if *workerID == "" {
		// Not weir worker's HOSTNAME-PID: a new ID on each restart left
		// the cordon and the metrics of the one before behind.
		*workerID, _ = os.Hostname() // else "": node's default
	}
	opts := node.Options{DataDir: abs, Host: *host, Port: *port, SyncAlways: syncAlways, SyncInterval: syncInterval, Coordinator: true,
		WorkerID: *workerID, Workers: *workers, WorkerSlots: *slots, WorkerCaps: caps, WorkerWait: *workerWait, CheckpointStore: *store, Replicas: *replicas, Log: logger(std, *verbose),
		OperatorLog: operatorLogger(std, *verbose), AllowSystemSubjects: *allowSystem, MaxModuleSize: moduleSize}
	if external {
		// Waits, as weir worker does, for a server that is down, and for
		// JetStream and its buckets' streams to answer: a cluster
		// restarted whole takes connections seconds before they do.
		opts.NATS, opts.WaitForNATS = nf.options("weir up"), true
	}
	n, err := node.Start(ctx, opts)
	if err != nil {
		if external && ctx.Err() != nil {
			// Interrupted while it waited for NATS: a stop asked for,
			// not a failure.
			slog.New(slog.NewTextHandler(std.Err, nil)).Info("weir up: stopped before it started")
			return nil
		}
		if errors.Is(err, node.ErrDataDirInUse) {
			return inUseHint(err, abs)
		}
		if hint := replicasHint(err, *replicas); hint != "" {
			return fmt.Errorf("%s: %w", hint, err)
		}
		if !external && errors.Is(err, syscall.EADDRINUSE) {
			// Most often a NATS server of the user's own, which weir up
			// would use with -nats rather than start one beside it.
			hp := net.JoinHostPort(*host, strconv.Itoa(*port))
			return fmt.Errorf("port %d is in use (a NATS server already? run on it with -nats %s; else give -port): %w", *port, shellQuote("nats://"+hp), err)
		}
		return err
	}
	defer n.Close()
	if !external {
		// weir run -data on the directory names this port (servedBy):
		// a hint, whose loss is said, not a reason to stop.
		if err := noteServed(abs, n.Server.ClientURL()); err != nil {
			fmt.Fprintf(std.Err, "weir up: %v\n", err)
		}
	}
	where, on, submit := "data in "+abs+syncNote(syncAlways, syncInterval), natsconn.Redact(n.URL()), natsconn.Redact(n.URL())
	if external {
		where = "no embedded server"
		// The servers as given: the one connected to now is one of a
		// cluster's, and a command should reach any of them.
		submit = natsconn.Redact(nf.url)
		if strings.Contains(nf.url, ",") {
			on += " (of " + submit + ")"
		}
	}
	fmt.Fprintf(std.Out, "weir is up: NATS on %s, %s, coordinator and %d worker(s) running (%s checkpoints)\n",
		on, where, *workers, n.CheckpointStore())
	if n.CheckpointStore() == node.StoreJetStream && dirStoreHasJobs(abs) {
		fmt.Fprintf(std.Err, "weir up: %s holds the jobs of runs with -checkpoint-store dir, which this one (jetstream) does not see: weir up -checkpoint-store dir on this directory shows them again\n",
			filepath.Join(abs, "checkpoints"))
	}
	if n.CheckpointStore() == node.StoreDir && jetStreamHasJobs(ctx, n.JS) {
		// The other way round: an SRE trial's jobs vanished from job ls
		// and /metrics without a word.
		fmt.Fprintf(std.Err, "weir up: JetStream (bucket %s) holds the jobs of runs with -checkpoint-store jetstream, which this one (dir) does not see: weir up -checkpoint-store jetstream on this directory shows them again\n",
			jetStreamJobsBucket)
	}
	if id := n.CoordinatorID(); id != "" {
		fmt.Fprintf(std.Out, "coordinator %s holds the coordinator lease of this NATS (bucket %s): another weir up here is refused while it runs\n",
			id, lease.Bucket)
	}
	conn := "" // the embedded server takes no auth
	if external {
		conn = nf.connFlags()
	}
	fmt.Fprintf(std.Out, "submit a job with: weir run -nats %s%s JOB.yaml   (%s)\n", shellQuote(submit), conn, ctrlCStops(external, *workers))
	if ln != nil {
		defer serveMetrics(ln, n)()
		fmt.Fprintf(std.Out, "metrics on http://%s/metrics\n", ln.Addr())
	}
	for ctx.Err() == nil {
		select {
		case <-ctx.Done():
			continue
		case <-n.Lost():
		}
		if _, taken := n.LeaseTakenBy(); taken {
			// Frozen or cut off for the lease's TTL, this coordinator
			// was replaced (a lapse that nobody took over is re-taken):
			// it stopped acting, and its jobs go on under the other.
			return fmt.Errorf("up: %w: this coordinator stopped, leaving its jobs to the one that holds the lease", n.LeaseErr())
		}
		// Lost to nobody (its key expired or was deleted, with writes
		// since that may be its own renewals whose answers were lost):
		// a quorum loss longer than the TTL left weir up exited and
		// nobody coordinating. It campaigns again as it started.
		lost := n.LeaseErr()
		if err := n.RestartCoordinator(ctx); err != nil {
			if ctx.Err() != nil {
				break // Ctrl-C while it campaigned
			}
			return fmt.Errorf("up: %w; campaigning for the lease again: %w", lost, err)
		}
		fmt.Fprintf(std.Out, "coordinator %s holds the coordinator lease of this NATS again (bucket %s), and resumed its jobs\n", n.CoordinatorID(), lease.Bucket)
	}
	// A structured line with a time, as weir up's log lines are.
	slog.New(slog.NewTextHandler(std.Out, nil)).Info("weir: shutting down")
	return nil
}

// healthz answers a liveness probe: 200 once the coordinator answers a
// request of its job API (its workers, within a second), with how many
// workers are live; 503 with why when it does not. An SRE trial found no
// endpoint to point a probe at.
func healthz(api interface {
	Workers(context.Context) ([]control.WorkerStatus, error)
}) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		live, err := liveWorkers(r.Context(), api)
		if err != nil {
			http.Error(w, "coordinator not answering: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintf(w, "ok: coordinator running, %d worker(s) live\n", live)
	})
}

// parseSync reads weir up's -sync: "" (nats-server's default interval),
// "always", or a positive duration.
func parseSync(v string) (always bool, interval time.Duration, err error) {
	switch v {
	case "":
		return false, 0, nil
	case "always":
		return true, 0, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return false, 0, fmt.Errorf("-sync %s: give always, or how often to fsync as a positive duration such as 1s", v)
	}
	return false, d, nil
}

// syncNote is what weir up's first line says of the embedded server's
// fsyncs: nothing for the default, else what -sync set.
func syncNote(always bool, interval time.Duration) string {
	switch {
	case always:
		return ", every JetStream write fsynced before it is acknowledged"
	case interval > 0:
		return fmt.Sprintf(", JetStream writes fsynced every %v", interval)
	}
	return ""
}

const workerUsage = `-nats URL [-id ID] [-slots N] [-memory SIZE] [-max-task-memory SIZE] [-max-call-timeout D] [-max-log-rate N] [-data DIR] [-checkpoint-store jetstream|dir] [-atomic-batch N] [-metrics ADDR]
       weir worker ls [-nats URL] [auth flags] [-json]
       weir worker drain NAME [-nats URL] [auth flags] [-timeout D]
       weir worker uncordon NAME [-nats URL] [auth flags]

Runs a worker that joins the coordinator reachable through NATS at URL and
runs the tasks it is given. While the server cannot be reached (a worker
started before it) it keeps trying, with a backoff up to 10s, logging each
failed attempt, until it connects or is interrupted; at a port that answers
something other than NATS (an HTTP server such as the NATS monitoring port,
a TLS port) it exits at once, saying what answered. Connected to a NATS
where no coordinator answers yet (started before weir up), it says so, and
the coordinator takes it on once it starts. -atomic-batch is the most messages its
JetStream sinks put in one atomic batch: at most the server's
max_batch_size (1000 by default in nats-server, 20000 in 'weir up'). -slots
is the most tasks it runs at a time, of all jobs (0, the default: no limit);
the coordinator gives it no more, and it refuses a deploy beyond them (from
a coordinator that does not know all it runs), saying what it runs.

` + capsUsage + `

weir worker ls lists the live workers the coordinator knows: ID, host, and
slots as used/total (used: the tasks placed there of the jobs that have not
ended; total "-": no limit), and which are cordoned or draining.

weir worker drain NAME takes a worker out of service without failing a job
over: it cordons it (no new task is placed there) and moves each job with
tasks on it to the other workers with a stop savepoint and a restore from
it; weir worker uncordon NAME makes it placeable again. For a rolling
upgrade: drain, stop the worker, start the new build under the same -id,
uncordon; then the next. weir worker drain -h says more.`

func runWorker(ctx context.Context, std Stdio, args []string) error {
	if len(args) > 0 {
		switch args[0] {
		case "ls":
			return listWorkers(ctx, std, args[1:])
		case "drain":
			return drainWorker(ctx, std, args[1:])
		case "uncordon":
			return uncordonWorker(ctx, std, args[1:])
		}
	}
	fs := newFlags(std, "worker", workerUsage)
	var nf natsFlags
	nf.register(fs, defaultNATS, "NATS server URL(s)")
	id := fs.String("id", "", "worker ID (default HOSTNAME-PID)")
	data := fs.String("data", "", "directory for spill files (and dir checkpoints)")
	store := fs.String("checkpoint-store", node.StoreJetStream, "checkpoint storage: jetstream (shared) or dir")
	atomicBatch := fs.Int("atomic-batch", sink.MaxAtomicBatch, "most messages per atomic batch of a JetStream sink (the server's max_batch_size or less)")
	slots := fs.Int("slots", 0, "most tasks the worker runs at a time, of all jobs (0: no limit)")
	var cf capsFlags
	cf.register(fs, "the worker")
	verbose := fs.Bool("v", false, "log what the worker does (the operators' own lines are logged from info up either way; -v adds their debug lines)")
	metricsAddr := fs.String("metrics", "", "serve the worker's own tasks' Prometheus metrics on http://ADDR/metrics, and /healthz (e.g. 127.0.0.1:9465): there while no coordinator is")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		if fs.Arg(0) == "ls" {
			// weir worker -nats URL ls: flags before the subcommand, as
			// weir job and weir module take them, list the workers; a
			// worker started here would run until interrupted, as one
			// more, instead.
			return listWorkers(ctx, std, slices.Concat(args[:len(args)-fs.NArg()], fs.Args()[1:]))
		}
		switch fs.Arg(0) {
		case "drain":
			return drainWorker(ctx, std, slices.Concat(args[:len(args)-fs.NArg()], fs.Args()[1:]))
		case "uncordon":
			return uncordonWorker(ctx, std, slices.Concat(args[:len(args)-fs.NArg()], fs.Args()[1:]))
		}
		return usagef("worker: unexpected argument %q", fs.Arg(0))
	}
	if *slots < 0 {
		return usagef("worker: -slots %d: give 0 (no limit) or more", *slots)
	}
	caps, err := cf.caps("worker")
	if err != nil {
		return err
	}
	var metricsLn net.Listener
	if *metricsAddr != "" {
		if metricsLn, err = listenMetrics("worker", *metricsAddr); err != nil {
			return err
		}
		defer metricsLn.Close()
	}
	if *data == "" {
		dir, err := os.MkdirTemp("", "weir-worker-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		*data = dir
	}
	// say logs the worker's own comings and goings, at info whatever -v:
	// as the structured lines its log writes (time=… level=…), not plain
	// lines without a time between them.
	say := slog.New(slog.NewTextHandler(std.Out, nil))
	n, err := node.Start(ctx, node.Options{NATS: nf.options("weir worker"), WaitForNATS: true, DataDir: *data, Workers: 1, WorkerID: *id,
		CheckpointStore: *store, AtomicBatch: *atomicBatch, WorkerSlots: *slots, WorkerCaps: caps, Log: logger(std, *verbose),
		OperatorLog: operatorLogger(std, *verbose)})
	if err != nil {
		if ctx.Err() != nil {
			// Interrupted while it waited for NATS: a stop asked for, not
			// a failure.
			slog.New(slog.NewTextHandler(std.Err, nil)).Info("weir worker: stopped before it joined")
			return nil
		}
		return err
	}
	defer n.Close()
	if metricsLn != nil {
		defer serveWorkerMetrics(metricsLn, n)()
		say.Info(fmt.Sprintf("worker %s metrics on http://%s/metrics", n.Workers[0].ID(), metricsLn.Addr()))
	}
	if n.CoordinatorAnswers() {
		say.Info(fmt.Sprintf("worker %s joined %s", n.Workers[0].ID(), natsconn.Redact(n.URL())))
	} else {
		// It heartbeats meanwhile: a coordinator that starts takes it
		// on. Saying "joined" would have the user look for jobs.
		say.Info(fmt.Sprintf("worker %s connected to %s; no coordinator answers there yet: it joins the one that weir up -nats %s starts",
			n.Workers[0].ID(), natsconn.Redact(n.URL()), shellQuote(natsconn.Redact(nf.url))))
	}
	<-ctx.Done()
	// Closing says goodbye to the coordinator, which places the tasks
	// that ran here on other workers from their latest checkpoints, or
	// waits for a worker to join or for free slots — no failure of the
	// jobs' (not counted against restart.attempts).
	say.Info(stoppingLine(n.Workers[0].ID(), n.Workers[0].Tasks()))
	return nil
}

// stoppingLine is what weir worker says as it stops holding tasks: what
// the coordinator does with them, if it holds any (a drained worker holds
// none). The worker does not know whether another worker can take them:
// with none live, or none with free slots, the coordinator waits for one
// (a trial's worker said its tasks moved to other workers while the
// coordinator said it waited for one to join).
func stoppingLine(id string, tasks int) string {
	switch tasks {
	case 0:
		return fmt.Sprintf("worker %s stopping: it holds no task", id)
	case 1:
		return fmt.Sprintf("worker %s stopping: the coordinator moves its 1 task to another worker, from its job's latest checkpoint, or waits until one can take it", id)
	}
	return fmt.Sprintf("worker %s stopping: the coordinator moves its %s to other workers, from their jobs' latest checkpoints, or waits until one can take them",
		id, plural(tasks, "task"))
}

const workerLsUsage = `[-nats URL] [auth flags] [-wait D] [-json]

Lists the live workers the coordinator knows: ID, host, and slots as
used/total (used: the tasks placed there of the jobs that have not ended;
total "-": no limit). While a worker has a memory budget (weir worker
-memory) a MEMORY column gives each worker's operators' memory as
used/budget (used: the limits.memory of its operator tasks, as placement
counts them; budget "-": none); while one has caps on an operator
instance, a CAPS column gives them: "task 1GiB, call 10s, log 50/s"
(-max-task-memory, -max-call-timeout, -max-log-rate; "-": none). A
worker the coordinator places no tasks on (its checkpoint store is not
the coordinator's) is followed by a line that says why. STATE is "ready", or, for a worker
cordoned by weir worker drain, "cordoned" (it holds no task) or
"draining" (it still holds tasks); a cordoned worker that is not live
(stopped after a drain) is listed as "down", until weir worker uncordon
forgets its cordon. Columns come and go with what the workers have
(MEMORY, CAPS): scripts read -json.`

// listWorkers is weir worker ls.
func listWorkers(ctx context.Context, std Stdio, args []string) error {
	fs := newFlags(std, "worker ls", workerLsUsage)
	var nf natsFlags
	nf.register(fs, defaultNATS, "NATS server URL")
	nf.registerWait(fs)
	asJSON := fs.Bool("json", false, "print the workers as JSON (an array of control.WorkerStatus) instead of the table")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("worker ls: unexpected argument %q", fs.Arg(0))
	}
	nc, api, err := connectAPI(&nf, std.Err)
	if err != nil {
		return err
	}
	defer nc.Close()
	ws, err := api.Workers(ctx)
	if err != nil {
		return apiErr("worker ls", err)
	}
	if *asJSON {
		return printJSON(std.Out, ws)
	}
	printWorkers(std.Out, ws, time.Now())
	return nil
}

// cordonState is a worker's STATE in weir worker ls: draining while a
// cordoned worker holds tasks, then cordoned.
func cordonState(x control.WorkerStatus) string {
	switch {
	case x.Down:
		return "down"
	case x.Cordoned && x.Used > 0:
		return "draining"
	case x.Cordoned:
		return "cordoned"
	}
	return "ready"
}

// printWorkers prints one line per worker, its slots as used/total, its
// operators' memory as used/budget and its caps (those two columns only
// while a worker has a budget or caps) and when it was last heard from
// (at now), then a line for each worker that gets no tasks and each that
// went silent: a worker killed or cut off is listed as live until its
// heartbeat timeout, which a trial read as healthy.
func printWorkers(w io.Writer, ws []control.WorkerStatus, now time.Time) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	// STATE always (added only while a worker was cordoned, it broke
	// the scripts that parse the list), MEMORY while one has a budget,
	// CAPS while one has caps: the list reads as before otherwise.
	budgets := slices.ContainsFunc(ws, func(x control.WorkerStatus) bool { return x.Caps.Memory > 0 })
	caps := slices.ContainsFunc(ws, func(x control.WorkerStatus) bool { return capsCell(x.Caps) != "-" })
	head := []string{"WORKER", "HOST", "STATE", "SLOTS"}
	if budgets {
		head = append(head, "MEMORY")
	}
	if caps {
		head = append(head, "CAPS")
	}
	fmt.Fprintln(tw, strings.Join(append(head, "LAST HEARD"), "\t"))
	for _, x := range ws {
		heard := "-"
		if !x.LastHeartbeat.IsZero() {
			heard = max(now.Sub(x.LastHeartbeat), 0).Round(100*time.Millisecond).String() + " ago"
		}
		row := []string{x.ID, x.Host}
		if x.Down {
			row[1] = "-"
		}
		row = append(row, cordonState(x))
		switch {
		case x.Down:
			row = append(row, "-")
		case x.Slots > 0:
			row = append(row, fmt.Sprintf("%d/%d", x.Used, x.Slots))
		default:
			row = append(row, fmt.Sprintf("%d/-", x.Used))
		}
		if budgets {
			row = append(row, workerMemory(x))
		}
		if caps {
			row = append(row, capsCell(x.Caps))
		}
		fmt.Fprintln(tw, strings.Join(append(row, heard), "\t"))
	}
	tw.Flush()
	for _, x := range ws {
		if x.Down {
			fmt.Fprintf(w, "worker %s is cordoned and not live: it gets no task when it comes back until weir worker uncordon %s\n", x.ID, x.ID)
		}
		if x.Unusable != "" {
			fmt.Fprintf(w, "worker %s gets no tasks: %s\n", x.ID, x.Unusable)
		}
		if d := now.Sub(x.LastHeartbeat); !x.LastHeartbeat.IsZero() && d > control.SilentAfter {
			fmt.Fprintf(w, "worker %s has not been heard from for %s (stopped, or cut off?): the coordinator declares it lost once its heartbeat timeout passes, and moves its tasks\n",
				x.ID, d.Round(100*time.Millisecond))
		}
	}
}

// workerMemory is a worker's MEMORY in weir worker ls: its operators'
// memory as used/budget, each as a refusal for want of memory writes it
// (jobspec.FormatSize, "0" for none): "640MiB/1GiB", "0/256MiB";
// "64MiB/-" for a worker without a budget; "-" for one that is down.
func workerMemory(x control.WorkerStatus) string {
	if x.Down {
		return "-"
	}
	used, budget := "0", "-"
	if x.MemoryUsed != 0 {
		used = jobspec.FormatSize(x.MemoryUsed)
	}
	if x.Caps.Memory > 0 {
		budget = jobspec.FormatSize(x.Caps.Memory)
	}
	return used + "/" + budget
}

// capsCell is a worker's caps on one operator instance in weir worker
// ls, "task 1GiB, call 10s, log 50/s" (-max-task-memory,
// -max-call-timeout, -max-log-rate), only those set; "-" for none.
func capsCell(c control.Caps) string {
	var parts []string
	if c.MaxTaskMemory > 0 {
		parts = append(parts, "task "+jobspec.FormatSize(c.MaxTaskMemory))
	}
	if c.MaxCallTimeout > 0 {
		parts = append(parts, "call "+c.MaxCallTimeout.String())
	}
	if c.MaxLogRate > 0 {
		parts = append(parts, fmt.Sprintf("log %d/s", c.MaxLogRate))
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, ", ")
}

// listenMetrics listens on addr for cmd's -metrics (weir up, weir run):
// an address in use says which flag gave it and what to do.
func listenMetrics(cmd, addr string) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if errors.Is(err, syscall.EADDRINUSE) {
		return nil, fmt.Errorf("%s: -metrics %s is in use (another weir's metrics? give -metrics another address, or leave -metrics out): %w", cmd, addr, err)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: -metrics %s: %w", cmd, addr, err)
	}
	return ln, nil
}

// serveMetrics serves n's Prometheus metrics (/metrics) and /healthz on
// ln (weir up -metrics, weir run -metrics) until the returned function is
// called.
func serveMetrics(ln net.Listener, n *node.Node) (stop func()) {
	mux := http.NewServeMux()
	mux.Handle("/metrics", metrics.Handler(metrics.NewCollector(runningManager{n}, 0)))
	mux.Handle("/healthz", healthz(runningManager{n}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	return func() { srv.Close() }
}

// runningManager is the job manager that runs now in n, for the metrics
// and /healthz (metrics.JobLister, WorkerLister, LastCheckpointer and
// WorkerLosses): weir up's coordinator, restarted in-process after it lost its
// lease to nobody (node.Node.RestartCoordinator), has a new one.
type runningManager struct{ n *node.Node }

func (r runningManager) Jobs(ctx context.Context) ([]control.JobStatus, error) {
	return r.n.JobManager().Jobs(ctx)
}

func (r runningManager) Workers(ctx context.Context) ([]control.WorkerStatus, error) {
	return r.n.JobManager().Workers(ctx)
}

func (r runningManager) LastCheckpoint(ctx context.Context, job string) (control.CheckpointInfo, error) {
	return r.n.JobManager().LastCheckpoint(ctx, job)
}

// WorkerLosses counts since the running manager started (a restarted
// coordinator's counts begin again, as a restarted weir up's do).
func (r runningManager) WorkerLosses() (lost, left uint64) {
	return r.n.JobManager().WorkerLosses()
}

// ctrlCStops says what a Ctrl-C of weir up stops, for its banner. With
// its embedded NATS, everything: the server goes with it. With -nats, the
// coordinator and its own workers only: tasks on weir workers of other
// processes run on (a stop cancels no task; the next weir up resumes
// their jobs), which "stops everything" said otherwise.
func ctrlCStops(external bool, workers int) string {
	switch {
	case !external:
		return "Ctrl-C stops everything"
	case workers == 0:
		return "Ctrl-C stops the coordinator only: tasks on the weir workers run on; weir job stop or cancel stops a job"
	default:
		return fmt.Sprintf("Ctrl-C stops the coordinator and its %s; tasks on other weir workers run on", plural(workers, "worker"))
	}
}
