package jobspec

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"

	"go.yaml.in/yaml/v3"

	"github.com/weirhq/weir/coordinator/modref"
	"github.com/weirhq/weir/internal/spell"
	"github.com/weirhq/weir/transport/source"
	"github.com/weirhq/weir/transport/subject"
)

// Error is one problem in a spec, located by file, line and field path.
type Error struct {
	File string
	Line int
	// Path is the field path, e.g. "operators[1].inputs[0].from".
	Path string
	Msg  string
}

func (e *Error) Error() string {
	var b strings.Builder
	if e.File != "" {
		b.WriteString(e.File)
		b.WriteString(":")
	}
	if e.Line > 0 {
		fmt.Fprintf(&b, "%d:", e.Line)
	}
	if b.Len() > 0 {
		b.WriteString(" ")
	}
	if e.Path != "" {
		b.WriteString(e.Path)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Errors is every problem found in a spec, in line order. It is the error
// type Parse returns.
type Errors []*Error

func (es Errors) Error() string {
	s := make([]string, len(es))
	for i, e := range es {
		s[i] = e.Error()
	}
	return strings.Join(s, "\n")
}

// Options adjust parsing.
type Options struct {
	// CheckModule, if set, is called for every operator's module reference
	// (already syntax-checked); an error is reported as an unknown module
	// at the operator's module field.
	CheckModule func(ref modref.Ref) error
	// Dir, if set, is the directory relative file module paths are
	// resolved against.
	Dir string
	// Reserved is what the spec's sources and sinks may not reach: the
	// zero value refuses weir's and NATS's own subjects and streams.
	Reserved Reserved
}

// ParseFile reads and parses the spec at path. Relative module file paths
// are resolved against the spec's directory.
func ParseFile(path string, opts Options) (*Spec, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read job spec: %w", err)
	}
	if opts.Dir == "" {
		// Absolute: the spec goes to a coordinator and workers that may
		// run in another directory.
		if opts.Dir, err = filepath.Abs(filepath.Dir(path)); err != nil {
			return nil, fmt.Errorf("read job spec: %w", err)
		}
	}
	return Parse(path, data, opts)
}

// Parse decodes and validates a spec. file names the spec in error
// messages. The error, if any, is an Errors value.
func Parse(file string, data []byte, opts Options) (*Spec, error) {
	p := &parser{file: file, opts: opts, reservedFor: opts.Reserved}
	spec := p.parse(data)
	if len(p.errs) > 0 {
		sortErrors(p.errs)
		return nil, p.errs
	}
	return spec, nil
}

type parser struct {
	file string
	opts Options
	// reservedFor is what the spec's sources and sinks may not reach
	// (Options.Reserved, or Check's argument).
	reservedFor Reserved
	errs        Errors
	// bad holds the field paths whose value was refused while decoding:
	// validation does not report them again as missing.
	bad map[string]bool
	// meant holds the names of sources and operators written under a
	// misspelt name key ("nme: lines") or as keys of a mapping that
	// should be a list: a reference to one is not reported as unknown.
	meant map[string]bool
}

// errf reports a value that cannot be decoded at path.
func (p *parser) errf(n *yaml.Node, path, format string, args ...any) {
	line := 0
	if n != nil {
		line = n.Line
	}
	p.errs = append(p.errs, &Error{File: p.file, Line: line, Path: path, Msg: fmt.Sprintf(format, args...)})
	if p.bad == nil {
		p.bad = map[string]bool{}
	}
	p.bad[path] = true
}

// refused reports whether the value at path, or one enclosing it, could
// not be decoded (and was reported).
func (p *parser) refused(path string) bool {
	for {
		if p.bad[path] {
			return true
		}
		i := strings.LastIndexAny(path, ".[")
		if i <= 0 {
			return false
		}
		path = path[:i]
	}
}

func sortErrors(es Errors) {
	// insertion sort: stable, and specs are small
	for i := 1; i < len(es); i++ {
		for j := i; j > 0 && es[j].Line < es[j-1].Line; j-- {
			es[j], es[j-1] = es[j-1], es[j]
		}
	}
}

// fields walks a mapping node, calling the handler registered for each key
// and reporting unknown and duplicate keys.
func (p *parser) fields(n *yaml.Node, path string, h map[string]func(v *yaml.Node, path string)) bool {
	if n.Kind != yaml.MappingNode {
		p.errf(n, path, "want a mapping, got %s", kindName(n))
		return false
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		sub := k.Value
		if path != "" {
			sub = path + "." + k.Value
		}
		fn, ok := h[k.Value]
		switch {
		case !ok:
			like := closest(k.Value, h)
			if like == "" || hasKey(n, like) {
				// No guess: say what the mapping takes (a trial's
				// limits: {max-batch: 16MiB} got no word of it).
				p.errf(k, sub, "unknown option %q (valid: %s)", k.Value, strings.Join(slices.Sorted(maps.Keys(h)), ", "))
				break
			}
			p.errf(k, sub, "unknown option %q (did you mean %s?)", k.Value, like)
			if like == "name" && v.Kind == yaml.ScalarNode &&
				(strings.HasPrefix(path, "sources[") || strings.HasPrefix(path, "operators[")) {
				// A producer's name under a misspelt key: an input
				// that reads it is no second mistake.
				if p.meant == nil {
					p.meant = map[string]bool{}
				}
				p.meant[v.Value] = true
			}
			// The value is most likely like's: validation should not
			// also report like as missing.
			if path != "" {
				like = path + "." + like
			}
			p.bad[like] = true
		case seen[k.Value]:
			p.errf(k, sub, "duplicate option")
		default:
			seen[k.Value] = true
			fn(v, sub)
		}
	}
	return true
}

// hasKey reports whether mapping n holds key.
func hasKey(n *yaml.Node, key string) bool {
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return true
		}
	}
	return false
}

// closest returns the option of h that key most likely misspells — at
// most two edits (a swap of neighbours counting as one) and fewer than
// half its length; else the option key is a known other word for; else
// the one option key shortens or lengthens (checkpoint, parallel,
// partitioning) — or "".
func closest(key string, h map[string]func(v *yaml.Node, path string)) string {
	opts := slices.Sorted(maps.Keys(h))
	if best := spell.Closest(key, opts); best != "" {
		return best
	}
	if opt, ok := otherWords[key]; ok && h[opt] != nil {
		return opt
	}
	var like []string
	for _, opt := range opts {
		if n := commonPrefix(key, opt); n >= 6 && n >= min(len(key), len(opt))-1 {
			like = append(like, opt)
		}
	}
	if len(like) == 1 {
		return like[0]
	}
	return ""
}

// otherWords maps words other systems use to the options weir names
// them by.
var otherWords = map[string]string{
	"type":   "kind",
	"source": "from",
}

// commonPrefix returns the length of the longest common prefix of a and
// b.
func commonPrefix(a, b string) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		if n.Tag == "!!null" {
			return "nothing"
		}
		return fmt.Sprintf("%q", n.Value)
	case yaml.AliasNode:
		return "an alias"
	}
	return "nothing"
}

func (p *parser) str(n *yaml.Node, path string, dst *string) {
	if n.Kind != yaml.ScalarNode || n.Tag == "!!null" {
		p.errf(n, path, "want a string, got %s", kindName(n))
		return
	}
	*dst = n.Value
}

// subject decodes a NATS subject a source reads: dot-separated non-empty
// tokens without whitespace, where "*" and a final ">" are wildcards.
func (p *parser) subject(n *yaml.Node, path string, dst *string) {
	var s string
	if p.str(n, path, &s); s == "" {
		return
	}
	if msg := subjectProblem(s); msg != "" {
		p.errf(n, path, "%s", msg)
		return
	}
	*dst = s
}

// sinkSubject decodes a sink's subject: one subject without wildcards, or
// a template whose last token is {key} (transport/subject).
func (p *parser) sinkSubject(n *yaml.Node, path string, dst *string) {
	var s string
	if p.str(n, path, &s); s == "" {
		return
	}
	if _, err := subject.Parse(s); err != nil {
		p.errf(n, path, "%v", err)
		return
	}
	*dst = s
}

// subjectProblem says what is wrong with subject s, which may hold
// wildcards, or "".
func subjectProblem(s string) string {
	toks := strings.Split(s, ".")
	for i, t := range toks {
		if t == "" || strings.ContainsFunc(t, unicode.IsSpace) || (t == ">" && i != len(toks)-1) {
			return fmt.Sprintf("bad subject %q (dot-separated tokens, none empty, without spaces)", s)
		}
	}
	return ""
}

// stream decodes a JetStream stream name, which NATS uses as a subject
// token and a file name.
func (p *parser) stream(n *yaml.Node, path string, dst *string) {
	var s string
	if p.str(n, path, &s); s == "" {
		return
	}
	if msg := streamProblem(s); msg != "" {
		p.errf(n, path, "%s", msg)
		return
	}
	*dst = s
}

// streamProblem says what is wrong with stream name s, or "".
func streamProblem(s string) string {
	if strings.ContainsFunc(s, func(r rune) bool { return unicode.IsSpace(r) || strings.ContainsRune(`.*>/\`, r) }) {
		return fmt.Sprintf("bad stream name %q (no spaces, '.', '*', '>', '/' or '\\')", s)
	}
	return ""
}

func (p *parser) integer(n *yaml.Node, path string, min, max int, dst *int) {
	if n.Kind != yaml.ScalarNode {
		p.errf(n, path, "want an integer, got %s", kindName(n))
		return
	}
	v, err := strconv.Atoi(n.Value)
	if errors.Is(err, strconv.ErrRange) {
		// Too many digits for an int: say the bound, not "integer".
		if strings.HasPrefix(n.Value, "-") {
			p.errf(n, path, "must be at least %d, got %s", min, n.Value)
		} else {
			p.errf(n, path, "must be at most %d, got %s", max, n.Value)
		}
		return
	}
	if err != nil {
		p.errf(n, path, "want an integer, got %q", n.Value)
		return
	}
	if v < min {
		p.errf(n, path, "must be at least %d, got %d", min, v)
		return
	}
	if v > max {
		p.errf(n, path, "must be at most %d, got %d", max, v)
		return
	}
	*dst = v
}

func (p *parser) boolean(n *yaml.Node, path string, dst *bool) {
	var b bool
	if n.Kind != yaml.ScalarNode || n.Decode(&b) != nil {
		p.errf(n, path, "want true or false, got %s", kindName(n))
		return
	}
	*dst = b
}

func (p *parser) duration(n *yaml.Node, path string, dst *time.Duration) {
	if n.Kind != yaml.ScalarNode {
		p.errf(n, path, "want a duration like 10s, got %s", kindName(n))
		return
	}
	if n.Value == "0" {
		*dst = 0
		return
	}
	d, err := time.ParseDuration(n.Value)
	if err == nil && d < 0 {
		p.errf(n, path, "%s: a duration must not be negative (0 or more: 500ms, 10s, 1m)", n.Value)
		return
	}
	if err != nil {
		if bareNumberRE.MatchString(n.Value) {
			// A bare number: the unit is what is missing.
			p.errf(n, path, "bad duration %q: a duration needs a unit (%ss or %sms?)", n.Value, n.Value, n.Value)
			return
		}
		p.errf(n, path, "bad duration %q (want e.g. 500ms, 10s, 1m)", n.Value)
		return
	}
	*dst = d
}

// maxListedNames is how many of its sources and operators a spec's
// unknown input lists.
const maxListedNames = 12

// bareNumberRE matches a number that would be a duration with a unit.
var bareNumberRE = regexp.MustCompile(`^[0-9]+(\.[0-9]+)?$`)

var sizeRE = regexp.MustCompile(`^([0-9]+)\s*([KMGT]i?B?|B)?$`)

// size decodes a size into dst and reports whether it could.
func (p *parser) size(n *yaml.Node, path string, dst *int64) bool {
	if n.Kind != yaml.ScalarNode {
		p.errf(n, path, "want a size like 64MiB, got %s", kindName(n))
		return false
	}
	v, err := ParseSize(n.Value)
	if err != nil {
		p.errf(n, path, "%v", err)
		return false
	}
	*dst = v
	return true
}

// ParseSize parses a size: a whole number of bytes, optionally followed
// by B or by K, M, G or T with an optional i and B. The units are powers
// of 1024 either way: 64MB, 64M and 64MiB are all 64 × 2²⁰ bytes.
func ParseSize(s string) (int64, error) {
	m := sizeRE.FindStringSubmatch(strings.TrimSpace(s))
	if m == nil {
		return 0, fmt.Errorf("bad size %q (want e.g. 65536, 512KiB, 64MiB, 1GiB)", s)
	}
	v, err := strconv.ParseInt(m[1], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("bad size %q", s)
	}
	unit := strings.TrimSuffix(m[2], "B")
	mult := int64(1)
	switch strings.TrimSuffix(unit, "i") {
	case "K":
		mult = 1 << 10
	case "M":
		mult = 1 << 20
	case "G":
		mult = 1 << 30
	case "T":
		mult = 1 << 40
	}
	if v > math.MaxInt64/mult {
		return 0, fmt.Errorf("size %q too large", s)
	}
	return v * mult, nil
}

// check reports err, a value's refusal by a Check function, at path, or
// calls set when it is nil.
func (p *parser) check(n *yaml.Node, path string, err error, set func()) {
	if err != nil {
		p.errf(n, path, "%v", err)
		return
	}
	set()
}

func (p *parser) oneOf(n *yaml.Node, path string, dst *string, allowed ...string) {
	if n.Kind != yaml.ScalarNode {
		p.errf(n, path, "want one of %s, got %s", strings.Join(allowed, ", "), kindName(n))
		return
	}
	s := n.Value
	for _, a := range allowed {
		if s == a {
			*dst = s
			return
		}
	}
	p.errf(n, path, "unknown value %q (%swant %s)", s, meant(s, allowed), strings.Join(allowed, ", "))
}

// meant is "did you mean X? " for the name of names that word most
// likely misspells (Closest), or the one name of 3 bytes or more that
// word lengthens or shortens (keyed: key), else "".
func meant(word string, names []string) string {
	if c := spell.Closest(word, names); c != "" {
		return "did you mean " + c + "? "
	}
	var like []string
	for _, n := range names {
		if min(len(n), len(word)) >= 3 && (strings.HasPrefix(word, n) || strings.HasPrefix(n, word)) {
			like = append(like, n)
		}
	}
	if len(like) == 1 {
		return "did you mean " + like[0] + "? "
	}
	return ""
}

func (p *parser) list(n *yaml.Node, path string, fn func(i int, item *yaml.Node, path string)) {
	if n.Kind != yaml.SequenceNode {
		p.errf(n, path, "want a list, got %s", kindName(n))
		return
	}
	for i, item := range n.Content {
		fn(i, item, fmt.Sprintf("%s[%d]", path, i))
	}
}

// namedList is list for the sources, operators or sinks, which a user
// may write as a mapping by name, as some other tools take them.
func (p *parser) namedList(n *yaml.Node, path, what string, fn func(i int, item *yaml.Node, path string)) {
	if n.Kind == yaml.MappingNode && len(n.Content) > 0 && n.Content[0].Kind == yaml.ScalarNode {
		p.errf(n, path, "want a list, got a mapping (write each %s as a list item with its name: - name: %s)", what, n.Content[0].Value)
		// Its keys are the names meant: inputs reading them are no
		// second mistake.
		if p.meant == nil {
			p.meant = map[string]bool{}
		}
		for i := 0; i < len(n.Content) && what != "sink"; i += 2 {
			p.meant[n.Content[i].Value] = true
		}
		return
	}
	p.list(n, path, fn)
}

// config turns a config value into bytes: a string verbatim, anything else
// as compact JSON.
func (p *parser) config(n *yaml.Node, path string, dst *[]byte) {
	if n.Kind == yaml.ScalarNode && n.Tag == "!!str" {
		*dst = []byte(n.Value)
		return
	}
	var v any
	if err := n.Decode(&v); err != nil {
		p.errf(n, path, "bad config: %s", strings.TrimPrefix(err.Error(), "yaml: "))
		return
	}
	v = jsonable(v)
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		p.errf(n, path, "config cannot be written as JSON: %v", err)
		return
	}
	*dst = bytes.TrimRight(buf.Bytes(), "\n")
}

// jsonable converts YAML maps with non-string keys into JSON objects.
func jsonable(v any) any {
	switch t := v.(type) {
	case map[string]any:
		for k, x := range t {
			t[k] = jsonable(x)
		}
		return t
	case map[any]any:
		m := make(map[string]any, len(t))
		for k, x := range t {
			m[fmt.Sprint(k)] = jsonable(x)
		}
		return m
	case []any:
		for i, x := range t {
			t[i] = jsonable(x)
		}
		return t
	case float64:
		if math.IsInf(t, 0) || math.IsNaN(t) {
			return fmt.Sprint(t)
		}
	}
	return v
}

var nameRE = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9-]{0,62}$`)

// ValidName reports whether name is a valid job, source, operator or sink
// name: letters, digits and '-', starting with a letter, at most 63
// characters. Such names are usable in NATS subject tokens and storage keys.
func ValidName(name string) bool { return nameRE.MatchString(name) }

func (p *parser) parse(data []byte) *Spec {
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	err := dec.Decode(&doc)
	if errors.Is(err, io.EOF) {
		p.errf(nil, "", "empty job spec")
		return nil
	}
	if err == nil {
		var next yaml.Node
		if err = dec.Decode(&next); errors.Is(err, io.EOF) {
			err = nil
		} else if err == nil && len(next.Content) > 0 && next.Content[0].Tag != "!!null" {
			p.errf(next.Content[0], "", "a second YAML document: a job spec is one document (one job per file)")
			return nil
		}
	}
	if err != nil {
		line, msg := yamlError(err, data)
		p.errs = append(p.errs, &Error{File: p.file, Line: line, Msg: "bad YAML: " + msg})
		return nil
	}
	if len(doc.Content) == 0 {
		p.errf(nil, "", "empty job spec")
		return nil
	}
	root := doc.Content[0]
	s := &Spec{
		Checkpointing: Checkpointing{
			Mode: ModeExactlyOnce, Interval: DefaultInterval, Timeout: DefaultTimeout,
			MaxConcurrent: DefaultMaxConcurrent, Retained: DefaultRetained,
		},
		Restart: Restart{Attempts: DefaultRestartAttempts},
	}
	nodes := map[string]*yaml.Node{}
	// The nodes of options checked against each other once all are read,
	// so that an error names the option's own line.
	var delayNode, initialNode, maxNode, multiplierNode, alignedTimeoutNode *yaml.Node
	checkpointingNodes := map[string]*yaml.Node{}
	ok := p.fields(root, "", map[string]func(*yaml.Node, string){
		"name": func(v *yaml.Node, path string) { p.str(v, path, &s.Name); nodes["name"] = v },
		"sources": func(v *yaml.Node, path string) {
			p.namedList(v, path, "source", func(i int, item *yaml.Node, path string) {
				src := Source{Parallelism: 1, Key: KeyFromHeader, Line: item.Line}
				p.fields(item, path, map[string]func(*yaml.Node, string){
					"name":        func(v *yaml.Node, path string) { p.str(v, path, &src.Name) },
					"kind":        func(v *yaml.Node, path string) { p.oneOf(v, path, &src.Kind, KindNATS, KindJetStream) },
					"subject":     func(v *yaml.Node, path string) { p.subject(v, path, &src.Subject); nodes[path] = v },
					"stream":      func(v *yaml.Node, path string) { p.stream(v, path, &src.Stream); nodes[path] = v },
					"filter":      func(v *yaml.Node, path string) { p.subject(v, path, &src.Filter); nodes[path] = v },
					"parallelism": func(v *yaml.Node, path string) { p.integer(v, path, 1, MaxParallelism, &src.Parallelism) },
					"partitions":  func(v *yaml.Node, path string) { p.integer(v, path, 1, MaxPartitions, &src.Partitions) },
					"partition-filter": func(v *yaml.Node, path string) {
						p.str(v, path, &src.PartitionFilter)
						nodes[path] = v
					},
					"key": func(v *yaml.Node, path string) { p.oneOf(v, path, &src.Key, KeyFromHeader, KeyFromSubject) },
					"pending-messages": func(v *yaml.Node, path string) {
						p.integer(v, path, 1, MaxPendingMessages, &src.PendingMessages)
					},
					"pending-bytes": func(v *yaml.Node, path string) {
						var n int64
						if p.size(v, path, &n) {
							p.check(v, path, CheckPendingBytes(n), func() { src.PendingBytes = n })
						}
					},
					"start": func(v *yaml.Node, path string) {
						var start string
						if p.str(v, path, &start); start == "" {
							return
						}
						if _, err := ParseStart(start); err != nil {
							p.errf(v, path, "%v", err)
							return
						}
						src.Start = start
					},
					"stop": func(v *yaml.Node, path string) {
						var stop string
						if p.str(v, path, &stop); stop == "" {
							return
						}
						if _, err := ParseStop(stop); err != nil {
							p.errf(v, path, "%v", err)
							return
						}
						src.Stop = stop
					},
				})
				s.Sources = append(s.Sources, src)
			})
		},
		"operators": func(v *yaml.Node, path string) {
			p.namedList(v, path, "operator", func(i int, item *yaml.Node, path string) {
				op := Operator{Parallelism: 1, Line: item.Line}
				p.fields(item, path, map[string]func(*yaml.Node, string){
					"name":        func(v *yaml.Node, path string) { p.str(v, path, &op.Name) },
					"module":      func(v *yaml.Node, path string) { p.str(v, path, &op.Module); nodes[path] = v },
					"parallelism": func(v *yaml.Node, path string) { p.integer(v, path, 1, MaxParallelism, &op.Parallelism) },
					"config":      func(v *yaml.Node, path string) { p.config(v, path, &op.Config) },
					"limits": func(v *yaml.Node, path string) {
						p.fields(v, path, map[string]func(*yaml.Node, string){
							"memory": func(v *yaml.Node, path string) {
								var n int64
								if p.size(v, path, &n) {
									p.check(v, path, CheckMemory(n), func() { op.Limits.Memory = n })
								}
							},
							"timeout": func(v *yaml.Node, path string) {
								var d time.Duration = -1
								if p.duration(v, path, &d); d >= 0 {
									p.check(v, path, CheckTimeout(d), func() { op.Limits.Timeout = d })
								}
							},
							"snapshot-timeout": func(v *yaml.Node, path string) {
								var d time.Duration = -1
								if p.duration(v, path, &d); d >= 0 {
									p.check(v, path, CheckTimeout(d), func() { op.Limits.SnapshotTimeout = d })
								}
							},
							"log-rate": func(v *yaml.Node, path string) { p.integer(v, path, 0, MaxLogRate, &op.Limits.LogRate) },
						})
					},
					"inputs": func(v *yaml.Node, path string) {
						nodes[path] = v
						if v.Kind == yaml.MappingNode {
							// One input written as the sink's is.
							p.errf(v, path, "want a list, got a mapping (write each input as a list item: - from: NAME)")
							return
						}
						p.list(v, path, func(i int, item *yaml.Node, path string) {
							op.Inputs = append(op.Inputs, p.input(item, path))
						})
					},
				})
				s.Operators = append(s.Operators, op)
			})
		},
		"sinks": func(v *yaml.Node, path string) {
			p.namedList(v, path, "sink", func(i int, item *yaml.Node, path string) {
				sk := Sink{Parallelism: 1, Line: item.Line}
				p.fields(item, path, map[string]func(*yaml.Node, string){
					"name":        func(v *yaml.Node, path string) { p.str(v, path, &sk.Name) },
					"kind":        func(v *yaml.Node, path string) { p.oneOf(v, path, &sk.Kind, KindNATS, KindJetStream) },
					"subject":     func(v *yaml.Node, path string) { p.sinkSubject(v, path, &sk.Subject); nodes[path] = v },
					"stream":      func(v *yaml.Node, path string) { p.stream(v, path, &sk.Stream); nodes[path] = v },
					"parallelism": func(v *yaml.Node, path string) { p.integer(v, path, 1, MaxParallelism, &sk.Parallelism) },
					"guarantee": func(v *yaml.Node, path string) {
						p.oneOf(v, path, &sk.Guarantee, AtMostOnce, AtLeastOnce, ExactlyOnce)
						nodes[path] = v
					},
					"publish": func(v *yaml.Node, path string) {
						p.oneOf(v, path, &sk.Publish, PublishAuto, PublishFast, PublishAtomic, PublishAsync)
						nodes[path] = v
					},
					"ack-timeout": func(v *yaml.Node, path string) {
						p.positive(v, path, &sk.AckTimeout)
						nodes[path] = v
					},
					"timestamps": func(v *yaml.Node, path string) { p.boolean(v, path, &sk.Timestamps) },
					"input":      func(v *yaml.Node, path string) { sk.Input = p.input(v, path) },
				})
				s.Sinks = append(s.Sinks, sk)
			})
		},
		"checkpointing": func(v *yaml.Node, path string) {
			c := &s.Checkpointing
			p.fields(v, path, map[string]func(*yaml.Node, string){
				"mode": func(v *yaml.Node, path string) {
					p.oneOf(v, path, &c.Mode, ModeExactlyOnce, ModeAtLeastOnce, ModeUnaligned)
				},
				"aligned-timeout": func(v *yaml.Node, path string) {
					p.duration(v, path, &c.AlignedTimeout)
					alignedTimeoutNode = v
					checkpointingNodes[path] = v
				},
				"interval": func(v *yaml.Node, path string) {
					p.atLeast(v, path, MinCheckpointInterval, intervalHint, &c.Interval)
				},
				"timeout": func(v *yaml.Node, path string) {
					p.atLeast(v, path, MinCheckpointTimeout, timeoutHint, &c.Timeout)
					checkpointingNodes[path] = v
				},
				"min-pause": func(v *yaml.Node, path string) { p.duration(v, path, &c.MinPause) },
				"max-concurrent": func(v *yaml.Node, path string) {
					p.integer(v, path, 1, math.MaxInt, &c.MaxConcurrent)
					checkpointingNodes[path] = v
				},
				"tolerable-failures": func(v *yaml.Node, path string) { p.integer(v, path, 0, math.MaxInt, &c.TolerableFailures) },
				"retained":           func(v *yaml.Node, path string) { p.integer(v, path, 1, MaxRetained, &c.Retained) },
				"disabled":           func(v *yaml.Node, path string) { p.boolean(v, path, &c.Disabled) },
			})
		},
		"channels": func(v *yaml.Node, path string) {
			p.fields(v, path, map[string]func(*yaml.Node, string){
				"buffer": func(v *yaml.Node, path string) {
					var n int64
					if !p.size(v, path, &n) {
						return
					}
					if n == 0 {
						// 0 is the workers' defaults only where nothing
						// was written (the API's JSON): written, it reads
						// as no buffer, which no channel can be.
						p.errf(v, path, "%s is less than %s (leave it out for the workers' defaults: 1MiB within a worker, up to 4MiB between workers)",
							v.Value, FormatSize(MinChannelBuffer))
						return
					}
					p.check(v, path, CheckChannelBuffer(n), func() { s.Channels.Buffer = n })
				},
				"debloat": func(v *yaml.Node, path string) {
					if v.Kind == yaml.ScalarNode && (v.Value == "off" || v.Value == "false" || v.Value == "0") {
						s.Channels.Debloat = DebloatOff
						return
					}
					var d time.Duration
					p.duration(v, path, &d)
					if d > 0 && d < MinDebloat {
						p.errf(v, path, "%s is less than %s (or off)", v.Value, MinDebloat)
						return
					}
					if d > 0 {
						s.Channels.Debloat = d
					}
				},
			})
		},
		"restart": func(v *yaml.Node, path string) {
			r := &s.Restart
			p.fields(v, path, map[string]func(*yaml.Node, string){
				"strategy": func(v *yaml.Node, path string) {
					p.oneOf(v, path, &r.Strategy, RestartFixedDelay, RestartExponentialBackoff, RestartNone)
				},
				"delay":    func(v *yaml.Node, path string) { p.duration(v, path, &r.Delay); delayNode = v },
				"initial":  func(v *yaml.Node, path string) { p.positive(v, path, &r.Initial); initialNode = v },
				"max":      func(v *yaml.Node, path string) { p.positive(v, path, &r.Max); maxNode = v },
				"attempts": func(v *yaml.Node, path string) { p.integer(v, path, 0, math.MaxInt, &r.Attempts) },
				"multiplier": func(v *yaml.Node, path string) {
					multiplierNode = v
					if v.Kind != yaml.ScalarNode {
						p.errf(v, path, "want a number, got %s", kindName(v))
						return
					}
					f, err := strconv.ParseFloat(v.Value, 64)
					if err != nil || f < 1 || math.IsInf(f, 0) {
						p.errf(v, path, "want a number >= 1, got %q", v.Value)
						return
					}
					r.Multiplier = f
				},
			})
		},
	})
	if !ok {
		return nil
	}
	r := &s.Restart
	if r.Strategy == "" {
		// Exponential backoff by default, as Flink's since 1.19: an outage
		// of what the job needs (checkpoint storage, NATS, its workers)
		// of a minute or two does not use up its attempts, as 10 restarts
		// a second apart did in ~10 s. A restart block that gives a delay
		// and no strategy means fixed-delay, the only one with a delay.
		r.Strategy = RestartExponentialBackoff
		if delayNode != nil {
			r.Strategy = RestartFixedDelay
		}
	}
	switch r.Strategy {
	case RestartFixedDelay:
		if delayNode == nil {
			r.Delay = DefaultRestartDelay
		}
		if n := cmp.Or(initialNode, maxNode, multiplierNode); n != nil {
			p.errf(n, "restart", "initial, max and multiplier apply to exponential-backoff only")
		}
	case RestartExponentialBackoff:
		if initialNode == nil {
			r.Initial = DefaultBackoffInitial
		}
		if maxNode == nil {
			r.Max = DefaultBackoffMax
		}
		if r.Multiplier == 0 {
			r.Multiplier = DefaultBackoffMultiplier
		}
		if delayNode != nil {
			p.errf(delayNode, "restart.delay", "delay applies to fixed-delay only (use initial)")
		}
		if r.Max < r.Initial {
			p.errf(cmp.Or(maxNode, initialNode), "restart.max", "max (%s) is less than initial (%s)", r.Max, r.Initial)
		}
	case RestartNone:
		r.Attempts = 0
	}
	if s.Checkpointing.AlignedTimeout > 0 && s.Checkpointing.Mode != ModeExactlyOnce {
		p.errf(alignedTimeoutNode, "checkpointing.aligned-timeout", "applies to mode exactly-once only (mode is %s)", s.Checkpointing.Mode)
	}
	for _, e := range checkpointingConflicts(s.Checkpointing) {
		if !p.refused(e.path) {
			p.errf(checkpointingNodes[e.path], e.path, "%s", e.msg)
		}
	}
	p.validate(s, root, nodes)
	return s
}

// braceValue finds a plain (unquoted) value holding a {…} token, such as
// a keyed sink subject (out.{key}) or a partition filter (lines.{p}.>):
// inside a flow mapping or sequence its braces end the value early.
var braceValue = regexp.MustCompile(`:\s+([^\s"'{\[,][^\s,{}]*\{[^\s{},]*\}[^\s,{}\]]*)`)

// yamlParserErrors are the messages of the YAML decoder's parser (not
// its scanner) that a hand-written spec can run into.
var yamlParserErrors = []string{
	"did not find expected ',' or ']'", "did not find expected ',' or '}'", "did not find expected '-' indicator",
	"did not find expected <document start>", "did not find expected key", "did not find expected node content",
}

// yamlError turns an error of the YAML decoder into a line and a message
// a user can act on: the line it names made 1-based where the decoder
// gives one less, the first line where it gives none, and a hint for the
// mistakes hand-written specs make most.
func yamlError(err error, data []byte) (int, string) {
	msg := err.Error()
	if te, ok := err.(*yaml.TypeError); ok {
		msg = strings.Join(te.Errors, "; ")
	}
	msg = strings.TrimPrefix(msg, "yaml: ")
	line := 0
	// Syntax errors read "yaml: line N: ...", or leave the line out when
	// it is the first.
	if rest, ok := strings.CutPrefix(msg, "line "); ok {
		if num, tail, ok := strings.Cut(rest, ": "); ok {
			if l, err := strconv.Atoi(num); err == nil {
				line, msg = l, tail
			}
		}
	}
	switch {
	case slices.Contains(yamlParserErrors, msg):
		// The parser's errors count lines from 0 (its scanner's from
		// 1): the line given is the one before the construct it could
		// not finish.
		line++
	case line == 0 && (strings.HasPrefix(msg, "found ") || strings.HasPrefix(msg, "could not find") ||
		strings.HasSuffix(msg, "not allowed in this context")):
		line = 1
	case strings.HasPrefix(msg, "unknown anchor "):
		// The decoder names no line: find the alias.
		name := strings.TrimSuffix(strings.TrimPrefix(msg, "unknown anchor '"), "' referenced")
		re := regexp.MustCompile(`\*` + regexp.QuoteMeta(name) + `([\s,\]}]|$)`)
		if loc := re.FindIndex(data); loc != nil {
			line = 1 + bytes.Count(data[:loc[0]], []byte("\n"))
		}
		msg += " (an alias *" + name + " needs an anchor &" + name + " before it)"
	}
	// A mistake found at the end of the file is on its last line, not
	// the empty one after the final newline.
	lines := strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
	line = min(line, len(lines))
	text := ""
	if line >= 1 {
		text = lines[line-1]
	}
	indent := text[:len(text)-len(strings.TrimLeft(text, " \t"))]
	switch {
	case strings.Contains(msg, "tab character"),
		strings.Contains(msg, "cannot start any token") && strings.Contains(indent, "\t"):
		msg += " (indent with spaces: YAML does not allow tabs)"
	case strings.Contains(msg, "cannot start any token"):
		msg += " (quote a value that starts with @, ` or %)"
	case msg == "found unexpected end of stream":
		msg += " (a quote left open?)"
	case msg == "could not find expected ':'":
		msg += " (a key without its colon?)"
	case msg == "mapping values are not allowed in this context":
		msg += " (a colon missing on the line before, a line indented too deep, or a value holding \": \" to quote?)"
	case strings.HasPrefix(msg, "did not find expected ',' or"):
		if m := braceValue.FindStringSubmatch(text); m != nil {
			msg += fmt.Sprintf(" (quote a value holding braces inside {…} or […]: %q)", m[1])
			break
		}
		msg += " (a bracket left open?)"
	case msg == "did not find expected '-' indicator":
		msg += " (a list item without its '-', or a line indented like one?)"
	case msg == "did not find expected key":
		msg += " (a line indented differently from the ones before it, or a bracket too many?)"
	}
	return line, msg
}

// atLeast is duration for a setting whose shortest value is least: a
// shorter one, 0 or negative, is refused with hint (", …") after it.
func (p *parser) atLeast(n *yaml.Node, path string, least time.Duration, hint string, dst *time.Duration) {
	if n.Kind == yaml.ScalarNode {
		d, err := time.ParseDuration(n.Value)
		if n.Value == "0" {
			d, err = 0, nil
		}
		if err == nil && d < least {
			p.errf(n, path, "%s is less than %s, the shortest %s", n.Value, least, hint)
			return
		}
	}
	p.duration(n, path, dst)
}

func (p *parser) positive(n *yaml.Node, path string, dst *time.Duration) {
	var d time.Duration = -1
	p.duration(n, path, &d)
	if d == 0 {
		p.errf(n, path, "must be greater than 0")
		return
	}
	if d > 0 {
		*dst = d
	}
}

func (p *parser) input(n *yaml.Node, path string) Input {
	in := Input{Line: n.Line}
	if n.Kind == yaml.ScalarNode && n.Tag == "!!str" {
		// "inputs: [lines]" or "input: lines": the name without from.
		p.errf(n, path, "want a mapping like {from: %s}, got %q", n.Value, n.Value)
		return in
	}
	p.fields(n, path, map[string]func(*yaml.Node, string){
		"from": func(v *yaml.Node, path string) { p.str(v, path, &in.From); in.Line = v.Line },
		"partition": func(v *yaml.Node, path string) {
			p.oneOf(v, path, &in.Partition, Forward, KeyHash, Broadcast, RoundRobin)
		},
		"port": func(v *yaml.Node, path string) {
			port := -1
			if p.integer(v, path, 0, MaxParallelism, &port); port >= 0 {
				in.Port = &port
			}
		},
	})
	return in
}

// validate checks references, names and the graph. What decoding already
// refused (a wrong type, an unknown value) is not reported again as
// missing.
func (p *parser) validate(s *Spec, root *yaml.Node, nodes map[string]*yaml.Node) {
	at := func(line int, path, format string, args ...any) {
		if p.refused(path) {
			return
		}
		p.errs = append(p.errs, &Error{File: p.file, Line: line, Path: path, Msg: fmt.Sprintf(format, args...)})
	}
	if s.Name == "" {
		line := 0
		if n := nodes["name"]; n != nil {
			line = n.Line
		}
		at(line, "name", "a job needs a name")
	} else if !nameRE.MatchString(s.Name) {
		p.errf(nodes["name"], "name", "%s", BadName(s.Name))
	}
	names := map[string]string{}
	checkName := func(name, path string, line int) {
		switch {
		case name == "":
			at(line, path+".name", "missing name")
		case !nameRE.MatchString(name):
			p.errs = append(p.errs, &Error{File: p.file, Line: line, Path: path + ".name",
				Msg: BadName(name)})
		case names[name] != "":
			p.errs = append(p.errs, &Error{File: p.file, Line: line, Path: path + ".name",
				Msg: fmt.Sprintf("duplicate name %q (also %s)", name, names[name])})
		default:
			names[name] = path
		}
	}
	rootLine := 0
	if root != nil {
		rootLine = root.Line
	}
	// has reports whether an optional field is set, and its line: a node
	// when parsing, a non-zero value when checking a struct (nodes nil).
	has := func(path string, set bool) (line int, ok bool) {
		if n := nodes[path]; n != nil {
			return n.Line, true
		}
		return 0, nodes == nil && set
	}
	if len(s.Sources) == 0 {
		at(rootLine, "sources", "a job needs at least one source")
	}
	if len(s.Sinks) == 0 {
		at(rootLine, "sinks", "a job needs at least one sink")
	}
	for i := range s.Sources {
		src := &s.Sources[i]
		path := fmt.Sprintf("sources[%d]", i)
		checkName(src.Name, path, src.Line)
		switch src.Kind {
		case "":
			at(src.Line, path+".kind", "missing kind (nats or jetstream)")
		case KindNATS:
			if src.Subject == "" {
				at(src.Line, path+".subject", "a nats source needs a subject")
			}
			// Name what was given: a core subject keeps no messages to
			// start or stop at.
			var given []string
			for _, f := range []struct {
				name string
				set  bool
			}{
				{"stream", src.Stream != ""}, {"filter", src.Filter != ""}, {"partitions", src.Partitions != 0},
				{"partition-filter", src.PartitionFilter != ""}, {"start", src.Start != "" || src.StartSequence != 0},
				{"stop", src.Stop != "" || src.StopSequence != 0},
			} {
				if f.set {
					given = append(given, f.name)
				}
			}
			switch len(given) {
			case 0:
			case 1:
				at(src.Line, path+"."+given[0], "%s applies to jetstream sources only (this one is kind nats)", given[0])
			default:
				at(src.Line, path, "%s and %s apply to jetstream sources only (this one is kind nats)",
					strings.Join(given[:len(given)-1], ", "), given[len(given)-1])
			}
		case KindJetStream:
			if src.Stream == "" {
				at(src.Line, path+".stream", "a jetstream source needs a stream")
			}
			// A stream's consumer has flow control: nothing to bound.
			switch {
			case src.PendingMessages != 0 && src.PendingBytes != 0:
				at(src.Line, path, "pending-messages and pending-bytes apply to nats sources only (a jetstream source drops nothing: its consumers wait for it)")
			case src.PendingMessages != 0:
				at(src.Line, path+".pending-messages", "pending-messages applies to nats sources only (a jetstream source drops nothing: its consumers wait for it)")
			case src.PendingBytes != 0:
				at(src.Line, path+".pending-bytes", "pending-bytes applies to nats sources only (a jetstream source drops nothing: its consumers wait for it)")
			}
			if src.Subject != "" && src.Filter != "" && src.Subject != src.Filter {
				at(src.Line, path, "give either subject or filter")
			}
			if src.Filter == "" {
				src.Filter = src.Subject
			}
			switch {
			case (src.Partitions == 0) != (src.PartitionFilter == ""):
				at(src.Line, path, "partitions and partition-filter go together")
			case src.Partitions > 0 && src.Filter != "":
				at(src.Line, path, "give either filter or partition-filter")
			case src.Partitions > 0:
				if _, err := source.PartitionFilters(src.PartitionFilter, src.Partitions, src.Parallelism, 0); err != nil {
					at(src.Line, path+".partition-filter", "%v", err)
				}
			}
		}
	}
	for i := range s.Operators {
		op := &s.Operators[i]
		path := fmt.Sprintf("operators[%d]", i)
		checkName(op.Name, path, op.Line)
		mpath := path + ".module"
		mline := op.Line
		if n := nodes[mpath]; n != nil {
			mline = n.Line
		}
		if op.Module == "" {
			at(op.Line, mpath, "missing module")
		} else if ref, err := modref.Parse(op.Module); err != nil {
			at(mline, mpath, "%v", err)
		} else {
			if ref.Kind == modref.File && p.opts.Dir != "" && !filepath.IsAbs(ref.Path) {
				ref.Path = filepath.Join(p.opts.Dir, ref.Path)
				op.Module = ref.Path
				if !strings.ContainsAny(op.Module, `/\`) {
					op.Module = "./" + op.Module
				}
			}
			if p.opts.CheckModule != nil {
				if err := p.opts.CheckModule(ref); err != nil {
					at(mline, mpath, "unknown module %q: %v", ref.String(), err)
				}
			}
		}
		if len(op.Inputs) == 0 {
			line := op.Line
			if n := nodes[path+".inputs"]; n != nil {
				line = n.Line
			}
			at(line, path+".inputs", "missing input: operator %q has no inputs", op.Name)
		}
	}
	for i := range s.Sinks {
		sk := &s.Sinks[i]
		path := fmt.Sprintf("sinks[%d]", i)
		checkName(sk.Name, path, sk.Line)
		if sk.Subject == "" && sk.Kind != "" {
			at(sk.Line, path+".subject", "a sink needs a subject")
		}
		gline := sk.Line
		if n := nodes[path+".guarantee"]; n != nil {
			gline = n.Line
		}
		switch sk.Kind {
		case "":
			at(sk.Line, path+".kind", "missing kind (nats or jetstream)")
		case KindNATS:
			if sk.Guarantee == "" {
				sk.Guarantee = AtMostOnce
			} else if sk.Guarantee != AtMostOnce {
				at(gline, path+".guarantee", "a nats sink is at-most-once; use kind jetstream for %s", sk.Guarantee)
			}
			if sk.Stream != "" {
				at(sk.Line, path+".stream", "stream applies to jetstream sinks only")
			}
		case KindJetStream:
			if sk.Guarantee == "" {
				sk.Guarantee = ExactlyOnce
			}
			if sk.Stream == "" {
				at(sk.Line, path+".stream", "a jetstream sink needs a stream")
			}
		}
		if line, ok := has(path+".publish", sk.Publish != ""); ok && (sk.Kind != KindJetStream || sk.Guarantee == AtMostOnce) {
			at(line, path+".publish", "publish applies to at-least-once and exactly-once jetstream sinks only")
		}
		if line, ok := has(path+".ack-timeout", sk.AckTimeout != 0); ok && (sk.Kind != KindJetStream || sk.Guarantee == AtMostOnce) {
			at(line, path+".ack-timeout", "ack-timeout applies to at-least-once and exactly-once jetstream sinks only")
		}
		if sk.Input.From == "" && !p.refused(path+".input.from") {
			at(sk.Line, path+".input", "missing input: sink %q has no input", sk.Name)
		}
	}
	// References and partitioning.
	// checkInput checks the input of consumer, an operator or (isSink) a
	// sink.
	checkInput := func(in *Input, path, consumer string, isSink bool, par int) {
		if in.From == "" {
			at(in.Line, path+".from", "missing from")
			return
		}
		kind, ppar, ok := s.Producer(in.From)
		if !ok {
			for _, sk := range s.Sinks {
				if sk.Name == in.From {
					at(in.Line, path+".from", "%q is a sink, and a sink produces nothing (want an operator or source)", in.From)
					return
				}
			}
			if !p.meant[in.From] {
				var names []string
				for _, src := range s.Sources {
					if src.Name != "" {
						names = append(names, src.Name)
					}
				}
				for _, op := range s.Operators {
					if op.Name != "" {
						names = append(names, op.Name)
					}
				}
				switch m := meant(in.From, names); {
				case m != "":
					at(in.Line, path+".from", "unknown operator or source %q (%s)", in.From, strings.TrimSuffix(m, " "))
				case len(names) > 0:
					// No close match (a short name is rarely one): what
					// it could read.
					if len(names) > maxListedNames {
						names = append(names[:maxListedNames], "…")
					}
					at(in.Line, path+".from", "unknown operator or source %q (the job has: %s)", in.From, strings.Join(names, ", "))
				default:
					at(in.Line, path+".from", "unknown operator or source %q", in.From)
				}
			}
			return
		}
		// A sink named like an operator (reported as a duplicate name)
		// reads that operator: no cycle.
		if in.From == consumer && kind == "operator" && !isSink {
			at(in.Line, path+".from", "cycle: %s reads its own output", consumer)
			return
		}
		switch in.Partition {
		case "":
			if ppar == par {
				in.Partition = Forward
			} else {
				in.Partition = RoundRobin
			}
		case Forward:
			if ppar != par {
				at(in.Line, path+".partition", "forward edge between different parallelisms: %s %q has %d, %q has %d",
					kind, in.From, ppar, consumer, par)
			}
		}
	}
	for i := range s.Operators {
		op := &s.Operators[i]
		for j := range op.Inputs {
			checkInput(&op.Inputs[j], fmt.Sprintf("operators[%d].inputs[%d]", i, j), op.Name, false, op.Parallelism)
		}
	}
	for i := range s.Sinks {
		sk := &s.Sinks[i]
		if sk.Input.From != "" {
			checkInput(&sk.Input, fmt.Sprintf("sinks[%d].input", i), sk.Name, true, sk.Parallelism)
		}
	}
	portProblems(s, at)
	p.cycles(s)
	p.reserved(s, func(path string, def int) int {
		if n := nodes[path]; n != nil {
			return n.Line
		}
		return def
	}, at)
}

// cycles reports each cycle among operators once, at the input that closes
// it.
func (p *parser) cycles(s *Spec) {
	idx := map[string]int{}
	for i, op := range s.Operators {
		if _, dup := idx[op.Name]; !dup {
			idx[op.Name] = i
		}
	}
	const (
		white = iota
		grey
		black
	)
	color := make([]int, len(s.Operators))
	var stack []string
	var visit func(i int)
	visit = func(i int) {
		color[i] = grey
		stack = append(stack, s.Operators[i].Name)
		for j, in := range s.Operators[i].Inputs {
			k, ok := idx[in.From]
			if !ok || k == i {
				continue
			}
			switch color[k] {
			case grey:
				start := 0
				for n, name := range stack {
					if name == in.From {
						start = n
					}
				}
				cyc := append(append([]string{}, stack[start:]...), in.From)
				p.errs = append(p.errs, &Error{File: p.file, Line: in.Line,
					Path: fmt.Sprintf("operators[%d].inputs[%d].from", i, j),
					Msg:  "cycle: " + strings.Join(reverse(cyc), " -> ")})
			case white:
				visit(k)
			}
		}
		stack = stack[:len(stack)-1]
		color[i] = black
	}
	for i := range s.Operators {
		if color[i] == white {
			visit(i)
		}
	}
}

// reverse turns a consumer-to-producer path into data-flow order.
func reverse(s []string) []string {
	out := make([]string, len(s))
	for i, v := range s {
		out[len(s)-1-i] = v
	}
	return out
}
