//go:build wasip1

package weir

import (
	"errors"
	"unsafe"

	"github.com/weirhq/weir/abi"
)

// The exports of ABI version 1. Each recovers panics from operator code into
// an error status with a message, so a Go panic is a clean operator error
// and never a trap.

//go:wasmexport weir_abi_v1
func exportABIv1() {}

//go:wasmexport weir_input
func exportInput(size int32) int32 {
	if size < 0 {
		return 0
	}
	if int(size) > cap(st.input) || cap(st.input) == 0 {
		c := max(int(size), 2*cap(st.input), 64)
		st.input = make([]byte, c)
	}
	st.input = st.input[:cap(st.input)]
	return int32(uintptr(unsafe.Pointer(unsafe.SliceData(st.input))))
}

// payload returns the bytes the host wrote at ptr, which must be the input
// buffer weir_input returned.
func payload(ptr, n int32) ([]byte, error) {
	if n < 0 || int(n) > cap(st.input) || ptr != int32(uintptr(unsafe.Pointer(unsafe.SliceData(st.input)))) {
		return nil, errors.New("weir: the payload is not inside the input buffer")
	}
	return st.input[:n], nil
}

//go:wasmexport weir_init
func exportInit(ptr, n int32) (status int32) {
	defer func() { recovered("Init", recover(), &status) }()
	if st.op == nil {
		return fail(errNoOperator)
	}
	data, err := payload(ptr, n)
	if err != nil {
		return fail(err)
	}
	config := append([]byte(nil), data...)
	if err := st.op.Init(config); err != nil {
		return fail(err)
	}
	return abi.OK
}

//go:wasmexport weir_process
func exportProcess(port, ptr, n int32) (status int32) {
	defer func() { recovered("Process", recover(), &status) }()
	if st.op == nil {
		return fail(errNoOperator)
	}
	data, err := payload(ptr, n)
	if err != nil {
		return fail(err)
	}
	it, err := abi.NewIter(data)
	if err != nil {
		return fail(err)
	}
	st.batch.it = it
	err = st.op.Process(int(port), &st.batch, &st.emit)
	if err != nil {
		// The cursor stays on the failing record, for the host's message.
		st.emit.reset()
		return fail(err)
	}
	st.cursor = -1
	if err := st.emit.flush(); err != nil {
		return fail(err)
	}
	return abi.OK
}

//go:wasmexport weir_end_of_input
func exportEndOfInput(port int32) (status int32) {
	defer func() { recovered("EndOfInput", recover(), &status) }()
	e, ok := st.op.(EndOfInputer)
	if !ok {
		return abi.OK
	}
	if err := e.EndOfInput(int(port), &st.emit); err != nil {
		st.emit.reset()
		return fail(err)
	}
	if err := st.emit.flush(); err != nil {
		return fail(err)
	}
	return abi.OK
}

//go:wasmexport weir_snapshot
func exportSnapshot() (status int32) {
	defer func() { recovered("Snapshot", recover(), &status) }()
	if st.op == nil {
		return fail(errNoOperator)
	}
	st.sw.reset()
	if err := st.op.Snapshot(&st.sw); err != nil {
		return fail(err)
	}
	if err := st.sw.Flush(); err != nil {
		return fail(err)
	}
	return abi.OK
}

//go:wasmexport weir_restore
func exportRestore() (status int32) {
	defer func() { recovered("Restore", recover(), &status) }()
	if st.op == nil {
		return fail(errNoOperator)
	}
	st.sr.reset()
	if err := st.op.Restore(&st.sr); err != nil {
		return fail(err)
	}
	// Bytes Restore left unread mean the state is not what it expects (as
	// in the other SDKs): fail rather than run on a partial restore.
	if end, err := st.sr.atEnd(); err != nil {
		return fail(err)
	} else if !end {
		return fail(errTrailingState)
	}
	return abi.OK
}

var errTrailingState = errors.New("weir: state has trailing bytes: restore returned before reading all of it (read back everything snapshot writes)")

//go:wasmexport weir_checkpoint_complete
func exportCheckpointComplete(id int64) (status int32) {
	defer func() { recovered("CheckpointComplete", recover(), &status) }()
	if c, ok := st.op.(CheckpointCompleter); ok {
		if err := c.CheckpointComplete(id); err != nil {
			return fail(err)
		}
	}
	return abi.OK
}

//go:wasmexport weir_cursor
func exportCursor() int32 {
	return int32(uintptr(unsafe.Pointer(&st.cursor)))
}

//go:wasmimport weir emit
func hostEmit(port int32, ptr unsafe.Pointer, n int32) int32

//go:wasmimport weir error
func hostError(ptr unsafe.Pointer, n int32)

//go:wasmimport weir log
func hostLog(level int32, ptr unsafe.Pointer, n int32)

//go:wasmimport weir snapshot_write
func hostSnapshotWrite(ptr unsafe.Pointer, n int32) int32

//go:wasmimport weir restore_read
func hostRestoreRead(ptr unsafe.Pointer, n int32) int32

func emitBatch(port int, b []byte) error {
	if rc := hostEmit(int32(port), unsafe.Pointer(unsafe.SliceData(b)), int32(len(b))); rc != 0 {
		return &EmitError{Port: port, Status: rc}
	}
	return nil
}

func setError(msg string) {
	hostError(unsafe.Pointer(unsafe.StringData(msg)), int32(len(msg)))
}

// Log writes one line to the host log, tagged with the operator's name.
func Log(level Level, msg string) {
	hostLog(int32(level), unsafe.Pointer(unsafe.StringData(msg)), int32(len(msg)))
}

func snapshotWrite(p []byte) int32 {
	return hostSnapshotWrite(unsafe.Pointer(unsafe.SliceData(p)), int32(len(p)))
}

func restoreRead(p []byte) int32 {
	return hostRestoreRead(unsafe.Pointer(unsafe.SliceData(p)), int32(len(p)))
}
