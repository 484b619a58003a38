// badctor: an operator whose constructor throws "badctor: constructor
// failed", for the conformance suite's TestSDKConstructorFailure: the
// message must reach the host. AssemblyScript runs the entry file's
// top-level code, register(new BadCtor()) included, as the module's start
// function.
import { Batch, Emitter, Operator, register } from "weir";
export * from "weir/exports";

class BadCtor extends Operator {
  constructor(fail: bool) {
    super();
    if (fail) throw new Error("badctor: constructor failed");
  }

  process(port: i32, input: Batch, out: Emitter): string | null {
    return null;
  }
}

register(new BadCtor(true));
