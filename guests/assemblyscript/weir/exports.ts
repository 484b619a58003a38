// The ABI's exports (abi/ABI.md §1). Re-export them from an operator's entry
// file: `export * from "weir/exports";`
import {
  ERR_TRAILING_STATE, Runtime, StateReader, StateWriter, copyBytes, current, cursorAddr, status,
} from "./index";

/** Declares ABI version 1; never called. */
export function weir_abi_v1(): void {}

/** The address of the i32 record cursor. */
export function weir_cursor(): usize {
  return cursorAddr;
}

/** Returns a buffer of at least size bytes for the next payload. */
export function weir_input(size: i32): usize {
  const rt = current();
  if (size < 1) size = 1;
  if (size > rt.inputCap) {
    if (rt.input) heap.free(rt.input);
    rt.input = heap.alloc(<usize>size);
    rt.inputCap = size;
  }
  return rt.input;
}

export function weir_init(ptr: usize, len: i32): i32 {
  const rt = current();
  return status(rt.op.init(copyBytes(ptr, len)));
}

export function weir_process(port: i32, ptr: usize, len: i32): i32 {
  const rt = current();
  rt.batch.reset(ptr);
  const err = rt.op.process(port, rt.batch, rt.out);
  // On an error the cursor stays on the failing record, for the host's message.
  if (err === null) store<i32>(cursorAddr, -1);
  return status(rt.out.finish(err));
}

export function weir_end_of_input(port: i32): i32 {
  const rt = current();
  return status(rt.out.finish(rt.op.endOfInput(port, rt.out)));
}

export function weir_checkpoint_complete(id: i64): i32 {
  return status(current().op.checkpointComplete(id));
}

export function weir_snapshot(): i32 {
  const rt: Runtime = current();
  const w = new StateWriter();
  let err = rt.op.snapshot(w);
  if (err === null) w.flush();
  if (err === null) err = w.error;
  w.free();
  return status(err);
}

export function weir_restore(): i32 {
  const rt: Runtime = current();
  const r = new StateReader();
  let err = rt.op.restore(r);
  if (err === null) err = r.error;
  if (err === null && !r.atEnd()) err = ERR_TRAILING_STATE;
  r.free();
  return status(err);
}
