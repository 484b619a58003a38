// Package coordinator wires weir's job side together: checkpoint storage
// (a local directory or JetStream), the module registry and the job
// manager. The parts live in the subpackages; see README.md.
//
//	c, err := coordinator.Open(ctx, coordinator.Config{NC: nc, StateDir: dir})
//	...
//	go c.Run(ctx, ready) // control protocol + job API until ctx is done
//
// Workers write task snapshots to c.State (the same store, or one opened the
// same way on their machine) under checkpoint.StateKey(job, id, task).
package coordinator

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirhq/weir/coordinator/checkpoint"
	"github.com/weirhq/weir/coordinator/control"
	"github.com/weirhq/weir/coordinator/job"
	"github.com/weirhq/weir/coordinator/registry"
	"github.com/weirhq/weir/transport/storage"
)

// Config configures a coordinator.
type Config struct {
	// NC is the connection to NATS (with JetStream).
	NC *nats.Conn
	// StateDir, if set, keeps checkpoints (state and metadata) in this local
	// directory, and job records in its subdirectory "_jobs"; otherwise they
	// go to JetStream: state in the Object Store bucket
	// storage.DefaultStateBucket, metadata in the KV bucket
	// storage.DefaultMetaBucket, job records in the KV bucket "weir_jobs".
	StateDir string
	// Replicas is how many servers of a NATS cluster keep each of weir's
	// JetStream buckets (job records, checkpoints, modules): new buckets
	// get max(Replicas, 1), existing ones are scaled to Replicas if it is
	// above 0 and kept as they are otherwise.
	Replicas int
	// Prefix of the control subjects ("" = control.DefaultPrefix).
	Prefix string
	// HeartbeatTimeout declares a silent worker lost (default 5s).
	HeartbeatTimeout time.Duration
	// WorkerWait is how long a job waits for a worker to join when none
	// is live, or for free slots, before that counts as a failure (default
	// job.DefaultWorkerWait; see job.Options.WorkerWait).
	WorkerWait time.Duration
	// FsyncEachWrite says the NATS server fsyncs every JetStream write
	// before acknowledging it (weir up -sync always; job.Options).
	FsyncEachWrite bool
	// AllowSystemSubjects lets specs reach weir's and NATS's own subjects
	// and streams (weir up -allow-system-subjects; job.Options).
	AllowSystemSubjects bool
	// MaxModuleSize is the largest module the module registry takes, in
	// bytes, set on its bucket for every process that pushes or loads
	// modules (registry.SetMaxModuleSize; weir up -max-module-size); 0 is
	// registry.DefaultMaxModuleSize.
	MaxModuleSize int64
	// Fence, if set, guards the coordinator's writes to shared state —
	// job records, checkpoint metadata, checkpoint deletes — and its
	// requests to workers with its lease (coordinator/lease): once it
	// refuses, the coordinator writes nothing and sends nothing more.
	Fence control.Fence
	Log   *slog.Logger
}

// Coordinator is a configured job side.
type Coordinator struct {
	// State holds task snapshots; Meta holds checkpoint metadata (the same
	// store with StateDir); Jobs holds job records (see job.Options.Jobs).
	// They are the stores as opened, for workers (State) and tools: the
	// Catalog and the Manager write through Config.Fence.
	State, Meta, Jobs storage.Store
	Catalog           *checkpoint.Catalog
	Registry          *registry.Registry
	Manager           *job.Manager
}

// Open opens storage and the registry and builds the job manager.
func Open(ctx context.Context, cfg Config) (*Coordinator, error) {
	if cfg.NC == nil {
		return nil, fmt.Errorf("coordinator: no NATS connection")
	}
	js, err := jetstream.New(cfg.NC)
	if err != nil {
		return nil, fmt.Errorf("coordinator: jetstream: %w", err)
	}
	c := &Coordinator{}
	if cfg.StateDir != "" {
		d, err := storage.NewDir(cfg.StateDir)
		if err != nil {
			return nil, fmt.Errorf("coordinator: %w", err)
		}
		c.State, c.Meta = d, d
		if c.Jobs, err = storage.NewDir(filepath.Join(cfg.StateDir, "_jobs")); err != nil {
			return nil, fmt.Errorf("coordinator: %w", err)
		}
	} else {
		if c.Jobs, err = storage.NewKV(ctx, js, "weir_jobs", cfg.Replicas); err != nil {
			return nil, fmt.Errorf("coordinator: %w", err)
		}
		if c.State, err = storage.NewObjectStore(ctx, js, storage.DefaultStateBucket, cfg.Replicas); err != nil {
			return nil, fmt.Errorf("coordinator: %w", err)
		}
		if c.Meta, err = storage.NewKV(ctx, js, storage.DefaultMetaBucket, cfg.Replicas); err != nil {
			return nil, fmt.Errorf("coordinator: %w", err)
		}
	}
	if c.Registry, err = registry.Open(ctx, js, "", cfg.Replicas); err != nil {
		return nil, fmt.Errorf("coordinator: %w", err)
	}
	if err := c.Registry.SetMaxModuleSize(ctx, cfg.MaxModuleSize); err != nil {
		return nil, fmt.Errorf("coordinator: %w", err)
	}
	c.Catalog = &checkpoint.Catalog{Meta: fence(c.Meta, cfg.Fence), State: fence(c.State, cfg.Fence), Log: cfg.Log}
	c.Manager = job.New(job.Options{NC: cfg.NC, Prefix: cfg.Prefix, Catalog: c.Catalog, Registry: c.Registry, Jobs: fence(c.Jobs, cfg.Fence),
		JetStream: js, HeartbeatTimeout: cfg.HeartbeatTimeout, WorkerWait: cfg.WorkerWait, FsyncEachWrite: cfg.FsyncEachWrite,
		AllowSystemSubjects: cfg.AllowSystemSubjects, Fence: cfg.Fence, Log: cfg.Log})
	return c, nil
}

// Run serves the control protocol and the job API until ctx is done.
func (c *Coordinator) Run(ctx context.Context, ready chan<- struct{}) error {
	return c.Manager.Run(ctx, ready)
}
