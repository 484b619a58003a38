package weir

import (
	"errors"
	"fmt"
	"os"
	"reflect"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/weirhq/weir/abi"
)

// Record is one stream record. In a Batch, Key and Value alias the input
// buffer and are valid only during the Process call: copy what you keep.
type Record = abi.Record

// Operator is a stream operator. The host calls its methods one at a time,
// never concurrently.
type Operator interface {
	// Init receives the operator's config bytes from the job spec (empty
	// when absent). An error fails the deployment with its message.
	Init(config []byte) error
	// Process handles one record batch from input port port and emits
	// output records through out.
	Process(port int, in *Batch, out *Emitter) error
	// Snapshot writes all state that affects future output to w.
	Snapshot(w *StateWriter) error
	// Restore reads back what Snapshot wrote, into a freshly initialised
	// operator. A task without state gets an empty stream. Bytes left
	// unread when Restore returns fail the restore ("weir: state has
	// trailing bytes").
	Restore(r *StateReader) error
}

// CheckpointCompleter is implemented by operators that want to know when a
// checkpoint is durable everywhere. The notification may repeat after a
// recovery.
type CheckpointCompleter interface {
	CheckpointComplete(id int64) error
}

// EndOfInputer is implemented by operators that emit final results when an
// input port ends.
type EndOfInputer interface {
	EndOfInput(port int, out *Emitter) error
}

// state holds the SDK's per-module state. A wasm module instance runs one
// operator on one thread, so a single value suffices.
type state struct {
	op     Operator
	input  []byte
	batch  Batch
	emit   Emitter
	sw     StateWriter
	sr     StateReader
	cursor int32
}

var st = state{cursor: -1}

// Register installs the module's operator. Call it once, from init.
func Register(op Operator) {
	if st.op != nil {
		panic("weir: Register called twice")
	}
	st.op = op
}

// errNoOperator is returned when the module never called Register.
var errNoOperator = errors.New("weir: no operator registered (call weir.Register from init)")

// fail reports err's message to the host and returns the error status.
func fail(err error) int32 {
	setError(err.Error())
	return abi.ErrGeneric
}

// recovered turns a panic value into an error message and status. It is
// called from a deferred function, on every call: all it does when there
// was no panic is compare v with nil.
func recovered(where string, v any, status *int32) {
	if v == nil {
		return
	}
	*status = panicked(where, v)
}

// panicked fails the call of a panic with value v in the operator's method
// where: the message names the code that panicked (panicSite), and the
// goroutine's stack goes to stderr after a "panic: " line, for the host to
// attach to the failure (wasm.OperatorError.Traceback: `weir exec -stack`
// prints it, a worker logs it once per task), as it does the Go runtime's
// traceback of a panic no recover caught. It runs in the deferred function,
// on the stack of the panic: the frames that panicked are still there.
//
//go:noinline
func panicked(where string, v any) int32 {
	st.emit.reset()
	at := ""
	if site := panicSite(); site != "" {
		at = " at " + site
	}
	msg := fmt.Sprintf("panic in %s%s: %v", where, at, v)
	// Go's own form for a panic a recover caught, and the blank line the
	// runtime writes before a goroutine's stack.
	fmt.Fprintf(os.Stderr, "panic: %v [recovered by weir: %s fails]\n\n%s", v, where, debug.Stack())
	return fail(errors.New(msg))
}

// sdkPackage is the import path of this package, whose frames panicSite
// passes over.
var sdkPackage = reflect.TypeFor[Batch]().PkgPath()

// panicSite returns where the panic being recovered happened, as
// "main.go:23 (main.(*op).Process)": the file (its base name), line and
// function of the innermost frame of the panicking goroutine outside the
// Go runtime, the SDK and the standard library, so that a panic in
// strings.Repeat or regexp.MustCompile names the operator's line that
// called it; else of the innermost frame outside the runtime and the
// SDK; "" if there is none. Go keeps the table it reads (pclntab) in
// every binary, -ldflags=-s -w too: the runtime's tracebacks need it.
func panicSite() string {
	var pcs [64]uintptr
	// Skip runtime.Callers and panicSite.
	n := runtime.Callers(2, pcs[:])
	frames := runtime.CallersFrames(pcs[:n])
	var first runtime.Frame
	for {
		f, more := frames.Next()
		if f.Function != "" && !strings.HasPrefix(f.Function, "runtime.") && !inPackage(f.Function, sdkPackage) {
			if !isStandard(f.Function) {
				return frameSite(f)
			}
			if first.Function == "" {
				first = f
			}
		}
		if !more {
			break
		}
	}
	if first.Function == "" {
		return ""
	}
	return frameSite(first)
}

// frameSite formats a frame as panicSite does.
func frameSite(f runtime.Frame) string {
	// The go command writes a file's path with slashes on every system.
	file := f.File[strings.LastIndexByte(f.File, '/')+1:]
	return fmt.Sprintf("%s:%d (%s)", file, f.Line, f.Function)
}

// inPackage reports whether the function named fn (a runtime.Frame's
// Function: "github.com/weirhq/weir/guests/go/weir.(*Batch).Next") is in
// the package with import path pkg.
func inPackage(fn, pkg string) bool {
	rest, ok := strings.CutPrefix(fn, pkg)
	return ok && strings.HasPrefix(rest, ".")
}

// isStandard reports whether the function named fn is in the standard
// library, whose import paths have no dot in their first element
// ("strings.Repeat", "encoding/json.Unmarshal"), as the go command tells
// them; package main is the operator's own.
func isStandard(fn string) bool {
	// The package path ends at the first dot after its last slash.
	slash := strings.LastIndexByte(fn, '/')
	dot := strings.IndexByte(fn[slash+1:], '.')
	if dot < 0 {
		return false
	}
	pkg := fn[:slash+1+dot]
	if pkg == "main" {
		return false
	}
	first, _, _ := strings.Cut(pkg, "/")
	return !strings.Contains(first, ".")
}

// Level is a log level for Log.
type Level int32

// Log levels, as in ABI.md §2.
const (
	LevelDebug Level = Level(abi.LogDebug)
	LevelInfo  Level = Level(abi.LogInfo)
	LevelWarn  Level = Level(abi.LogWarn)
	LevelError Level = Level(abi.LogError)
)

// EmitError is returned when the host refuses an emitted batch.
type EmitError struct {
	Port   int   // output port
	Status int32 // the host's status code
}

// Error returns the one-line message.
func (e *EmitError) Error() string {
	return fmt.Sprintf("weir: emit to port %d: %s", e.Port, statusText(e.Status))
}

// statusText explains a host status code.
func statusText(rc int32) string {
	switch rc {
	case abi.ErrInvalidBatch:
		return "malformed batch"
	case abi.ErrBadPort:
		return "no such output port"
	case abi.ErrNotNow:
		return "not allowed in this call"
	case abi.ErrIO:
		return "the host could not store or read the state"
	case abi.ErrOutOfBounds:
		return "out of bounds"
	}
	return fmt.Sprintf("status %d", rc)
}
