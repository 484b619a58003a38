package weir

import (
	"errors"
	"fmt"

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
// called from a deferred function.
func recovered(where string, v any, status *int32) {
	if v == nil {
		return
	}
	st.emit.reset()
	*status = fail(fmt.Errorf("panic in %s: %v", where, v))
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
