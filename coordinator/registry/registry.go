// Package registry is weir's module registry: WebAssembly operator modules
// stored in a JetStream Object Store bucket, one object per NAME and
// VERSION, each with its sha256 digest. Pushing validates the module with a
// function the caller passes in (the CLI passes the host's validator; the
// registry knows nothing of wazero).
//
// References (see coordinator/modref) resolve to module bytes and digest:
// NAME@VERSION, NAME (the latest version), sha256:DIGEST (any version with
// that content) or a local file path.
package registry

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirhq/weir/coordinator/modref"
	"github.com/weirhq/weir/internal/spell"
	"github.com/weirhq/weir/transport/natsconn"
	"github.com/weirhq/weir/transport/storage"
)

// DefaultBucket is the object store bucket modules live in.
const DefaultBucket = "weir_modules"

// Errors callers branch on.
var (
	// ErrNotFound: no module matches the reference. Its text follows the
	// module's name: "module pass@1: not in the module registry".
	ErrNotFound = errors.New("not in the module registry")
	// ErrExists: the version being pushed already exists.
	ErrExists = errors.New("module version exists")
	// ErrInvalid: the validator refused the module.
	ErrInvalid = errors.New("invalid module")
	// ErrTooLarge: the module is over the registry's size limit
	// (MaxModuleSize).
	ErrTooLarge = errors.New("module over the size limit")
)

// DefaultMaxModuleSize is the largest module a registry takes unless whoever
// runs weir sets another limit (SetMaxModuleSize; weir up
// -max-module-size): ten times a Go guest (3.5 MB), and hundreds of times a
// Rust, C or AssemblyScript one (20 to 70 KB).
const DefaultMaxModuleSize = 32 << 20

// metaMaxSize is the metadata key of the bucket's stream that holds the
// registry's size limit, in bytes: set by the coordinator
// (SetMaxModuleSize), read by every push and load, wherever it runs.
const metaMaxSize = "weir.max-module-size"

// TooLargeError is a module over the registry's size limit; it matches
// ErrTooLarge.
type TooLargeError struct {
	Module string // the module's name, reference or path
	Size   int64
	Limit  int64
}

func (e *TooLargeError) Error() string {
	return fmt.Sprintf("module %s is %s (%d bytes), over the module registry's limit of %s: shrink it (strip its debug info: "+
		"wasm-opt --strip-debug, Go -ldflags=\"-s -w\"), or have whoever runs weir raise weir up -max-module-size",
		e.Module, sizeIEC(e.Size), e.Size, sizeIEC(e.Limit))
}

// Is matches ErrTooLarge.
func (e *TooLargeError) Is(target error) bool { return target == ErrTooLarge }

// sizeIEC writes n bytes in the largest binary unit that leaves at least
// 1, to one decimal: "32 MiB", "100.5 MiB".
func sizeIEC(n int64) string {
	v, unit := float64(n), "bytes"
	for _, u := range []struct {
		name string
		size float64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if float64(n) >= u.size {
			v, unit = float64(n)/u.size, u.name
			break
		}
	}
	return strings.TrimSuffix(strconv.FormatFloat(v, 'f', 1, 64), ".0") + " " + unit
}

// InvalidModuleError is a module the validator refused; it matches
// ErrInvalid and the validator's error.
type InvalidModuleError struct {
	Name string
	Err  error
}

func (e *InvalidModuleError) Error() string {
	// A validator that loads the module names it too ("module NAME: …").
	why := strings.TrimPrefix(e.Err.Error(), "module "+e.Name+": ")
	return fmt.Sprintf("module %s refused: %s", e.Name, why)
}

// Unwrap returns ErrInvalid and the validator's error.
func (e *InvalidModuleError) Unwrap() []error { return []error{ErrInvalid, e.Err} }

// Validator checks a module before it is stored; its error is the reason
// the push is refused.
type Validator func(ctx context.Context, name string, wasm []byte) error

// Module describes a stored module version.
type Module struct {
	Name    string `json:"name"`
	Version int    `json:"version"`
	// Digest is the lower-case hex sha256 of the module bytes.
	Digest string    `json:"digest"`
	Size   int64     `json:"size"`
	Pushed time.Time `json:"pushed"`
}

// Ref returns "NAME@VERSION".
func (m Module) Ref() string { return fmt.Sprintf("%s@%d", m.Name, m.Version) }

// Registry is a module registry on a JetStream object store. Versions are
// claimed in a KV bucket (BUCKET_versions) with create-if-absent, so
// concurrent pushes never get the same version (but pushes of the same
// content, one of whose claims went unanswered: claim). Pushes, listings, reads
// and removals go through the bucket's stream leader (storage.ObjectStore):
// on a cluster, a worker connected to a replica that lags finds a module
// pushed just before, instead of failing its job with "not in the module
// registry", and a push's upload waits out an election of the stream's
// leader. So does a push's claim of its version (claim).
type Registry struct {
	js       jetstream.JetStream
	bucket   string
	store    *storage.ObjectStore
	versions jetstream.KeyValue
	// claims reads the versions' bucket through its stream's leader.
	claims *storage.KV
	nc     *nats.Conn
	// tryTimeout bounds one try of a version's claim.
	tryTimeout time.Duration
	// create creates a key of the versions' bucket: versions.Create, or in
	// a test one whose acknowledgement is lost.
	create func(ctx context.Context, key string, value []byte) (uint64, error)
}

// Open opens the registry in bucket ("" = DefaultBucket), creating the
// bucket if needed; replicas as for storage.NewObjectStore (0: a new
// bucket gets 1, an existing one keeps its own).
func Open(ctx context.Context, js jetstream.JetStream, bucket string, replicas int) (*Registry, error) {
	if bucket == "" {
		bucket = DefaultBucket
	}
	_, err := storage.OpenObjectStore(ctx, js, jetstream.ObjectStoreConfig{
		Bucket: bucket, Storage: jetstream.FileStorage, Description: "weir operator modules",
	}, replicas)
	if err != nil {
		return nil, fmt.Errorf("open module registry %s: %w", bucket, err)
	}
	kv, err := storage.OpenKeyValue(ctx, js, jetstream.KeyValueConfig{
		Bucket: bucket + "_versions", Storage: jetstream.FileStorage, Description: "weir module versions",
	}, replicas)
	if err != nil {
		return nil, fmt.Errorf("open module registry %s: %w", bucket, err)
	}
	// The bucket exists now: replicas 0 leaves it as it is.
	claims, err := storage.NewKV(ctx, js, bucket+"_versions", 0)
	if err != nil {
		return nil, fmt.Errorf("open module registry %s: %w", bucket, err)
	}
	return &Registry{js: js, bucket: bucket, store: storage.ObjectStoreOf(js, bucket), versions: kv, claims: claims,
		nc: js.Conn(), tryTimeout: js.Options().DefaultTimeout, create: func(ctx context.Context, key string, value []byte) (uint64, error) {
			return kv.Create(ctx, key, value)
		}}, nil
}

// Digest returns the lower-case hex sha256 of data.
func Digest(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

// MaxModuleSize returns the largest module the registry takes, in bytes:
// the limit SetMaxModuleSize set on its bucket, DefaultMaxModuleSize if
// none was set.
func (r *Registry) MaxModuleSize(ctx context.Context) (int64, error) {
	st, err := r.js.Stream(ctx, "OBJ_"+r.bucket)
	if err != nil {
		return 0, fmt.Errorf("module registry %s: read its size limit: %w", r.bucket, err)
	}
	if n, err := strconv.ParseInt(st.CachedInfo().Config.Metadata[metaMaxSize], 10, 64); err == nil && n > 0 {
		return n, nil
	}
	return DefaultMaxModuleSize, nil
}

// SetMaxModuleSize sets the largest module the registry takes to n bytes
// (0: DefaultMaxModuleSize), for every process that pushes or loads
// modules through the bucket: it is kept in the metadata of the bucket's
// stream. Modules stored before over the limit stay, and no worker loads
// them.
func (r *Registry) SetMaxModuleSize(ctx context.Context, n int64) error {
	if n <= 0 {
		n = DefaultMaxModuleSize
	}
	st, err := r.js.Stream(ctx, "OBJ_"+r.bucket)
	if err != nil {
		return fmt.Errorf("module registry %s: set its size limit: %w", r.bucket, err)
	}
	cfg := st.CachedInfo().Config
	v := strconv.FormatInt(n, 10)
	if cfg.Metadata[metaMaxSize] == v {
		return nil
	}
	cfg.Metadata = maps.Clone(cfg.Metadata)
	if cfg.Metadata == nil {
		cfg.Metadata = map[string]string{}
	}
	cfg.Metadata[metaMaxSize] = v
	if _, err := r.js.UpdateStream(ctx, cfg); err != nil {
		return fmt.Errorf("module registry %s: set its size limit: %w", r.bucket, err)
	}
	return nil
}

// checkSize refuses a module of size bytes over the registry's limit.
func (r *Registry) checkSize(ctx context.Context, module string, size int64) error {
	limit, err := r.MaxModuleSize(ctx)
	if err != nil {
		return err
	}
	if size > limit {
		return &TooLargeError{Module: module, Size: size, Limit: limit}
	}
	return nil
}

func objectName(name string, version int) string { return fmt.Sprintf("%s/%d", name, version) }

const (
	metaDigest = "weir-sha256"
	metaPushed = "weir-pushed"
)

// Push validates wasm with validate (if not nil) and stores it as name at
// version, or at the latest version plus one when version is 0. A module
// over the registry's size limit (MaxModuleSize) is refused first, with a
// *TooLargeError.
func (r *Registry) Push(ctx context.Context, name string, wasm []byte, version int, validate Validator) (Module, error) {
	if !modref.ValidName(name) {
		return Module{}, fmt.Errorf("push %q: bad module name (a letter, then letters, digits, '-' or '_')", name)
	}
	if version < 0 {
		return Module{}, fmt.Errorf("push %s: version must be positive", name)
	}
	if err := r.checkSize(ctx, name, int64(len(wasm))); err != nil {
		return Module{}, err
	}
	if validate != nil {
		if err := validate(ctx, name, wasm); err != nil {
			return Module{}, &InvalidModuleError{Name: name, Err: err}
		}
	}
	all, err := r.List(ctx)
	if err != nil {
		return Module{}, err
	}
	latest := 0
	digest := Digest(wasm)
	for _, m := range all {
		if m.Name == name {
			if m.Version == version {
				// Versions are immutable: say whether it holds these
				// bytes already, and what a push without one gives.
				if m.Digest == digest {
					return Module{}, fmt.Errorf("push %s: %w (with these bytes already: nothing to push)", m.Ref(), ErrExists)
				}
				next := 0
				for _, o := range all {
					if o.Name == name {
						next = max(next, o.Version)
					}
				}
				return Module{}, fmt.Errorf("push %s: %w (with other bytes; versions do not change: push without -version for %s@%d)", m.Ref(), ErrExists, name, next+1)
			}
			latest = max(latest, m.Version)
		}
	}
	explicit := version != 0
	for {
		if !explicit {
			version = latest + 1
		}
		err := r.claim(ctx, versionKey(name, version), digest)
		if err == nil {
			break
		}
		if !errors.Is(err, jetstream.ErrKeyExists) {
			return Module{}, fmt.Errorf("push %s@%d: claim version: %w", name, version, err)
		}
		if explicit {
			return Module{}, fmt.Errorf("push %s@%d: %w", name, version, ErrExists)
		}
		latest = version
	}
	m := Module{Name: name, Version: version, Digest: digest, Size: int64(len(wasm)), Pushed: time.Now().UTC()}
	if err := r.put(ctx, m, wasm); err != nil {
		// Best effort, through the stream's leader and an election: a
		// claim left behind only keeps its version from a push that
		// names it.
		_ = r.claims.DeleteKey(ctx, versionKey(name, version))
		return Module{}, fmt.Errorf("push %s: %w", m.Ref(), err)
	}
	return m, nil
}

// claim claims key, a version of a module, for the module with digest:
// it creates the key in the versions' bucket, or fails with
// jetstream.ErrKeyExists when another push has claimed the version.
//
// While the bucket's stream has no leader (an election on a cluster), the
// create is sent again until a leader stores it, each try bounded by
// r.tryTimeout, within ctx's deadline or, without one,
// natsconn.ElectionWait (natsconn.ThroughElection), as the push's upload
// waits (storage.ObjectStore.PutObject). A try that failed so may have
// been stored after all (its acknowledgement lost, or come after the
// try's deadline): the next try then finds the key there. That is no
// conflict when the key holds digest — the claim landed, as read from the
// stream's leader — so a key that exists after a failed try is ours when
// it names our module's content. (Another push of the same content to the
// same version at the same moment would be taken for ours too: it stores
// the same bytes.)
func (r *Registry) claim(ctx context.Context, key, digest string) error {
	failed := false // a try failed: it may have been stored
	err := natsconn.ThroughElection(ctx, r.nc, r.tryTimeout, func(ctx context.Context) error {
		_, err := r.create(ctx, key, []byte(digest))
		if err != nil && natsconn.Leaderless(err) {
			failed = true
		}
		return err
	})
	if !failed || !errors.Is(err, jetstream.ErrKeyExists) {
		return err
	}
	ours, rerr := r.claimedFor(ctx, key, digest)
	switch {
	case rerr != nil:
		return fmt.Errorf("%w (after a try that failed; reading it back: %w)", err, rerr)
	case ours:
		return nil
	}
	return err
}

// claimedFor reports whether key of the versions' bucket holds digest, as
// the bucket's stream leader has it.
func (r *Registry) claimedFor(ctx context.Context, key, digest string) (bool, error) {
	got, err := storage.ReadAll(ctx, r.claims, key)
	if err != nil {
		return false, err
	}
	return string(got) == digest, nil
}

// put stores wasm as the object of m, its digest and push time in the
// object's metadata (fromInfo reads them back).
func (r *Registry) put(ctx context.Context, m Module, wasm []byte) error {
	return r.store.PutObject(ctx, jetstream.ObjectMeta{
		Name:     objectName(m.Name, m.Version),
		Metadata: map[string]string{metaDigest: m.Digest, metaPushed: m.Pushed.Format(time.RFC3339Nano)},
	}, bytes.NewReader(wasm))
}

// PushContent returns a version holding exactly wasm: one already stored
// with its digest (under any name; pushed is false), or else a new version
// of name, validated and pushed as Push does. A reference to the digest
// then pins these bytes wherever it is resolved.
func (r *Registry) PushContent(ctx context.Context, name string, wasm []byte, validate Validator) (m Module, pushed bool, err error) {
	ms, err := r.Find(ctx, modref.Ref{Kind: modref.Digest, Digest: Digest(wasm)})
	if err == nil {
		return ms[0], false, nil
	}
	if !errors.Is(err, ErrNotFound) {
		return Module{}, false, err
	}
	if m, err = r.Push(ctx, name, wasm, 0, validate); err != nil {
		return Module{}, false, err
	}
	return m, true, nil
}

func versionKey(name string, version int) string { return fmt.Sprintf("%s.%d", name, version) }

func fromInfo(in *jetstream.ObjectInfo) (Module, bool) {
	name, ver, ok := strings.Cut(in.Name, "/")
	if !ok {
		return Module{}, false
	}
	v, err := strconv.Atoi(ver)
	if err != nil {
		return Module{}, false
	}
	m := Module{Name: name, Version: v, Digest: in.Metadata[metaDigest], Size: int64(in.Size)}
	m.Pushed, _ = time.Parse(time.RFC3339Nano, in.Metadata[metaPushed])
	return m, true
}

// List returns every stored module version, by name and version.
func (r *Registry) List(ctx context.Context) ([]Module, error) {
	infos, err := r.store.Infos(ctx, "")
	if err != nil {
		return nil, fmt.Errorf("list modules: %w", err)
	}
	var out []Module
	for _, in := range infos {
		if m, ok := fromInfo(in); ok {
			out = append(out, m)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Name != out[j].Name {
			return out[i].Name < out[j].Name
		}
		return out[i].Version < out[j].Version
	})
	return out, nil
}

// Find returns the versions a registry or digest reference matches: one
// for NAME@VERSION and NAME (the latest), every version with the content
// for sha256:DIGEST.
func (r *Registry) Find(ctx context.Context, ref modref.Ref) ([]Module, error) {
	all, err := r.List(ctx)
	if err != nil {
		return nil, err
	}
	var out []Module
	switch ref.Kind {
	case modref.Registry:
		for _, m := range all {
			if m.Name == ref.Name && (ref.Version == 0 || m.Version == ref.Version) {
				out = append(out, m)
			}
		}
		if ref.Version == 0 && len(out) > 1 {
			out = out[len(out)-1:]
		}
	case modref.Digest:
		for _, m := range all {
			if m.Digest == ref.Digest {
				out = append(out, m)
			}
		}
	default:
		return nil, fmt.Errorf("module %s: not a registry reference", ref)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("module %s: %w%s", ref, ErrNotFound, whatIsThere(ref, all))
	}
	return out, nil
}

// whatIsThere says, after a registry reference that matched nothing, what
// the registry holds instead: the versions of its name ("keysum has
// versions 1, 2, 3"), else a name it likely misspells, else how to list
// them.
func whatIsThere(ref modref.Ref, all []Module) string {
	if ref.Kind != modref.Registry {
		return ""
	}
	var versions []string
	var names []string
	for _, m := range all {
		if m.Name == ref.Name {
			versions = append(versions, strconv.Itoa(m.Version))
		}
		if len(names) == 0 || names[len(names)-1] != m.Name {
			names = append(names, m.Name)
		}
	}
	switch {
	case len(versions) == 1:
		return fmt.Sprintf(" (%s has version %s only)", ref.Name, versions[0])
	case len(versions) > 1:
		return fmt.Sprintf(" (%s has versions %s)", ref.Name, strings.Join(versions, ", "))
	case len(names) == 0:
		return " (it holds no module yet: weir module push NAME FILE stores one)"
	}
	if best := spell.Closest(ref.Name, names); best != "" {
		return fmt.Sprintf(" (did you mean %s? weir module ls lists them)", best)
	}
	return " (weir module ls lists what it holds)"
}

// Inspect returns the module a reference names (NAME, NAME@VERSION or
// sha256:DIGEST).
func (r *Registry) Inspect(ctx context.Context, ref string) (Module, error) {
	p, err := modref.Parse(ref)
	if err != nil {
		return Module{}, err
	}
	ms, err := r.Find(ctx, p)
	if err != nil {
		return Module{}, err
	}
	return ms[len(ms)-1], nil
}

// Remove deletes NAME@VERSION, or every version of NAME, and returns what it
// deleted.
func (r *Registry) Remove(ctx context.Context, ref string) ([]Module, error) {
	p, err := modref.Parse(ref)
	if err != nil {
		return nil, err
	}
	if p.Kind != modref.Registry {
		return nil, fmt.Errorf("remove %s: give NAME or NAME@VERSION", ref)
	}
	all, err := r.List(ctx)
	if err != nil {
		return nil, err
	}
	var gone []Module
	for _, m := range all {
		if m.Name == p.Name && (p.Version == 0 || m.Version == p.Version) {
			if err := r.store.DeleteKey(ctx, objectName(m.Name, m.Version)); err != nil {
				return gone, fmt.Errorf("remove %s: %w", m.Ref(), err)
			}
			_ = r.claims.DeleteKey(ctx, versionKey(m.Name, m.Version)) // as in Push
			gone = append(gone, m)
		}
	}
	if len(gone) == 0 {
		return nil, fmt.Errorf("remove %s: %w", ref, ErrNotFound)
	}
	return gone, nil
}

// Get returns the bytes of a stored module version, verifying its digest.
// A version over the registry's size limit (stored before the limit was
// lowered, or around weir) is refused, with a *TooLargeError, before it
// is read.
func (r *Registry) Get(ctx context.Context, m Module) ([]byte, error) {
	if err := r.checkSize(ctx, m.Ref(), m.Size); err != nil {
		return nil, err
	}
	data, err := storage.ReadAll(ctx, r.store, objectName(m.Name, m.Version))
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("module %s: %w", m.Ref(), ErrNotFound)
		}
		return nil, fmt.Errorf("module %s: %w", m.Ref(), err)
	}
	if m.Digest != "" && Digest(data) != m.Digest {
		return nil, fmt.Errorf("module %s: content does not match its digest", m.Ref())
	}
	return data, nil
}

// Resolve returns the bytes and description of the module ref names. A
// file reference is read from disk (its Module has Name = the path and
// Version 0); reg may be nil when only file references are expected. A
// module over reg's size limit (DefaultMaxModuleSize without reg) is
// refused, with a *TooLargeError, before it is read.
func Resolve(ctx context.Context, reg *Registry, ref string) ([]byte, Module, error) {
	p, err := modref.Parse(ref)
	if err != nil {
		return nil, Module{}, err
	}
	if p.Kind == modref.File {
		limit := int64(DefaultMaxModuleSize)
		if reg != nil {
			if limit, err = reg.MaxModuleSize(ctx); err != nil {
				return nil, Module{}, err
			}
		}
		if st, err := os.Stat(p.Path); err == nil && st.Mode().IsRegular() && st.Size() > limit {
			return nil, Module{}, &TooLargeError{Module: p.Path, Size: st.Size(), Limit: limit}
		}
		data, err := os.ReadFile(p.Path)
		if err != nil {
			// "module x.wasm: no such file or directory", not "module
			// x.wasm: open x.wasm: no such file or directory".
			if pe := (*fs.PathError)(nil); errors.As(err, &pe) && pe.Path == p.Path {
				err = pe.Err
			}
			return nil, Module{}, fmt.Errorf("module %s: %w", p.Path, err)
		}
		return data, Module{Name: p.Path, Digest: Digest(data), Size: int64(len(data))}, nil
	}
	if reg == nil {
		return nil, Module{}, fmt.Errorf("module %s: no registry to resolve it", ref)
	}
	ms, err := reg.Find(ctx, p)
	if err != nil {
		return nil, Module{}, err
	}
	m := ms[len(ms)-1]
	data, err := reg.Get(ctx, m)
	if err != nil {
		return nil, Module{}, err
	}
	return data, m, nil
}

// Check reports whether ref names an existing module (a readable file, or
// a module in reg); it suits jobspec.Options.CheckModule.
func Check(ctx context.Context, reg *Registry, ref modref.Ref) error {
	if ref.Kind == modref.File {
		st, err := os.Stat(ref.Path)
		if err != nil {
			return fmt.Errorf("no such file")
		}
		if st.IsDir() {
			return fmt.Errorf("is a directory")
		}
		return nil
	}
	if reg == nil {
		return fmt.Errorf("no module registry")
	}
	if _, err := reg.Find(ctx, ref); err != nil {
		if errors.Is(err, ErrNotFound) {
			// Find's words after the reference: what is there instead.
			_, rest, _ := strings.Cut(err.Error(), ": ")
			return errors.New(rest)
		}
		return err
	}
	return nil
}
