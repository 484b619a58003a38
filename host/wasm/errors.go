package wasm

import (
	"cmp"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/weirhq/weir/abi"
)

// Kind classifies why a module was refused at load.
type Kind int

// The classes of load-time refusal.
const (
	// KindNotWasm: the bytes are not a WebAssembly core module (wrong magic
	// number or binary version).
	KindNotWasm Kind = iota + 1
	// KindMalformed: the module is truncated or does not decode or validate.
	KindMalformed
	// KindMissingExport: a required export is absent.
	KindMissingExport
	// KindExportSignature: an export has the wrong type or signature.
	KindExportSignature
	// KindABIVersion: the module declares an ABI version this host does not
	// speak.
	KindABIVersion
	// KindCommandModule: the module exports _start (a WASI command, not a
	// reactor).
	KindCommandModule
	// KindImport: the module imports something outside the allowed set.
	KindImport
	// KindMemoryLimit: the module declares more than the host allows of
	// what takes host memory (or time to compile): a minimum memory over
	// the limit, tables of too many entries, too many locals, too many
	// functions, a function's code too large.
	KindMemoryLimit
)

// Sentinels for errors.Is, one per Kind.
var (
	ErrNotWasm         = errors.New("not a WebAssembly module")
	ErrMalformed       = errors.New("malformed module")
	ErrMissingExport   = errors.New("missing export")
	ErrExportSignature = errors.New("wrong export signature")
	ErrABIVersion      = errors.New("unknown ABI version")
	ErrCommandModule   = errors.New("command module")
	ErrImport          = errors.New("import not allowed")
	ErrMemoryLimit     = errors.New("memory over the limit")
)

var kindSentinels = map[Kind]error{
	KindNotWasm:         ErrNotWasm,
	KindMalformed:       ErrMalformed,
	KindMissingExport:   ErrMissingExport,
	KindExportSignature: ErrExportSignature,
	KindABIVersion:      ErrABIVersion,
	KindCommandModule:   ErrCommandModule,
	KindImport:          ErrImport,
	KindMemoryLimit:     ErrMemoryLimit,
}

// String names the kind.
func (k Kind) String() string {
	if e, ok := kindSentinels[k]; ok {
		return e.Error()
	}
	return fmt.Sprintf("kind(%d)", int(k))
}

// ValidationError says why a module was refused at load. Its message is one
// line naming the module and the problem; errors.Is matches the Kind's
// sentinel (ErrMissingExport, ...).
type ValidationError struct {
	Module string // the module's name as given to Load or Validate
	Kind   Kind
	Detail string // e.g. "missing export weir_process"
	Err    error  // the underlying decoder error, if any
	// MinMemoryBytes is, for a module refused because its minimum memory
	// is over the limit (KindMemoryLimit), that minimum: the least limit
	// that would take it. 0 otherwise.
	MinMemoryBytes uint64
}

// Error returns the one-line message.
func (e *ValidationError) Error() string {
	return fmt.Sprintf("module %s: %s", e.Module, e.Detail)
}

// Unwrap returns the Kind's sentinel and the underlying error.
func (e *ValidationError) Unwrap() []error {
	if e.Err != nil {
		return []error{kindSentinels[e.Kind], e.Err}
	}
	return []error{kindSentinels[e.Kind]}
}

// ErrInstanceFailed is wrapped by every call to an instance that failed
// earlier (trap, deadline, error status, host fault) or was closed: an
// instance is never reused after a failure.
var ErrInstanceFailed = errors.New("instance failed earlier or was closed")

// TrapError is a WebAssembly trap (unreachable, out-of-bounds access,
// division by zero, stack overflow, ...) raised inside an export.
type TrapError struct {
	Operator    string
	Export      string
	RecordIndex int    // index of the record being processed, from 0 (messages count from 1); -1 if unknown
	Record      string // that record's key and the start of its value (Process), "" if unknown
	// Stack is the wasm stack trace, one frame per line, functions named
	// by the module's name section, Rust's legacy-mangled names and C++'s
	// Itanium-mangled ones demangled ("<probe::Probe as
	// weir::Operator>::process", "process(unsigned char const*, unsigned
	// long)"), each after its module's name and a "." only when the name
	// section names the module (a host function's:
	// "wasi_snapshot_preview1.fd_write").
	Stack string
	Err   error // the runtime's error
	// Message is the error message the guest set (weir.error) during the
	// call before it trapped, "" if none: how SDKs pass on a panic's or an
	// abort's message (Rust panic!, AssemblyScript abort/throw).
	Message string
	// Fatal is the line a guest runtime wrote to stderr during the call
	// to say why it stopped, "" if none: the Go runtime's "fatal error:
	// out of memory" or "fatal error: all goroutines are asleep -
	// deadlock!", or "panic: …" of a goroutine's panic. The message
	// gives it when the guest set no Message.
	Fatal string
	// Traceback is what the guest runtime wrote to stderr after Fatal,
	// "" if nothing: the Go runtime's stack of the goroutine that failed
	// (the first one running, else the first one, as in a deadlock) and
	// the lines before it, then how many other goroutines' stacks were
	// left out ("(12 other goroutines left out)"). It is not logged with
	// the guest's other output: a worker logs it with the task's failure,
	// once per task, as it does Stack.
	Traceback string
	// LastStderr is, when the guest set no Message and wrote no Fatal
	// line, the last line it wrote to stderr during the call, "" if none:
	// what a runtime that aborts without a known form of words said last
	// (C++'s libc++ without exceptions: "stoll: no conversion"; a C
	// operator's fprintf before abort). The message gives it as what the
	// operator wrote, not as the cause.
	LastStderr string
	// Recursion is the function the wasm stack trace of an out-of-bounds
	// access shows over and over ("depth(i32) i32"), "" if none: a
	// recursion that ran the stack C and Rust keep in linear memory below
	// address 0, which traps as a bare out-of-bounds access.
	Recursion string
	// MemorySize and MemoryLimit are the instance's memory size and limit
	// in bytes when the memory had grown close to the limit (7/8 or more:
	// the likely cause of a guest runtime's out-of-memory abort, as a
	// runtime grows its heap in chunks), else 0. When a memory.grow was
	// refused during the call (GrowRefused), they are the size when it was
	// refused and the limit that refused it, however far below the limit.
	MemorySize, MemoryLimit uint64
	// GrowRefused is the size in bytes (pages times 64 KiB) of the last
	// memory.grow the memory limit refused during the call, 0 if none: a
	// guest runtime traps when its heap cannot grow, so one huge request
	// made while the memory is still small shows as a bare "unreachable"
	// without it.
	GrowRefused uint64
}

// Error returns the one-line message.
func (e *TrapError) Error() string {
	full := memoryNote(e.MemorySize, e.MemoryLimit, e.GrowRefused)
	reason := firstLine(e.Err.Error())
	if e.Recursion != "" {
		reason += " (the stack trace is " + e.Recursion + " over and over: most likely a recursion too deep for the " +
			"operator's stack, which C's -Wl,-z,stack-size=N or Rust's -C link-arg=-zstack-size=N enlarges)"
	}
	if m := cmp.Or(e.Message, e.Fatal); m != "" {
		// The guest's own words first; the runtime's ("wasm error:
		// unreachable") say only how it stopped.
		reason = m + " (" + reason + ")"
	} else if e.LastStderr != "" {
		reason += lastStderr(e.LastStderr)
	}
	if e.RecordIndex >= 0 {
		return fmt.Sprintf("operator %s: %s: trap at %s: %s%s", e.Operator, e.Export, recordOfBatch(e.RecordIndex, e.Record), reason, full)
	}
	return fmt.Sprintf("operator %s: %s: trap: %s%s", e.Operator, e.Export, reason, full)
}

// lastStderr is the end of a failure's message that gives the last line
// the operator wrote to stderr in the failed call.
func lastStderr(line string) string {
	return fmt.Sprintf(" (after the operator wrote to stderr: %q)", line)
}

// recordOfBatch names the record at index ix (0-based, the guest's
// cursor) of the batch for a message, counting from 1 as people do —
// "record 2 of the batch" is the second — with its key and value (rec,
// describeRecord) after it.
func recordOfBatch(ix int, rec string) string {
	return fmt.Sprintf("record %d of the batch%s", ix+1, paren(rec))
}

// paren returns " (s)", or "" for an empty s.
func paren(s string) string {
	if s == "" {
		return ""
	}
	return " (" + s + ")"
}

// mib formats a byte count in MiB: "64 MiB", "61.5 MiB".
func mib(n uint64) string {
	return strconv.FormatFloat(float64(n)/(1<<20), 'f', -1, 64) + " MiB"
}

// memoryNote is the end of a failure's message that says where the
// instance's memory stood, from the fields of TrapError: the memory.grow
// refused during the call, else the memory's size when it had grown near
// its limit (limit > 0), else nothing.
//
//	(memory.grow of 16384 pages (1 GiB) refused: the operator's memory limit (limits.memory) is 64 MiB and it had 2 MiB)
//	(its memory had grown to 63 MiB of its 64 MiB limit)
func memoryNote(size, limit, refused uint64) string {
	switch {
	case refused > 0:
		pages := refused / PageSize
		unit := "pages"
		if pages == 1 {
			unit = "page"
		}
		return fmt.Sprintf(" (memory.grow of %d %s (%s) refused: the operator's memory limit (limits.memory) is %s and it had %s)",
			pages, unit, sizeIEC(refused), sizeIEC(limit), sizeIEC(size))
	case limit > 0:
		return fmt.Sprintf(" (its memory had grown to %s of its %s limit)", mib(size), mib(limit))
	}
	return ""
}

// sizeIEC formats a byte count in the largest of KiB, MiB and GiB that
// leaves at least 1, to two decimals at most: "64 KiB", "1.5 MiB", "1 GiB"
// (for 1 GiB and 64 KiB too: the page count says it exactly).
func sizeIEC(n uint64) string {
	v, unit := float64(n)/(1<<10), "KiB"
	if n >= 1<<30 {
		v, unit = float64(n)/(1<<30), "GiB"
	} else if n >= 1<<20 {
		v, unit = float64(n)/(1<<20), "MiB"
	}
	s := strconv.FormatFloat(v, 'f', 2, 64)
	s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	return s + " " + unit
}

// Unwrap returns the runtime's error.
func (e *TrapError) Unwrap() error { return e.Err }

// DeadlineError reports a call interrupted because it ran longer than the
// operator's call deadline (Limits.CallTimeout, limits.timeout) or, for
// weir_snapshot and weir_restore, its snapshot deadline
// (Limits.SnapshotTimeout, limits.snapshot-timeout).
type DeadlineError struct {
	Operator string
	Export   string
	// Timeout is the deadline the call ran past.
	Timeout     time.Duration
	RecordIndex int    // index of the record being processed; -1 if unknown
	Record      string // that record's key and the start of its value (Process), "" if unknown
	// MemorySize, MemoryLimit and GrowRefused are as in TrapError: set
	// when a memory.grow was refused during the call or the memory had
	// grown to 7/8 of its limit or more, as when a guest spins on an
	// allocation that keeps failing (an unchecked C malloc), else 0.
	MemorySize, MemoryLimit uint64
	GrowRefused             uint64
}

// Error returns the one-line message, with what to do about an operator
// that is merely slow, and, when its memory had grown near its limit, the
// advice to raise that too: a state that outgrows the deadline outgrows
// the memory next.
func (e *DeadlineError) Error() string {
	note := memoryNote(e.MemorySize, e.MemoryLimit, e.GrowRefused)
	if e.GrowRefused == 0 && e.MemoryLimit > 0 {
		note = fmt.Sprintf(" (its memory had grown to %s of its %s limit: raise limits.memory too)", mib(e.MemorySize), mib(e.MemoryLimit))
	}
	return e.message() + note
}

func (e *DeadlineError) message() string {
	if isStateExport(e.Export) {
		// weir_snapshot and weir_restore have a deadline of their own,
		// limits.snapshot-timeout: they take as long as the state is large.
		verb := "write"
		if e.Export == abi.ExportRestore {
			verb = "read"
		}
		return fmt.Sprintf("operator %s: %s: exceeded the %s snapshot deadline (stuck, or its state is too large to %s in time; if merely slow, raise limits.snapshot-timeout)",
			e.Operator, e.Export, e.Timeout, verb)
	}
	at, why := "", "stuck"
	if e.RecordIndex >= 0 {
		at = " at " + recordOfBatch(e.RecordIndex, e.Record)
	}
	if e.Export == abi.ExportProcess {
		// Process hands a batch over in pieces sized to take a quarter of
		// the deadline at the pace of earlier calls.
		why = "stuck, or much slower on this record than on earlier ones"
	}
	return fmt.Sprintf("operator %s: %s: exceeded the %s call deadline%s (%s; if merely slow, raise limits.timeout)",
		e.Operator, e.Export, e.Timeout, at, why)
}

// ExitError reports a guest that called WASI proc_exit (Go's os.Exit, C's
// exit).
type ExitError struct {
	Operator string
	Export   string
	Code     uint32
	// RecordIndex is the index of the record being processed when the
	// guest exited (its weir_cursor, in weir_process and
	// weir_end_of_input), -1 if unknown, as in TrapError.
	RecordIndex int
	// Record is that record's key and the start of its value (Process),
	// "" if unknown.
	Record string
	// Fatal, Traceback and LastStderr are as in TrapError: what the
	// guest runtime wrote to stderr about why it exits, "" if nothing.
	Fatal, Traceback, LastStderr string
	// GrowRefused, MemorySize and MemoryLimit are as in TrapError, set
	// only when a memory.grow was refused during the call (as when a
	// guest exits because its heap cannot grow), else 0.
	MemorySize, MemoryLimit uint64
	GrowRefused             uint64
}

// Error returns the one-line message.
func (e *ExitError) Error() string {
	at, fatal := "", ""
	if e.RecordIndex >= 0 {
		at = "at " + recordOfBatch(e.RecordIndex, e.Record) + ": "
	}
	if e.Fatal != "" {
		fatal = ": " + e.Fatal
	} else if e.LastStderr != "" {
		fatal = lastStderr(e.LastStderr)
	}
	return fmt.Sprintf("operator %s: %s: %sthe module exited with code %d%s", e.Operator, e.Export, at, e.Code, fatal) +
		memoryNote(e.MemorySize, e.MemoryLimit, e.GrowRefused)
}

// OperatorError is a non-zero status returned by an export, with the
// message the guest set through weir.error.
type OperatorError struct {
	Operator string
	Export   string
	Status   int32
	Message  string // empty when the guest set none
	// RecordIndex is the index in the batch of the record the guest was
	// processing when it returned the error (its weir_cursor, for
	// weir_process and weir_end_of_input); -1 if unknown or not inside a
	// record.
	RecordIndex int
	// Record is that record's key and the start of its value (Process),
	// "" if unknown.
	Record string
	// Traceback is, as in TrapError, what the guest wrote to stderr
	// after a fatal line ("panic: …") during the call, "" if nothing: the
	// stack of the goroutine whose panic the Go SDK recovered into this
	// error. It is not logged with the guest's other output: a worker
	// logs it with the task's failure, once per task.
	Traceback string
	// GrowRefused, MemorySize and MemoryLimit are as in TrapError, set
	// only when a memory.grow was refused during the call (an SDK's "out
	// of memory" then says how much was asked for), else 0.
	MemorySize, MemoryLimit uint64
	GrowRefused             uint64
}

// Error returns the one-line message.
func (e *OperatorError) Error() string {
	at := ""
	if e.RecordIndex >= 0 {
		at = "at " + recordOfBatch(e.RecordIndex, e.Record) + ": "
	}
	note := memoryNote(e.MemorySize, e.MemoryLimit, e.GrowRefused)
	if e.Message == "" {
		// Most often a C callback's `return WEIR_ERR` (or -1) where
		// weir_fail would have said why.
		return fmt.Sprintf("operator %s: %s: %sreturned status %d and set no error message (C: return weir_fail(\"why\") rather than a bare status)%s",
			e.Operator, e.Export, at, e.Status, note)
	}
	return fmt.Sprintf("operator %s: %s: %s%s%s", e.Operator, e.Export, at, e.Message, note)
}

// FaultError is a call the host failed because the guest misused an
// import: a malformed emitted batch, an unknown output port, a pointer past
// the end of memory, an import called outside the export that permits it,
// or an unusable input buffer.
type FaultError struct {
	Operator string
	Export   string
	Detail   string
	// Status is what the import returned to the guest (abi.ErrBadPort,
	// …), for a guest author's debugging: the message leaves it out.
	Status int32
	// RecordIndex is, as in OperatorError, the record of the batch the
	// guest's cursor was on when the import refused it (weir_process,
	// weir_end_of_input), else -1; Record is its key and the start of its
	// value (weir_process), "" if unknown.
	RecordIndex int
	Record      string
	Err         error // e.g. the abi.BatchError of a malformed batch
}

// Error returns the one-line message.
func (e *FaultError) Error() string {
	at := ""
	if e.RecordIndex >= 0 {
		at = "at " + recordOfBatch(e.RecordIndex, e.Record) + ": "
	}
	return fmt.Sprintf("operator %s: %s: %s%s", e.Operator, e.Export, at, e.Detail)
}

// Unwrap returns the underlying error.
func (e *FaultError) Unwrap() error { return e.Err }

// StateError is a failure of the io.Writer or io.Reader a snapshot or a
// restore streams through.
type StateError struct {
	Operator string
	Export   string
	Err      error
}

// Error returns the one-line message.
func (e *StateError) Error() string {
	return fmt.Sprintf("operator %s: %s: state stream: %v", e.Operator, e.Export, e.Err)
}

// Unwrap returns the stream's error.
func (e *StateError) Unwrap() error { return e.Err }

func firstLine(s string) string {
	for i := 0; i < len(s); i++ {
		if s[i] == '\n' {
			return s[:i]
		}
	}
	return s
}

// describeRecord fills in the Record of a failure at a record of batch: a
// job's failure then says which input it was, not only its place in a
// batch nobody saw. A cursor past the batch's records says that the
// guest's memory was overwritten there instead.
func describeRecord(err error, batch []byte) {
	var (
		te *TrapError
		oe *OperatorError
		de *DeadlineError
		xe *ExitError
		fe *FaultError
		at *string
		ix int
	)
	switch {
	case errors.As(err, &te):
		at, ix = &te.Record, te.RecordIndex
	case errors.As(err, &oe):
		at, ix = &oe.Record, oe.RecordIndex
	case errors.As(err, &de):
		at, ix = &de.Record, de.RecordIndex
	case errors.As(err, &xe):
		at, ix = &xe.Record, xe.RecordIndex
	case errors.As(err, &fe):
		at, ix = &fe.Record, fe.RecordIndex
	default:
		return
	}
	if ix < 0 || *at != "" {
		return
	}
	it, ierr := abi.NewIter(batch)
	if ierr != nil {
		return
	}
	if n := it.Count(); ix >= n {
		// No record of the batch: the guest's cursor holds what
		// something else wrote over it.
		records := "records"
		if n == 1 {
			records = "record"
		}
		*at = fmt.Sprintf("%s%d %s: the SDK's record cursor was overwritten, most likely by a write through a NULL or stray pointer in the operator", pastTheBatch, n, records)
		return
	}
	for it.Next() {
		if it.Index() == ix {
			*at = recordSummary(it.Record())
			return
		}
	}
}

// pastTheBatch begins the Record of a failure whose record cursor was
// past the batch's records (describeRecord): it names no record.
const pastTheBatch = "past the batch's "

// FailedRecord returns the record an operator's failure (TrapError,
// DeadlineError, ExitError, OperatorError, FaultError) names: its key and
// the start of its value, as its message gives them ("key \"k99\", value
// \"…\""), or "" where it names none (a failure outside weir_process, or
// a record cursor the guest overwrote). Two failures on the same record
// return the same words, wherever the record stood in its batch.
func FailedRecord(err error) string {
	var (
		te  *TrapError
		oe  *OperatorError
		de  *DeadlineError
		xe  *ExitError
		fe  *FaultError
		rec string
	)
	switch {
	case errors.As(err, &te):
		rec = te.Record
	case errors.As(err, &oe):
		rec = oe.Record
	case errors.As(err, &de):
		rec = de.Record
	case errors.As(err, &xe):
		rec = xe.Record
	case errors.As(err, &fe):
		rec = fe.Record
	}
	if strings.HasPrefix(rec, pastTheBatch) {
		return ""
	}
	return rec
}

// summaryBytes is how much of a record's key and value a message quotes.
const summaryBytes = 48

// recordSummary describes a record in a few words: key "k", value "{..."
// (83 bytes).
func recordSummary(r abi.Record) string {
	var b strings.Builder
	if len(r.Key) > 0 {
		b.WriteString("key ")
		b.WriteString(quoteStart(r.Key))
		b.WriteString(", ")
	}
	b.WriteString("value ")
	b.WriteString(quoteStart(r.Value))
	if len(r.Value) > summaryBytes {
		fmt.Fprintf(&b, " (%d bytes)", len(r.Value))
	}
	return b.String()
}

// quoteStart quotes the first summaryBytes of p, cut at a UTF-8 boundary,
// with "…" after it when p is longer.
func quoteStart(p []byte) string {
	if len(p) <= summaryBytes {
		return strconv.Quote(string(p))
	}
	n := summaryBytes
	for n > summaryBytes-utf8.UTFMax && n > 0 && !utf8.RuneStart(p[n]) {
		n--
	}
	return strconv.Quote(string(p[:n])) + "…"
}
