package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirhq/weir/cmd/weir/internal/worker"
	"github.com/weirhq/weir/coordinator/control"
	"github.com/weirhq/weir/coordinator/jobspec"
	"github.com/weirhq/weir/coordinator/modref"
	"github.com/weirhq/weir/coordinator/registry"
	"github.com/weirhq/weir/guests/sourcebuild"
	"github.com/weirhq/weir/host/wasm"
	"github.com/weirhq/weir/transport/natsconn"
)

func init() {
	register(command{
		Name:    "module",
		Summary: "manage the module registry: push, ls, inspect, rm",
		Run:     runModule,
	})
}

const moduleUsage = `push|ls|inspect|rm [flags] [args]

  weir module push NAME FILE [-version V]   validate FILE and store it as NAME@V
                                            (V defaults to the latest version + 1);
                                            a Go package directory or a .rs, .c, .cpp,
                                            .ts or .wat source is built first
  weir module ls                            list every module version
  weir module inspect NAME[@V]|sha256:D     show one module version (latest by default)
  weir module rm NAME[@V]... [-force]       remove one version, or every version, of
                                            each; refused, before anything is removed,
                                            if one is not in the registry or a job
                                            that has not ended runs it (-force: all
                                            the same)`

// defaultNATS is where weir looks for NATS when -nats is not given.
const defaultNATS = "nats://127.0.0.1:4222"

func runModule(ctx context.Context, std Stdio, args []string) error {
	fs := newFlags(std, "module", moduleUsage)
	var nf natsFlags
	nf.register(fs, defaultNATS, "NATS server URL")
	version := fs.Int("version", 0, "version to push (0: the latest + 1)")
	bucket := fs.String("bucket", registry.DefaultBucket, "object store bucket of the registry")
	force := fs.Bool("force", false, "rm: remove the module even while a job runs it")
	var pos []string
	rest := args
	for {
		if err := parseFlags(fs, rest); err != nil {
			return err
		}
		rest = fs.Args()
		if len(rest) == 0 {
			break
		}
		pos = append(pos, rest[0])
		rest = rest[1:]
	}
	if len(pos) == 0 {
		fs.Usage()
		return usagef("module: missing subcommand (push, ls, inspect or rm)")
	}
	want := map[string]int{"push": 2, "ls": 0, "inspect": 1, "rm": 1}
	n, ok := want[pos[0]]
	if !ok {
		return usagef("module: unknown subcommand %q (%spush, ls, inspect or rm)", pos[0], didYouMean(pos[0], []string{"push", "ls", "inspect", "rm"}))
	}
	if pos[0] == "rm" && len(pos) > 1 {
		n = len(pos) - 1 // rm takes one reference or several
	}
	if len(pos)-1 != n {
		return usagef("module %s: want %d argument(s), got %d (see weir module -h)", pos[0], n, len(pos)-1)
	}
	var data []byte
	if pos[0] == "push" {
		// FILE may be a source file or a Go package directory, built
		// as weir run builds one.
		builder := &moduleBuilder{std: std}
		defer builder.Close()
		file, _, err := builder.build(ctx, pos[2])
		if err != nil {
			return fmt.Errorf("module push: %w", err)
		}
		if data, err = os.ReadFile(file); err != nil {
			return fmt.Errorf("module push: %w", err)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	nc, err := connectNATS(&nf, "weir module", std.Err)
	if err != nil {
		return err
	}
	defer nc.Close()
	reg, err := openRegistry(ctx, nc, *bucket)
	if err != nil {
		return err
	}
	switch pos[0] {
	case "push":
		// The same bytes pushed again make a new version all the same
		// (a name's versions are its history); say which ones they repeat.
		same, err := reg.Find(ctx, modref.Ref{Kind: modref.Digest, Digest: registry.Digest(data)})
		if err != nil && !errors.Is(err, registry.ErrNotFound) {
			return err
		}
		m, err := reg.Push(ctx, pos[1], data, *version, validateModule)
		if err != nil {
			return err
		}
		fmt.Fprintf(std.Out, "pushed %s sha256:%s (%d bytes)%s\n", m.Ref(), m.Digest, m.Size, sameBytes(same))
	case "ls":
		ms, err := reg.List(ctx)
		if err != nil {
			return err
		}
		tw := tabwriter.NewWriter(std.Out, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "NAME\tVERSION\tSIZE\tDIGEST\tPUSHED")
		for _, m := range ms {
			fmt.Fprintf(tw, "%s\t%d\t%d\tsha256:%.12s\t%s\n", m.Name, m.Version, m.Size, m.Digest, m.Pushed.Format(time.RFC3339))
		}
		return tw.Flush()
	case "inspect":
		m, err := reg.Inspect(ctx, pos[1])
		if err != nil {
			return err
		}
		fmt.Fprintf(std.Out, "name:    %s\nversion: %d\nref:     %s\ndigest:  sha256:%s\nsize:    %d\npushed:  %s\n",
			m.Name, m.Version, m.Ref(), m.Digest, m.Size, m.Pushed.Format(time.RFC3339))
	case "rm":
		refs := slices.Compact(pos[1:])
		// Every reference is checked before anything is removed: one
		// unknown or in use leaves all of them.
		if err := modulesKnown(ctx, reg, refs); err != nil {
			return err
		}
		if !*force {
			if err := moduleInUse(ctx, std.Err, nc, reg, refs); err != nil {
				return err
			}
		}
		for _, ref := range refs {
			gone, err := reg.Remove(ctx, ref)
			if errors.Is(err, registry.ErrNotFound) {
				continue // removed with an earlier reference (pass and pass@1)
			}
			if err != nil {
				return err
			}
			for _, m := range gone {
				fmt.Fprintf(std.Out, "removed %s\n", m.Ref())
			}
		}
	}
	return nil
}

// openRegistry opens the module registry in bucket ("" = the default) on
// nc's JetStream.
func openRegistry(ctx context.Context, nc *nats.Conn, bucket string) (*registry.Registry, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("jetstream: %w", err)
	}
	// Through an election of its buckets' streams' leaders (a cluster
	// regaining its quorum), as weir up and weir worker open it; a try
	// makes a few requests.
	var reg *registry.Registry
	err = natsconn.ThroughElection(ctx, nc, 2*natsconn.ElectionTry, func(ctx context.Context) (err error) {
		reg, err = registry.Open(ctx, js, bucket, 0)
		return err
	})
	return reg, err
}

// pushLocalModules stores the module of every operator that names a local
// file — a .wasm, or the wasm built from a Go package (built maps the built
// file to its package directory) — in reg and points the operator at the
// module's digest, which pins its bytes: a worker on any machine can then
// load it. Bytes the registry holds already are not pushed again. It prints
// one line per module.
func pushLocalModules(ctx context.Context, w io.Writer, reg *registry.Registry, spec *jobspec.Spec, built map[string]string) error {
	refs := map[string]string{} // file -> reference, for operators sharing a module
	for i := range spec.Operators {
		op := &spec.Operators[i]
		ref, err := modref.Parse(op.Module)
		if err != nil || ref.Kind != modref.File {
			continue
		}
		if r, ok := refs[ref.Path]; ok {
			op.Module = r
			continue
		}
		source := ref.Path
		if pkg, ok := built[ref.Path]; ok {
			source = pkg
		}
		data, err := os.ReadFile(ref.Path)
		if err != nil {
			return fmt.Errorf("operator %s: %w", op.Name, err)
		}
		m, pushed, err := reg.PushContent(ctx, registryName(source), data, validateModule)
		if err == nil {
			// Pushed or there already, it is checked against what this
			// job's operator allows it (its memory), before the job
			// deploys it: microseconds, no compilation.
			err = worker.MemoryLimitHint(*op, wasm.Check(registryName(source), data, wasm.Limits{MemoryBytes: uint64(op.Limits.Memory)}))
		}
		if err != nil {
			return interruptedIn(ctx, "pushing module "+displayPath(source), fmt.Errorf("operator %s: push %s: %w", op.Name, displayPath(source), err))
		}
		how := "pushed as"
		if !pushed {
			how = "in the registry as"
		}
		refs[ref.Path] = "sha256:" + m.Digest
		op.Module = refs[ref.Path]
		fmt.Fprintf(w, "module %s → %s (%s %s)\n", displayPath(source), op.Module, how, m.Ref())
	}
	return nil
}

// interruptedError is an error of a step that Ctrl-C (or a signal) cut
// short, said as the step it interrupted: the chain of what the canceled
// requests were doing says nothing to the one who interrupted them.
type interruptedError struct {
	what string // "pushing module ./upper"
	err  error
}

func (e *interruptedError) Error() string { return "interrupted while " + e.what }
func (e *interruptedError) Unwrap() error { return e.err }

// interruptedIn is err, of the step what, as an interruptedError when ctx
// was canceled (the command interrupted); else err itself.
func interruptedIn(ctx context.Context, what string, err error) error {
	if err == nil || ctx.Err() == nil {
		return err
	}
	if _, ok := errors.AsType[*interruptedError](err); ok {
		return err
	}
	return &interruptedError{what: what, err: err}
}

// registryName turns a file or package directory into a registry module
// name: its base name without ".wasm" or a source file's extension, with '-' for each character other
// than ASCII letters, digits, '-' and '_', behind "m-" unless it starts
// with a letter, and cut to 64 characters.
func registryName(path string) string {
	name := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' {
			return r
		}
		return '-'
	}, moduleBase(path))
	if name == "" || !(name[0] >= 'a' && name[0] <= 'z' || name[0] >= 'A' && name[0] <= 'Z') {
		name = "m-" + name
	}
	return name[:min(len(name), 64)]
}

// displayPath is path relative to the working directory when it lies
// below it, else path itself.
func displayPath(path string) string {
	wd, err := os.Getwd()
	if err != nil {
		return path
	}
	rel, err := filepath.Rel(wd, path)
	if err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return path
	}
	return rel
}

// validateModule runs the host's load-time checks on a module pushed on
// its own (weir module push). How much memory it may have is up to each
// job that runs it (an operator's limits.memory, checked as the job
// deploys): the check allows all a wasm32 module can address.
func validateModule(ctx context.Context, name string, data []byte) error {
	e, err := wasm.NewEngine(wasm.Config{})
	if err != nil {
		return fmt.Errorf("start wasm engine: %w", err)
	}
	defer e.Close(ctx)
	return e.Validate(ctx, name, data, wasm.Limits{MemoryBytes: wasm.MaxMemoryBytes})
}

// sameBytes notes the modules a push repeats byte for byte, "" if none.
func sameBytes(ms []registry.Module) string {
	if len(ms) == 0 {
		return ""
	}
	refs := make([]string, len(ms))
	for i, m := range ms {
		refs[i] = m.Ref()
	}
	return ": the same bytes as " + strings.Join(refs, ", ")
}

// moduleBase is the base name of a module file or its source without the
// extension: "upper" for upper.wasm and upper.rs, a directory's whole.
func moduleBase(path string) string {
	base := filepath.Base(path)
	if _, ok := sourcebuild.Of(path); ok || filepath.Ext(path) == ".wasm" {
		return strings.TrimSuffix(base, filepath.Ext(base))
	}
	return base
}

// inUseWait bounds how long weir module rm asks the coordinator which
// jobs run the module: the registry needs none, and may have none.
const inUseWait = 3 * time.Second

// modulesKnown says what is wrong with the first of refs that names no
// version in reg (a digest or a file, or a name or version not there).
func modulesKnown(ctx context.Context, reg *registry.Registry, refs []string) error {
	all, err := reg.List(ctx)
	if err != nil {
		return err
	}
	for _, ref := range refs {
		p, err := modref.Parse(ref)
		if err != nil {
			return err
		}
		if p.Kind != modref.Registry {
			return fmt.Errorf("remove %s: give NAME or NAME@VERSION", ref)
		}
		if !slices.ContainsFunc(all, func(m registry.Module) bool {
			return m.Name == p.Name && (p.Version == 0 || m.Version == p.Version)
		}) {
			return fmt.Errorf("remove %s: %w", ref, registry.ErrNotFound)
		}
	}
	return nil
}

// moduleInUse refuses the removal of the module versions refs name
// (NAME: every version; NAME@V: one) while a job that has not ended runs
// one of them (control.JobStatus.Modules, by digest) and no version left
// has its bytes: its next restart, failover or rescale would not find
// it, and would fail the job for good. With no coordinator answering
// within inUseWait, it says it could not tell, on w, and lets it go.
func moduleInUse(ctx context.Context, w io.Writer, nc *nats.Conn, reg *registry.Registry, refs []string) error {
	var ps []modref.Ref
	for _, ref := range refs {
		if p, err := modref.Parse(ref); err == nil && p.Kind == modref.Registry {
			ps = append(ps, p)
		}
	}
	all, err := reg.List(ctx)
	if err != nil {
		return err
	}
	gone, kept := map[string]string{}, map[string]bool{}
	for _, m := range all {
		if slices.ContainsFunc(ps, func(p modref.Ref) bool { return m.Name == p.Name && (p.Version == 0 || m.Version == p.Version) }) {
			gone[m.Digest] = m.Ref()
		} else {
			kept[m.Digest] = true
		}
	}
	ref := strings.Join(refs, " ")
	for d := range kept {
		delete(gone, d) // another version keeps the bytes: jobs find them
	}
	if len(gone) == 0 {
		return nil
	}
	api := control.NewAPIClient(nc, "")
	actx, cancel := context.WithTimeout(ctx, inUseWait)
	defer cancel()
	jobs, err := api.Jobs(actx)
	if err != nil {
		fmt.Fprintf(w, "no coordinator answered within %s: cannot tell whether a job runs %s\n", inUseWait, ref)
		return nil
	}
	var users []string
	for _, j := range jobs {
		if j.State.Terminal() {
			continue
		}
		ops := slices.Sorted(maps.Keys(j.Modules))
		for _, op := range ops {
			if r, ok := gone[j.Modules[op].Digest]; ok {
				users = append(users, fmt.Sprintf("job %s (%s) runs %s as operator %s", j.Name, j.State, r, op))
			}
		}
	}
	if len(users) == 0 {
		return nil
	}
	return fmt.Errorf("module rm %s: %s: its next restart or failover would not find the module and would fail for good; stop or cancel the job first, or give -force",
		ref, strings.Join(users, "; "))
}

// moduleLines returns one line per operator of mods, in operator order:
// the reference the spec gave, then — unless it named one version — the
// registry version it resolved to, and the start of the digest the job
// runs: "op: ddop → ddop@3 (sha256:1a2b3c4d5e6f)". A restore that ran a
// build other than the one meant (the latest version of a name, pushed
// since) said nothing of which. reg may be nil: no versions then.
func moduleLines(ctx context.Context, reg *registry.Registry, mods map[string]control.Module) []string {
	var versions map[string][]registry.Module // by digest
	if reg != nil {
		if all, err := reg.List(ctx); err == nil {
			versions = map[string][]registry.Module{}
			for _, m := range all {
				versions[m.Digest] = append(versions[m.Digest], m)
			}
		}
	}
	var lines []string
	for _, op := range slices.Sorted(maps.Keys(mods)) {
		m := mods[op]
		ref, err := modref.Parse(m.Ref)
		line := op + ": " + m.Ref
		if err == nil && ref.Kind == modref.Digest {
			line = op + ": sha256:" + ref.Digest[:min(12, len(ref.Digest))] + "…"
		}
		if err == nil && !(ref.Kind == modref.Registry && ref.Version > 0) {
			// The version of the digest: of the name the reference gave,
			// else the newest pushed with these bytes.
			var v string
			for _, rm := range versions[m.Digest] {
				if ref.Kind != modref.Registry || rm.Name == ref.Name {
					v = rm.Ref()
				}
			}
			if v != "" {
				line += " → " + v
			}
		}
		if m.Digest != "" && (err != nil || ref.Kind != modref.Digest) {
			line += " (sha256:" + m.Digest[:min(12, len(m.Digest))] + ")"
		}
		lines = append(lines, line)
	}
	return lines
}
