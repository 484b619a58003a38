// Package node assembles a weir process: NATS (the embedded server, or an
// existing one by URL), the coordinator's job manager, and workers — in any
// combination, all talking through the same NATS control subjects. `weir
// up`, `weir run`, `weir worker` and the end-to-end tests start one.
package node

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirhq/weir/cmd/weir/internal/worker"
	"github.com/weirhq/weir/coordinator"
	"github.com/weirhq/weir/coordinator/control"
	"github.com/weirhq/weir/coordinator/job"
	"github.com/weirhq/weir/coordinator/lease"
	"github.com/weirhq/weir/coordinator/registry"
	"github.com/weirhq/weir/host"
	"github.com/weirhq/weir/host/wasm"
	"github.com/weirhq/weir/transport/embedded"
	"github.com/weirhq/weir/transport/natsconn"
	"github.com/weirhq/weir/transport/source"
	"github.com/weirhq/weir/transport/storage"
)

// ErrDataDirInUse is wrapped by the error of a Start whose data directory
// another weir process holds (weir up, weir run -data, a worker): one
// directory serves one process at a time.
var ErrDataDirInUse = errors.New("one weir process per data directory")

// Store kinds for checkpoint storage.
const (
	// StoreDir keeps checkpoints in DataDir/checkpoints: one machine only.
	StoreDir = "dir"
	// StoreJetStream keeps checkpoint state in a JetStream object store and
	// metadata in a KV bucket: shared by every worker of a cluster.
	StoreJetStream = "jetstream"
)

// Options configure a node.
type Options struct {
	// DataDir holds the embedded server's JetStream store, local
	// checkpoints and spill files. Required unless NATS is set and the
	// store is JetStream.
	DataDir string
	// NATS, if set, connects to an existing server or cluster instead of
	// starting the embedded one.
	NATS *natsconn.Options
	// WaitForNATS makes Start wait for the NATS server when it cannot be
	// reached: it keeps trying (natsconn.ConnectRetry), then waits for
	// JetStream to answer, logging one line per failed attempt, until it
	// succeeds or ctx is done — for a worker started before its server.
	// Without it Start fails at once, as interactive commands should.
	WaitForNATS bool
	// Connecting, if set, is called as Start connects to the external
	// server (NATS set, WaitForNATS not), and the function it returns once
	// that connection is made or has failed, so that a command can say
	// what it waits for while a server does not answer.
	Connecting func() (connected func())
	// Host and Port of the embedded server (default 127.0.0.1:4222; -1 picks
	// a free port).
	Host string
	Port int
	// SyncAlways makes the embedded server fsync every JetStream write
	// before acknowledging it (embedded.Config.SyncAlways); SyncInterval,
	// when SyncAlways is off, sets how often it fsyncs (0: the server's
	// default, two minutes). Without SyncAlways a power loss, or a crash
	// of the machine, can lose writes acknowledged within the interval:
	// exactly-once output a checkpoint recorded as committed among them.
	// With SyncAlways the coordinator tells the workers so
	// (control.Deploy.FsyncEachWrite): at-least-once sinks in publish mode
	// auto then publish atomic batches, one fsync each, where their
	// streams allow atomic publish.
	SyncAlways   bool
	SyncInterval time.Duration
	// Coordinator runs the job manager in this process.
	Coordinator bool
	// Workers is the number of in-process workers.
	Workers int
	// WorkerID names the first worker (default "<hostname>-<pid>").
	WorkerID string
	// WorkerSlots is the most tasks each in-process worker is given at a
	// time, of all jobs (worker.Config.Slots; 0: no limit).
	WorkerSlots int
	// WorkerCaps bound what operators may ask of each in-process worker
	// (worker.Config.Caps: a memory budget, per-instance maximums).
	WorkerCaps control.Caps
	// CheckpointStore is StoreDir or StoreJetStream; default StoreDir with
	// the embedded server, StoreJetStream with an external one.
	CheckpointStore string
	// HeartbeatTimeout declares a silent worker lost (0 = default).
	HeartbeatTimeout time.Duration
	// WorkerWait is how long the coordinator's jobs wait for a worker to
	// join when none is live, or for free slots (0 = job.DefaultWorkerWait).
	WorkerWait time.Duration
	// HeartbeatInterval of the workers (0 = default).
	HeartbeatInterval time.Duration
	// AtomicBatch is the workers' atomic batch size for JetStream sinks
	// (worker.Config.AtomicBatch); 0 means the embedded server's limit
	// (embedded.DefaultMaxAtomicBatch) with the embedded server, and
	// nats-server's default (1000) with an external one.
	AtomicBatch int
	// Log receives everything the node logs, the operators' lines too
	// unless OperatorLog is set.
	Log *slog.Logger
	// OperatorLog, if set, receives the operators' own lines
	// (worker.Config.OperatorLog).
	OperatorLog *slog.Logger
	// Hooks wrap the workers' task parts (tests only).
	Hooks *worker.Hooks
	// Store, if set, replaces the checkpoint store (tests only).
	Store host.Store
	// Replicas is how many servers of a NATS cluster keep weir's own
	// buckets (coordinator.Config.Replicas); 0 creates them with 1 and
	// leaves existing ones as they are.
	Replicas int
	// CacheDir is the wasm compilation cache ("" = the user cache dir).
	CacheDir string
	// LeaseTTL is how long the coordinator's lease lasts unrenewed, when
	// Start creates its bucket (0 = lease.DefaultTTL); a bucket that
	// exists keeps its own. With an external NATS the coordinator holds
	// the lease while it runs (see Start).
	LeaseTTL time.Duration
	// AllowSystemSubjects lets the coordinator's jobs reach weir's and
	// NATS's own subjects and streams (coordinator.Config; weir up
	// -allow-system-subjects).
	AllowSystemSubjects bool
	// MaxModuleSize is the largest module the module registry takes, in
	// bytes (coordinator.Config.MaxModuleSize; weir up -max-module-size);
	// 0 is registry.DefaultMaxModuleSize. Only a coordinator sets it.
	MaxModuleSize int64

	// fence, if set, wraps the coordinator's lease fence, or, given nil,
	// is the fence of a coordinator that holds no lease (tests only).
	fence func(control.Fence) control.Fence
}

// idleModules is how many compiled modules without a running instance a
// node's workers keep (wasm.Config.MaxIdleModules).
const idleModules = 8

// Node is a running weir process.
type Node struct {
	// Server is the embedded server, nil with an external one.
	Server *embedded.Server
	// Conn is the node's NATS connection.
	Conn *nats.Conn
	// JS is JetStream on Conn.
	JS jetstream.JetStream
	// API calls the job API (of this node's coordinator or another's).
	API *control.APIClient
	// Manager is the coordinator's job manager, nil unless Coordinator.
	// RestartCoordinator replaces it: read it with JobManager where that
	// may run meanwhile.
	Manager *job.Manager
	// Workers are the in-process workers.
	Workers []*worker.Worker
	// Registry is the module registry.
	Registry *registry.Registry
	// AtomicBatch is the in-process workers' atomic batch size for
	// exactly-once sinks (Options.AtomicBatch after defaults).
	AtomicBatch int

	engine   *wasm.Engine
	nats     *natsconn.Options // the external server's settings, nil with the embedded one
	opts     Options           // as Start was given them, for RestartCoordinator
	stateDir string            // the dir checkpoint store's directory, "" for JetStream's
	log      *slog.Logger
	// mu guards lease and Manager, which RestartCoordinator replaces.
	mu      sync.Mutex
	lease   *lease.Lease // the coordinator's lease; nil without one
	unlock  func()       // releases the data directory; nil when not locked
	discard func()       // unlock for a Start that failed: removes the lock file it created
	store   string       // StoreDir or StoreJetStream
	// The coordinator stops first (it leaves its jobs' tasks running, on
	// other processes' workers too, for the next coordinator to take
	// over), then the workers (which stop their own tasks).
	stopCoordinator, stopWorkers context.CancelFunc
	coordinatorDone, workersDone chan struct{}
}

// URL is where clients reach the node's NATS.
func (n *Node) URL() string { return n.Conn.ConnectedUrl() }

// Dial opens another connection to the node's NATS — the embedded server,
// or the external one with the node's settings — with extra options
// appended. The caller closes it.
func (n *Node) Dial(extra ...nats.Option) (*nats.Conn, error) {
	if n.Server != nil {
		return n.Server.Connect(extra...)
	}
	return natsconn.Connect(*n.nats, extra...)
}

// CheckpointStore is where the node's workers keep checkpoints: StoreDir
// or StoreJetStream.
func (n *Node) CheckpointStore() string { return n.store }

// connEvents returns the options that log the node's NATS connection
// dropping, coming back and its asynchronous errors, one line each on log
// — in place of nats.go's default, which prints the bare error to stderr
// ("write: broken pipe on connection [8]") and nothing when the
// connection is lost or restored. A job's core source that drops
// messages is left to its worker, which names the job, the task and the
// count.
func connEvents(log *slog.Logger) []nats.Option {
	return []nats.Option{
		nats.DisconnectErrHandler(func(nc *nats.Conn, err error) {
			if nc.IsClosed() {
				return // closed on purpose
			}
			log.Warn("NATS connection lost; reconnecting", "err", err)
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			// At the loss's level: a log that shows the loss (weir up
			// and weir worker log warnings without -v) shows its end.
			log.Warn("NATS connection restored", "server", natsconn.Redact(nc.ConnectedUrl()))
		}),
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			if c, ok := source.CoreOf(sub); ok && errors.Is(err, nats.ErrSlowConsumer) {
				// A job's core source: its worker logs what it dropped,
				// naming the job and the task, at its next heartbeat
				// (while it drops, once a heartbeat). This is the
				// start of a run of drops.
				cfg := c.Config()
				log.Debug("core NATS source drops messages", "job", cfg.Job, "task", cfg.Task, "subject", sub.Subject, "err", err)
				return
			}
			if sub != nil {
				log.Warn("NATS error", "subject", sub.Subject, "err", err)
				return
			}
			log.Warn("NATS error", "err", err)
		}),
	}
}

// ConnectError is Start's error when it could not connect to the
// external NATS server (Options.NATS, without WaitForNATS): Err, which
// names the server, says why. A caller can add what to check.
type ConnectError struct{ Err error }

func (e *ConnectError) Error() string { return e.Err.Error() }
func (e *ConnectError) Unwrap() error { return e.Err }

// Start starts a node and returns once its coordinator and workers listen.
// On an error it stops what it had started.
//
// A coordinator on an external NATS (Options.NATS) first takes the
// coordinator lease (coordinator/lease): another weir up's coordinator
// that answers, or that renews its lease, has Start refused, naming it;
// one that does not (frozen, or gone without a word) has Start wait for
// its lease to expire, up to the lease's TTL, logging that it waits. The
// coordinator then writes job records and checkpoints and sends requests
// to workers only while it surely holds the lease; once it lost it
// (another took it over after this process was frozen or cut off for the
// TTL), it stops acting at once, leaving what the workers run to the new
// coordinator, and Lost says so. With the embedded server the data
// directory's lock makes it the only one: it takes no lease.
func Start(ctx context.Context, opts Options) (*Node, error) {
	n := &Node{coordinatorDone: make(chan struct{}), workersDone: make(chan struct{})}
	var workers sync.WaitGroup
	err := n.start(ctx, opts, &workers)
	if err != nil {
		if n.stopCoordinator != nil {
			n.stopCoordinator()
			<-n.coordinatorDone
			n.stopWorkers()
			workers.Wait()
		}
		// A failed start (a port in use, say) leaves no lock file
		// behind, nor a data directory it made and left empty: discard
		// instead of unlock, once the rest is closed.
		discard := n.discard
		if discard != nil {
			n.unlock = nil
		}
		n.closeResources()
		if discard != nil {
			if opts.NATS == nil {
				_ = os.Remove(filepath.Join(opts.DataDir, "nats")) // only if empty
			}
			discard()
		}
		return nil, err
	}
	return n, nil
}

// start does Start's work on n; what it started is in n (and workers)
// when it fails.
func (n *Node) start(ctx context.Context, opts Options, workers *sync.WaitGroup) (err error) {
	log := opts.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if opts.AtomicBatch == 0 && opts.NATS == nil {
		opts.AtomicBatch = embedded.DefaultMaxAtomicBatch
	}
	n.AtomicBatch = opts.AtomicBatch
	n.nats = opts.NATS
	kind := opts.CheckpointStore
	if kind == "" {
		kind = StoreDir
		if opts.NATS != nil {
			kind = StoreJetStream
		}
	}
	n.store = kind
	stateDir := ""
	switch kind {
	case StoreDir:
		if opts.DataDir == "" {
			return errors.New("node: the dir checkpoint store needs a data directory")
		}
		stateDir = filepath.Join(opts.DataDir, "checkpoints")
	case StoreJetStream:
	default:
		return fmt.Errorf("node: unknown checkpoint store %q (want %s or %s)", kind, StoreDir, StoreJetStream)
	}
	if opts.NATS == nil && opts.DataDir == "" {
		return errors.New("node: a data directory is required for the embedded server")
	}
	if opts.NATS == nil || (opts.Coordinator && stateDir != "") {
		// The embedded server's store, and the coordinator's job records
		// and checkpoints, have one owner: a second weir on the same
		// directory would resume the same jobs and delete the other's
		// checkpoints.
		if n.unlock, n.discard, err = lockDataDir(opts.DataDir); err != nil {
			return err
		}
	}
	if opts.NATS == nil {
		port := opts.Port
		if port == 0 {
			port = 4222
		}
		srv, err := embedded.Start(embedded.Config{Host: opts.Host, Port: port, DataDir: filepath.Join(opts.DataDir, "nats"),
			SyncAlways: opts.SyncAlways, SyncInterval: opts.SyncInterval})
		if err != nil {
			return fmt.Errorf("start embedded NATS: %w", err)
		}
		n.Server = srv
		if n.Conn, err = srv.Connect(append(connEvents(log), nats.Name("weir"))...); err != nil {
			return fmt.Errorf("connect to embedded NATS: %w", err)
		}
	} else if opts.WaitForNATS {
		n.Conn, err = natsconn.ConnectRetry(ctx, *opts.NATS, func(attempt int, err error, wait time.Duration) {
			// err names the server (without its password)
			log.Warn("NATS not reachable; retrying", "attempt", attempt, "retry_in", wait.Round(time.Millisecond), "err", err)
		}, connEvents(log)...)
		if err != nil {
			return err
		}
	} else {
		connected := func() {}
		if opts.Connecting != nil {
			connected = opts.Connecting()
		}
		n.Conn, err = natsconn.Connect(*opts.NATS, connEvents(log)...)
		connected()
		if err != nil {
			return &ConnectError{Err: err}
		}
	}
	if n.JS, err = jetstream.New(n.Conn); err != nil {
		return fmt.Errorf("jetstream: %w", err)
	}
	if opts.WaitForNATS && opts.NATS != nil {
		if err := waitForJetStream(ctx, n.JS, *opts.NATS, log); err != nil {
			return err
		}
	} else if opts.NATS != nil {
		if err := checkJetStream(ctx, n.JS, *opts.NATS); err != nil {
			return err
		}
	}
	n.API = control.NewAPIClient(n.Conn, "")
	var coord *coordinator.Coordinator
	var taskStore host.Store
	n.opts, n.stateDir, n.log = opts, stateDir, log
	if opts.Coordinator {
		if coord, err = n.openCoordinator(ctx); err != nil {
			return err
		}
		n.Manager, n.Registry, taskStore = coord.Manager, coord.Registry, coord.State
	} else {
		// A bucket's stream that elects a leader (a cluster just
		// restarted) is waited for and logged, as the coordinator's are,
		// not a worker's exit.
		if err := untilAvailable(ctx, "the module registry's buckets", log, natsconn.ElectionWait, func(ctx context.Context) (err error) {
			n.Registry, err = registry.Open(ctx, n.JS, "", opts.Replicas)
			return err
		}); err != nil {
			return fmt.Errorf("module registry: %w", err)
		}
		if stateDir != "" {
			taskStore, err = storage.NewDir(stateDir)
		} else {
			err = untilAvailable(ctx, "the checkpoint store's bucket", log, natsconn.ElectionWait, func(ctx context.Context) (err error) {
				taskStore, err = storage.NewObjectStore(ctx, n.JS, storage.DefaultStateBucket, opts.Replicas)
				return err
			})
		}
		if err != nil {
			return fmt.Errorf("checkpoint store: %w", err)
		}
	}
	if opts.Store != nil {
		taskStore = opts.Store
	}

	workerCtx, stopWorkers := context.WithCancel(context.Background())
	n.stopWorkers = stopWorkers
	var pending []<-chan struct{}
	failed := make(chan error, 1+opts.Workers)
	if coord != nil {
		pending = append(pending, n.runCoordinator(coord, failed))
	} else {
		n.stopCoordinator = func() {}
		close(n.coordinatorDone)
	}
	if opts.Workers > 0 {
		// A worker lives long and sees every version of every module it
		// runs: the compiled code of those it no longer runs is released
		// past idleModules (a later deploy loads it again, from the
		// on-disk cache).
		if n.engine, err = wasm.NewEngine(wasm.Config{CacheDir: opts.CacheDir, MaxIdleModules: idleModules}); err != nil {
			return fmt.Errorf("wasm engine: %w", err)
		}
		spill := ""
		if opts.DataDir != "" {
			spill = filepath.Join(opts.DataDir, "spill")
			if err := os.MkdirAll(spill, 0o755); err != nil {
				return fmt.Errorf("spill dir: %w", err)
			}
		}
		for i := 0; i < opts.Workers; i++ {
			id := opts.WorkerID
			if id == "" {
				h, _ := os.Hostname()
				id = fmt.Sprintf("%s-%d", h, os.Getpid())
			}
			if i > 0 {
				id = fmt.Sprintf("%s-%d", id, i)
			}
			w, err := worker.New(worker.Config{
				ID: id, Conn: n.Conn, Engine: n.engine, Store: taskStore,
				Modules: ModuleSource(n.Registry), SpillDir: spill,
				HeartbeatInterval: opts.HeartbeatInterval, Log: log, OperatorLog: opts.OperatorLog, Hooks: opts.Hooks,
				AtomicBatch: opts.AtomicBatch, Slots: opts.WorkerSlots, Caps: opts.WorkerCaps,
			})
			if err != nil {
				return err
			}
			n.Workers = append(n.Workers, w)
			ready := make(chan struct{})
			pending = append(pending, ready)
			workers.Add(1)
			go func() {
				defer workers.Done()
				if err := w.Run(workerCtx, ready); err != nil {
					select {
					case <-ready: // running: only the log says it stopped
						log.Error("worker stopped", "worker", w.ID(), "err", err)
					default: // refused as it started: Start returns err, whose caller says it
					}
					if !strings.HasPrefix(err.Error(), "worker "+w.ID()+":") {
						err = fmt.Errorf("worker %s: %w", w.ID(), err)
					}
					failed <- err
				}
			}()
		}
	}
	go func() {
		workers.Wait()
		close(n.workersDone)
	}()
	for _, ch := range pending {
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		case err := <-failed:
			// err leads with its cause, and names the worker or the
			// coordinator it stopped.
			return err
		case <-n.Lost():
			return fmt.Errorf("node: the coordinator stopped while starting: %w", n.LeaseErr())
		}
	}
	return nil
}

// openCoordinator is a coordinator's start path, at Start and at
// RestartCoordinator: on an external NATS it campaigns for the lease
// (refused while another coordinator answers the job API or renews the
// lease; waiting, up to its TTL, for one that does neither to expire)
// and sets n.lease; then it opens the job, checkpoint and module stores,
// fenced by the lease, and builds the job manager, which loads the jobs
// as it runs (runCoordinator).
func (n *Node) openCoordinator(ctx context.Context) (*coordinator.Coordinator, error) {
	opts, log := n.opts, n.log
	var fence control.Fence
	if opts.NATS != nil {
		var kv jetstream.KeyValue
		var ttl time.Duration
		if err := untilAvailable(ctx, "the coordinator lease's bucket", log, natsconn.ElectionWait, func(ctx context.Context) (err error) {
			kv, ttl, err = lease.Open(ctx, n.JS, opts.Replicas, opts.LeaseTTL)
			return err
		}); err != nil {
			return nil, err
		}
		if err := noOtherCoordinator(ctx, n.Conn, kv, *opts.NATS); err != nil {
			return nil, err
		}
		// A try waits out the lease bucket's election, and another
		// holder's lease expiring, within a bound: a cluster that lost
		// its quorum after the bucket opened is logged and waited for
		// like the buckets, not waited on in silence until ctx ends.
		// One holder ID for every try: a try that timed out may have
		// stored the lease, which the next then knows for its own.
		var l *lease.Lease
		host, _ := os.Hostname()
		holder := lease.Holder{ID: rand.Text()[:12], Host: host, PID: os.Getpid()}
		if err := untilAvailable(ctx, "the coordinator lease", log, natsconn.ElectionWait+ttl, func(ctx context.Context) (err error) {
			l, err = takeLease(ctx, n.Conn, kv, ttl, holder, *opts.NATS, log)
			return err
		}); err != nil {
			return nil, err
		}
		n.mu.Lock()
		n.lease = l // released by Close from here on
		n.mu.Unlock()
		fence = l.Guard
		if opts.fence != nil {
			fence = opts.fence(fence)
		}
	} else if opts.fence != nil {
		fence = opts.fence(nil)
	}
	var coord *coordinator.Coordinator
	err := untilAvailable(ctx, "the job, checkpoint and module buckets", log, natsconn.ElectionWait, func(ctx context.Context) (err error) {
		coord, err = coordinator.Open(ctx, coordinator.Config{NC: n.Conn, StateDir: n.stateDir, Replicas: opts.Replicas,
			HeartbeatTimeout: opts.HeartbeatTimeout, WorkerWait: opts.WorkerWait, FsyncEachWrite: opts.SyncAlways && opts.NATS == nil,
			AllowSystemSubjects: opts.AllowSystemSubjects, MaxModuleSize: opts.MaxModuleSize, Fence: fence, Log: log.With("component", "coordinator")})
		return err
	})
	if err != nil {
		return nil, err
	}
	return coord, nil
}

// runCoordinator runs coord's job manager — it resumes the stored jobs,
// then serves the control protocol and the job API — until
// n.stopCoordinator, or until the lease, lost, stops it: its jobs go on
// under the coordinator that holds the lease now, or under this process's
// next one (RestartCoordinator). It returns a channel closed once the
// coordinator listens; an error of its run goes to failed.
func (n *Node) runCoordinator(coord *coordinator.Coordinator, failed chan<- error) <-chan struct{} {
	log := n.log
	coordCtx, stopCoordinator := context.WithCancel(context.Background())
	done := make(chan struct{})
	n.stopCoordinator, n.coordinatorDone = stopCoordinator, done
	n.mu.Lock()
	l := n.lease
	n.mu.Unlock()
	if l != nil {
		go func() {
			select {
			case <-l.Lost():
				if coordCtx.Err() == nil {
					log.Info("coordinator stops: it lost its lease", "err", l.Err())
					stopCoordinator()
				}
			case <-coordCtx.Done():
			}
		}()
	}
	ready := make(chan struct{})
	go func() {
		defer close(done)
		if err := coord.Manager.Run(coordCtx, ready); err != nil {
			log.Error("coordinator stopped", "err", err)
			select {
			case failed <- fmt.Errorf("coordinator: %w", err):
			default: // nobody waits for it: the log said it
			}
		}
	}()
	return ready
}

// RestartCoordinator restarts, in this process, a coordinator that lost
// its lease (Lost) to nobody (LeaseTakenBy says none took it over: its
// key expired or was deleted, with writes to the bucket since that it
// cannot tell from another's): it waits for the stopped coordinator to
// end, logs one line, and runs Start's path again — it campaigns for the
// lease as a new weir up does (refused while another coordinator answers
// or renews it, waiting up to its TTL for one that does neither), then
// loads the jobs from storage and resumes them as a restarted
// coordinator does. The lease and its fence alone keep a second
// coordinator from acting, as at Start. The workers run on throughout.
// It returns once the coordinator listens again; on an error (refused,
// or ctx done) the node has no coordinator, and the caller closes it. It
// is not to be called concurrently with itself or Close.
func (n *Node) RestartCoordinator(ctx context.Context) error {
	n.mu.Lock()
	old := n.lease
	n.mu.Unlock()
	if old == nil || old.Err() == nil {
		return errors.New("node: RestartCoordinator is for a coordinator whose lease was lost (Lost); this one holds its lease, or none")
	}
	n.stopCoordinator()
	<-n.coordinatorDone
	_ = old.Release(context.Background()) // lost: it stops renewing and deletes nothing
	n.log.Warn(fmt.Sprintf("coordinator stopped: %v; no other coordinator is known to hold the lease, so it campaigns for it again "+
		"as weir up starts (refused, or waiting, while another holds it); the in-process workers run on", old.Err()))
	coord, err := n.openCoordinator(ctx)
	if err != nil {
		return fmt.Errorf("coordinator restart: %w", err)
	}
	n.mu.Lock()
	n.Manager = coord.Manager
	n.mu.Unlock()
	failed := make(chan error, 1)
	ready := n.runCoordinator(coord, failed)
	select {
	case <-ready:
		return nil
	case err := <-failed:
		return fmt.Errorf("coordinator restart: %w", err)
	case <-n.Lost():
		return fmt.Errorf("coordinator restart: the coordinator stopped while starting: %w", n.LeaseErr())
	case <-ctx.Done():
		return fmt.Errorf("coordinator restart: %w", ctx.Err())
	}
}

// jetStreamCheckTimeout bounds checkJetStream's one question to the
// server.
const jetStreamCheckTimeout = 5 * time.Second

// checkJetStream asks the server of o whether its account has JetStream,
// once, and returns an error that says what to change when it has not:
// without it weir can keep no job record, checkpoint or module, and the
// first bucket it opened failed with "no responders available for
// request", naming neither the server nor JetStream. Any other answer (a
// cluster still electing its JetStream leader) is left to the calls that
// follow, which wait or fail naming what they did.
func checkJetStream(ctx context.Context, js jetstream.JetStream, o natsconn.Options) error {
	c, cancel := context.WithTimeout(ctx, jetStreamCheckTimeout)
	defer cancel()
	_, err := js.AccountInfo(c)
	if errors.Is(err, jetstream.ErrJetStreamNotEnabled) || errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount) {
		return jetStreamMissing(o, err)
	}
	return nil
}

// jetStreamMissing explains err, JetStream's "not enabled" from the
// server of o: for the server (no server of it runs JetStream: nats.go
// reports that when no server answers JetStream's API) or for the
// account the connection authenticated as.
func jetStreamMissing(o natsconn.Options, err error) error {
	if errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount) {
		who := "the account"
		if o.User != "" {
			who = fmt.Sprintf("the account of user %q", o.User)
		}
		return fmt.Errorf("NATS %s: JetStream is not enabled for %s, and weir keeps its jobs, checkpoints and modules in it: "+
			"enable JetStream for that account in the server's config (jetstream: enabled), or connect as a user of one that has it: %w",
			natsconn.Redact(o.URL), who, err)
	}
	return fmt.Errorf("NATS %s: JetStream is not enabled on the server (or not answering yet, on a cluster still starting it), "+
		"and weir keeps its jobs, checkpoints and modules in it: "+
		"start nats-server with -js (or a jetstream {} block in its config): %w", natsconn.Redact(o.URL), err)
}

// waitForJetStream returns once JetStream answers, or ctx is done. A
// server that just started, or a cluster still electing its JetStream
// leader, accepts connections before JetStream answers; a server without
// JetStream is waited for as well (it may be restarted with it), each
// attempt logged saying how to enable it. An account without JetStream
// is an error at once.
func waitForJetStream(ctx context.Context, js jetstream.JetStream, o natsconn.Options, log *slog.Logger) error {
	for attempt := 1; ; attempt++ {
		c, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := js.AccountInfo(c)
		cancel()
		switch {
		case err == nil:
			return nil
		case errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount):
			return jetStreamMissing(o, err)
		case errors.Is(err, jetstream.ErrJetStreamNotEnabled):
			err = jetStreamMissing(o, err)
		}
		if ctx.Err() != nil {
			return fmt.Errorf("jetstream: %w (last attempt: %w)", ctx.Err(), err)
		}
		wait := natsconn.RetryDelay(attempt)
		log.Warn("JetStream not available; retrying", "attempt", attempt, "retry_in", wait.Round(time.Millisecond), "err", err)
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("jetstream: %w (last attempt: %w)", ctx.Err(), err)
		}
	}
}

// untilAvailable calls open, which opens (or creates) JetStream buckets
// named by what, until it succeeds, fails for another reason than a stream
// or JetStream without a leader (natsconn.Leaderless), or ctx ends: a
// cluster restarted whole takes connections, and answers that JetStream
// is enabled, seconds before its streams have leaders, and weir up waits
// for them as weir worker waits for JetStream, logging each try. open
// must be one that may be done twice. Each try's context ends after
// bound: a request that no leader answers ends with nats.go's timeout
// only where its context has no deadline of its own, and a try within a
// long deadline (a caller's) would otherwise wait until it in silence.
func untilAvailable(ctx context.Context, what string, log *slog.Logger, bound time.Duration, open func(context.Context) error) error {
	for attempt := 1; ; attempt++ {
		tctx, cancel := context.WithTimeout(ctx, bound)
		err := open(tctx)
		cancel()
		if err == nil || !natsconn.Leaderless(err) || ctx.Err() != nil {
			return err
		}
		wait := natsconn.RetryDelay(attempt)
		log.Warn("JetStream not available; retrying", "waiting_for", what, "attempt", attempt, "retry_in", wait.Round(time.Millisecond), "err", err)
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%w (waiting for %s: %w)", ctx.Err(), what, err)
		}
	}
}

// leaseReleaseWait bounds how long Close waits for the server to delete
// the coordinator's lease.
const leaseReleaseWait = 2 * time.Second

// otherCoordinatorWait bounds noOtherCoordinator's question: a
// coordinator answers the job API at once, and nobody listening is told
// at once (no responders).
const otherCoordinatorWait = 2 * time.Second

// noOtherCoordinator returns an error when a coordinator answers the job
// API on nc already (another weir up on the same NATS): two would resume
// the same jobs from the same records, each deploying its own attempts
// onto the same workers and deleting the other's checkpoints, and both
// started without a word. The error names the server and the live
// workers the other one reports, whose hosts say where it runs, and who
// holds the coordinator lease in kv, if anyone does. Only one that
// answers is found: one started at the same moment, or one whose process
// is frozen, is left to the lease (takeLease).
func noOtherCoordinator(ctx context.Context, nc *nats.Conn, kv jetstream.KeyValue, o natsconn.Options) error {
	ws, ok := coordinatorWorkers(nc)
	if !ok {
		return nil
	}
	holder := ""
	if h, ok := lease.Current(ctx, kv); ok {
		holder = h.String() + " holds the coordinator lease; "
	}
	workers := make([]string, 0, len(ws))
	for _, w := range ws {
		if w.Host != "" {
			workers = append(workers, w.ID+" on "+w.Host)
		} else {
			workers = append(workers, w.ID)
		}
	}
	live := "no live workers"
	if len(workers) > 0 {
		live = "live workers: " + strings.Join(workers, ", ")
	}
	return fmt.Errorf("NATS %s: another coordinator already runs there (%s%s): two would run the same jobs; "+
		"stop that weir up first, or join it with weir worker", natsconn.Redact(o.URL), holder, live)
}

// coordinatorWorkers asks the job API on nc for the live workers, waiting
// otherCoordinatorWait at most, and reports whether a coordinator
// answered. No responders (none runs) comes back at once; no answer in
// time (none that works) is none either. The workers are a hint: an
// answer that does not decode still counts.
func coordinatorWorkers(nc *nats.Conn) ([]control.WorkerStatus, bool) {
	msg, err := nc.Request(control.Subjects{}.API(control.APIWorkers), []byte("{}"), otherCoordinatorWait)
	if err != nil || len(msg.Data) == 0 {
		return nil, false
	}
	var rep struct {
		Result []control.WorkerStatus `json:"result"`
	}
	_ = json.Unmarshal(msg.Data, &rep)
	return rep.Result, true
}

// takeLease takes the coordinator lease in kv (with its ttl) for holder,
// on the external NATS of o, through nc (lease.Take, which waits out an
// election of the bucket's stream's leader): refused, it says who holds
// it and what to do.
func takeLease(ctx context.Context, nc *nats.Conn, kv jetstream.KeyValue, ttl time.Duration, holder lease.Holder, o natsconn.Options, log *slog.Logger) (*lease.Lease, error) {
	// No Answers: noOtherCoordinator has just asked, and a holder that
	// did not answer then (frozen, or still starting) is told apart by
	// whether it renews its lease; asking again would cost a frozen one's
	// replacement 2 s more.
	l, err := lease.Take(ctx, lease.Config{KV: kv, TTL: ttl, Conn: nc, Log: log, Holder: holder})
	var held *lease.HeldError
	if errors.As(err, &held) {
		return nil, fmt.Errorf("NATS %s: another coordinator already runs there (%s holds the coordinator lease): two would run the same jobs; "+
			"stop that weir up first, or join it with weir worker", natsconn.Redact(o.URL), held.Holder)
	}
	return l, err
}

// Lost is closed once the coordinator lost its lease (LeaseErr says how)
// and stopped: close the node and exit. Nil (never closed) without a
// lease.
func (n *Node) Lost() <-chan struct{} {
	l := n.currentLease()
	if l == nil {
		return nil
	}
	return l.Lost()
}

// currentLease is the coordinator's lease, nil without one.
func (n *Node) currentLease() *lease.Lease {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.lease
}

// JobManager is the coordinator's job manager running now (Manager, read
// safely while RestartCoordinator may replace it), nil unless
// Coordinator.
func (n *Node) JobManager() *job.Manager {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.Manager
}

// LeaseTakenBy returns who holds the coordinator lease now, once this
// coordinator lost it to another (lease.Lease.TakenBy), and false
// otherwise: without a lease, while it holds it, and once it lost it to
// nobody, which RestartCoordinator campaigns for again.
func (n *Node) LeaseTakenBy() (lease.Holder, bool) {
	l := n.currentLease()
	if l == nil {
		return lease.Holder{}, false
	}
	return l.TakenBy()
}

// LeaseErr says how the coordinator lost its lease (wrapping
// lease.ErrLost), nil while it holds it or holds none.
func (n *Node) LeaseErr() error {
	l := n.currentLease()
	if l == nil {
		return nil
	}
	return l.Err()
}

// CoordinatorID is the ID the coordinator holds its lease as, "" without
// one.
func (n *Node) CoordinatorID() string {
	l := n.currentLease()
	if l == nil {
		return ""
	}
	return l.Holder().ID
}

// CoordinatorAnswers reports whether a coordinator answers on the node's
// NATS now (its own, or another's), waiting 2 s at most: a worker that
// starts before weir up says that it waits for one.
func (n *Node) CoordinatorAnswers() bool {
	_, ok := coordinatorWorkers(n.Conn)
	return ok
}

// ModuleSource resolves a module reference through the registry (or a
// local file path) and checks its digest.
func ModuleSource(reg *registry.Registry) worker.ModuleSource {
	return func(ctx context.Context, m control.Module) ([]byte, error) {
		ref := m.Ref
		if m.Digest != "" {
			ref = "sha256:" + m.Digest
		}
		data, _, err := registry.Resolve(ctx, reg, ref)
		if err != nil && m.Digest != "" {
			// A local file has no registry entry: fall back to the path.
			data, _, err = registry.Resolve(ctx, reg, m.Ref)
		}
		if err != nil {
			return nil, err
		}
		if m.Digest != "" && registry.Digest(data) != m.Digest {
			return nil, fmt.Errorf("module %s: %w: digest %s, the job was submitted with %s (restore the job from a checkpoint to run the new one)",
				m.Ref, worker.ErrModuleChanged, registry.Digest(data), m.Digest)
		}
		return data, nil
	}
}

// Close stops the coordinator, then the workers (canceling their tasks),
// then closes NATS and the embedded server. The coordinator cancels no
// task: those of its jobs on other processes' workers run on, as after a
// crash, until the next coordinator resumes the jobs and takes them over.
func (n *Node) Close() {
	if n.stopCoordinator != nil {
		n.stopCoordinator()
		<-n.coordinatorDone
		n.stopWorkers()
		<-n.workersDone
	}
	n.closeResources()
}

func (n *Node) closeResources() {
	if l := n.currentLease(); l != nil {
		// The coordinator has stopped: the next one takes the lease at
		// once instead of waiting for it to expire — unless the server
		// is gone, which would hold the stop for nothing.
		ctx, cancel := context.WithTimeout(context.Background(), leaseReleaseWait)
		if !n.Conn.IsConnected() {
			cancel() // Release stops renewing, and the lease expires
		}
		_ = l.Release(ctx)
		cancel()
	}
	if n.engine != nil {
		_ = n.engine.Close(context.Background())
	}
	if n.Conn != nil {
		n.Conn.Close()
	}
	if n.Server != nil {
		n.Server.Shutdown()
	}
	if n.unlock != nil {
		n.unlock()
		n.unlock = nil
	}
}
