// Package wasm runs weir operator modules with wazero: it validates a
// module at load (each refusal a typed *ValidationError), compiles it once
// per content hash with an on-disk compilation cache, and instantiates one
// sandboxed *Instance per task. An Instance drives the ABI of abi/ABI.md
// (record batches in, emitted batches out, streamed snapshots) under a
// memory cap and a per-call deadline, and turns traps, deadlines, proc_exit
// and misused imports into errors without ever crashing the host.
package wasm

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"
)

// PageSize is the unit of wasm linear memory: a memory limit is a whole
// number of 64 KiB pages.
const PageSize = 65536

// MaxMemoryBytes is the most linear memory a wasm32 module can address
// (65536 pages, 4 GiB); a larger Limits.MemoryBytes is capped to it.
const MaxMemoryBytes = 65536 * PageSize

// DefaultWatchdogInterval is how often an Engine checks call deadlines
// unless Config.WatchdogInterval says otherwise. It is the resolution of
// Limits.CallTimeout: a call that overruns its timeout is interrupted at
// the first check after it, so it runs for between the timeout rounded up
// to the interval and one interval more, and every timeout up to one
// interval acts alike.
const DefaultWatchdogInterval = 10 * time.Millisecond

// Default limits.
const (
	DefaultMemoryBytes = 64 << 20
	DefaultCallTimeout = 5 * time.Second
	// DefaultSnapshotTimeout bounds weir_snapshot and weir_restore, which
	// take time in proportion to the operator's state rather than to one
	// batch: long enough for millions of keys on a loaded machine, short
	// enough to catch a snapshot stuck in a loop.
	DefaultSnapshotTimeout = 60 * time.Second
	DefaultMaxBatchBytes   = 4 << 20
	// DefaultMaxStateBytes is as large as a task snapshot may be
	// (host/snapshot.MaxSize): a larger state could not be restored.
	DefaultMaxStateBytes = 1 << 30
)

// Limits are the sandbox limits of an operator. Zero fields take the
// defaults.
type Limits struct {
	// MemoryBytes caps the instance's linear memory (rounded down to whole
	// 64 KiB pages, at least one page, at most MaxMemoryBytes). Default
	// 64 MiB.
	MemoryBytes uint64
	// CallTimeout is the longest one call into the module may run, timed
	// by the engine's watchdog (see DefaultWatchdogInterval for its
	// resolution) while the process runs: time it was stopped (SIGSTOP,
	// a frozen VM) does not count. Default 5s.
	CallTimeout time.Duration
	// SnapshotTimeout is the longest one weir_snapshot or weir_restore
	// call may run, timed as CallTimeout is: those calls write or read
	// the whole state, and take longer the more keys it holds. Default
	// DefaultSnapshotTimeout, or CallTimeout when that is longer.
	SnapshotTimeout time.Duration
	// MaxBatchBytes is the largest input batch Process accepts. Default 4 MiB.
	MaxBatchBytes int
	// MaxStateBytes is the most one Snapshot may write: the writer is
	// typically a buffer in host memory, outside the guest's memory
	// limit. Default DefaultMaxStateBytes (1 GiB).
	MaxStateBytes int
}

// withDefaults fills zero fields and caps the memory at 4 GiB.
func (l Limits) withDefaults() Limits {
	if l.MemoryBytes == 0 {
		l.MemoryBytes = DefaultMemoryBytes
	}
	if l.MemoryBytes > MaxMemoryBytes {
		l.MemoryBytes = MaxMemoryBytes
	}
	if l.MemoryBytes < PageSize {
		l.MemoryBytes = PageSize
	}
	if l.CallTimeout <= 0 {
		l.CallTimeout = DefaultCallTimeout
	}
	if l.SnapshotTimeout <= 0 {
		l.SnapshotTimeout = max(DefaultSnapshotTimeout, l.CallTimeout)
	}
	if l.MaxBatchBytes <= 0 {
		l.MaxBatchBytes = DefaultMaxBatchBytes
	}
	if l.MaxStateBytes <= 0 {
		l.MaxStateBytes = DefaultMaxStateBytes
	}
	return l
}

func (l Limits) pages() uint32 { return uint32(l.MemoryBytes / PageSize) }

// Config configures an Engine.
type Config struct {
	// CacheDir is the on-disk compilation cache. Empty means
	// os.UserCacheDir()/weir/wazero (os.TempDir()/weir-wazero without a
	// user cache dir); "-" keeps compiled code in memory only.
	CacheDir string
	// Interpreter forces wazero's interpreter instead of its compiler.
	// Without it the compiler is used wherever wazero supports it.
	Interpreter bool
	// WatchdogInterval is how often call deadlines are checked; a call is
	// interrupted within this long after its deadline rounded up to a
	// whole number of intervals. Default DefaultWatchdogInterval.
	WatchdogInterval time.Duration
	// MaxIdleModules bounds the compiled modules the engine keeps that
	// have no live instance: past it, the least recently used are
	// released, and a Module handle of one of them can no longer be
	// instantiated (Load it again; the on-disk cache makes that cheap).
	// A long-lived worker sees every version of every module it runs;
	// without a bound their compiled code stays for the life of the
	// process. 0 keeps them all.
	MaxIdleModules int
	// MaxCacheBytes bounds the on-disk compilation cache (CacheDir): when
	// it holds more, at NewEngine and after each compile, its entries are
	// removed, oldest written first, down to three quarters of it
	// (trimCache). 0 is DefaultMaxCacheBytes; a negative value keeps
	// everything. The bound is shared by every engine on the directory,
	// each process trimming what all of them wrote.
	MaxCacheBytes int64

	// ticks, if set, replaces the watchdog's ticker: a test sends the
	// times the watchdog sees.
	ticks <-chan time.Time
}

// Engine compiles and runs modules. Use one per process; it is safe for
// concurrent use. Close releases everything it compiled and instantiated.
type Engine struct {
	cfg   Config
	cache wazero.CompilationCache
	// cacheDir is the on-disk compilation cache, "" when in memory only.
	cacheDir string

	mu       sync.Mutex
	runtimes map[runtimeKey]*runtime
	modules  map[moduleKey]*Module
	closed   bool
	tick     uint64 // orders the uses of modules, for MaxIdleModules

	instMu    sync.Mutex
	instances map[*Instance]struct{}
	stopWatch chan struct{}
	watchDone chan struct{}

	release     chan struct{} // asks the releaser to return memory to the OS (memory.go)
	releaseDone chan struct{}
	releases    atomic.Uint64 // the releaser's collections, for tests

	seq atomic.Uint64 // instance names
}

// runtimeKey selects a runtime: one per way of interrupting a call
// (instrumented loops, or wazero's WithCloseOnContextDone for modules the
// rewriter cannot walk). The memory limit is not the runtime's but each
// instance's (memory.go).
type runtimeKey struct {
	terminate bool
}

// runtime is one wazero runtime, all sharing the Engine's compilation
// cache, each with WASI and the weir host module.
type runtime struct {
	r    wazero.Runtime
	wasi map[string]api.FunctionDefinition
}

// moduleKey identifies compiled code: the module's bytes, whatever the
// limits (the memory limit is each instance's, memory.go).
type moduleKey struct {
	hash [sha256.Size]byte
}

// NewEngine creates an Engine.
func NewEngine(cfg Config) (*Engine, error) {
	e := &Engine{
		cfg:       cfg,
		runtimes:  make(map[runtimeKey]*runtime),
		modules:   make(map[moduleKey]*Module),
		instances: make(map[*Instance]struct{}),
		stopWatch: make(chan struct{}),
		watchDone: make(chan struct{}),

		release:     make(chan struct{}, 1),
		releaseDone: make(chan struct{}),
	}
	if e.cfg.WatchdogInterval <= 0 {
		e.cfg.WatchdogInterval = DefaultWatchdogInterval
	}
	dir := cfg.CacheDir
	if dir == "" {
		if d, err := os.UserCacheDir(); err == nil {
			dir = filepath.Join(d, "weir", "wazero")
		} else {
			dir = filepath.Join(os.TempDir(), "weir-wazero")
		}
	}
	if dir == "-" {
		e.cache = wazero.NewCompilationCache()
	} else {
		c, err := wazero.NewCompilationCacheWithDir(dir)
		if err != nil {
			return nil, fmt.Errorf("wasm: compilation cache %s: %w", dir, err)
		}
		e.cache = c
		e.cacheDir = dir
		if e.cfg.MaxCacheBytes == 0 {
			e.cfg.MaxCacheBytes = DefaultMaxCacheBytes
		}
		trimCache(dir, e.cfg.MaxCacheBytes)
	}
	go e.watchdog()
	go e.releaser()
	return e, nil
}

// Close closes every instance and module of the engine and stops its
// watchdog.
func (e *Engine) Close(ctx context.Context) error {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil
	}
	e.closed = true
	rts := e.runtimes
	e.runtimes = nil
	e.modules = nil
	e.mu.Unlock()
	close(e.stopWatch)
	<-e.watchDone
	<-e.releaseDone
	var errs []error
	for _, rt := range rts {
		errs = append(errs, rt.r.Close(ctx))
	}
	errs = append(errs, e.cache.Close(ctx))
	return errors.Join(errs...)
}

// runtimeFor returns the runtime for a key, creating it once. Callers hold
// e.mu.
func (e *Engine) runtimeFor(ctx context.Context, key runtimeKey) (*runtime, error) {
	if rt, ok := e.runtimes[key]; ok {
		return rt, nil
	}
	var rc wazero.RuntimeConfig
	if e.cfg.Interpreter {
		rc = wazero.NewRuntimeConfigInterpreter()
	} else {
		rc = wazero.NewRuntimeConfig() // the compiler where supported
	}
	// wazero's memory limit is the wasm32 maximum: the instance's own limit
	// is enforced by its allocator, which then sees the grows it refuses
	// (memory.go).
	rc = rc.WithCompilationCache(e.cache).
		WithMemoryLimitPages(MaxMemoryBytes / PageSize).
		WithCloseOnContextDone(key.terminate)
	r := wazero.NewRuntimeWithConfig(ctx, rc)
	if _, err := wasi_snapshot_preview1.Instantiate(ctx, r); err != nil {
		r.Close(ctx)
		return nil, fmt.Errorf("wasm: instantiating WASI: %w", err)
	}
	if err := instantiateHostModule(ctx, r); err != nil {
		r.Close(ctx)
		return nil, err
	}
	rt := &runtime{r: r, wasi: r.Module(wasiModule).ExportedFunctionDefinitions()}
	e.runtimes[key] = rt
	return rt, nil
}

// Module is a compiled, validated operator module. It is shared by every
// Instance made from it and lives as long as its Engine, unless the
// engine releases it as idle (Config.MaxIdleModules).
type Module struct {
	name     string
	limits   Limits
	engine   *Engine
	compiled wazero.CompiledModule
	rt       *runtime
	hash     [sha256.Size]byte
	// instrumented: loops check the exported interrupt global (see
	// instrument.go); otherwise the runtime watches the call context.
	instrumented bool
	// hasStart: the module's start function is exported as startExport
	// (hoistStart), for Instantiate to call first.
	hasStart bool
	// use is the compiled code's bookkeeping, shared by the Modules of
	// other names made from the same bytes.
	use *moduleUse
}

// moduleUse counts the live instances of a compiled module and when it
// was last used; e.mu guards it.
type moduleUse struct {
	key      moduleKey
	live     int
	last     uint64 // e.tick at the last Load, Instantiate or Close
	released bool
}

// Name is the name the module was loaded under.
func (m *Module) Name() string { return m.name }

// Hash is the sha256 of the module's bytes.
func (m *Module) Hash() [sha256.Size]byte { return m.hash }

// Limits are the module's effective limits (defaults filled in).
func (m *Module) Limits() Limits { return m.limits }

// Load validates and compiles a module, or returns the compiled module
// loaded earlier with the same bytes (under this name and these limits). A
// refused module gets a *ValidationError naming the problem.
func (e *Engine) Load(ctx context.Context, name string, wasm []byte, lim Limits) (*Module, error) {
	lim = lim.withDefaults()
	info, err := inspectModule(name, wasm, lim)
	if err != nil {
		return nil, err
	}
	key := moduleKey{hash: sha256.Sum256(wasm)}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return nil, errors.New("wasm: engine closed")
	}
	e.tick++
	if m, ok := e.modules[key]; ok {
		m.use.last = e.tick
		if m.name == name && m.limits == lim {
			return m, nil
		}
		// Same code under another name or limits: share the compiled code.
		c := *m
		c.name, c.limits = name, lim
		return &c, nil
	}
	cm, rt, instrumented, err := e.compile(ctx, name, wasm, info)
	if err != nil {
		return nil, err
	}
	m := &Module{name: name, limits: lim, engine: e, compiled: cm, rt: rt, hash: key.hash, instrumented: instrumented, hasStart: info.hasStart,
		use: &moduleUse{key: key, last: e.tick}}
	e.modules[key] = m
	e.releaseIdle(ctx)
	return m, nil
}

// acquire counts a new instance of m; it fails for a module released as
// idle.
func (e *Engine) acquire(m *Module) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if m.use.released {
		return fmt.Errorf("module %s was released after it stayed unused (Engine MaxIdleModules): load it again", m.name)
	}
	m.use.live++
	e.tick++
	m.use.last = e.tick
	return nil
}

// releaseInstance counts an instance of m gone and releases idle modules
// past MaxIdleModules.
func (e *Engine) releaseInstance(ctx context.Context, m *Module) {
	e.mu.Lock()
	defer e.mu.Unlock()
	m.use.live--
	e.tick++
	m.use.last = e.tick
	e.releaseIdle(ctx)
}

// releaseIdle closes the least recently used compiled modules without a
// live instance beyond MaxIdleModules. Callers hold e.mu.
func (e *Engine) releaseIdle(ctx context.Context) {
	if e.cfg.MaxIdleModules <= 0 || e.closed {
		return
	}
	var idle []*Module
	for _, m := range e.modules {
		if m.use.live == 0 {
			idle = append(idle, m)
		}
	}
	if len(idle) <= e.cfg.MaxIdleModules {
		return
	}
	sort.Slice(idle, func(a, b int) bool { return idle[a].use.last < idle[b].use.last })
	for _, m := range idle[:len(idle)-e.cfg.MaxIdleModules] {
		m.use.released = true
		delete(e.modules, m.use.key)
		_ = m.compiled.Close(ctx)
	}
}

// cachedModules is how many compiled modules the engine keeps (tests).
func (e *Engine) cachedModules() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.modules)
}

// compile instruments and compiles a module that passed inspectModule, and
// checks its WASI imports. Callers hold e.mu.
func (e *Engine) compile(ctx context.Context, name string, wasm []byte, info *moduleInfo) (wazero.CompiledModule, *runtime, bool, error) {
	malformed := func(err error) error {
		return &ValidationError{Module: name, Kind: KindMalformed, Detail: "truncated or malformed module: " + err.Error(), Err: err}
	}
	capped, err := capTables(wasm, info)
	if err != nil {
		return nil, nil, false, malformed(err)
	}
	hoisted, err := hoistStart(capped, info)
	if err != nil {
		return nil, nil, false, malformed(err)
	}
	code, err := instrument(hoisted, info)
	instrumented := err == nil
	if !instrumented {
		var u *errUninstrumentable
		if !errors.As(err, &u) {
			return nil, nil, false, malformed(err)
		}
		code = hoisted // interrupted by wazero instead
	}
	rt, err := e.runtimeFor(ctx, runtimeKey{terminate: !instrumented})
	if err != nil {
		return nil, nil, false, err
	}
	cm, err := rt.r.CompileModule(ctx, code)
	if e.cacheDir != "" {
		trimCache(e.cacheDir, e.cfg.MaxCacheBytes) // the compile may have added an entry
	}
	if err != nil {
		return nil, nil, false, &ValidationError{Module: name, Kind: KindMalformed, Detail: "invalid module: " + firstLine(err.Error()), Err: err}
	}
	if err := checkWASIImports(name, cm, rt); err != nil {
		cm.Close(ctx)
		return nil, nil, false, err
	}
	return cm, rt, instrumented, nil
}

// Validate runs every load-time check of Load on a module, including a full
// decode by wazero, and keeps nothing but the compilation cache entry. It is
// the upload-time check of a module registry.
func (e *Engine) Validate(ctx context.Context, name string, wasm []byte, lim Limits) error {
	lim = lim.withDefaults()
	info, err := inspectModule(name, wasm, lim)
	if err != nil {
		return err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return errors.New("wasm: engine closed")
	}
	if _, ok := e.modules[moduleKey{hash: sha256.Sum256(wasm)}]; ok {
		return nil
	}
	cm, _, _, err := e.compile(ctx, name, wasm, info)
	if err != nil {
		return err
	}
	return cm.Close(ctx)
}

// Check runs the load-time checks that need no compilation: everything but
// the decoding of function bodies. It is cheap (microseconds) and needs no
// Engine.
func Check(name string, wasm []byte, lim Limits) error {
	return checkModule(name, wasm, lim.withDefaults())
}

// checkWASIImports refuses WASI imports the runtime does not provide or
// provides with another signature.
func checkWASIImports(name string, cm wazero.CompiledModule, rt *runtime) error {
	for _, im := range cm.ImportedFunctions() {
		mod, fn, _ := im.Import()
		if mod != wasiModule {
			continue
		}
		def, ok := rt.wasi[fn]
		if !ok {
			return &ValidationError{Module: name, Kind: KindImport, Detail: fmt.Sprintf("import %s.%s not allowed: no such WASI function", mod, fn)}
		}
		if !sameTypes(def.ParamTypes(), im.ParamTypes()) || !sameTypes(def.ResultTypes(), im.ResultTypes()) {
			return &ValidationError{Module: name, Kind: KindImport, Detail: fmt.Sprintf("import %s.%s not allowed: wrong signature", mod, fn)}
		}
	}
	return nil
}

func sameTypes(a, b []api.ValueType) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// watchdog interrupts calls that overran their deadline. It never allocates
// per call: an instance counts its calls (odd = in a call), and the
// watchdog adds up how long it has seen the same odd count.
//
// It counts only time the process ran: a gap between its ticks longer
// than stalledAfter means the process itself was not running (stopped
// with SIGSTOP, its VM frozen, a long stop of the world), and counts as
// one interval. A call that was running when the process stopped is not
// past its deadline for the time nobody ran, and the operator is not
// named as stuck for it.
func (e *Engine) watchdog() {
	defer close(e.watchDone)
	ticks := e.cfg.ticks
	if ticks == nil {
		t := time.NewTicker(e.cfg.WatchdogInterval)
		defer t.Stop()
		ticks = t.C
	}
	stalled := stalledAfter(e.cfg.WatchdogInterval)
	var last time.Time
	for {
		select {
		case <-e.stopWatch:
			return
		case now := <-ticks:
			ran := now.Sub(last)
			if last.IsZero() || ran > stalled {
				ran = e.cfg.WatchdogInterval
			}
			last = now
			e.instMu.Lock()
			for inst := range e.instances {
				inst.watch(now, ran)
			}
			e.instMu.Unlock()
		}
	}
}

// stalledAfter is how long a gap between the watchdog's ticks, every
// interval, must be for the watchdog to take it for a time the process
// was not running rather than for a late tick: 100 intervals, at least a
// second. A tick runs late when the machine is busy; a stop (SIGSTOP, a VM
// freeze) lasts longer. A pause shorter than this counts against the
// call's deadline as if the call ran.
func stalledAfter(interval time.Duration) time.Duration {
	return max(100*interval, time.Second)
}

func (e *Engine) register(inst *Instance) {
	e.instMu.Lock()
	e.instances[inst] = struct{}{}
	e.instMu.Unlock()
}

func (e *Engine) unregister(inst *Instance) {
	e.instMu.Lock()
	delete(e.instances, inst)
	e.instMu.Unlock()
}
