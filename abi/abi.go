// Package abi defines weir's guest contract, version 1: the names of the
// functions a WebAssembly operator module exports and imports, the status
// codes they exchange, and the record-batch byte layout that carries records
// between the host and the guest.
//
// The normative text is ABI.md in this directory; this package is its
// executable half. It imports nothing of weir and builds for GOOS=wasip1, so
// the Go guest SDK uses the same codec as the host.
package abi

// Version is the ABI version this package describes. A module declares the
// version it was written against by exporting a function named
// VersionExportPrefix followed by the decimal version, e.g. "weir_abi_v1".
const Version = 1

// VersionExportPrefix starts the name of the marker export that declares a
// module's ABI version. The marker is a function of type () -> () that the
// host never calls.
const VersionExportPrefix = "weir_abi_v"

// ImportModule is the name of the import module the host provides.
const ImportModule = "weir"

// Names of the functions the host provides in ImportModule.
const (
	// ImportEmit is emit(port i32, ptr i32, len i32) -> i32: hand the host a
	// complete record batch for an output port.
	ImportEmit = "emit"
	// ImportError is error(ptr i32, len i32): set the UTF-8 message that
	// explains the error code the current call is about to return.
	ImportError = "error"
	// ImportLog is log(level i32, ptr i32, len i32): write one log line.
	ImportLog = "log"
	// ImportSnapshotWrite is snapshot_write(ptr i32, len i32) -> i32: append
	// one chunk to the state stream; only valid during ExportSnapshot.
	ImportSnapshotWrite = "snapshot_write"
	// ImportRestoreRead is restore_read(ptr i32, cap i32) -> i32: read the
	// next chunk of the state stream; only valid during ExportRestore.
	ImportRestoreRead = "restore_read"
)

// Names of the functions a module exports.
const (
	// ExportMemory is the module's linear memory.
	ExportMemory = "memory"
	// ExportInitialize is the optional WASI reactor initializer, called
	// exactly once before any other export.
	ExportInitialize = "_initialize"
	// ExportInput is weir_input(size i32) -> i32: return the address of a
	// guest-owned buffer of at least size bytes for the next call's payload.
	ExportInput = "weir_input"
	// ExportInit is weir_init(ptr i32, len i32) -> i32: configure the
	// operator with its config bytes.
	ExportInit = "weir_init"
	// ExportProcess is weir_process(port i32, ptr i32, len i32) -> i32:
	// process one record batch that arrived on an input port.
	ExportProcess = "weir_process"
	// ExportSnapshot is weir_snapshot() -> i32: write the operator's state
	// with snapshot_write.
	ExportSnapshot = "weir_snapshot"
	// ExportRestore is weir_restore() -> i32: read the operator's state with
	// restore_read.
	ExportRestore = "weir_restore"
	// ExportCheckpointComplete is the optional
	// weir_checkpoint_complete(id i64) -> i32.
	ExportCheckpointComplete = "weir_checkpoint_complete"
	// ExportEndOfInput is the optional weir_end_of_input(port i32) -> i32.
	ExportEndOfInput = "weir_end_of_input"
	// ExportCursor is the optional weir_cursor() -> i32: the address of an
	// i32 in guest memory that holds the index of the record being processed.
	ExportCursor = "weir_cursor"
)

// Status codes returned by exports and imports. Any non-zero value returned
// by an export is an error; the values below are the ones the host assigns
// meaning to.
const (
	// OK means success.
	OK int32 = 0
	// ErrGeneric is the conventional error code of a guest.
	ErrGeneric int32 = 1
	// ErrInvalidBatch is returned by emit for a malformed batch.
	ErrInvalidBatch int32 = -1
	// ErrBadPort is returned by emit for an output port the task lacks.
	ErrBadPort int32 = -2
	// ErrNotNow is returned by an import called outside the export that
	// permits it (emit outside process or end-of-input, snapshot_write
	// outside snapshot, restore_read outside restore).
	ErrNotNow int32 = -3
	// ErrIO is returned by snapshot_write and restore_read when the host
	// could not write or read the state stream.
	ErrIO int32 = -4
	// ErrOutOfBounds is returned when a pointer and length pass the end of
	// the guest's memory.
	ErrOutOfBounds int32 = -5
)

// Log levels for ImportLog, matching log/slog's levels divided by four.
const (
	LogDebug int32 = -1
	LogInfo  int32 = 0
	LogWarn  int32 = 1
	LogError int32 = 2
)

// Export signatures, as WebAssembly value types: 'i' is i32, 'I' is i64.
// Params and results are listed separately. Optional exports are marked.
var Exports = []ExportSig{
	{Name: ExportInput, Params: "i", Results: "i", Required: true},
	{Name: ExportInit, Params: "ii", Results: "i", Required: true},
	{Name: ExportProcess, Params: "iii", Results: "i", Required: true},
	{Name: ExportSnapshot, Params: "", Results: "i", Required: true},
	{Name: ExportRestore, Params: "", Results: "i", Required: true},
	{Name: ExportCheckpointComplete, Params: "I", Results: "i"},
	{Name: ExportEndOfInput, Params: "i", Results: "i"},
	{Name: ExportCursor, Params: "", Results: "i"},
	{Name: ExportInitialize, Params: "", Results: ""},
}

// Imports lists the signatures of every function in ImportModule.
var Imports = []ExportSig{
	{Name: ImportEmit, Params: "iii", Results: "i"},
	{Name: ImportError, Params: "ii", Results: ""},
	{Name: ImportLog, Params: "iii", Results: ""},
	{Name: ImportSnapshotWrite, Params: "ii", Results: "i"},
	{Name: ImportRestoreRead, Params: "ii", Results: "i"},
}

// ExportSig is the signature of an export or import: its parameter and result
// types written one letter each ('i' = i32, 'I' = i64).
type ExportSig struct {
	Name     string
	Params   string
	Results  string
	Required bool
}
