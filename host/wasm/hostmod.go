package wasm

import (
	"context"
	"fmt"
	"io"
	"log/slog"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"

	"github.com/weirhq/weir/abi"
)

// The host functions of import module "weir" (ABI.md §2). They are
// instantiated once per runtime; each finds the calling Instance in the
// context of the call, which is the instance's own long-lived context.

type instanceKey struct{}

func instanceOf(ctx context.Context) *Instance {
	i, _ := ctx.Value(instanceKey{}).(*Instance)
	return i
}

// maxErrorMessage is where weir.error cuts a message.
const maxErrorMessage = 4096

func instantiateHostModule(ctx context.Context, r wazero.Runtime) error {
	i32 := api.ValueTypeI32
	b := r.NewHostModuleBuilder(abi.ImportModule)
	fn := func(name string, f api.GoModuleFunc, params, results []api.ValueType) {
		b.NewFunctionBuilder().WithGoModuleFunction(f, params, results).Export(name)
	}
	fn(abi.ImportEmit, hostEmit, []api.ValueType{i32, i32, i32}, []api.ValueType{i32})
	fn(abi.ImportError, hostError, []api.ValueType{i32, i32}, nil)
	fn(abi.ImportLog, hostLog, []api.ValueType{i32, i32, i32}, nil)
	fn(abi.ImportSnapshotWrite, hostSnapshotWrite, []api.ValueType{i32, i32}, []api.ValueType{i32})
	fn(abi.ImportRestoreRead, hostRestoreRead, []api.ValueType{i32, i32}, []api.ValueType{i32})
	if _, err := b.Instantiate(ctx); err != nil {
		return fmt.Errorf("wasm: instantiating the %s host module: %w", abi.ImportModule, err)
	}
	return nil
}

func hostEmit(ctx context.Context, _ api.Module, stack []uint64) {
	i := instanceOf(ctx)
	if i == nil {
		stack[0] = api.EncodeI32(abi.ErrNotNow)
		return
	}
	stack[0] = api.EncodeI32(i.hostEmit(api.DecodeI32(stack[0]), api.DecodeU32(stack[1]), api.DecodeU32(stack[2])))
}

func (i *Instance) hostEmit(port int32, ptr, n uint32) int32 {
	if i.phase != phaseProcess && i.phase != phaseEndOfInput {
		return i.faultf(abi.ErrNotNow, nil, "emit called during %s (only during %s and %s)", i.export, abi.ExportProcess, abi.ExportEndOfInput)
	}
	if port < 0 || int(port) >= i.outputs {
		// An operator's output ports are the inputs that read from it in
		// the job spec, numbered as plan.Build does: operators' inputs
		// first, then sinks'. A consumer that reads it twice (a self-join)
		// has two, and a spec may list its sinks first. weir exec's are
		// -outputs.
		return i.faultf(abi.ErrBadPort, nil, "emit to output port %d: the task has %d output port(s), one per input in the job spec that reads "+
			"from the operator, numbered from 0 in spec order, operators' inputs before sinks' (weir exec: -outputs N)", port, i.outputs)
	}
	b, ok := i.mem.Read(ptr, n)
	if !ok {
		return i.faultf(abi.ErrOutOfBounds, nil, "emit of %d bytes at address %d passes the end of memory (%d bytes)", n, ptr, i.mem.Size())
	}
	if _, err := abi.ValidateBatch(b); err != nil {
		return i.faultf(abi.ErrInvalidBatch, err, "emit to port %d: %v", port, err)
	}
	if i.pendingBytes+len(b) > i.maxEmitBytes {
		return i.faultf(abi.ErrInvalidBatch, nil, "emitted more than %d bytes in one call", i.maxEmitBytes)
	}
	i.pendingBytes += len(b)
	i.pending = append(i.pending, emitted{port: int(port), batch: append([]byte(nil), b...)})
	return abi.OK
}

func hostError(ctx context.Context, _ api.Module, stack []uint64) {
	i := instanceOf(ctx)
	if i == nil {
		return
	}
	ptr, n := api.DecodeU32(stack[0]), api.DecodeU32(stack[1])
	if n > maxErrorMessage {
		n = maxErrorMessage
	}
	b, ok := i.mem.Read(ptr, n)
	if !ok {
		i.message = fmt.Sprintf("(error message of %d bytes at address %d passes the end of memory)", n, ptr)
		return
	}
	i.message = string(b)
}

func hostLog(ctx context.Context, _ api.Module, stack []uint64) {
	i := instanceOf(ctx)
	if i == nil {
		return
	}
	level, ptr, n := api.DecodeI32(stack[0]), api.DecodeU32(stack[1]), api.DecodeU32(stack[2])
	if n > maxErrorMessage {
		n = maxErrorMessage
	}
	b, ok := i.mem.Read(ptr, n)
	if !ok {
		i.logs.log(slog.LevelWarn, "log line passes the end of memory", "operator", i.name, "address", ptr, "length", n)
		return
	}
	i.logs.log(logLevel(level), string(b), "operator", i.name)
}

// logLevel is the slog level of an ABI log level (abi/ABI.md: -1 debug, 0
// info, 1 warn, 2 error); a level outside them is taken as the nearest,
// rather than printed as ERROR+20 or DEBUG-8.
func logLevel(level int32) slog.Level {
	return slog.Level(min(max(level, -1), 2) * 4)
}

func hostSnapshotWrite(ctx context.Context, _ api.Module, stack []uint64) {
	i := instanceOf(ctx)
	if i == nil {
		stack[0] = api.EncodeI32(abi.ErrNotNow)
		return
	}
	stack[0] = api.EncodeI32(i.hostSnapshotWrite(api.DecodeU32(stack[0]), api.DecodeU32(stack[1])))
}

func (i *Instance) hostSnapshotWrite(ptr, n uint32) int32 {
	if i.phase != phaseSnapshot || i.snapW == nil {
		return i.faultf(abi.ErrNotNow, nil, "snapshot_write called during %s (only during %s)", i.export, abi.ExportSnapshot)
	}
	b, ok := i.mem.Read(ptr, n)
	if !ok {
		return i.faultf(abi.ErrOutOfBounds, nil, "snapshot_write of %d bytes at address %d passes the end of memory (%d bytes)", n, ptr, i.mem.Size())
	}
	if i.stateErr != nil {
		return abi.ErrIO
	}
	if len(b) > i.limits.MaxStateBytes-i.stateBytes {
		return i.faultf(abi.ErrIO, nil, "snapshot_write: state over the %d-byte limit", i.limits.MaxStateBytes)
	}
	i.stateBytes += len(b)
	_, err := i.stateIO(func() (int, error) { return i.snapW.Write(b) })
	if err != nil {
		i.stateErr = err
		return abi.ErrIO
	}
	return abi.OK
}

func hostRestoreRead(ctx context.Context, _ api.Module, stack []uint64) {
	i := instanceOf(ctx)
	if i == nil {
		stack[0] = api.EncodeI32(abi.ErrNotNow)
		return
	}
	stack[0] = api.EncodeI32(i.hostRestoreRead(api.DecodeU32(stack[0]), api.DecodeU32(stack[1])))
}

func (i *Instance) hostRestoreRead(ptr, capacity uint32) int32 {
	if i.phase != phaseRestore || i.restR == nil {
		return i.faultf(abi.ErrNotNow, nil, "restore_read called during %s (only during %s)", i.export, abi.ExportRestore)
	}
	if capacity > 1<<30 {
		capacity = 1 << 30 // keep the count representable as a positive i32
	}
	b, ok := i.mem.Read(ptr, capacity)
	if !ok {
		return i.faultf(abi.ErrOutOfBounds, nil, "restore_read of %d bytes at address %d passes the end of memory (%d bytes)", capacity, ptr, i.mem.Size())
	}
	if i.stateErr != nil {
		return abi.ErrIO
	}
	if i.restEOF || len(b) == 0 {
		return 0
	}
	for tries := 0; ; tries++ {
		if tries == 100 {
			i.stateErr = io.ErrNoProgress
			return abi.ErrIO
		}
		n, err := i.stateIO(func() (int, error) { return i.restR.Read(b) })
		if n > 0 {
			if err == io.EOF {
				i.restEOF = true
			} else if err != nil {
				i.stateErr = err
			}
			return int32(n)
		}
		if err == io.EOF {
			i.restEOF = true
			return 0
		}
		if err != nil {
			i.stateErr = err
			return abi.ErrIO
		}
	}
}
